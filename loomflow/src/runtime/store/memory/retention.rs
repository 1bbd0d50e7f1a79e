//! Retention: how many checkpoints a thread of the memory store keeps.

use super::kept::Kept;
use crate::runtime::store::RunStatus;

/// How many checkpoints a thread of a [`MemoryStore`](super::MemoryStore) keeps by default.
pub const DEFAULT_RETAINED_CHECKPOINTS: usize = 100;

/// Drops the oldest checkpoints of one thread down to `limit`, keeping the newest `limit`
/// top-level interrupted ones whatever their age (a fork goes back to a suspension; a run
/// that suspends every turn still does not grow without bound) with the suspended subgraph
/// rows a fork from each takes along, what the thread's newest run may still read (see
/// [`needed`]), and the first checkpoint of every run with a top-level one kept: it
/// describes the run's graph, which a fork from any of them names (see `Runtime::fork`).
pub(super) fn prune(kept: &mut Vec<Kept>, limit: usize) {
    let needed = needed(kept);
    let mut suspensions_left = limit;
    let mut suspension: Vec<bool> = (kept.iter().rev())
        .map(|cp| {
            let kept = cp.namespace().is_empty()
                && cp.status == RunStatus::Interrupted
                && suspensions_left > 0;
            suspensions_left -= usize::from(kept);
            kept
        })
        .collect();
    suspension.reverse();
    // A fork from a suspension takes along the newest row of each of its run's subgraphs
    // written before it: kept too when it is suspended (where the subgraph asked).
    let parents: Vec<usize> = (0..kept.len()).filter(|&at| suspension[at]).collect();
    for at in parents {
        let mut namespaces: Vec<&str> = Vec::new();
        for child in (0..at).rev() {
            let (cp, run) = (&kept[child], kept[at].run());
            if cp.namespace().is_empty() || cp.run() != run || namespaces.contains(&cp.namespace())
            {
                continue;
            }
            namespaces.push(cp.namespace());
            suspension[child] |= cp.status == RunStatus::Interrupted;
        }
    }
    // Oldest first, until enough are gone.
    let mut excess = kept.len().saturating_sub(limit);
    let mut keep: Vec<bool> = (kept.iter().zip(suspension))
        .map(|(cp, suspension)| {
            let needed = suspension || needed.contains(&cp.id);
            if excess > 0 && !needed {
                excess -= 1;
                false
            } else {
                true
            }
        })
        .collect();
    // Runs are filed one after another: a run's first row comes before its others.
    let mut described_of = None;
    for (at, cp) in kept.iter().enumerate().rev() {
        if !cp.namespace().is_empty() {
            continue;
        }
        if keep[at] {
            described_of = Some(cp.run());
        }
        if described_of == Some(cp.run()) && cp.described() {
            keep[at] = true;
        }
    }
    let mut keep = keep.into_iter();
    kept.retain(|_| keep.next().unwrap_or(true));
}

/// Where one namespace of the newest run stands: its newest row, and its newest row that
/// finished a step (running or completed: not suspended, not failed, so a step of its own
/// may still be under way after it).
struct Newest<'a> {
    namespace: &'a str,
    newest: u64,
    settled: Option<u64>,
}

/// The rows of the thread's newest run kept whatever their age, besides interrupted ones
/// and its first (see [`prune`]): its newest top-level row, and the newest row of each
/// subgraph whose parent's step is not over (written after the newest step its parent
/// finished): a resume or recover runs that step again and carries the subgraph on from
/// there. A subgraph of a step that is over (one of a loop's earlier turns) is never read
/// again, so the namespaces a run keeps do not grow with its steps.
fn needed(kept: &[Kept]) -> Vec<u64> {
    let Some(run) = kept.last().map(Kept::run) else {
        return Vec::new();
    };
    // From the end, one entry per namespace: a run has a handful in flight at a time.
    let mut namespaces: Vec<Newest<'_>> = Vec::new();
    for cp in kept.iter().rev().filter(|cp| cp.run() == run) {
        let settles = matches!(cp.status, RunStatus::Running | RunStatus::Completed);
        match namespaces
            .iter_mut()
            .find(|n| n.namespace == cp.namespace())
        {
            Some(entry) => {
                if settles && entry.settled.is_none() {
                    entry.settled = Some(cp.id);
                }
            }
            None => namespaces.push(Newest {
                namespace: cp.namespace(),
                newest: cp.id,
                settled: settles.then_some(cp.id),
            }),
        }
    }
    let settled_of = |namespace: &str| {
        // The nearest ancestor with rows kept: its finished steps end its children's.
        let mut ancestor = namespace;
        loop {
            ancestor = ancestor.rsplit_once('/').map_or("", |(parent, _)| parent);
            if let Some(entry) = namespaces.iter().find(|n| n.namespace == ancestor) {
                return entry.settled;
            }
            if ancestor.is_empty() {
                return None;
            }
        }
    };
    namespaces
        .iter()
        .filter(|n| n.namespace.is_empty() || settled_of(n.namespace).is_none_or(|s| n.newest > s))
        .map(|n| n.newest)
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::super::MemoryStore;
    use crate::runtime::store::{Checkpoint, RunStatus, Store};

    fn cp(namespace: &str, step: u64, status: RunStatus) -> Checkpoint {
        Checkpoint::new("t", 1, namespace, step, status, json!({ "state": step }))
    }

    async fn put(store: &MemoryStore, checkpoint: Checkpoint) -> u64 {
        store.put_checkpoint(checkpoint).await.unwrap()
    }

    /// Kept: interrupted rows, the run's first (described) row, the newest row, and the
    /// newest row of a subgraph inside the step under way; a subgraph of a finished step
    /// goes with the rest.
    #[tokio::test]
    async fn retention_keeps_the_newest_and_what_runs_need() {
        let store = MemoryStore::with_retention(Some(10));
        let mut first = cp("", 0, RunStatus::Running);
        first.body["graph_name"] = json!("g");
        let described = put(&store, first).await;
        put(&store, cp("child:1", 0, RunStatus::Running)).await;
        let interrupted = put(&store, cp("", 1, RunStatus::Interrupted)).await;
        for step in 1..=100 {
            put(&store, cp("", step, RunStatus::Running)).await;
        }
        for step in 0..=30 {
            put(&store, cp("child:101", step, RunStatus::Running)).await;
        }
        let kept = store.list_checkpoints("t").await.unwrap();
        assert!((10..=16).contains(&kept.len()), "{}", kept.len());
        let ids: Vec<u64> = kept.iter().map(|c| c.id).collect();
        assert!(ids.contains(&interrupted), "interrupted checkpoints stay");
        assert!(ids.contains(&described), "the run's description stays");
        let top = store.latest_checkpoint("t", "").await.unwrap().unwrap();
        assert_eq!(top.step, 100, "the newest top-level row stays");
        assert_eq!(kept.last().unwrap().step, 30, "the newest stays");
        assert!(
            store
                .latest_checkpoint("t", "child:1")
                .await
                .unwrap()
                .is_none(),
            "a subgraph of a finished step goes"
        );
        assert!(
            store.get_checkpoint("t", 5).await.unwrap().is_none(),
            "old ones go"
        );
    }

    /// A subgraph in a loop writes in a new namespace each turn: the thread stays bounded.
    #[tokio::test]
    async fn retention_bounds_a_subgraph_in_a_loop() {
        let store = MemoryStore::with_retention(Some(10));
        for step in 0..300 {
            put(&store, cp(&format!("sub:{step}"), 0, RunStatus::Completed)).await;
            put(&store, cp("", step, RunStatus::Running)).await;
        }
        let kept = store.list_checkpoints("t").await.unwrap().len();
        assert!((10..=16).contains(&kept), "{kept}");
    }

    /// A run that suspends every turn (a wait in a loop) keeps its newest suspensions only.
    #[tokio::test]
    async fn retention_bounds_a_run_that_suspends_every_turn() {
        let store = MemoryStore::with_retention(Some(10));
        let mut suspensions = Vec::new();
        for step in 0..300 {
            suspensions.push(put(&store, cp("", 2 * step, RunStatus::Interrupted)).await);
            put(&store, cp("", 2 * step + 1, RunStatus::Running)).await;
        }
        let kept: Vec<u64> = (store.list_checkpoints("t").await.unwrap().iter())
            .map(|c| c.id)
            .collect();
        assert!(kept.len() <= 40, "{}", kept.len());
        assert!(suspensions[290..].iter().all(|id| kept.contains(id)));
        assert!(!kept.contains(&suspensions[0]), "old suspensions go");
    }

    /// A suspension kept keeps the suspended subgraph row a fork from it takes along, however
    /// many suspensions came after; before its fix the subgraph rows counted among the
    /// suspensions kept, and the oldest kept parent could lose its child's.
    #[tokio::test]
    async fn a_kept_suspension_keeps_its_subgraphs_suspension() {
        let store = MemoryStore::with_retention(Some(4));
        let child = put(&store, cp("sub:1", 0, RunStatus::Interrupted)).await;
        let parent = put(&store, cp("", 1, RunStatus::Interrupted)).await;
        for step in 2..6 {
            put(
                &store,
                cp(&format!("sub:{step}"), 0, RunStatus::Interrupted),
            )
            .await;
            put(&store, cp("", step, RunStatus::Running)).await;
        }
        for step in 6..9 {
            put(&store, cp("", step, RunStatus::Interrupted)).await;
        }
        let kept: Vec<u64> = (store.list_checkpoints("t").await.unwrap().iter())
            .map(|c| c.id)
            .collect();
        assert!(
            kept.contains(&parent),
            "the fourth newest suspension stays: {kept:?}"
        );
        assert!(kept.contains(&child), "with its subgraph's row: {kept:?}");
    }

    #[tokio::test]
    async fn without_retention_everything_stays() {
        let store = MemoryStore::with_retention(None);
        for step in 0..300 {
            store
                .put_checkpoint(cp("", step, RunStatus::Running))
                .await
                .unwrap();
        }
        assert_eq!(store.list_checkpoints("t").await.unwrap().len(), 300);
    }
}
