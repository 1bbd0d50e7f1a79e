//! Retention: how many checkpoints a thread of the memory store keeps.

use super::kept::Kept;
use crate::runtime::store::RunStatus;
use crate::runtime::store::retention::{RetainedRow, kept_rows};

/// How many checkpoints a thread of a [`MemoryStore`](super::MemoryStore) keeps by default.
pub const DEFAULT_RETAINED_CHECKPOINTS: usize = 100;

/// Drops the oldest checkpoints of one thread down to `limit`, but what retention keeps
/// whatever its age (see [`kept_rows`]).
pub(super) fn prune(rows: &mut Vec<Kept>, limit: usize) {
    let mut keep = kept_rows(rows, limit).into_iter();
    rows.retain(|_| keep.next().unwrap_or(true));
}

impl RetainedRow for Kept {
    fn id(&self) -> u64 {
        self.id
    }

    fn run(&self) -> u64 {
        Kept::run(self)
    }

    fn namespace(&self) -> &str {
        Kept::namespace(self)
    }

    fn status(&self) -> RunStatus {
        self.status
    }

    fn described(&self) -> bool {
        Kept::described(self)
    }
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
