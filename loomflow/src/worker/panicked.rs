//! A run whose execution panicked where the executor does not catch it.

use super::RunReport;
use crate::runtime::claim::RunClaim;

/// Fails the run whose execution panicked outside what the executor guards (a node's
/// body, a router and a reducer are guarded; a state's `Serialize` or `Clone` is not), in
/// one write that lets it go: left claimed, it would be held and renewed for as long as the
/// process lives; let go runnable, it would panic again at once.
///
/// An execution that panicked once it no longer held the run (it had let go, or its lease
/// was lost) writes nothing: the report says what the run's row says; so does one that let
/// it go runnable holding resume requests, for the next execution to apply them. One that
/// stopped holding them without letting go (the store did not take the release), for its
/// lease to run out, fails the run still: the next execution would panic again.
pub(super) async fn fail(
    runtime: &crate::runtime::Runtime,
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
    if claim.is_done() && !claim.holds_request() {
        tracing::error!(%thread, %graph, %error, "a worker's run panicked once it no longer held the run; its row stands");
        let state = super::registry::standing(runtime, &thread).await;
        return RunReport {
            thread,
            graph,
            state,
            error: Some(error),
        };
    }
    tracing::error!(%thread, %graph, %error, "a worker's run panicked; it is failed");
    super::registry::failed(&claim, graph, error).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use super::*;
    use crate::runtime::{RunState, Runtime};

    /// A panic once the execution had let the run go (a state's `Drop` as the outcome is
    /// read) writes nothing, and the report says what the row says: before, it said failed
    /// while the row said otherwise.
    #[tokio::test]
    async fn a_panic_after_the_run_was_let_go_writes_nothing() {
        let runtime = Runtime::in_memory();
        runtime
            .submit("g", "t", serde_json::json!(1))
            .await
            .unwrap();
        let claim = runtime.claim_run(&Arc::from("t"), None).await.unwrap();
        claim.release().await.unwrap();
        let before = runtime.store().get_run("t").await.unwrap().unwrap().state;
        let report = fail(&runtime, claim, "g".to_owned(), Box::new("boom")).await;
        let row = runtime.store().get_run("t").await.unwrap().unwrap();
        assert_eq!((report.state, row.state), (before, before));
        assert_ne!(row.state, RunState::Failed);
        assert!(report.error.unwrap().contains("boom"));
    }
}
