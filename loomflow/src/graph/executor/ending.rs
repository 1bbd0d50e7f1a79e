//! How an execution stops: the write that ends it, and a failed step, a cancel or a
//! hand-back between two supersteps before its graph's end.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::checkpoint::{PendingWrite, RunKey, SnapshotRef, add_audit};
use super::route::JoinMarks;
use super::{ErrorChain, Result};
use crate::context::RunShared;
use crate::event::EventKind;
use crate::graph::State;
use crate::graph::compiled::CompiledInner;
use crate::graph::error::RunError;
use crate::graph::run::RunOutcome;
use crate::runtime::claim::RunClaim;
use crate::runtime::{Checkpoint, Durability, RunStatus, Runtime};

/// Where a failed step started: its number, the nodes it ran, the joins' progress, and
/// for a resumed step its finished siblings and the values it was given.
pub(super) struct Position<'a> {
    pub(super) step: u64,
    pub(super) active: &'a [usize],
    pub(super) joins: &'a JoinMarks,
    pub(super) pending: &'a [PendingWrite],
    pub(super) resume_values: &'a BTreeMap<String, Vec<Value>>,
}

/// Ends a failed run: nothing of the failed step is written (the last checkpoint stays the
/// newest), except in `Exit` mode, which has written nothing yet and records the last good
/// state with the step to retry. A resumed step that fails leaves the interrupted checkpoint
/// the newest in every mode, so that its question can be answered again: the run stays
/// interrupted; the resume requests it applied (see `resume_request`) are refused, spent,
/// as are those queued for it when its values were given to `resume` directly.
pub(super) async fn fail<S: State>(
    g: &CompiledInner<S>,
    shared: &RunShared,
    state: S,
    error: RunError,
    at: Position<'_>,
) -> Result<RunOutcome<S>> {
    let Position {
        step,
        active,
        joins,
        pending,
        resume_values,
    } = at;
    let message = ErrorChain(&error).to_string();
    tracing::warn!(graph = %g.name, thread = %shared.thread, step, error = %message, "run failed");
    let resumed = !resume_values.is_empty();
    let root = shared.namespace.is_root();
    if resumed && shared.claim.holds_request() {
        tracing::warn!(thread = %shared.thread, "the resumed step failed with the resume requests it applied: they are spent, and the run waits for another answer");
        Box::pin(shared.claim.refuse_request()).await?;
    } else if resumed && root && shared.claim.answered_directly().is_some() {
        // Values given to `resume` directly, which the step failed with: the question is
        // open, as for a request's value. The requests queued for it are dropped all the
        // same: the resume answered instead of them (another answer is another input, whose
        // journaled calls are made afresh: a charge made again, say).
        shared.claim.direct_resume_failed();
    } else if root {
        // Recorded on the run's row as the execution lets go; also if it is dropped before.
        shared.claim.failing(&message);
    }
    if shared.durability == Durability::Exit && !resumed {
        // The whole position, as a checkpoint of another mode would have kept it: the joins'
        // progress, and for a resumed step its finished siblings and the values it was
        // given, so that a recovery neither loses a join nor runs a sibling again.
        let snapshot = SnapshotRef::new(g, &state, active)
            .joins(&joins.0)
            .suspended(pending, &[], resume_values);
        let mut cp = RunKey::of(shared).checkpoint(g, step - 1, RunStatus::Failed, &snapshot)?;
        cp.error = Some(message.clone());
        add_audit(shared, &mut cp);
        put_last(shared, cp).await?;
    } else {
        flush_audit(shared).await?;
    }
    shared.emit(step, None, EventKind::Error { message });
    Ok(RunOutcome::Failed { state, error })
}

/// Ends a top-level run whose route out of `START` failed (a branch that chose a node it did
/// not declare, a router that panicked): nothing ran, and a failed checkpoint at step 0 keeps
/// its input under its own number, in every durability mode. The thread's row names the run
/// that failed, and `recover` (after a fix) routes it again from that input; without the
/// checkpoint, it would find the thread's previous run and hand back its outcome.
pub(super) async fn start_failed<S: State>(
    graph: &Arc<CompiledInner<S>>,
    (thread, runtime, claim): (&str, &Runtime, &RunClaim),
    (run, state, error): (u64, S, RunError),
) -> Result<RunOutcome<S>> {
    let message = ErrorChain(&error).to_string();
    tracing::warn!(graph = %graph.name, thread, error = %message, "run failed at its start");
    let store = runtime.store();
    let trace = crate::telemetry::current_trace_parent().map(Arc::<str>::from);
    let key = RunKey {
        thread,
        run,
        namespace: "",
        trace: trace.as_ref(),
        unserialized: store.as_memory().is_some(),
        json_bodies: store.writes_json_bodies(),
    };
    let snapshot = SnapshotRef::new(graph, &state, &[]).described();
    let mut cp = key.step_checkpoint(graph, 0, RunStatus::Failed, &snapshot)?;
    cp.error = Some(message);
    claim.put_last_checkpoint(cp).await?;
    Ok(RunOutcome::Failed { state, error })
}

/// What a checkpoint whose state does not serialize fails with (a map keyed by something
/// other than strings, a `Serialize` of the user's that fails): the state the step's nodes
/// (`nodes`) left, named with them and with where in it (`.m`), as a store would refuse it.
/// Any other error is returned as it is.
pub(super) fn unwritable_state<S: State>(
    g: &CompiledInner<S>,
    state: &S,
    nodes: &[usize],
    error: RunError,
) -> RunError {
    let RunError::Json { source, .. } = error else {
        return error;
    };
    let mut sink = serde_json::Serializer::new(std::io::sink());
    let path = serde_path_to_error::serialize(state, &mut sink).err();
    let at = (path.map(|e| e.path().to_string()))
        .filter(|path| path != ".")
        .map(|path| format!(", at {path}"))
        .unwrap_or_default();
    let names: Vec<&str> = nodes.iter().map(|&i| &*g.nodes[i].name).collect();
    let what = format!(
        "state of graph {} after node {}{at}",
        g.name,
        names.join(", ")
    );
    RunError::json(what, source)
}

/// Stops a run that was asked to stop ([`Runtime::cancel`](crate::Runtime::cancel)) between two supersteps: its
/// last checkpoint is written again as cancelled, with the step it would have run next.
///
/// `still_waiting` are the waits and timers the execution picked up on and did not answer
/// (see `observe::picked_up`): a `resume` entry still queued for one says the run was carried
/// on past it, which it was not; it is forgotten. When no step ran (`ran` is false), no
/// answer reached its node either, and every queued `resume` entry is forgotten.
pub(super) async fn cancel<S: State>(
    g: &CompiledInner<S>,
    shared: &RunShared,
    (step, still_waiting, ran): (u64, &[String], bool),
    state: S,
    active: &[usize],
    joins: &JoinMarks,
) -> Result<RunOutcome<S>> {
    tracing::info!(graph = %g.name, thread = %shared.thread, step, "run cancelled");
    match ran {
        true => shared.forget_resumes_of(still_waiting.iter().map(String::as_str)),
        false => shared.forget_resumes(),
    }
    let snapshot = SnapshotRef::new(g, &state, active).joins(&joins.0);
    let mut cp = RunKey::of(shared).checkpoint(g, step, RunStatus::Cancelled, &snapshot)?;
    add_audit(shared, &mut cp);
    put_last(shared, cp).await?;
    shared.emit(
        step,
        None,
        EventKind::Error {
            message: "the run was cancelled".to_owned(),
        },
    );
    Err(RunError::Cancelled {
        thread: shared.thread.to_string(),
    })
}

/// Lets a run go between two supersteps, as its worker was asked (a graceful shutdown):
/// every finished step is checkpointed, and letting go is all that is left; except in
/// `Exit` mode, which has written nothing: when this execution finished a step (`ran`), its
/// position after `step` goes first, so that the worker that carries it on does not start
/// it over (before any step, the newest checkpoint says where the run stands, with the
/// answers a resumed step was to take). A subgraph's run stops too, and its parent's step
/// with it: carried on, the step runs again, and the subgraph picks up from its own
/// checkpoint (in `Exit` mode, from the parent's last position written).
pub(super) async fn hand_back<S: State>(
    g: &CompiledInner<S>,
    shared: &RunShared,
    state: &S,
    (step, ran, active, joins): (u64, bool, &[usize], &JoinMarks),
) -> Result<RunOutcome<S>> {
    if shared.durability == Durability::Exit && shared.namespace.is_root() && ran {
        let snapshot = SnapshotRef::new(g, state, active).joins(&joins.0);
        let mut cp = RunKey::of(shared).checkpoint(g, step, RunStatus::Running, &snapshot)?;
        add_audit(shared, &mut cp);
        shared.claim.write_reserved_start().await?;
        shared.claim.put_checkpoint(cp).await?;
        // Past the step that took them: the resume requests it applied are spent, and the
        // run is let go at once rather than held for them.
        shared.claim.request_spent();
    }
    tracing::info!(graph = %g.name, thread = %shared.thread, step, "run handed back");
    Err(RunError::Yielded {
        thread: shared.thread.to_string(),
    })
}

/// Writes the checkpoint that ends an execution. A top-level run lets its claim go in the
/// same write; a subgraph's claim is its parent's, which carries on.
///
/// Not an `async fn`, which would keep the checkpoint twice.
#[allow(clippy::manual_async_fn)]
pub(super) fn put_last(
    shared: &RunShared,
    cp: Checkpoint,
) -> impl Future<Output = Result<()>> + Send + '_ {
    async move {
        if shared.namespace.is_root() {
            shared.claim.put_last_checkpoint(cp).await?;
        } else {
            // An `Exit` run's start goes first, as before a journal entry: the subgraph's
            // rows would otherwise be filed under a run number the thread's next run takes
            // again, and read back by it.
            shared.claim.write_reserved_start().await?;
            shared.claim.put_checkpoint(cp).await?;
        }
        Ok(())
    }
}

/// Writes the audit entries the run recorded since its last write, for a run that stops
/// without writing a checkpoint (a failed step leaves the last one as it was). `resume`
/// entries are not among them: the run was not carried past its suspension, and the
/// execution that carries it on records them.
async fn flush_audit(shared: &RunShared) -> Result<()> {
    let mut audit = shared.take_audit_but_resumes();
    if !audit.is_empty() {
        shared.claim.entries_named(&mut audit);
        shared.runtime.store().append_audit(audit).await?;
    }
    Ok(())
}

/// Whether a cancel landed after the run looked at its row and before its suspension was
/// written, and the run, suspended now, was cancelled as a suspended run is. Should the
/// store fail here, the suspension stands, and the row's request stops the run when it is
/// carried on.
pub(super) async fn cancel_after_suspending(runtime: &Runtime, claim: &RunClaim) -> bool {
    let cancelled = match claim.cancel_asked().await {
        Ok(true) => runtime.cancel(claim.thread()).await.map(|_| true),
        Ok(false) => Ok(false),
        Err(error) => Err(error.into()),
    };
    cancelled.unwrap_or_else(|error| {
        tracing::warn!(thread = %claim.thread(), %error, "could not cancel the run asked to stop as it suspended");
        false
    })
}

/// Whether an execution that ended with `result` lets its run go runnable at once: handed
/// back, busy, or stopped by a store failure in passing (a database restart, a lost
/// connection). The run is not at fault, and may have taken what it waited for; it is let
/// go as after a crash.
pub(super) fn half_way<T>(result: &Result<T>) -> bool {
    match result {
        Err(RunError::Yielded { .. } | RunError::Busy { .. }) => true,
        Err(RunError::Store(error)) => in_passing(error),
        _ => false,
    }
}

/// Whether a store failure stops an execution without failing its run: the store failed in
/// passing (a lost connection, a full disk), or the lease was lost, and the run is carried
/// on, by this process or another. What the store refused
/// ([`StoreError::Refused`](crate::runtime::StoreError::Refused)), a row it cannot decode,
/// an operation it does not offer: each would fail again, so the run fails rather than
/// being let go to be tried again, and again.
pub(super) fn in_passing(error: &crate::runtime::StoreError) -> bool {
    error.is_passing() || matches!(error, crate::runtime::StoreError::LeaseLost { .. })
}

/// Spends the resume requests queued for the question asked at checkpoint `answered`,
/// which a resume given its values directly answered, once the run took them (a resume
/// refused answers nothing, and leaves them for the run's next execution). Those sent for
/// a question the run asked since stay. What fails here leaves them queued: sent for a
/// question the run has moved past, they are dropped when an execution takes them.
pub(super) async fn spend_resume_requests(runtime: &Runtime, thread: &str, answered: u64) {
    if !runtime.may_hold_resume_requests(thread) {
        return;
    }
    let why = "its question was answered by a resume";
    if let Err(error) = runtime
        .drop_resume_requests_for(thread, answered, why)
        .await
    {
        tracing::warn!(%thread, %error, "could not drop the resume requests a resume answered");
    }
}

/// Whether `error` refuses the values a resume gave (or the requests it took): the run
/// stays where it was, interrupted.
pub(super) fn refuses_resume(error: &RunError) -> bool {
    matches!(
        error,
        RunError::ResumeValue { .. }
            | RunError::UnknownInterrupt { .. }
            | RunError::AmbiguousResume { .. }
            | RunError::WaitsForSignal { .. }
            | RunError::WaitsForTimer { .. }
            | RunError::NotInterrupted { .. }
    )
}

/// Whether an execution that ended with `result` and let go of its run left it as it was,
/// suspended (a refused resume request, a direct resume whose step failed, an error before
/// the run moved): what it waits for may have come while it was held, and found no run to
/// wake.
pub(super) fn as_it_was<S>(result: &Result<RunOutcome<S>>) -> bool {
    !matches!(
        result,
        Ok(RunOutcome::Interrupted { .. } | RunOutcome::Completed(_))
    )
}
