//! Where a run begins: a fresh input, or a checkpoint to carry on from (recover, resume).

use std::collections::BTreeMap;

use serde_json::Value;

use super::checkpoint::Snapshot;
use super::observe::{Answered, Resumed};
use super::owned::{OwnedSnapshot, ReadBack};
use super::resume_request::{Answering, resume_requests};
use super::route::{JoinMarks, route};
use super::{Position, Result, ResumeValue, Start};
use crate::graph::State;
use crate::graph::compiled::CompiledInner;
use crate::graph::error::RunError;
use crate::graph::run::RunOutcome;
use crate::runtime::claim::RunClaim;
use crate::runtime::{Checkpoint, ResumeRequest, RunStatus, Runtime};

mod graph_change;
mod newest;
mod recovered;
use graph_change::check_graph;
use newest::newest;
use recovered::recover_interrupted;

pub(super) enum Located<S> {
    Position(Position<S>),
    Finished(RunOutcome<S>),
    /// A top-level run whose route out of `START` failed: its number, its input, and why
    /// (see `ending::start_failed`).
    StartFailed {
        run: u64,
        state: S,
        error: RunError,
    },
}

/// A checkpoint read back: its row's columns and the executor's snapshot.
struct Stored<S> {
    id: u64,
    run: u64,
    step: u64,
    status: RunStatus,
    state: StoredState<S>,
    next: StoredNext,
    /// The rest of the snapshot; its `state` and `next` are moved out to the fields above.
    snapshot: Snapshot,
}

/// A checkpoint's state, as read back.
enum StoredState<S> {
    /// From a checkpoint's body: decoded when the run needs it.
    Json(Value),
    /// From a snapshot this process kept as values, through JSON already.
    Typed(S),
}

/// The nodes a checkpoint runs next, as read back.
enum StoredNext {
    /// By name, from a body or from a snapshot another graph kept.
    Names(Vec<String>),
    /// As indexes into the reading graph's nodes: a snapshot it kept itself.
    Indexes(Vec<usize>),
}

impl<S: State> Stored<S> {
    /// Reads `cp` for `g`, whose snapshot a graph of state `S` may have kept as values (in
    /// memory); see [`OwnedSnapshot::read`] for `payloads`.
    fn read(cp: Checkpoint, g: &CompiledInner<S>, thread: &str, payloads: bool) -> Result<Self> {
        let (id, run, step, status) = (cp.id, cp.run, cp.step, cp.status);
        let kept = cp.unserialized.as_ref();
        let (state, next, snapshot) =
            match kept.and_then(|kept| OwnedSnapshot::read(&*kept.0, g, payloads)) {
                Some(read) => {
                    let ReadBack {
                        state,
                        next,
                        mut snapshot,
                    } = read.map_err(|e| {
                        RunError::json(format!("checkpointed state of thread {thread}"), e)
                    })?;
                    let next = match next {
                        Some(indexes) => StoredNext::Indexes(indexes),
                        None => StoredNext::Names(std::mem::take(&mut snapshot.next)),
                    };
                    (StoredState::Typed(state), next, snapshot)
                }
                None => {
                    // A memory store's checkpoint comes without its thread: named here, for
                    // an error building its body to say whose it is.
                    let mut cp = cp;
                    if cp.thread.is_empty() {
                        thread.clone_into(&mut cp.thread);
                    }
                    let mut snapshot = Snapshot::decode(cp.serialized()?.body, thread)?;
                    let state = StoredState::Json(std::mem::take(&mut snapshot.state));
                    let next = StoredNext::Names(std::mem::take(&mut snapshot.next));
                    (state, next, snapshot)
                }
            };
        Ok(Self {
            id,
            run,
            step,
            status,
            state,
            next,
            snapshot,
        })
    }
}

impl<S> Stored<S> {
    /// The checkpoint, as a resume request answers it.
    fn answering(&self) -> Answering {
        Answering {
            id: self.id,
            run: self.run,
            step: self.step,
        }
    }

    fn interrupt_ids(&self) -> Vec<String> {
        self.snapshot
            .interrupts
            .iter()
            .map(|i| i.id.clone())
            .collect()
    }
}

impl<S: State> StoredState<S> {
    /// The state, decoded for `g` if it came as JSON.
    fn decode(self, g: &CompiledInner<S>, thread: &str) -> Result<S> {
        match self {
            Self::Typed(state) => Ok(state),
            Self::Json(state) => crate::json::from_value_at(state, || {
                format!("checkpointed state of thread {thread} (graph {})", g.name)
            })
            .map_err(|(what, e)| RunError::json(what, e)),
        }
    }
}

impl StoredNext {
    /// Whether it names no node.
    fn is_empty(&self) -> bool {
        match self {
            Self::Names(names) => names.is_empty(),
            Self::Indexes(indexes) => indexes.is_empty(),
        }
    }

    /// The nodes, as indexes into `g`'s, in order; a name `g` has no node for is
    /// [`RunError::CheckpointMismatch`].
    fn indexes<S>(self, g: &CompiledInner<S>, thread: &str) -> Result<Vec<usize>> {
        let mut active = match self {
            Self::Indexes(indexes) => indexes,
            Self::Names(names) => {
                let mut active = Vec::with_capacity(names.len());
                for name in names {
                    let index =
                        g.node_index(&name)
                            .ok_or_else(|| RunError::CheckpointMismatch {
                                thread: thread.to_owned(),
                                graph: g.name.to_string(),
                                node: name,
                            })?;
                    active.push(index);
                }
                active
            }
        };
        active.sort_unstable();
        Ok(active)
    }
}

/// What `locate` carries on with outside its block: the rare paths that wait on the store
/// once the checkpoint has been read, boxed so that they take no room in its future.
type Carried<'a, S> = std::pin::Pin<Box<dyn Future<Output = Result<Located<S>>> + Send + 'a>>;

/// Works out where the run begins: a fresh input, or a checkpoint to carry on from.
pub(super) async fn locate<S: State>(
    g: &CompiledInner<S>,
    thread: &str,
    runtime: &Runtime,
    claim: &RunClaim,
    namespace: &str,
    start: Start<S>,
    allow_graph_change: bool,
) -> Result<Located<S>> {
    // A route out of `START` that fails (a branch naming a node it did not declare, a
    // router that panics) hands the input back with the error.
    let fresh = |run: u64, state: S| -> Result<Position<S>, (RunError, S)> {
        let mut joins = JoinMarks::new(g);
        let active = match route(g, [g.topology().start()], &state, &mut joins) {
            Ok(active) => active,
            Err(error) => return Err((error, state)),
        };
        Ok(Position {
            run,
            step: 0,
            state,
            active,
            joins,
            pending: Vec::new(),
            resume_values: BTreeMap::new(),
            fresh: true,
            over_open_run: false,
            resumed: None,
        })
    };
    // A recover with a resume request to apply leaves this block with the future that
    // applies it, awaited outside: inside, the checkpoint it moved there would keep its
    // room in this future across the await.
    // Where the memory store keeps the thread: the claim found it (see `MemoryStore::claim_now`).
    let placed = (thread, claim.place());
    let with_request = 'located: {
        let position = match start {
            Start::Fresh(input) => {
                let (previous, over_open_run) =
                    newest::previous_run(runtime, placed, namespace).await?;
                let run = previous.map_or(1, |run| run + 1);
                match fresh(run, input) {
                    Ok(position) => Position {
                        over_open_run,
                        ..position
                    },
                    // The run fails before its first step, its input the last good state.
                    Err((error, state)) if namespace.is_empty() => {
                        return Ok(Located::StartFailed { run, state, error });
                    }
                    Err((error, state)) => {
                        return Ok(Located::Finished(RunOutcome::Failed { state, error }));
                    }
                }
            }
            Start::Child { input, run } => fresh(run, input).map_err(|(error, _)| error)?,
            Start::Recover => {
                let cp = latest(g, runtime, placed, namespace, true).await?;
                check_graph(g, thread, runtime, &cp, allow_graph_change).await?;
                // A top-level run interrupted for a value carries on with a resume request
                // sent for it, if there is one, as a resume with that value would.
                let for_a_value = cp.status == RunStatus::Interrupted
                    && namespace.is_empty()
                    && (cp.snapshot.interrupts.iter())
                        .any(|i| i.signal.is_none() && i.wake_at_ms.is_none());
                if for_a_value {
                    let carried: Carried<'_, S> =
                        Box::pin(with_request(g, (runtime, claim), thread, cp));
                    break 'located carried;
                }
                match cp.status {
                    RunStatus::Completed => {
                        return Ok(Located::Finished(RunOutcome::Completed(
                            cp.state.decode(g, thread)?,
                        )));
                    }
                    RunStatus::Interrupted => {
                        // Awaited outside, as `with_request` is: it may read a subgraph's
                        // checkpoints, and its future would add to every run's.
                        let (from, to) = ((runtime, namespace), (thread, cp));
                        let carried: Carried<'_, S> = Box::pin(recover_interrupted(g, from, to));
                        break 'located carried;
                    }
                    // A run whose route out of `START` failed (see `ending::start_failed`): it
                    // is routed again from its input.
                    RunStatus::Failed if cp.step == 0 && cp.next.is_empty() => {
                        let (run, state) = (cp.run, cp.state.decode(g, thread)?);
                        match fresh(run, state) {
                            Ok(position) => position,
                            Err((error, state)) => {
                                return Ok(Located::StartFailed { run, state, error });
                            }
                        }
                    }
                    RunStatus::Running | RunStatus::Failed => {
                        from_checkpoint(g, thread, cp, Vec::new())?
                    }
                    RunStatus::Cancelled => {
                        return Err(RunError::Cancelled {
                            thread: thread.to_owned(),
                        });
                    }
                }
            }
            Start::ResumeOne(value) => {
                let cp = interrupted(g, runtime, placed, namespace).await?;
                check_graph(g, thread, runtime, &cp, allow_graph_change).await?;
                let answer = only_answer(&cp, thread, value)?;
                answers_directly(claim, namespace, &cp);
                resume_position(g, thread, cp, [answer].into_iter())?
            }
            Start::Resume(values) => {
                let cp = interrupted(g, runtime, placed, namespace).await?;
                check_graph(g, thread, runtime, &cp, allow_graph_change).await?;
                let answers = answers_by_id(&cp, thread, values)?;
                answers_directly(claim, namespace, &cp);
                resume_position(g, thread, cp, answers.into_iter())?
            }
        };
        return Ok(Located::Position(position));
    };
    with_request.await
}

/// Notes on a top-level run's claim that it answers `cp`'s question directly: the resume
/// requests queued for it are spent once the run took the answer (see `executor::claimed`).
fn answers_directly<S>(claim: &RunClaim, namespace: &str, cp: &Stored<S>) {
    if namespace.is_empty() {
        claim.answers_directly(cp.id);
    }
}

/// The newest checkpoint of `thread`, read for `g` (with its interrupts' payloads or not).
async fn latest<S: State>(
    g: &CompiledInner<S>,
    runtime: &Runtime,
    (thread, place): (&str, usize),
    namespace: &str,
    payloads: bool,
) -> Result<Stored<S>> {
    let cp = newest(runtime, (thread, place), namespace)
        .await?
        .ok_or_else(|| RunError::UnknownThread {
            thread: thread.to_owned(),
        })?;
    Stored::read(cp, g, thread, payloads)
}

/// The newest checkpoint of a suspended `thread`, to resume: its interrupts come without
/// their payloads, which a resume does not read. A cancelled run's resume is refused as
/// cancelled, whether it was stopped while suspended or while it ran.
async fn interrupted<S: State>(
    g: &CompiledInner<S>,
    runtime: &Runtime,
    (thread, place): (&str, usize),
    namespace: &str,
) -> Result<Stored<S>> {
    let cp = latest(g, runtime, (thread, place), namespace, false).await?;
    if cp.status == RunStatus::Cancelled {
        return Err(RunError::Cancelled {
            thread: thread.to_owned(),
        });
    }
    if cp.status != RunStatus::Interrupted {
        return Err(RunError::NotInterrupted {
            thread: thread.to_owned(),
            status: cp.status.as_str(),
        });
    }
    Ok(cp)
}

/// The value `value` given to the pending interrupt at `at`, whose id is `id`, checked: an
/// interrupt that waits for a signal or a timer takes no value, and the value must have
/// serialized.
fn answer<S>(
    cp: &Stored<S>,
    thread: &str,
    at: usize,
    id: &str,
    value: ResumeValue,
) -> Result<(usize, Value)> {
    let interrupt = &cp.snapshot.interrupts[at];
    if let Some(signal) = &interrupt.signal {
        return Err(RunError::WaitsForSignal {
            thread: thread.to_owned(),
            id: id.to_owned(),
            signal: signal.clone(),
        });
    }
    if let Some(wake_at_ms) = interrupt.wake_at_ms {
        return Err(RunError::WaitsForTimer {
            thread: thread.to_owned(),
            id: id.to_owned(),
            wake_at_ms,
        });
    }
    let value = value.map_err(|source| RunError::UnserializableResume {
        thread: thread.to_owned(),
        id: id.to_owned(),
        source,
    })?;
    Ok((at, value))
}

/// Where `cp`, interrupted for a value, carries on: resumed with the resume requests sent
/// for it, if there are any (see [`resume_requests`]); else as any recover of it would.
/// Requests an earlier execution took and that were refused then are not refused again.
async fn with_request<S: State>(
    g: &CompiledInner<S>,
    (runtime, claim): (&Runtime, &RunClaim),
    thread: &str,
    cp: Stored<S>,
) -> Result<Located<S>> {
    let (requests, fresh) = resume_requests(runtime, claim, thread, &cp.answering()).await?;
    if !requests.is_empty() {
        match requested_answers(&cp, thread, requests) {
            Ok(answers) => {
                let position = resume_position(g, thread, cp, answers.into_iter())?;
                return Ok(Located::Position(position));
            }
            Err(error) if fresh => return Err(error),
            // Taken by an execution that stopped before it could refuse them: spent now,
            // or every later execution would take them up again.
            Err(_) => claim.refuse_request().await?,
        }
    }
    recover_interrupted(g, (runtime, ""), (thread, cp)).await
}

/// The answers `requests` give `cp`'s interrupts, oldest first: one per interrupt, the
/// newest for each; a request that names none answers the only pending one.
fn requested_answers<S>(
    cp: &Stored<S>,
    thread: &str,
    requests: Vec<ResumeRequest>,
) -> Result<Vec<(usize, Value)>> {
    let mut values = BTreeMap::new();
    for ResumeRequest {
        interrupt, value, ..
    } in requests
    {
        let id = match interrupt {
            Some(id) => id,
            None => cp.snapshot.interrupts[unnamed(cp, thread)?].id.clone(),
        };
        values.insert(id, Ok(value));
    }
    answers_by_id(cp, thread, values)
}

/// Which pending interrupt a value that names none answers
/// ([`unnamed_answer`](crate::runtime::store::unnamed_answer)); refused when that is not one.
fn unnamed<S>(cp: &Stored<S>, thread: &str) -> Result<usize> {
    crate::runtime::store::unnamed_answer(&cp.snapshot.interrupts).map_err(|pending| {
        RunError::AmbiguousResume {
            thread: thread.to_owned(),
            pending,
        }
    })
}

/// The answer `value` gives the one pending interrupt a value naming none answers
/// ([`answer`]); refused when that is not one.
fn only_answer<S>(cp: &Stored<S>, thread: &str, value: ResumeValue) -> Result<(usize, Value)> {
    let at = unnamed(cp, thread)?;
    answer(cp, thread, at, &cp.snapshot.interrupts[at].id, value)
}

/// The answers `values` gives by interrupt id, each checked ([`answer`]) against the
/// pending interrupts.
fn answers_by_id<S>(
    cp: &Stored<S>,
    thread: &str,
    values: BTreeMap<String, ResumeValue>,
) -> Result<Vec<(usize, Value)>> {
    let mut answers = Vec::with_capacity(values.len());
    for (id, value) in values {
        let Some(at) = cp.snapshot.interrupts.iter().position(|i| i.id == id) else {
            return Err(RunError::UnknownInterrupt {
                thread: thread.to_owned(),
                pending: cp.interrupt_ids(),
                id,
            });
        };
        answers.push(answer(cp, thread, at, &id, value)?);
    }
    Ok(answers)
}

/// Files each answer (the index of the interrupt it answers, and its value) under its
/// node, at the position of the interrupt call it answers.
fn resume_position<S: State>(
    g: &CompiledInner<S>,
    thread: &str,
    mut cp: Stored<S>,
    answers: impl ExactSizeIterator<Item = (usize, Value)>,
) -> Result<Position<S>> {
    let Snapshot {
        interrupts,
        resume_values,
        ..
    } = &mut cp.snapshot;
    // The subgraph nodes this resume answers: each starts its object afresh.
    let mut answered_subgraphs: Vec<&str> = Vec::new();
    let mut answered = Vec::with_capacity(answers.len());
    for (at, value) in answers {
        let interrupt = &interrupts[at];
        let node = &interrupt.node;
        let values = resume_values.entry(node.clone()).or_default();
        if g.is_subgraph(node) {
            // A subgraph node suspends on its child's interrupts, answered by id, in any
            // order: its values travel as one object, {id: value}, that it hands down. Only
            // this resume's: the child's checkpoints keep what earlier answers did (a
            // checkpoint from before `forget_child_answers` may still hold them).
            if !answered_subgraphs.contains(&node.as_str()) {
                answered_subgraphs.push(node);
                *values = vec![Value::Object(serde_json::Map::new())];
            }
            if let Some(Value::Object(by_id)) = values.first_mut() {
                by_id.insert(interrupt.id.clone(), value);
            }
            answered.push(Answered { at, value: 0 });
        } else {
            values.truncate(interrupt.index);
            values.push(value);
            let value = values.len() - 1;
            answered.push(Answered { at, value });
        }
    }
    from_checkpoint(g, thread, cp, answered)
}

/// Drops the answers given to subgraph nodes, as a run suspends again. A subgraph's child
/// run took them up and its own checkpoints record what they did: handing them down again
/// at the next resume would answer interrupts that are no longer pending.
pub(super) fn forget_child_answers<S: State>(
    g: &CompiledInner<S>,
    resume_values: &mut BTreeMap<String, Vec<Value>>,
) {
    if !resume_values.is_empty() {
        resume_values.retain(|node, _| !g.is_subgraph(node));
    }
}

/// The position a checkpoint records; `answered` says which interrupts a resume answers,
/// and where their values are filed.
fn from_checkpoint<S: State>(
    g: &CompiledInner<S>,
    thread: &str,
    cp: Stored<S>,
    answered: Vec<Answered>,
) -> Result<Position<S>> {
    let Snapshot {
        state: _,
        next: _,
        joins: stored_joins,
        pending_writes,
        interrupts,
        resume_values,
        graph,
        graph_description: _,
        trace,
    } = cp.snapshot;
    let resumed = Resumed {
        checkpoint: cp.id,
        step: cp.step,
        status: cp.status,
        trace,
        interrupts,
        answered,
        graph_changed: graph.is_some_and(|recorded| *recorded != *g.fingerprint),
    };
    let active = cp.next.indexes(g, thread)?;
    let mut joins = JoinMarks::new(g);
    if stored_joins.len() == joins.0.len()
        && stored_joins
            .iter()
            .zip(&joins.0)
            .all(|(a, b)| a.len() == b.len())
    {
        joins.0 = stored_joins;
    }
    Ok(Position {
        run: cp.run,
        step: cp.step,
        state: cp.state.decode(g, thread)?,
        active,
        joins,
        pending: pending_writes,
        resume_values,
        fresh: false,
        over_open_run: false,
        resumed: Some(resumed),
    })
}
