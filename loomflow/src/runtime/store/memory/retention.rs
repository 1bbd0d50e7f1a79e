//! Retention: how many checkpoints a thread of the memory store keeps.

use super::kept::Kept;
use crate::runtime::store::RunStatus;

/// Drops the oldest checkpoints of one thread down to `limit`, keeping the newest of each
/// namespace and every interrupted one whatever their age.
pub(super) fn prune(kept: &mut Vec<Kept>, limit: usize) {
    // The newest row of each namespace, found from the end; a run has one namespace, or a
    // few (its subgraphs), so a short list is all it takes.
    let mut newest: Vec<(&str, u64)> = Vec::new();
    for cp in kept.iter().rev() {
        if !newest
            .iter()
            .any(|(namespace, _)| *namespace == cp.namespace())
        {
            newest.push((cp.namespace(), cp.id));
        }
    }
    let newest: Vec<u64> = newest.into_iter().map(|(_, id)| id).collect();
    // Oldest first, until enough are gone.
    let mut excess = kept.len().saturating_sub(limit);
    kept.retain(|cp| {
        let needed = cp.status == RunStatus::Interrupted || newest.contains(&cp.id);
        if excess > 0 && !needed {
            excess -= 1;
            false
        } else {
            true
        }
    });
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

    #[tokio::test]
    async fn retention_keeps_the_newest_and_what_runs_need() {
        let store = MemoryStore::with_retention(Some(10));
        store
            .put_checkpoint(cp("child:1", 0, RunStatus::Running))
            .await
            .unwrap();
        let interrupted = store
            .put_checkpoint(cp("", 0, RunStatus::Interrupted))
            .await
            .unwrap();
        for step in 1..=100 {
            store
                .put_checkpoint(cp("", step, RunStatus::Running))
                .await
                .unwrap();
        }
        let kept = store.list_checkpoints("t").await.unwrap();
        assert!((10..=16).contains(&kept.len()), "{}", kept.len());
        assert!(
            kept.iter().any(|c| c.id == interrupted),
            "interrupted checkpoints stay"
        );
        assert!(
            kept.iter().any(|c| c.namespace == "child:1"),
            "each namespace's newest stays"
        );
        assert_eq!(kept.last().unwrap().step, 100, "the newest stays");
        assert!(
            store.get_checkpoint("t", 5).await.unwrap().is_none(),
            "old ones go"
        );
        assert_eq!(
            store
                .latest_checkpoint("t", "child:1")
                .await
                .unwrap()
                .unwrap()
                .step,
            0
        );
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
