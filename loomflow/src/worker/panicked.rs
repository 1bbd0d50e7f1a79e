//! A run whose execution panicked where the executor does not catch it.

use super::RunReport;
use crate::runtime::RunState;
use crate::runtime::claim::RunClaim;

/// Fails the run whose execution panicked outside what the executor guards (a node's
/// body, a router and a reducer are guarded; a state's `Serialize` or `Clone` is not), in
/// one write that lets it go: left claimed, it would be held and renewed for as long as the
/// process lives; let go runnable, it would panic again at once.
pub(super) async fn fail(
    claim: RunClaim,
    graph: String,
    panic: Box<dyn std::any::Any + Send>,
) -> RunReport {
    let error = format!(
        "the execution of graph {graph} panicked: {}",
        crate::sync::panic_message(&*panic)
    );
    drop(panic);
    let thread = claim.thread().to_owned();
    tracing::error!(%thread, %graph, %error, "a worker's run panicked; it is failed");
    let state = match claim.finish(RunState::Failed, Some(error.clone())).await {
        Ok(()) => RunState::Failed,
        Err(store) => {
            tracing::warn!(%thread, %store, "could not fail the run; it is let go, to be tried again");
            RunState::Running
        }
    };
    RunReport {
        thread,
        graph,
        state,
        error: Some(error),
    }
}
