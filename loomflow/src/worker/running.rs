//! The runs a worker's loop executes at once, each in a task of its own.

use std::sync::Arc;

use tokio::task::JoinSet;

use super::WorkerInner;
use crate::runtime::ClaimedRun;
use crate::runtime::claim::RunClaim;

/// The runs a worker executes, and their claims; each task returns when its run is due
/// again (see `WorkerInner::execute`).
#[derive(Default)]
pub(super) struct Running {
    pub(super) tasks: JoinSet<Option<u64>>,
    pub(super) claims: Vec<RunClaim>,
}

impl Running {
    pub(super) fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Asks every run still executing to stop at its next superstep and let go.
    pub(super) fn hand_back(&self) {
        for claim in &self.claims {
            claim.request_yield();
        }
    }
}

/// Executes a claimed run in a task of its own.
pub(super) fn spawn(
    inner: &Arc<WorkerInner>,
    running: &mut Running,
    run: ClaimedRun,
    claim: RunClaim,
) {
    running.claims.retain(|claim| !claim.is_done());
    running.claims.push(claim.clone());
    let inner = Arc::clone(inner);
    running
        .tasks
        .spawn(async move { inner.execute(run, claim).await });
}
