//! One superstep: run the active nodes concurrently, each on its own copy of the state, and
//! merge their changes.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use futures_util::future::join_all;
use serde_json::Value;
use tracing::Instrument;

use super::checkpoint::PendingWrite;
use super::{ErrorChain, Result};
use crate::context::{Context, RunShared};
use crate::event::EventKind;
use crate::graph::State;
use crate::graph::compiled::CompiledInner;
use crate::graph::error::RunError;
use crate::graph::merge::{BranchResult, changed_fields, merge_branches};
use crate::graph::node::NodeError;
use crate::graph::subgraph::ChildStop;
use crate::runtime::{Interrupt, StoreError};

pub(super) enum StepOutcome<S> {
    Merged(S),
    Suspended {
        pending_writes: Vec<PendingWrite>,
        interrupts: Vec<Interrupt>,
    },
}

/// How one node's run ended.
enum NodeEnd {
    Finished,
    Suspended(Vec<Interrupt>),
}

/// Runs the active nodes of one superstep (except those with pending writes) and merges.
pub(super) async fn run_step<S: State>(
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
                NodeEnd::Suspended(interrupts) => StepOutcome::Suspended {
                    pending_writes: Vec::new(),
                    interrupts,
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
            NodeEnd::Suspended(mut suspended) => interrupts.append(&mut suspended),
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
                changed: Some(changed_fields(state, &working)?),
            });
        }
        return Ok(StepOutcome::Suspended {
            pending_writes,
            interrupts,
        });
    }

    let mut changed = vec![None; done.len()];
    for write in pending {
        let index = g
            .node_index(&write.node)
            .ok_or_else(|| RunError::CheckpointMismatch {
                thread: shared.thread.to_string(),
                graph: g.name.to_string(),
                node: write.node.clone(),
            })?;
        let working = S::deserialize(&write.state)
            .map_err(|e| RunError::json(format!("pending write of node {}", write.node), e))?;
        done.push((index, working));
        changed.push(write.changed.as_deref());
    }
    let mut done: Vec<_> = done.into_iter().zip(changed).collect();
    done.sort_by_key(|((i, _), _)| *i);
    let branches = done
        .into_iter()
        .map(|((i, working), changed)| BranchResult {
            node: &g.nodes[i].name,
            state: working,
            changed,
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
    let mut ctx = Context::new(Arc::clone(shared), Arc::clone(&node.name), step, resume);
    shared.emit(step, Some(&node.name), EventKind::NodeStart);
    let span = tracing::info_span!(
        target: crate::telemetry::TARGET,
        "node",
        otel.name = %format!("node {}", node.name),
        loomflow.node = %node.name,
        loomflow.step = crate::telemetry::count(step),
    );
    // A hand-written node may panic while building its future, or while it runs.
    let ctx_ref = &ctx;
    let start = AssertUnwindSafe(move || {
        let state = state; // moved, so the closure is FnOnce and may return the borrow
        node.node.run(state, ctx_ref)
    });
    let outcome = match std::panic::catch_unwind(start) {
        Ok(future) => {
            let running = AssertUnwindSafe(future).catch_unwind();
            if span.is_disabled() {
                running.await
            } else {
                running.instrument(span).await
            }
        }
        Err(panic) => Err(panic),
    };
    if let Some(ended) = ctx.journal_writes_ended() {
        ended.await;
    }
    let crate::context::Finished {
        bad_resume,
        suspension,
        store_failure: noted_store_failure,
    } = ctx.finish();
    if let Some(bad_resume) = bad_resume {
        return Err(bad_resume);
    }
    let suspension = Some(suspension).filter(|s| !s.is_empty());
    // A node that failed once the run was asked to stop (its wait woke with
    // `RunError::Cancelled`): the run is cancelled, not failed.
    if matches!(outcome, Ok(Err(_))) && suspension.is_none() && shared.claim.cancel_requested() {
        return Err(RunError::Cancelled {
            thread: shared.thread.to_string(),
        });
    }
    // A subgraph's run that stopped without failing (handed back, a resume value refused,
    // a store failure): the run stops the same way, from where this step started, rather
    // than failing; carried on, the step runs again and the subgraph picks up from its own
    // checkpoint. Likewise a node that failed because the store did (a journal write on a
    // dropped connection): the run is let go, as after a crash, not failed.
    let outcome = match outcome {
        Ok(Err(NodeError::Failed(error))) if suspension.is_none() => {
            match error.downcast::<ChildStop>() {
                Ok(stop) => return Err(stop.0),
                Err(error) => match (store_failure(error), noted_store_failure) {
                    (Ok(failure), _) => return Err(RunError::Store(failure)),
                    // The node's own error type around the store's failure (`anyhow`, an
                    // enum of its own) hides it from a downcast: the context noted it.
                    (Err(error), Some(noted)) => {
                        tracing::warn!(
                            node = %node.name,
                            step,
                            error = %ErrorChain(&*error),
                            "node {} failed after the store failed under it: the run is let go \
                             for its next execution to run the node again",
                            node.name
                        );
                        return Err(RunError::Store(noted));
                    }
                    (Err(error), None) => Ok(Err(NodeError::Failed(error))),
                },
            }
        }
        outcome => outcome,
    };
    match (outcome, suspension) {
        (Ok(result), Some(interrupts)) => {
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
            Ok(NodeEnd::Suspended(interrupts))
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
            message: crate::sync::panic_message(&*panic),
        }),
    }
}

/// The store's failure a node's error is, when it is one the store may not fail again (a
/// write or a read that failed, a closed store): not the node's fault. Anything else,
/// including a write the store refused for what it holds, is given back.
fn store_failure(
    error: Box<dyn std::error::Error + Send + Sync>,
) -> std::result::Result<StoreError, Box<dyn std::error::Error + Send + Sync>> {
    // A node's `?` on the crate's error brings a store's failure as the run's (see
    // `NodeError`'s `From`).
    match error.downcast::<RunError>() {
        Ok(error) => match *error {
            RunError::Store(failure) if failure.is_passing() => Ok(failure),
            other => Err(Box::new(other)),
        },
        Err(other) => Err(other),
    }
}
