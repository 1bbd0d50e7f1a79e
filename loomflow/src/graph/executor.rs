//! The superstep executor.
//!
//! A run is a sequence of supersteps. Each runs every active node concurrently on its own
//! copy of the state as it was when the step began, merges their changes in declaration
//! order, then follows edges, branches and joins to find the next active set. A failure
//! anywhere in a step (a node error or panic, a merge conflict, a bad route) discards the
//! whole step: the state stays as it was when the step began.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use futures_util::future::join_all;
use tracing::Instrument;

use crate::context::{Context, RunShared};
use crate::error::RunError;
use crate::event::EventKind;
use crate::graph::State;
use crate::graph::compiled::{CompiledGraph, CompiledInner, Outgoing, Target};
use crate::graph::merge::{BranchResult, merge_branches};
use crate::graph::run::RunOutcome;
use crate::runtime::{Checkpoint, Durability, RunStatus};
use crate::{Error, Result};

/// Everything one run needs.
pub(crate) struct Execution<S> {
    pub(crate) graph: CompiledGraph<S>,
    pub(crate) shared: Arc<RunShared>,
    pub(crate) input: S,
    pub(crate) recursion_limit: u64,
    pub(crate) durability: Durability,
}

/// Drives a run to its end. `Err` only for store failures; node failures are outcomes.
pub(crate) async fn execute<S: State>(execution: Execution<S>) -> Result<RunOutcome<S>> {
    let span = tracing::info_span!(
        "loomflow.run",
        graph = %execution.graph.inner.name,
        thread = %execution.shared.thread,
        namespace = %execution.shared.namespace,
    );
    run_supersteps(execution).instrument(span).await
}

async fn run_supersteps<S: State>(execution: Execution<S>) -> Result<RunOutcome<S>> {
    let Execution {
        graph,
        shared,
        input,
        recursion_limit,
        durability,
    } = execution;
    let g = &*graph.inner;
    let mut state = input;
    let mut joins = JoinMarks::new(g);

    let mut active = match route(g, [(crate::graph::START, &g.entry)], &state, &mut joins) {
        Ok(active) => active,
        Err(error) => return finish_failed(g, &shared, durability, 0, state, error).await,
    };
    let mut step: u64 = 0;
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
            }
            .into();
            return finish_failed(g, &shared, durability, step, state, error).await;
        }

        let next_state = match run_step(g, &shared, &active, &state, step).await {
            Ok(next_state) => next_state,
            Err(error) => return finish_failed(g, &shared, durability, step, state, error).await,
        };
        let mut next_joins = joins.clone();
        let outs = active.iter().map(|&i| (&*g.nodes[i].name, &g.nodes[i].out));
        let next = match route(g, outs, &next_state, &mut next_joins) {
            Ok(next) => next,
            Err(error) => return finish_failed(g, &shared, durability, step, state, error).await,
        };
        state = next_state;
        joins = next_joins;

        if durability != Durability::Exit {
            shared
                .runtime
                .commit(checkpoint(g, &shared, step, &state, &next)?, durability)
                .await?;
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

    if durability == Durability::Exit {
        shared
            .runtime
            .commit(checkpoint(g, &shared, step, &state, &[])?, durability)
            .await?;
    }
    shared.emit(step, None, EventKind::Done);
    Ok(RunOutcome::Completed(state))
}

async fn finish_failed<S: State>(
    g: &CompiledInner<S>,
    shared: &RunShared,
    durability: Durability,
    step: u64,
    state: S,
    error: Error,
) -> Result<RunOutcome<S>> {
    tracing::warn!(graph = %g.name, thread = %shared.thread, step, error = %ErrorChain(&error), "run failed");
    if durability == Durability::Exit && step > 1 {
        // Keep the last good state; earlier modes already wrote it.
        shared
            .runtime
            .commit(checkpoint(g, shared, step - 1, &state, &[])?, durability)
            .await?;
    }
    shared.emit(
        step,
        None,
        EventKind::Error {
            message: ErrorChain(&error).to_string(),
        },
    );
    Ok(RunOutcome::Failed { state, error })
}

fn checkpoint<S: State>(
    g: &CompiledInner<S>,
    shared: &RunShared,
    step: u64,
    state: &S,
    next: &[usize],
) -> Result<Checkpoint> {
    let value = serde_json::to_value(state)
        .map_err(|e| Error::json(format!("state of graph {}", g.name), e))?;
    Ok(Checkpoint::new(
        &*shared.thread,
        1,
        &*shared.namespace,
        step,
        if next.is_empty() {
            RunStatus::Completed
        } else {
            RunStatus::Running
        },
        value,
        next.iter().map(|&i| g.nodes[i].name.to_string()).collect(),
    ))
}

/// Runs the active nodes of one superstep and returns the merged state.
async fn run_step<S: State>(
    g: &CompiledInner<S>,
    shared: &Arc<RunShared>,
    active: &[usize],
    state: &S,
    step: u64,
) -> Result<S> {
    if let [only] = active {
        let mut working = state.clone();
        run_node(g, shared, *only, &mut working, step).await?;
        return Ok(working);
    }

    let runs = active.iter().map(|&i| {
        let mut working = state.clone();
        async move {
            let result = run_node(g, shared, i, &mut working, step).await;
            (i, result, working)
        }
    });
    let finished = join_all(runs).await;
    let mut branches = Vec::with_capacity(finished.len());
    for (i, result, working) in finished {
        result?;
        branches.push(BranchResult {
            node: &g.nodes[i].name,
            state: working,
        });
    }
    merge_branches(state.clone(), branches, &g.reducers, step)
}

/// Runs one node, turning errors and panics into [`RunError`]s that name it.
async fn run_node<S: State>(
    g: &CompiledInner<S>,
    shared: &Arc<RunShared>,
    index: usize,
    state: &mut S,
    step: u64,
) -> Result<()> {
    let node = &g.nodes[index];
    let ctx = Context::new(Arc::clone(shared), Arc::clone(&node.name), step);
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
    match outcome {
        Ok(Ok(())) => {
            shared.emit(step, Some(&node.name), EventKind::NodeEnd);
            Ok(())
        }
        Ok(Err(source)) => Err(RunError::NodeFailed {
            node: node.name.to_string(),
            step,
            source: Box::new(source),
        }
        .into()),
        Err(panic) => Err(RunError::NodePanicked {
            node: node.name.to_string(),
            step,
            message: panic_message(&*panic),
        }
        .into()),
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
                        }
                        .into());
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
