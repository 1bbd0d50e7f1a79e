//! Time travel: starting a thread from a checkpoint of another (or of itself).

use std::sync::Arc;

use super::store::{Checkpoint, RunStatus};
use super::{Result, Runtime, RuntimeError};

impl Runtime {
    /// Starts thread `new_thread` from checkpoint `checkpoint_id` of `thread` (time travel).
    ///
    /// The original thread is untouched. A run suspended inside a subgraph takes the
    /// subgraph's own checkpoints along, so that resuming the fork answers the subgraph's
    /// question as resuming the original would. Carry on with
    /// [`CompiledGraph::recover`](crate::CompiledGraph::recover) (or `resume`, when the
    /// checkpoint was interrupted) on the new thread.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::UnknownCheckpoint`] when `thread` has no such checkpoint;
    /// [`RuntimeError::Busy`] when a run is executing on `new_thread`; a store failure.
    pub async fn fork(&self, thread: &str, checkpoint_id: u64, new_thread: &str) -> Result<()> {
        let mut checkpoint = self
            .inner
            .store
            .get_checkpoint(thread, checkpoint_id)
            .await?
            .ok_or_else(|| RuntimeError::UnknownCheckpoint {
                thread: thread.to_owned(),
                checkpoint: checkpoint_id,
            })?;
        // Written under a claim, like every write of a run: never into a thread that is
        // executing, and the run number below stays right.
        let claim = self.claim_run(&Arc::from(new_thread), None).await?;
        // A new run of `new_thread`: its journal keys must not meet those of earlier runs
        // there, or their recorded results would be replayed.
        let run = self
            .inner
            .store
            .latest_checkpoint(new_thread, "")
            .await?
            .map_or(1, |latest| latest.run + 1);
        // A run suspended inside a subgraph keeps the child's position in the child's own
        // checkpoints: they go along, or a resume of the fork would start the child afresh
        // and ask its question again, whatever the answer.
        if checkpoint.status == RunStatus::Interrupted {
            for mut child in self.children_at(thread, &checkpoint).await? {
                child.id = 0;
                child.thread = new_thread.to_owned();
                child.run = run;
                claim.put_checkpoint(child).await?;
            }
        }
        checkpoint.id = 0;
        checkpoint.thread = new_thread.to_owned();
        checkpoint.run = run;
        checkpoint.namespace = String::new();
        claim.put_checkpoint(checkpoint).await?;
        claim.release().await?;
        Ok(())
    }

    /// The newest checkpoint of each subgraph namespace of `parent`'s run on `thread`
    /// written before `parent`: where its children stood when it was written.
    async fn children_at(&self, thread: &str, parent: &Checkpoint) -> Result<Vec<Checkpoint>> {
        let mut newest: Vec<Checkpoint> = Vec::new();
        let all = self.inner.store.list_checkpoints(thread).await?;
        let children = all
            .into_iter()
            .filter(|cp| !cp.namespace.is_empty() && cp.run == parent.run && cp.id < parent.id);
        for cp in children {
            match newest
                .iter_mut()
                .find(|kept| kept.namespace == cp.namespace)
            {
                Some(kept) if kept.id < cp.id => *kept = cp,
                Some(_) => {}
                None => newest.push(cp),
            }
        }
        Ok(newest)
    }
}
