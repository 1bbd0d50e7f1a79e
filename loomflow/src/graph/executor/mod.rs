//! The superstep executor.
//!
//! A run is a sequence of supersteps. Each runs every active node concurrently on its own
//! copy of the state as it was when the step began, merges their changes in declaration
//! order, then follows edges, branches and joins to find the next active set. A failure
//! anywhere in a step (a node error or panic, a merge conflict, a bad route) discards the
//! whole step: the state stays as it was when the step began, and no checkpoint is written.
//!
//! A node that calls `ctx.interrupt` suspends the step instead: the checkpoint records the
//! state the step began with, the interrupts, and the finished copies of its siblings
//! (pending writes), so that on resume only the interrupted nodes run again.

mod body;
mod checkpoint;
mod ending;
mod kept_interrupt;
mod locate;
mod observe;
mod owned;
mod resume_request;
mod route;
mod step;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use tracing::Instrument;

use crate::context::RunShared;
use crate::event::EventKind;
use crate::graph::State;
use crate::graph::compiled::CompiledGraph;
use crate::graph::error::RunError;
use crate::graph::namespace::Namespace;
use crate::graph::run::RunOutcome;
use crate::runtime::claim::RunClaim;
use crate::runtime::{Durability, RunState, RunStatus, Runtime};

pub(crate) use crate::error_chain::ErrorChain;
use checkpoint::{CheckpointWriter, PendingWrite, RunKey, SnapshotRef, add_audit};
use ending::{cancel, fail, put_last};
use locate::{Located, locate};
use observe::Resumed;
use route::{JoinMarks, route_into};
use step::{StepOutcome, run_step};

type Result<T, E = RunError> = std::result::Result<T, E>;

/// Where a run begins.
pub(crate) enum Start<S> {
    /// A new run on the thread, from this input.
    Fresh(S),
    /// A new run of a subgraph, inside its parent's run.
    Child { input: S, run: u64 },
    /// Resume the pending interrupt (there must be exactly one) with this value, or with
    /// the error that kept it from serializing.
    ResumeOne(ResumeValue),
    /// Resume pending interrupts by id.
    Resume(BTreeMap<String, ResumeValue>),
    /// Carry on from the newest checkpoint, whatever stopped the run.
    Recover,
}

/// A value given on resume, serialized where it was given: a value that does not serialize
/// is reported when the resume runs, naming the interrupt it was for.
pub(crate) type ResumeValue = std::result::Result<Value, serde_json::Error>;

/// Everything one run needs.
pub(crate) struct Execution<S> {
    pub(crate) graph: CompiledGraph<S>,
    pub(crate) thread: Arc<str>,
    pub(crate) runtime: Runtime,
    pub(crate) events: Option<crate::event::EventSink>,
    pub(crate) namespace: Namespace,
    pub(crate) start: Start<S>,
    pub(crate) recursion_limit: u64,
    pub(crate) durability: Durability,
    /// Carry on from a checkpoint written by a graph of another structure.
    pub(crate) allow_graph_change: bool,
    /// The claim it executes under: the parent's for a subgraph; `None`: it claims its own.
    pub(crate) claim: Option<RunClaim>,
    /// How long a top-level run waits for a busy thread's claim; `None`: not at all.
    pub(crate) wait_if_busy: Option<std::time::Duration>,
}

/// Where the loop picks up.
struct Position<S> {
    run: u64,
    /// The last superstep completed.
    step: u64,
    state: S,
    active: Vec<usize>,
    joins: JoinMarks,
    pending: Vec<PendingWrite>,
    resume_values: BTreeMap<String, Vec<Value>>,
    /// A new run, whose input is not checkpointed yet.
    fresh: bool,
    /// A new run over one its thread's row may still ask to stop: its start is written now.
    over_open_run: bool,
    /// Where it picked up from, when it carried on from a checkpoint.
    resumed: Option<Resumed>,
}

/// Drives a run to its end. `Err` for store failures and bad resume requests; node failures
/// are outcomes.
///
/// Not an `async fn`, which would keep the execution twice (as its argument, and as the
/// variable the body moves it to); likewise [`claimed`] and [`run_supersteps`]. A run's
/// future is moved whole when it is boxed or spawned.
pub(crate) fn execute<S: State>(
    execution: Execution<S>,
) -> impl Future<Output = Result<RunOutcome<S>>> + Send {
    let span = observe::run_span(
        &execution.graph.inner.name,
        &execution.thread,
        execution.namespace.as_str(),
    );
    async move {
        // Not wrapped when nobody records spans: the wrapper would move the whole run's
        // future.
        let result = if span.is_disabled() {
            claimed(execution).await
        } else {
            claimed(execution).instrument(span.clone()).await
        };
        span.record("loomflow.outcome", observe::outcome_name(&result));
        if observe::failed(&result) {
            span.record("otel.status_code", "ERROR");
        }
        result
    }
}

/// Runs under the execution's claim: a top-level run claims its thread before it reads
/// anything and releases it when it stops; a subgraph uses its parent's. Once the claim is
/// lost (another execution took the run over), the run ends with that error whatever it was
/// doing, having written nothing since.
///
/// A top-level run ends its claim: a failed run is recorded as failed on its run row (its
/// newest checkpoint stays the last good one), anything else just lets go.
///
/// A top-level run given its claim (a worker's) that ends in an error of its own (its
/// state does not decode, its graph changed, …) is recorded as failed too, so that the
/// worker does not take it again and again. A store failure, a lost lease, a cancel, a
/// hand-back or a refused resume request leave it as it was. The caller of a direct run
/// gets the error instead, the run left as it was.
///
/// Not an `async fn`, which would keep the execution twice: as its argument, and as the
/// variable the body moves it to.
#[allow(clippy::manual_async_fn)]
fn claimed<S: State>(
    mut execution: Execution<S>,
) -> impl Future<Output = Result<RunOutcome<S>>> + Send {
    async move {
        let top_level = execution.namespace.is_root();
        let given = execution.claim.is_some();
        if top_level && !given && matches!(execution.start, Start::Recover) {
            // A recover in a long-lived process: signals other processes stored since it last
            // looked (the decision a waiting run is recovered for) come in first. A worker
            // looks before it claims, and a fresh run or a resume with values has no use for it.
            execution.runtime.refresh_signals().await?;
        }
        let claim = match execution.claim.take() {
            // The parent's claim, or one a worker took for this run.
            Some(claim) => claim,
            None => {
                let claim = (execution.runtime)
                    .claim_run(&execution.thread, execution.wait_if_busy)
                    .await?;
                // A resume or a recover of a run its row asks to stop (the cancel came as
                // the execution before let go) stops before its first step, as under a
                // worker.
                if top_level && !matches!(execution.start, Start::Fresh(_)) {
                    claim.cancel_asked().await?;
                }
                claim
            }
        };
        // Kept for a top-level run, to look at what arrived for it once it has let go.
        let runtime = top_level.then(|| execution.runtime.clone());
        let events = execution.events.clone().filter(|_| top_level);
        let result = run_supersteps(execution, claim.clone()).await;
        if claim.is_lost() {
            return Err(claim.lost_error().into());
        }
        if top_level {
            let half_way = ending::half_way(&result);
            let mut refused = false;
            let failure = match &result {
                // Its resumed step failed with the resume requests it applied: refused, as
                // a value it cannot take is, below.
                Ok(RunOutcome::Failed { .. }) if claim.refused_request() => {
                    refused = true;
                    None
                }
                // A resume given its values directly whose step failed: interrupted still.
                Ok(RunOutcome::Failed { .. }) if claim.failed_direct_resume() => None,
                Ok(RunOutcome::Failed { error, .. }) => Some(ErrorChain(error).to_string()),
                Err(RunError::Cancelled { .. } | RunError::Yielded { .. }) => None,
                Err(RunError::Store(store)) if ending::in_passing(store) => None,
                // What the store refused it would refuse again, a row it cannot decode it
                // would not decode again: the run fails, rather than being tried at once,
                // again and again.
                Err(error @ RunError::Store(_)) => Some(ErrorChain(error).to_string()),
                Err(RunError::Busy { .. }) => None,
                // A resume request the run could not take: it stays interrupted, and the
                // request is spent.
                Err(error) if ending::refuses_resume(error) => {
                    refused = true;
                    if let Err(error) = claim.refuse_request().await {
                        tracing::warn!(thread = %claim.thread(), %error, "could not record a refused resume request");
                    }
                    None
                }
                Err(error) if given => Some(ErrorChain(error).to_string()),
                _ => None,
            };
            if let (Some(runtime), Some(answered), false, Ok(_)) =
                (&runtime, claim.answered_directly(), refused, &result)
            {
                let spending = ending::spend_resume_requests(runtime, claim.thread(), answered);
                Box::pin(spending).await;
            }
            let released = failure.is_none() && !half_way;
            let ended = match failure {
                Some(message) => claim.finish(RunState::Failed, Some(message)).await,
                None if half_way => claim.release_runnable().await,
                None => claim.release().await,
            };
            if let Err(error) = ended {
                // The outcome stands; the claim, dropped, lets the run go runnable.
                tracing::warn!(thread = %claim.thread(), %error, "could not release the run's claim");
            }
            if let (Some(runtime), true) = (&runtime, released && ending::as_it_was(&result)) {
                Box::pin(runtime.wake_if_waiting(claim.thread())).await;
            }
            if let (Some(runtime), Ok(RunOutcome::Interrupted { interrupts, .. })) =
                (&runtime, &result)
            {
                // Boxed where it waits for the store, as the rare cancel does: neither
                // makes every run's future larger.
                let quiet = matches!(claim.cancel_asked_now(), Some(Ok(false)));
                if !quiet && Box::pin(ending::cancel_after_suspending(runtime, &claim)).await {
                    events.iter().for_each(observe::tell_cancelled);
                    return Err(RunError::Cancelled {
                        thread: claim.thread().to_owned(),
                    });
                }
                runtime.wake_if_queued(claim.thread(), interrupts);
            }
        }
        result
    }
}

/// Not an `async fn`: the execution is taken apart before the future is made, so that the
/// future keeps its parts once rather than the whole execution beside them.
fn run_supersteps<S: State>(
    execution: Execution<S>,
    claim: RunClaim,
) -> impl Future<Output = Result<RunOutcome<S>>> + Send {
    let Execution {
        graph,
        thread,
        runtime,
        events,
        namespace,
        start,
        recursion_limit,
        durability,
        allow_graph_change,
        claim: _,
        wait_if_busy: _,
    } = execution;
    async move {
        let g = &*graph.inner;
        runtime.load_stored_signals().await?;
        let located = locate(
            g,
            &thread,
            &runtime,
            &claim,
            namespace.as_str(),
            start,
            allow_graph_change,
        );
        // Taken apart as it comes: a named `Position` would keep its room in the future.
        let Position {
            run,
            mut step,
            mut state,
            mut active,
            mut joins,
            mut pending,
            mut resume_values,
            fresh,
            over_open_run,
            resumed,
        } = match located.await? {
            Located::Position(position) => position,
            Located::Finished(outcome) => return Ok(observe::told(&events, &namespace, outcome)),
            Located::StartFailed { run, state, error } => {
                let (at, failed) = ((&*thread, &runtime, &claim), (run, state, error));
                let outcome = Box::pin(ending::start_failed(&graph.inner, at, failed)).await?;
                return Ok(observe::told(&events, &namespace, outcome));
            }
        };
        // The run's session, where signals sent to the thread queue while it runs: opened
        // now only to take in what waits pending for the thread or to share one held already,
        // else by the first signal or receive that needs it (`RunClaim::open_session`). What
        // the run has not received when it stops goes back to pending for the next execution.
        if namespace.is_root() {
            runtime.open_if_needed(&claim);
        }
        let shared = Arc::new(RunShared {
            thread,
            run,
            runtime,
            events,
            namespace,
            durability,
            claim,
            audit: std::sync::Mutex::default(),
            trace: crate::telemetry::current_trace_parent().map(Arc::from),
            resumed_from: resumed.as_ref().map_or(0, |resumed| resumed.checkpoint),
        });
        // Carried on under another structure fingerprint: the first checkpoint describes it,
        // for the checks of the next resume, a fork and `loomflow graph` to find.
        let mut describe_change = resumed.as_ref().is_some_and(|r| r.graph_changed);
        let still_waiting = observe::picked_up(&shared, g, run, resumed, &resume_values);
        let key = RunKey::of(&shared);
        let top_level = shared.namespace.is_root();
        let mut writer = CheckpointWriter::new(&shared.claim, durability, top_level);
        // Whether the newest checkpoint written says the run completed; a run that ends without
        // one (an `Exit` run, or one with nothing to run) gets it at the end.
        let mut completed_written = false;
        if fresh && (durability != Durability::Exit || over_open_run) {
            let status = if active.is_empty() {
                RunStatus::Completed
            } else {
                RunStatus::Running
            };
            let snapshot = SnapshotRef::new(g, &state, &active)
                .joins(&joins.0)
                .described();
            let mut cp = key.step_checkpoint(&graph.inner, 0, status, &snapshot)?;
            add_audit(&shared, &mut cp);
            // Nothing has run yet: a power cut that takes this write back takes the whole
            // run back with it. A run that is over at once (nothing to run) is an outcome.
            cp.start_only = status == RunStatus::Running && cp.audit.is_empty();
            writer.write_start(cp).await?;
            completed_written = active.is_empty();
        } else if fresh && !active.is_empty() && shared.namespace.is_root() {
            // `Exit`: the start is written only before the run's first journal entry, which
            // would otherwise be filed under a number the thread's next run takes again.
            let snapshot = SnapshotRef::new(g, &state, &active)
                .joins(&joins.0)
                .described();
            let mut cp = key.step_checkpoint(&graph.inner, 0, RunStatus::Running, &snapshot)?;
            cp.start_only = true;
            shared.claim.reserve_start(cp);
        }
        let mut last_nodes: Vec<usize> = Vec::new();
        // Ends the run with a failed step: what was queued for the store goes first, then
        // the failure is written from the position the step started at.
        macro_rules! stop_failed {
            ($error:expr) => {{
                writer.finish().await?;
                let position = ending::Position {
                    step,
                    active: &active,
                    joins: &joins,
                    pending: &pending,
                    resume_values: &resume_values,
                };
                return Box::pin(fail(g, &shared, state, $error, position)).await;
            }};
        }
        // Ends the run cancelled, as of the step `$step` (see `ending::cancel`).
        // The limit counts this execution's supersteps: a run that suspends every turn (a
        // conversation, an approval loop) is not stopped by the turns before its resume.
        let first_step = step;
        macro_rules! cancel_at {
            ($step:expr) => {{
                let at = ($step, &still_waiting[..], step > first_step);
                return Box::pin(cancel(g, &shared, at, state, &active, &joins)).await;
            }};
        }

        while !active.is_empty() {
            if let Some(events) = &shared.events {
                // A slow reader of a bounded stream holds the run; a cancel ends the wait.
                let _ = shared.claim.unless_cancelled(events.room()).await;
            }
            // Another execution took the run over (the heartbeat found the lease gone): stop
            // before running anything more. A run that writes each step learns it from its
            // next write; one that writes later (`Async`, `Exit`) learns it here.
            if shared.claim.is_lost() {
                let _ = writer.finish().await;
                return Err(shared.claim.lost_error().into());
            }
            // A subgraph's run stops too, before its own next step: its parent's step then
            // ends cancelled, and the parent's run with it.
            if shared.claim.cancel_requested() {
                writer.finish().await?;
                cancel_at!(step);
            }
            if shared.claim.yield_requested() {
                writer.finish().await?;
                let at = (step, step > first_step, &active[..], &joins);
                return Box::pin(ending::hand_back(g, &shared, &state, at)).await;
            }
            step += 1;
            if step - first_step > recursion_limit {
                let error = RunError::RecursionLimit {
                    limit: recursion_limit,
                    last_nodes: last_nodes
                        .iter()
                        .map(|&i| g.nodes[i].name.to_string())
                        .collect(),
                };
                stop_failed!(error);
            }

            let span = observe::superstep_span(g, step, &active);
            let running = || run_step(g, &shared, &active, &state, step, &pending, &resume_values);
            // Not wrapped when nobody records spans: moving the step's future into the wrapper
            // costs more than the step's own bookkeeping. Made where it is awaited, so that it
            // is not moved there.
            let outcome = if span.is_disabled() {
                running().await
            } else {
                running().instrument(span).await
            };
            let next_state = match outcome {
                Ok(StepOutcome::Merged(next_state)) => next_state,
                Ok(StepOutcome::Suspended {
                    pending_writes,
                    interrupts,
                }) => {
                    writer.finish().await?;
                    // Asked to stop while the step ran (here, or from another process): the
                    // run is cancelled where the step started rather than left waiting for
                    // answers nobody will give. A subgraph's run goes by what this process
                    // knows (its parent's run looks at the row).
                    let cancelled = match shared.namespace.is_root() {
                        true => shared.claim.cancel_asked().await?,
                        false => shared.claim.cancel_requested(),
                    };
                    if cancelled {
                        drop((pending_writes, interrupts));
                        cancel_at!(step - 1);
                    }
                    locate::forget_child_answers(g, &mut resume_values);
                    // A top-level run's first checkpoint keeps the graph's description (see
                    // `check_graph`, which finds it there); only a run that wrote none (`Exit`
                    // durability) or a subgraph keeps it where it suspends.
                    let describe = durability == Durability::Exit || !shared.namespace.is_root();
                    let describe = std::mem::take(&mut describe_change) || describe;
                    let snapshot = SnapshotRef::new(g, &state, &active)
                        .joins(&joins.0)
                        .suspended(&pending_writes, &interrupts, &resume_values)
                        .describe(describe);
                    // Only the step it resumed can suspend on what the run waited for.
                    let still_waiting = match step == first_step + 1 {
                        true => &still_waiting[..],
                        false => &[],
                    };
                    observe::record_interrupts(&shared, g, &interrupts, still_waiting);
                    // Made in a block of its own, so that the future awaited below keeps the
                    // only copy of the checkpoint.
                    let write = {
                        let mut cp = key.step_checkpoint(
                            &graph.inner,
                            step - 1,
                            RunStatus::Interrupted,
                            &snapshot,
                        )?;
                        // What the interrupts say about the run, from them as they are: the
                        // store need not read them back out of the body.
                        cp.waits = Some(Box::new(crate::runtime::store::Waits::of(&interrupts)));
                        add_audit(&shared, &mut cp);
                        put_last(&shared, cp)
                    };
                    // Suspension always reaches the store before we return: the process may exit.
                    write
                        .instrument(observe::suspend_span(step, &interrupts))
                        .await?;
                    // Only built for a listener: the payloads may be large. One event per
                    // interrupt, the top-level run's, which names it as the outcome does (a
                    // subgraph's by its subgraph node): not one more for each level it
                    // suspends through.
                    let told = shared.events.is_some() && shared.namespace.is_root();
                    for interrupt in interrupts.iter().filter(|_| told) {
                        shared.emit(
                            step,
                            Some(&interrupt.node),
                            EventKind::Interrupt {
                                id: interrupt.id.clone(),
                                payload: interrupt.payload.clone(),
                            },
                        );
                    }
                    return Ok(RunOutcome::Interrupted { state, interrupts });
                }
                // A subgraph let go at its worker's shutdown, or a store failure stopped the
                // step: the run lets go from where the step started, not at fault.
                Err(error @ RunError::Yielded { .. }) => {
                    writer.finish().await?;
                    return Err(error);
                }
                Err(RunError::Store(error)) if ending::in_passing(&error) => {
                    writer.finish().await?;
                    return Err(error.into());
                }
                // A resume value the node could not use: the resume is refused as a bad request
                // and the checkpoint it came from stays as it was.
                Err(error @ RunError::ResumeValue { .. }) => {
                    writer.finish().await?;
                    return Err(error);
                }
                // A node's wait woke because the run was asked to stop: the run is cancelled
                // where the step started, as it is between steps. A subgraph's run records
                // it under its own namespace and hands it to its parent, which ends the run.
                Err(RunError::Cancelled { .. }) if shared.claim.cancel_requested() => {
                    writer.finish().await?;
                    cancel_at!(step - 1);
                }
                Err(error) => {
                    stop_failed!(error);
                }
            };
            let mut next_joins = joins.clone();
            let ran = active.iter().map(|&i| g.topology().node(i));
            // The step before last's buffer holds the next active set: no allocation a step.
            let mut next = std::mem::take(&mut last_nodes);
            if let Err(error) = route_into(g, ran, &next_state, &mut next_joins, &mut next) {
                stop_failed!(error);
            }
            // Made before the step's state is taken: a state its nodes left unwritable fails
            // the step, from where it started.
            let checkpoint = (durability != Durability::Exit).then(|| {
                let status = if next.is_empty() {
                    RunStatus::Completed
                } else {
                    RunStatus::Running
                };
                let snapshot = (SnapshotRef::new(g, &next_state, &next).joins(&next_joins.0))
                    .describe(std::mem::take(&mut describe_change));
                key.step_checkpoint(&graph.inner, step, status, &snapshot)
            });
            if let Some(Err(error)) = checkpoint {
                stop_failed!(ending::unwritable_state(g, &next_state, &active, error));
            }
            state = next_state;
            joins = next_joins;
            pending.clear();
            // Most steps have none: an empty map's `clear` still builds and drops an iterator.
            if !resume_values.is_empty() {
                resume_values.clear();
            }

            if let Some(Ok(mut cp)) = checkpoint {
                add_audit(&shared, &mut cp);
                // Past the interrupted checkpoint: the writer spends the resume requests
                // taken once the checkpoint is written.
                if next.is_empty() {
                    writer.write_last(cp, &shared).await?;
                } else {
                    writer.write(cp).await?;
                }
                completed_written = next.is_empty();
            }
            if shared.events.is_some() {
                let nodes = active
                    .iter()
                    .map(|&i| g.nodes[i].name.to_string())
                    .collect();
                shared.emit(step, None, EventKind::Step { nodes });
            }
            last_nodes = std::mem::replace(&mut active, next);
        }

        observe::unfired_joins(g, &shared.thread, &joins.0);
        writer.finish().await?;
        if !completed_written {
            let snapshot = SnapshotRef::new(g, &state, &[]).describe(describe_change);
            let mut cp =
                key.step_checkpoint(&graph.inner, step, RunStatus::Completed, &snapshot)?;
            add_audit(&shared, &mut cp);
            put_last(&shared, cp).await?;
        }
        shared.emit(step, None, EventKind::Done);
        Ok(RunOutcome::Completed(state))
    }
}

#[cfg(test)]
mod tests;
