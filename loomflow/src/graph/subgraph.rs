//! A compiled graph used as one node of another graph.

use std::sync::Arc;

use crate::context::Context;
use crate::graph::State;
use crate::graph::compiled::CompiledGraph;
use crate::graph::executor::{Execution, Start, execute};
use crate::graph::node::{BoxFuture, Node, NodeError, NodeResult};
use crate::graph::run::RunOutcome;
use crate::graph::shape::GraphShape;

type MapIn<S, T> = Box<dyn Fn(&S) -> T + Send + Sync>;
type MapOut<S, T> = Box<dyn Fn(&mut S, T) + Send + Sync>;

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
        from: impl Fn(&mut S, T) + Send + Sync + 'static,
    ) -> Self {
        Self {
            name,
            graph,
            into: Box::new(into),
            from: Box::new(from),
        }
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
            let namespace = if ctx.namespace().is_empty() {
                format!("{}:{}", self.name, ctx.superstep())
            } else {
                format!("{}/{}:{}", ctx.namespace(), self.name, ctx.superstep())
            };
            let execution = Execution {
                graph: self.graph.clone(),
                thread: Arc::from(ctx.thread()),
                runtime: ctx.runtime().clone(),
                events: ctx.event_sender(),
                namespace: Arc::from(namespace),
                start: Start::Child {
                    input: (self.into)(state),
                    run: ctx.run_number(),
                },
                recursion_limit: self.graph.inner.recursion_limit,
                durability: ctx.durability(),
                claim: Some(ctx.claim().clone()),
                wait_if_busy: None,
            };
            match execute(execution).await? {
                RunOutcome::Completed(child) => {
                    (self.from)(state, child);
                    Ok(())
                }
                RunOutcome::Interrupted { interrupts, .. } => Err(NodeError::failed(format!(
                    "subgraph {} was interrupted ({}); interrupts inside subgraphs are not supported yet",
                    self.name,
                    interrupts
                        .iter()
                        .map(|i| i.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))),
                RunOutcome::Failed { error, .. } => Err(error.into()),
            }
        })
    }

    fn subgraph_shape(&self) -> Option<Arc<GraphShape>> {
        Some(Arc::clone(self.graph.shape()))
    }
}
