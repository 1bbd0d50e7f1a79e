//! A compiled graph used as one node of another graph.

use std::sync::Arc;

use futures_util::future::Either;
use tracing::Instrument;

use crate::context::Context;
use crate::graph::State;
use crate::graph::compiled::CompiledGraph;
use crate::graph::error::RunError;
use crate::graph::executor::{Execution, Start, execute};
use crate::graph::node::{BoxFuture, Node, NodeError, NodeResult};
use crate::graph::run::RunOutcome;
use crate::graph::shape::GraphShape;
use crate::runtime::RunStatus;

/// How a subgraph's run stopped without failing: handed back at its worker's shutdown,
/// refused a resume value it could not use, or stopped by a store failure. It leaves its
/// node as this error, which the parent's step takes out again to stop the same way
/// (`executor::step`), rather than as the node's failure, which would fail the run.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub(crate) struct ChildStop(pub(crate) RunError);

type MapIn<S, T> = Box<dyn Fn(&S) -> T + Send + Sync>;
/// Writes the child's final state back; an error fails the node (a team shape refusing a
/// round past its limit, or a coordinator that decided nothing).
type MapOut<S, T> = Box<dyn Fn(&mut S, T) -> NodeResult + Send + Sync>;

pub(crate) struct SubgraphNode<S, T> {
    name: String,
    graph: CompiledGraph<T>,
    into: MapIn<S, T>,
    from: MapOut<S, T>,
}

impl<S, T> SubgraphNode<S, T> {
    pub(crate) fn new(
        name: String,
        graph: CompiledGraph<T>,
        into: impl Fn(&S) -> T + Send + Sync + 'static,
        from: impl Fn(&mut S, T) -> NodeResult + Send + Sync + 'static,
    ) -> Self {
        Self {
            name,
            graph,
            into: Box::new(into),
            from: Box::new(from),
        }
    }
}

impl<S: State, T: State> SubgraphNode<S, T> {
    /// Where the child run begins. This node runs again for the same superstep when its
    /// run is resumed or recovered; the child then carries on from its own newest
    /// checkpoint (answering its interrupts with the values given for them) instead of
    /// starting over.
    async fn start(&self, ctx: &Context, namespace: &str, state: &S) -> Result<Start<T>, RunError> {
        let latest = ctx
            .runtime()
            .store()
            .latest_checkpoint(ctx.thread(), namespace)
            .await?;
        let Some(latest) = latest.filter(|cp| cp.run == ctx.run_number()) else {
            return Ok(Start::Child {
                input: (self.into)(state),
                run: ctx.run_number(),
            });
        };
        let mut values = ctx.child_resume_values();
        // The child writes its own checkpoints: it may have taken an answer and asked again
        // in a step whose parent did not write (a sibling failed or was refused, the process
        // died), under the same id if it asks in a loop. A child checkpoint newer than the
        // parent's is such a question, which the answers given are not for: it reaches the
        // parent as the child is recovered.
        let moved_on = latest.id > ctx.resumed_from();
        if latest.status != RunStatus::Interrupted || values.is_empty() || moved_on {
            return Ok(Start::Recover);
        }
        // Only the answers to what the child still asks.
        let pending = latest.interrupts()?;
        values.retain(|id, _| pending.iter().any(|interrupt| interrupt.id == *id));
        Ok(match values.is_empty() {
            true => Start::Recover,
            false => Start::Resume(values.into_iter().map(|(id, v)| (id, Ok(v))).collect()),
        })
    }
}

impl<S: State, T: State> Node<S> for SubgraphNode<S, T> {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> Option<&str> {
        Some(self.graph.name())
    }

    fn run<'a>(&'a self, state: &'a mut S, ctx: &'a Context) -> BoxFuture<'a, NodeResult> {
        Box::pin(async move {
            // The parent's step makes each invocation's namespace (and so its checkpoints and
            // journal) its own: a subgraph in a loop does not replay its previous invocation.
            let namespace = ctx.run_namespace().child(&self.name, ctx.superstep());
            let start = self.start(ctx, &namespace.to_string(), state).await?;
            let execution = Execution {
                graph: self.graph.clone(),
                thread: Arc::from(ctx.thread()),
                runtime: ctx.runtime().clone(),
                events: ctx.event_sender(),
                namespace,
                start,
                recursion_limit: self.graph.inner.recursion_limit,
                durability: ctx.durability(),
                // The parent checked the whole structure, subgraphs included.
                allow_graph_change: true,
                claim: Some(ctx.claim().clone()),
                wait_if_busy: None,
            };
            // The run's own span is made as it starts: inside the embedded span, if any.
            let embedded = (self.graph.inner.embedded_span.as_ref())
                .map(|embedded| (embedded, (embedded.make)(ctx.thread())));
            let run = match &embedded {
                Some((_, span)) => Either::Left(
                    span.in_scope(|| execute(execution))
                        .instrument(span.clone()),
                ),
                None => Either::Right(execute(execution)),
            };
            let ran = match &self.graph.inner.time_limit {
                None => run.await,
                Some(limit) => match tokio::time::timeout(limit.after, run).await {
                    Ok(ran) => ran,
                    // What the child wrote stays: running the node again carries it on.
                    Err(_) => {
                        let error = (limit.error)(ctx.thread());
                        if let (Some((embedded, span)), NodeError::Failed(source)) =
                            (&embedded, &error)
                        {
                            (embedded.failed)(span, &**source);
                        }
                        return Err(error);
                    }
                },
            };
            if let Some((embedded, span)) = &embedded {
                match &ran {
                    Ok(RunOutcome::Failed { error, .. }) => (embedded.failed)(span, error),
                    Err(RunError::Cancelled { .. } | RunError::Yielded { .. }) | Ok(_) => {}
                    Err(error) => (embedded.failed)(span, error),
                }
            }
            let outcome = match ran {
                Ok(outcome) => outcome,
                Err(
                    stop @ (RunError::Yielded { .. }
                    | RunError::ResumeValue { .. }
                    | RunError::Store(_)),
                ) => return Err(NodeError::failed(ChildStop(stop))),
                Err(error) => return Err(error.into()),
            };
            match outcome {
                RunOutcome::Completed(child) => Ok((self.from)(state, child)?),
                // The whole run suspends on the child's interrupts; running this node again
                // (resume, recover) carries the child on from its own checkpoint.
                RunOutcome::Interrupted { interrupts, .. } => {
                    Err(ctx.suspend_on_child(interrupts).into())
                }
                RunOutcome::Failed { error, .. } => Err(error.into()),
            }
        })
    }

    fn subgraph_shape(&self) -> Option<Arc<GraphShape>> {
        Some(Arc::clone(self.graph.shape()))
    }
}
