//! The graphs a worker runs, by name, with their state types erased.

use futures_util::future::BoxFuture;

use crate::graph::{CompiledGraph, ErrorChain, RunError, RunOutcome, State};
use crate::runtime::claim::RunClaim;
use crate::runtime::{Checkpoint, ClaimedRun, RunState, RunStatus, Runtime};

/// How a run a worker executed ended, as its `on_finished` callback sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunReport {
    /// The thread.
    pub thread: String,
    /// The graph's name.
    pub graph: String,
    /// Where the run stands now: completed, failed, cancelled, or suspended again
    /// (waiting, sleeping, interrupted; interrupted too when it refused the resume request
    /// it applied). `running` when the worker lost its lease, or a store failure stopped
    /// the execution: the run is carried on, by another worker or by this one.
    pub state: RunState,
    /// What went wrong: why the run failed, why it refused a resume request, or why the
    /// execution stopped short.
    pub error: Option<String>,
}

/// How an execution ended: its report, and, for a run it suspended on a timer or a wait
/// with a deadline, when the run is due (ms since the Unix epoch, by the runtime's clock).
pub(crate) type Stopped = (RunReport, Option<u64>);

/// A compiled graph with its state type erased.
pub(crate) trait Registered: Send + Sync {
    /// Executes a claimed run to its next stop; a run a graph of another structure wrote is
    /// carried on when `allow_graph_change`.
    fn execute(
        &self,
        runtime: &Runtime,
        claimed: ClaimedRun,
        claim: RunClaim,
        allow_graph_change: bool,
    ) -> BoxFuture<'static, Stopped>;
}

impl<S: State> Registered for CompiledGraph<S> {
    fn execute(
        &self,
        runtime: &Runtime,
        claimed: ClaimedRun,
        claim: RunClaim,
        allow_graph_change: bool,
    ) -> BoxFuture<'static, Stopped> {
        let graph = self.clone();
        let runtime = runtime.clone();
        Box::pin(async move {
            let thread = claimed.record.thread;
            let mut report = RunReport {
                thread: thread.clone(),
                graph: graph.name().to_owned(),
                state: RunState::Failed,
                error: None,
            };
            // A queued run starts from its input; anything else carries on.
            let input = match (claimed.record.state, claimed.input) {
                (RunState::Queued, Some(input)) => match serde_path_to_error::deserialize(&input) {
                    Ok(typed) => Some(typed),
                    Err(e) => {
                        let message = format!(
                            "the input submitted for graph {} is not {} (its state type): {}",
                            report.graph,
                            crate::type_name::readable::<S>(),
                            crate::json::at_path(&e)
                        );
                        let run = claimed.record.run + 1;
                        let failed = (&claim, run, message.clone());
                        if let Err(error) = keep_unread_input(failed, input).await {
                            tracing::warn!(%thread, %error, "could not record the failed run");
                        }
                        report.error = Some(message);
                        return (report, None);
                    }
                },
                _ => None,
            };
            let mut wake_at_ms = None;
            let kept = claim.clone();
            let claimed = (claim, allow_graph_change);
            match graph.run_claimed(&runtime, thread, input, claimed).await {
                Ok(RunOutcome::Completed(_)) => report.state = RunState::Completed,
                Ok(RunOutcome::Interrupted { interrupts, .. }) => {
                    report.state = RunState::of_interrupts(&interrupts);
                    wake_at_ms = interrupts.iter().filter_map(|i| i.wake_at_ms).min();
                }
                // Its resumed step failed with the resume request it applied: the request
                // was refused, and the run waits for another answer.
                Ok(RunOutcome::Failed { error, .. }) if kept.refused_request() => {
                    report.state = RunState::Interrupted;
                    report.error = Some(ErrorChain(&error).to_string());
                }
                Ok(RunOutcome::Failed { error, .. }) => {
                    report.error = Some(ErrorChain(&error).to_string());
                }
                Err(RunError::Cancelled { .. }) => report.state = RunState::Cancelled,
                Err(RunError::Yielded { .. }) => report.state = RunState::Running,
                Err(RunError::Store(error @ crate::runtime::StoreError::LeaseLost { .. })) => {
                    report.state = RunState::Running;
                    report.error = Some(ErrorChain(&error).to_string());
                }
                // Not every error fails the run: a store failure lets it go runnable, a
                // refused resume request leaves it as it was. Its row says where it stands.
                Err(error) => {
                    report.state = standing(&runtime, &report.thread).await;
                    report.error = Some(ErrorChain(&error).to_string());
                }
            }
            (report, wake_at_ms)
        })
    }
}

/// Where `thread`'s run stands, by its row, after an execution that ended with an error;
/// `running` (let go, to be carried on) when the row cannot be read either.
pub(super) async fn standing(runtime: &Runtime, thread: &str) -> RunState {
    match runtime.store().get_run(thread).await {
        Ok(Some(row)) => row.state,
        Ok(None) => RunState::Failed,
        Err(error) => {
            tracing::debug!(%thread, %error, "could not read the run's row after its error");
            RunState::Running
        }
    }
}

/// Ends the run `claim` holds as failed with `error`, for a worker that decided it (a panic
/// it caught, a run whose executions keep dying), and reports it. Should the store not take
/// the write, the run stands as the claim, dropped, leaves it (see `RunClaim::failing`).
pub(super) async fn failed(claim: &RunClaim, graph: String, error: String) -> RunReport {
    let thread = claim.thread().to_owned();
    let state = match claim.finish(RunState::Failed, Some(error.clone())).await {
        Ok(()) => RunState::Failed,
        Err(store) => {
            tracing::warn!(%thread, %store, "could not fail the run");
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

/// Fails a queued run whose input the worker's state type cannot read, keeping the input in
/// a failed checkpoint at step 0, as a run whose route out of `START` failed keeps it: a
/// deploy that changed the state type (a worker of the new version took a run the old one
/// submitted) loses no run, and `recover` by a program whose type reads the input (the old
/// version, or a fixed one) routes it from there.
async fn keep_unread_input(
    (claim, run, message): (&RunClaim, u64, String),
    input: serde_json::Value,
) -> Result<u64, crate::runtime::StoreError> {
    // No graph's fingerprint: no graph ran the input, and the version that reads it (the
    // old one, rolled back to) may have another structure than this worker's.
    let body = serde_json::json!({ "state": input, "next": [] });
    let mut checkpoint = Checkpoint::new("", run, "", 0, RunStatus::Failed, body);
    checkpoint.error = Some(message);
    claim.put_last_checkpoint(checkpoint).await
}
