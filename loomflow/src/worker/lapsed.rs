//! A run whose executions keep dying while they hold it: failed rather than run again.

use super::RunReport;
use crate::runtime::claim::RunClaim;
use crate::runtime::{RunRecord, RunState, Runtime};

/// The default of [`WorkerBuilder::max_lapses`](super::WorkerBuilder::max_lapses).
pub const DEFAULT_MAX_LAPSES: u32 = 3;

/// Fails the run `claim` holds, whose last `lapses` executions in a row lost its lease
/// without letting it go: each one's process died (a crash, an abort, out of memory) or
/// stopped renewing. Run again, it could take this worker's process down too, and every
/// worker's after it. Its checkpoints stay as they are: a `recover` carries it on once the
/// cause is found. A run someone asked to cancel is cancelled instead ([`cancel`]).
pub(super) async fn fail(claim: RunClaim, graph: String, lapses: u64) -> RunReport {
    let thread = claim.thread().to_owned();
    let error = format!(
        "the run's last {lapses} executions in a row lost its lease without letting it go \
         (each one's process died, or stopped renewing it): failed rather than run again, \
         which could take this worker down too; recover it once the cause is found"
    );
    tracing::error!(%thread, %graph, lapses, "a run whose executions keep dying is failed");
    // Should the write not reach the store, the claim dropped records the failure still:
    // let go runnable, the run would be run again, its lapses counted from 0.
    claim.failing(&error);
    super::registry::failed(&claim, graph, error).await
}

/// Cancels the run of `record` that `claim` holds, whose executions kept dying while it
/// waited for them to stop: as [`Runtime::cancel`] does, its newest checkpoint is written
/// again as cancelled (so that a `resume` or `recover` is refused) and the requests queued
/// to resume it are dropped.
pub(super) async fn cancel(
    runtime: &Runtime,
    claim: RunClaim,
    record: &RunRecord,
    graph: String,
) -> RunReport {
    let thread = claim.thread().to_owned();
    let state = match runtime.cancel_claimed(&claim, record).await {
        Ok(()) => RunState::Cancelled,
        Err(error) => {
            tracing::warn!(%thread, %error, "a run whose executions keep dying was not cancelled");
            RunState::Running
        }
    };
    RunReport {
        thread,
        graph,
        state,
        error: None,
    }
}
