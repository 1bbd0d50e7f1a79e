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

use std::any::Any;
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use futures_util::future::join_all;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;
use tracing::Instrument;

use crate::context::{Context, RunShared};
use crate::event::{Event, EventKind};
use crate::graph::State;
use crate::graph::compiled::{CompiledGraph, CompiledInner, Outgoing, Target};
use crate::graph::error::RunError;
use crate::graph::merge::{BranchResult, merge_branches};
use crate::graph::node::NodeError;
use crate::graph::run::RunOutcome;
use crate::runtime::claim::RunClaim;
use crate::runtime::{Checkpoint, Durability, Interrupt, PendingWrite, RunStatus, Runtime};

type Result<T, E = RunError> = std::result::Result<T, E>;

/// Where a run begins.
pub(crate) enum Start<S> {
    /// A new run on the thread, from this input.
    Fresh(S),
    /// A new run of a subgraph, inside its parent's run.
    Child { input: S, run: u64 },
    /// Resume the pending interrupt (there must be exactly one) with this value.
    ResumeOne(Value),
    /// Resume pending interrupts by id.
    Resume(BTreeMap<String, Value>),
    /// Carry on from the newest checkpoint, whatever stopped the run.
    Recover,
}

/// Everything one run needs.
pub(crate) struct Execution<S> {
    pub(crate) graph: CompiledGraph<S>,
    pub(crate) thread: Arc<str>,
    pub(crate) runtime: Runtime,
    pub(crate) events: Option<UnboundedSender<Event>>,
    pub(crate) namespace: Arc<str>,
    pub(crate) start: Start<S>,
    pub(crate) recursion_limit: u64,
    pub(crate) durability: Durability,
    /// The claim the run executes under: the parent's for a subgraph; `None` for a
    /// top-level run, which claims its thread itself.
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
}

/// Drives a run to its end. `Err` for store failures and bad resume requests; node failures
/// are outcomes.
pub(crate) async fn execute<S: State>(execution: Execution<S>) -> Result<RunOutcome<S>> {
    let span = tracing::info_span!(
        "loomflow.run",
        graph = %execution.graph.inner.name,
        thread = %execution.thread,
        namespace = %execution.namespace,
    );
    claimed(execution).instrument(span).await
}

/// Runs under the execution's claim: a top-level run claims its thread before it reads
/// anything and releases it when it stops; a subgraph uses its parent's. Once the claim is
/// lost (another execution took the run over), the run ends with that error whatever it was
/// doing, having written nothing since.
async fn claimed<S: State>(mut execution: Execution<S>) -> Result<RunOutcome<S>> {
    let (claim, top_level) = match execution.claim.take() {
        Some(parent) => (parent, false),
        None => {
            let claim = execution
                .runtime
                .claim_run(&execution.thread, execution.wait_if_busy)
                .await?;
            (claim, true)
        }
    };
    let result = run_supersteps(execution, claim.clone()).await;
    if claim.is_lost() {
        return Err(claim.lost_error().into());
    }
    if top_level && let Err(error) = claim.release().await {
        // The outcome stands; the lease runs out on its own.
        tracing::warn!(thread = %claim.thread(), %error, "could not release the run's claim");
    }
    result
}

async fn run_supersteps<S: State>(
    execution: Execution<S>,
    claim: RunClaim,
) -> Result<RunOutcome<S>> {
    let Execution {
        graph,
        thread,
        runtime,
        events,
        namespace,
        start,
        recursion_limit,
        durability,
        claim: _,
        wait_if_busy: _,
    } = execution;
    let g = &*graph.inner;
    runtime.load_stored_signals().await?;
    let position = match locate(g, &thread, &runtime, &claim, &namespace, start, durability).await?
    {
        Located::Position(position) => position,
        Located::Finished(outcome) => return Ok(outcome),
    };
    let Position {
        run,
        mut step,
        mut state,
        mut active,
        mut joins,
        mut pending,
        mut resume_values,
    } = position;
    let session = namespace.is_empty().then(|| runtime.session(&thread));
    let shared = Arc::new(RunShared {
        thread,
        run,
        runtime,
        events,
        namespace,
        durability,
        claim,
        _session: session,
    });
    let mut writer = CheckpointWriter::new(&shared.claim, durability);
    let mut last_nodes: Vec<usize> = Vec::new();

    while !active.is_empty() {
        step += 1;
        if step > recursion_limit {
            let error = RunError::RecursionLimit {
                limit: recursion_limit,
                last_nodes: last_nodes
                    .iter()
                    .map(|&i| g.nodes[i].name.to_string())
                    .collect(),
            };
            writer.finish().await?;
            return fail(g, &shared, durability, step, state, &active, error).await;
        }

        let outcome = run_step(g, &shared, &active, &state, step, &pending, &resume_values).await;
        let next_state = match outcome {
            Ok(StepOutcome::Merged(next_state)) => next_state,
            Ok(StepOutcome::Suspended {
                pending_writes,
                interrupts,
            }) => {
                writer.finish().await?;
                let mut cp = checkpoint(
                    g,
                    &shared,
                    step - 1,
                    RunStatus::Interrupted,
                    &state,
                    &active,
                )?;
                cp.joins.clone_from(&joins.0);
                cp.pending_writes = pending_writes;
                cp.interrupts.clone_from(&interrupts);
                cp.resume_values = resume_values;
                // Suspension always reaches the store before we return: the process may exit.
                put_last(&shared, cp).await?;
                for interrupt in &interrupts {
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
            // A resume value the node could not use: the resume is refused as a bad request
            // and the checkpoint it came from stays as it was.
            Err(error @ RunError::ResumeValue { .. }) => {
                writer.finish().await?;
                return Err(error);
            }
            Err(error) => {
                writer.finish().await?;
                return fail(g, &shared, durability, step, state, &active, error).await;
            }
        };
        let mut next_joins = joins.clone();
        let outs = active.iter().map(|&i| (&*g.nodes[i].name, &g.nodes[i].out));
        let next = match route(g, outs, &next_state, &mut next_joins) {
            Ok(next) => next,
            Err(error) => {
                writer.finish().await?;
                return fail(g, &shared, durability, step, state, &active, error).await;
            }
        };
        state = next_state;
        joins = next_joins;
        pending.clear();
        resume_values.clear();

        if durability != Durability::Exit {
            let status = if next.is_empty() {
                RunStatus::Completed
            } else {
                RunStatus::Running
            };
            let mut cp = checkpoint(g, &shared, step, status, &state, &next)?;
            cp.joins.clone_from(&joins.0);
            if next.is_empty() {
                writer.write_last(cp, &shared).await?;
            } else {
                writer.write(cp).await?;
            }
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

    writer.finish().await?;
    if durability == Durability::Exit {
        let cp = checkpoint(g, &shared, step, RunStatus::Completed, &state, &[])?;
        put_last(&shared, cp).await?;
    }
    shared.emit(step, None, EventKind::Done);
    Ok(RunOutcome::Completed(state))
}

enum Located<S> {
    Position(Position<S>),
    Finished(RunOutcome<S>),
}

/// Works out where the run begins: a fresh input, or a checkpoint to carry on from.
async fn locate<S: State>(
    g: &CompiledInner<S>,
    thread: &str,
    runtime: &Runtime,
    claim: &RunClaim,
    namespace: &str,
    start: Start<S>,
    durability: Durability,
) -> Result<Located<S>> {
    let fresh = |run: u64, state: S| -> Result<Position<S>> {
        let mut joins = JoinMarks::new(g);
        let active = route(g, [(crate::graph::START, &g.entry)], &state, &mut joins)?;
        Ok(Position {
            run,
            step: 0,
            state,
            active,
            joins,
            pending: Vec::new(),
            resume_values: BTreeMap::new(),
        })
    };
    let (position, write_input) = match start {
        Start::Fresh(input) => {
            let previous = runtime.store().latest_checkpoint(thread, namespace).await?;
            let run = previous.map_or(1, |cp| cp.run + 1);
            (fresh(run, input)?, true)
        }
        Start::Child { input, run } => (fresh(run, input)?, true),
        Start::Recover => {
            let cp = latest(runtime, thread, namespace).await?;
            match cp.status {
                RunStatus::Completed => {
                    return Ok(Located::Finished(RunOutcome::Completed(decode_state(
                        g, thread, cp.state,
                    )?)));
                }
                // A run waiting for signals is run again: the signals may have arrived.
                RunStatus::Interrupted if cp.interrupts.iter().any(|i| i.signal.is_some()) => {
                    (from_checkpoint(g, thread, cp)?, false)
                }
                RunStatus::Interrupted => {
                    let interrupts = cp.interrupts.clone();
                    return Ok(Located::Finished(RunOutcome::Interrupted {
                        state: decode_state(g, thread, cp.state)?,
                        interrupts,
                    }));
                }
                RunStatus::Running | RunStatus::Failed => (from_checkpoint(g, thread, cp)?, false),
            }
        }
        Start::ResumeOne(value) => {
            let cp = interrupted(runtime, thread, namespace).await?;
            let [only] = cp.interrupts.as_slice() else {
                return Err(RunError::AmbiguousResume {
                    thread: thread.to_owned(),
                    pending: cp.interrupts.iter().map(|i| i.id.clone()).collect(),
                });
            };
            let values = BTreeMap::from([(only.id.clone(), value)]);
            (resume_position(g, thread, cp, values)?, false)
        }
        Start::Resume(values) => {
            let cp = interrupted(runtime, thread, namespace).await?;
            (resume_position(g, thread, cp, values)?, false)
        }
    };
    if write_input && durability != Durability::Exit {
        let mut cp = checkpoint_parts(
            g,
            thread,
            position.run,
            namespace,
            0,
            RunStatus::Running,
            &position.state,
            &position.active,
        )?;
        cp.joins.clone_from(&position.joins.0);
        claim.put_checkpoint(cp).await?;
    }
    Ok(Located::Position(position))
}

async fn latest(runtime: &Runtime, thread: &str, namespace: &str) -> Result<Checkpoint> {
    runtime
        .store()
        .latest_checkpoint(thread, namespace)
        .await?
        .ok_or_else(|| RunError::UnknownThread {
            thread: thread.to_owned(),
        })
}

async fn interrupted(runtime: &Runtime, thread: &str, namespace: &str) -> Result<Checkpoint> {
    let cp = latest(runtime, thread, namespace).await?;
    if cp.status != RunStatus::Interrupted {
        return Err(RunError::NotInterrupted {
            thread: thread.to_owned(),
            status: cp.status.as_str(),
        });
    }
    Ok(cp)
}

fn resume_position<S: State>(
    g: &CompiledInner<S>,
    thread: &str,
    mut cp: Checkpoint,
    values: BTreeMap<String, Value>,
) -> Result<Position<S>> {
    let pending_ids = || cp_ids(&cp.interrupts);
    let mut additions: Vec<(String, usize, Value)> = Vec::with_capacity(values.len());
    for (id, value) in values {
        let Some(interrupt) = cp.interrupts.iter().find(|i| i.id == id) else {
            return Err(RunError::UnknownInterrupt {
                thread: thread.to_owned(),
                id,
                pending: pending_ids(),
            });
        };
        if let Some(signal) = &interrupt.signal {
            return Err(RunError::WaitsForSignal {
                thread: thread.to_owned(),
                id,
                signal: signal.clone(),
            });
        }
        additions.push((interrupt.node.clone(), interrupt.index, value));
    }
    for (node, index, value) in additions {
        let values = cp.resume_values.entry(node).or_default();
        values.truncate(index);
        values.push(value);
    }
    from_checkpoint(g, thread, cp)
}

fn cp_ids(interrupts: &[Interrupt]) -> Vec<String> {
    interrupts.iter().map(|i| i.id.clone()).collect()
}

fn decode_state<S: State>(g: &CompiledInner<S>, thread: &str, state: Value) -> Result<S> {
    serde_json::from_value(state).map_err(|e| {
        RunError::json(
            format!("checkpointed state of thread {thread} (graph {})", g.name),
            e,
        )
    })
}

fn from_checkpoint<S: State>(
    g: &CompiledInner<S>,
    thread: &str,
    cp: Checkpoint,
) -> Result<Position<S>> {
    let mut active = Vec::with_capacity(cp.next.len());
    for name in &cp.next {
        let index = g
            .nodes
            .iter()
            .position(|n| *n.name == **name)
            .ok_or_else(|| RunError::CheckpointMismatch {
                thread: thread.to_owned(),
                graph: g.name.clone(),
                node: name.clone(),
            })?;
        active.push(index);
    }
    active.sort_unstable();
    let mut joins = JoinMarks::new(g);
    if cp.joins.len() == joins.0.len()
        && cp
            .joins
            .iter()
            .zip(&joins.0)
            .all(|(a, b)| a.len() == b.len())
    {
        joins.0 = cp.joins;
    }
    Ok(Position {
        run: cp.run,
        step: cp.step,
        state: decode_state(g, thread, cp.state)?,
        active,
        joins,
        pending: cp.pending_writes,
        resume_values: cp.resume_values,
    })
}

/// Ends a failed run: nothing of the failed step is written (the last checkpoint stays the
/// newest), except in `Exit` mode, which has written nothing yet and records the last good
/// state with the step to retry.
async fn fail<S: State>(
    g: &CompiledInner<S>,
    shared: &RunShared,
    durability: Durability,
    step: u64,
    state: S,
    active: &[usize],
    error: RunError,
) -> Result<RunOutcome<S>> {
    let message = ErrorChain(&error).to_string();
    tracing::warn!(graph = %g.name, thread = %shared.thread, step, error = %message, "run failed");
    if durability == Durability::Exit {
        let mut cp = checkpoint(g, shared, step - 1, RunStatus::Failed, &state, active)?;
        cp.error = Some(message.clone());
        put_last(shared, cp).await?;
    }
    shared.emit(step, None, EventKind::Error { message });
    Ok(RunOutcome::Failed { state, error })
}

/// Writes the checkpoint that ends an execution. A top-level run lets its claim go in the
/// same write; a subgraph's claim is its parent's, which carries on.
async fn put_last(shared: &RunShared, cp: Checkpoint) -> Result<()> {
    if shared.namespace.is_empty() {
        shared.claim.put_last_checkpoint(cp).await?;
    } else {
        shared.claim.put_checkpoint(cp).await?;
    }
    Ok(())
}

fn checkpoint<S: State>(
    g: &CompiledInner<S>,
    shared: &RunShared,
    step: u64,
    status: RunStatus,
    state: &S,
    next: &[usize],
) -> Result<Checkpoint> {
    checkpoint_parts(
        g,
        &shared.thread,
        shared.run,
        &shared.namespace,
        step,
        status,
        state,
        next,
    )
}

#[allow(clippy::too_many_arguments)] // a checkpoint has this many parts
fn checkpoint_parts<S: State>(
    g: &CompiledInner<S>,
    thread: &str,
    run: u64,
    namespace: &str,
    step: u64,
    status: RunStatus,
    state: &S,
    next: &[usize],
) -> Result<Checkpoint> {
    let value = serde_json::to_value(state)
        .map_err(|e| RunError::json(format!("state of graph {}", g.name), e))?;
    Ok(Checkpoint::new(
        thread,
        run,
        namespace,
        step,
        status,
        value,
        next.iter().map(|&i| g.nodes[i].name.to_string()).collect(),
    ))
}

/// Writes checkpoints as the durability mode asks: in line (`Sync`), or in order through a
/// background task (`Async`) that [`finish`](CheckpointWriter::finish) waits for. Both under
/// the run's claim.
enum CheckpointWriter {
    Direct(RunClaim),
    Background {
        queue: Option<UnboundedSender<Checkpoint>>,
        task: Option<tokio::task::JoinHandle<Result<()>>>,
    },
}

impl CheckpointWriter {
    fn new(claim: &RunClaim, durability: Durability) -> Self {
        if durability != Durability::Async {
            return Self::Direct(claim.clone());
        }
        let (queue, mut rx) = tokio::sync::mpsc::unbounded_channel::<Checkpoint>();
        let claim = claim.clone();
        let task = tokio::spawn(async move {
            while let Some(cp) = rx.recv().await {
                claim.put_checkpoint(cp).await?;
            }
            Ok(())
        });
        Self::Background {
            queue: Some(queue),
            task: Some(task),
        }
    }

    /// Writes the checkpoint that ends the execution: in line, it releases a top-level
    /// run's claim (see [`put_last`]); in the background, the claim is released after
    /// [`finish`](Self::finish).
    async fn write_last(&mut self, cp: Checkpoint, shared: &RunShared) -> Result<()> {
        match self {
            Self::Direct(_) => put_last(shared, cp).await,
            Self::Background { .. } => self.write(cp).await,
        }
    }

    async fn write(&mut self, cp: Checkpoint) -> Result<()> {
        match self {
            Self::Direct(claim) => claim.put_checkpoint(cp).await.map(drop).map_err(Into::into),
            Self::Background { queue, .. } => {
                if let Some(queue) = queue {
                    // A send fails only if the writer stopped on an error, which `finish` reports.
                    let _ = queue.send(cp);
                }
                Ok(())
            }
        }
    }

    /// Waits until every queued checkpoint is written.
    async fn finish(&mut self) -> Result<()> {
        if let Self::Background { queue, task } = self {
            queue.take();
            if let Some(task) = task.take() {
                return task.await.map_err(|_| RunError::Internal {
                    problem: "background checkpoint writer stopped",
                })?;
            }
        }
        Ok(())
    }
}

enum StepOutcome<S> {
    Merged(S),
    Suspended {
        pending_writes: Vec<PendingWrite>,
        interrupts: Vec<Interrupt>,
    },
}

/// How one node's run ended.
enum NodeEnd {
    Finished,
    Suspended(Interrupt),
}

/// Runs the active nodes of one superstep (except those with pending writes) and merges.
async fn run_step<S: State>(
    g: &CompiledInner<S>,
    shared: &Arc<RunShared>,
    active: &[usize],
    state: &S,
    step: u64,
    pending: &[PendingWrite],
    resume_values: &BTreeMap<String, Vec<Value>>,
) -> Result<StepOutcome<S>> {
    let resume_for = |i: usize| {
        resume_values
            .get(&*g.nodes[i].name)
            .cloned()
            .unwrap_or_default()
    };
    if let ([only], []) = (active, pending) {
        let mut working = state.clone();
        return Ok(
            match run_node(g, shared, *only, &mut working, step, resume_for(*only)).await? {
                NodeEnd::Finished => StepOutcome::Merged(working),
                NodeEnd::Suspended(interrupt) => StepOutcome::Suspended {
                    pending_writes: Vec::new(),
                    interrupts: vec![interrupt],
                },
            },
        );
    }

    let is_pending = |i: usize| pending.iter().any(|p| *p.node == *g.nodes[i].name);
    let runs = active.iter().filter(|&&i| !is_pending(i)).map(|&i| {
        let mut working = state.clone();
        let resume = resume_for(i);
        async move {
            let result = run_node(g, shared, i, &mut working, step, resume).await;
            (i, result, working)
        }
    });
    let finished = join_all(runs).await;

    let mut interrupts = Vec::new();
    let mut done = Vec::with_capacity(finished.len());
    for (i, result, working) in finished {
        match result? {
            NodeEnd::Finished => done.push((i, working)),
            NodeEnd::Suspended(interrupt) => interrupts.push(interrupt),
        }
    }
    if !interrupts.is_empty() {
        let mut pending_writes = pending.to_vec();
        for (i, working) in done {
            let value = serde_json::to_value(&working)
                .map_err(|e| RunError::json(format!("state of graph {}", g.name), e))?;
            pending_writes.push(PendingWrite {
                node: g.nodes[i].name.to_string(),
                state: value,
            });
        }
        return Ok(StepOutcome::Suspended {
            pending_writes,
            interrupts,
        });
    }

    for write in pending {
        let index = g
            .nodes
            .iter()
            .position(|n| *n.name == *write.node)
            .ok_or_else(|| RunError::CheckpointMismatch {
                thread: shared.thread.to_string(),
                graph: g.name.clone(),
                node: write.node.clone(),
            })?;
        let working: S = serde_json::from_value(write.state.clone())
            .map_err(|e| RunError::json(format!("pending write of node {}", write.node), e))?;
        done.push((index, working));
    }
    done.sort_by_key(|(i, _)| *i);
    let branches = done
        .into_iter()
        .map(|(i, working)| BranchResult {
            node: &g.nodes[i].name,
            state: working,
        })
        .collect();
    merge_branches(state.clone(), branches, &g.reducers, step).map(StepOutcome::Merged)
}

/// Runs one node, turning errors and panics into [`RunError`]s that name it.
async fn run_node<S: State>(
    g: &CompiledInner<S>,
    shared: &Arc<RunShared>,
    index: usize,
    state: &mut S,
    step: u64,
    resume: Vec<Value>,
) -> Result<NodeEnd> {
    let node = &g.nodes[index];
    let ctx = Context::new(Arc::clone(shared), Arc::clone(&node.name), step, resume);
    shared.emit(step, Some(&node.name), EventKind::NodeStart);
    let span = tracing::debug_span!("loomflow.node", node = %node.name, step);
    // A hand-written node may panic while building its future, or while it runs.
    let ctx_ref = &ctx;
    let start = AssertUnwindSafe(move || {
        let state = state; // moved, so the closure is FnOnce and may return the borrow
        node.node.run(state, ctx_ref)
    });
    let outcome = match std::panic::catch_unwind(start) {
        Ok(future) => {
            AssertUnwindSafe(future)
                .catch_unwind()
                .instrument(span)
                .await
        }
        Err(panic) => Err(panic),
    };
    if let Some(bad_resume) = ctx.take_bad_resume() {
        return Err(bad_resume);
    }
    let suspension = ctx.take_suspension();
    match (outcome, suspension) {
        (Ok(result), Some(interrupt)) => {
            match result {
                Ok(()) => tracing::warn!(
                    node = %node.name,
                    step,
                    "node {} caught its suspension and returned Ok; it stays suspended",
                    node.name
                ),
                Err(NodeError::Failed(error)) => tracing::warn!(
                    node = %node.name,
                    step,
                    error = %ErrorChain(&*error),
                    "node {} asked to suspend, then failed; it stays suspended and the error is dropped",
                    node.name
                ),
                Err(_) => {}
            }
            Ok(NodeEnd::Suspended(interrupt))
        }
        (Ok(Ok(())), None) => {
            shared.emit(step, Some(&node.name), EventKind::NodeEnd);
            Ok(NodeEnd::Finished)
        }
        (Ok(Err(error)), None) => Err(RunError::NodeFailed {
            node: node.name.to_string(),
            step,
            source: match error {
                NodeError::Failed(source) => source,
                // A suspension the Context did not record: the node built the error itself.
                NodeError::Suspended { node } => Box::new(RunError::Suspended { node }),
            },
        }),
        (Err(panic), _) => Err(RunError::NodePanicked {
            node: node.name.to_string(),
            step,
            message: panic_message(&*panic),
        }),
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// Which sources of each join have run since it last fired.
#[derive(Clone)]
struct JoinMarks(Vec<Vec<bool>>);

impl JoinMarks {
    fn new<S>(g: &CompiledInner<S>) -> Self {
        Self(g.joins.iter().map(|j| vec![false; j.sources]).collect())
    }
}

/// Follows edges, branches and joins out of the given nodes; returns the next active set in
/// declaration order, each node once.
fn route<'g, S: 'g>(
    g: &'g CompiledInner<S>,
    outs: impl IntoIterator<Item = (&'g str, &'g Outgoing<S>)>,
    state: &S,
    joins: &mut JoinMarks,
) -> Result<Vec<usize>> {
    let mut marked = vec![false; g.nodes.len()];
    let mut mark = |t: Target| {
        if let Target::Node(i) = t {
            marked[i] = true;
        }
    };
    for (from, out) in outs {
        for &t in &out.next {
            mark(t);
        }
        if let Some(branch) = &out.branch {
            for chosen in (branch.router)(state).0 {
                match branch.targets.iter().find(|(name, _)| *name == chosen) {
                    Some(&(_, t)) => mark(t),
                    None => {
                        return Err(RunError::UndeclaredRoute {
                            node: from.to_owned(),
                            target: chosen,
                        });
                    }
                }
            }
        }
        for &(j, pos) in &out.joins {
            let marks = &mut joins.0[j];
            marks[pos] = true;
            if marks.iter().all(|&m| m) {
                marks.iter_mut().for_each(|m| *m = false);
                mark(g.joins[j].target);
            }
        }
    }
    Ok(marked
        .iter()
        .enumerate()
        .filter_map(|(i, &m)| m.then_some(i))
        .collect())
}

/// Displays an error with its chain of sources.
pub(crate) struct ErrorChain<'a>(pub(crate) &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(s) = source {
            write!(f, ": {s}")?;
            source = s.source();
        }
        Ok(())
    }
}
