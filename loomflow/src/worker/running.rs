//! The runs a worker's loop executes at once, each in a task of its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::task::{Id, JoinSet};

use super::WorkerInner;
use crate::runtime::ClaimedRun;
use crate::runtime::claim::RunClaim;

/// The runs a worker executes, and their claims; each task returns when its run is due
/// again (see `WorkerInner::execute`).
#[derive(Default)]
pub(super) struct Running {
    pub(super) tasks: JoinSet<Option<u64>>,
    /// Each task's claim, until the task has ended; shared with a shutdown that asks them
    /// to let go while the loop waits on the store.
    claims: Claims,
}

/// The claims of the runs a worker executes.
#[derive(Clone, Default)]
pub(super) struct Claims(Arc<Mutex<HashMap<Id, RunClaim>>>);

impl Claims {
    /// Asks every run still executing to stop at its next superstep and let go.
    pub(super) fn hand_back(&self) {
        for claim in crate::sync::lock(&self.0).values() {
            claim.request_yield();
        }
    }

    /// The claims still held.
    pub(super) fn held(&self) -> Vec<RunClaim> {
        let claims = crate::sync::lock(&self.0);
        claims.values().filter(|c| !c.is_done()).cloned().collect()
    }
}

impl Running {
    pub(super) fn len(&self) -> usize {
        self.tasks.len()
    }

    /// The runs' claims, shared.
    pub(super) fn claims(&self) -> &Claims {
        &self.claims
    }

    /// Waits for a task to end and forgets its claim; returns when its run is due again.
    /// `None` when no task is left.
    pub(super) async fn next_ended(&mut self) -> Option<Option<u64>> {
        let ended = self.tasks.join_next_with_id().await?;
        let (id, due) = match ended {
            Ok((id, due)) => (id, due),
            // Aborted (a shutdown past its timeout); a panic is caught inside the task.
            Err(error) => (error.id(), None),
        };
        crate::sync::lock(&self.claims.0).remove(&id);
        Some(due)
    }
}

/// Executes a claimed run in a task of its own.
pub(super) fn spawn(
    inner: &Arc<WorkerInner>,
    running: &mut Running,
    run: ClaimedRun,
    claim: RunClaim,
) {
    let kept = claim.clone();
    let inner = Arc::clone(inner);
    let task = running
        .tasks
        .spawn(async move { inner.execute(run, claim).await });
    crate::sync::lock(&running.claims.0).insert(task.id(), kept);
}
