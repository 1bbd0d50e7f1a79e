//! [`Graph`]: the builder users compose nodes and edges with.

use std::sync::Arc;

use crate::context::Context;
use crate::graph::compiled::{CompiledGraph, EmbeddedSpan, TimeLimit};
use crate::graph::error::RunError;
use crate::graph::error::{GraphError, GraphProblem};
use crate::graph::merge::Reducer;
use crate::graph::node::{BoxFuture, FnNode, IntoSyncNodeResult, Node, NodeResult, SyncFnNode};
use crate::graph::subgraph::SubgraphNode;
use crate::graph::{END, START, State};

type Result<T, E = RunError> = std::result::Result<T, E>;

/// The default number of supersteps a run may take before it is stopped.
pub const DEFAULT_RECURSION_LIMIT: u64 = 25;

/// Where a branch's router sends the run: one target, several (fan-out), or none.
///
/// Built from `&str`, `String`, or a `Vec` / array of either.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Route(pub(crate) Vec<String>);

impl Route {
    /// A route to no node: the path ends here.
    pub fn none() -> Self {
        Self(Vec::new())
    }
}

impl From<&str> for Route {
    fn from(target: &str) -> Self {
        Self(vec![target.to_owned()])
    }
}

impl From<String> for Route {
    fn from(target: String) -> Self {
        Self(vec![target])
    }
}

impl<T: Into<String>> From<Vec<T>> for Route {
    fn from(targets: Vec<T>) -> Self {
        Self(targets.into_iter().map(Into::into).collect())
    }
}

impl<T: Into<String>, const N: usize> From<[T; N]> for Route {
    fn from(targets: [T; N]) -> Self {
        Self(targets.into_iter().map(Into::into).collect())
    }
}

pub(crate) type Router<S> = Arc<dyn Fn(&S) -> Route + Send + Sync>;

pub(crate) struct BranchDecl<S> {
    pub(crate) from: String,
    pub(crate) targets: Vec<String>,
    pub(crate) router: Router<S>,
}

pub(crate) struct JoinDecl {
    pub(crate) sources: Vec<String>,
    pub(crate) target: String,
}

/// A graph under construction over state `S`.
///
/// Add nodes, connect them with edges, branches and joins, then [`compile`](Graph::compile).
///
/// # Examples
///
/// ```
/// use loomflow::prelude::*;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
/// let graph = Graph::new("double")
///     .node_sync("double", |n: &mut u64| *n *= 2)
///     .edge(START, "double")
///     .branch("double", ["double", END], |n: &u64| if *n < 100 { "double" } else { END })
///     .compile()?;
///
/// let outcome = graph.invoke(&Runtime::in_memory(), "t1", 3).await?;
/// assert_eq!(outcome.completed()?, 192);
/// # Ok(()) }
/// ```
#[must_use]
pub struct Graph<S> {
    pub(crate) name: String,
    pub(crate) nodes: Vec<Arc<dyn Node<S>>>,
    pub(crate) edges: Vec<(String, String)>,
    pub(crate) branches: Vec<BranchDecl<S>>,
    pub(crate) joins: Vec<JoinDecl>,
    pub(crate) reducers: Vec<(String, Reducer)>,
    pub(crate) recursion_limit: u64,
    /// How long a run of the graph may take when it is another graph's node.
    pub(crate) time_limit: Option<TimeLimit>,
    /// The span a run of the graph as another graph's node runs in.
    pub(crate) embedded_span: Option<EmbeddedSpan>,
}

impl<S: 'static> std::fmt::Debug for Graph<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("name", &self.name)
            .field(
                "nodes",
                &self.nodes.iter().map(|n| n.name()).collect::<Vec<_>>(),
            )
            .field("edges", &self.edges)
            .field("recursion_limit", &self.recursion_limit)
            .finish_non_exhaustive()
    }
}

impl<S: State> Graph<S> {
    /// Starts an empty graph with a name (used in errors, spans and diagrams).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            nodes: Vec::new(),
            edges: Vec::new(),
            branches: Vec::new(),
            joins: Vec::new(),
            reducers: Vec::new(),
            recursion_limit: DEFAULT_RECURSION_LIMIT,
            time_limit: None,
            embedded_span: None,
        }
    }

    /// Bounds a run of this graph used as another graph's node (an agent's timeout): past
    /// `limit`, the node fails with the error `limit` makes for the thread.
    pub(crate) fn time_limit(mut self, limit: TimeLimit) -> Self {
        self.time_limit = Some(limit);
        self
    }

    /// Runs each run of this graph used as another graph's node in the span `span` makes
    /// for the thread (an agent's `invoke_agent`, as its own runs have).
    pub(crate) fn embedded_span(mut self, span: EmbeddedSpan) -> Self {
        self.embedded_span = Some(span);
        self
    }

    /// Adds a node: a `#[node]` function or any [`Node`] implementation.
    pub fn node(mut self, node: impl Node<S>) -> Self {
        self.nodes.push(Arc::new(node));
        self
    }

    /// Adds a node from an async closure.
    ///
    /// The closure returns a boxed future so that it may borrow the state:
    ///
    /// ```
    /// use loomflow::prelude::*;
    ///
    /// let graph = Graph::new("g")
    ///     .node_fn("greet", |s: &mut String, ctx| {
    ///         Box::pin(async move {
    ///             s.push_str(" from ");
    ///             s.push_str(ctx.node());
    ///             Ok(())
    ///         })
    ///     })
    ///     .edge(START, "greet")
    ///     .edge("greet", END);
    /// # let _ = graph;
    /// ```
    pub fn node_fn<F>(mut self, name: impl Into<String>, func: F) -> Self
    where
        F: for<'a> Fn(&'a mut S, &'a Context) -> BoxFuture<'a, NodeResult> + Send + Sync + 'static,
    {
        self.nodes.push(Arc::new(FnNode {
            name: name.into(),
            func,
        }));
        self
    }

    /// Adds a node from a synchronous closure returning `()` or a `Result` whose error is
    /// any error type (see [`IntoSyncNodeResult`](crate::graph::IntoSyncNodeResult)).
    pub fn node_sync<F, R>(mut self, name: impl Into<String>, func: F) -> Self
    where
        F: Fn(&mut S) -> R + Send + Sync + 'static,
        R: IntoSyncNodeResult + 'static,
    {
        self.nodes.push(Arc::new(SyncFnNode {
            name: name.into(),
            func,
        }));
        self
    }

    /// Adds a compiled graph over another state type `T` as one node.
    ///
    /// `into` builds the child's input from this graph's state; `from` writes the child's
    /// final state back. Each invocation checkpoints and journals under its own namespace
    /// (`name:step`, nested as `outer:2/inner:1`), and
    /// its events reach this run's stream with node names prefixed by `name/`.
    pub fn subgraph<T, I, O>(
        self,
        name: impl Into<String>,
        graph: CompiledGraph<T>,
        into: I,
        from: O,
    ) -> Self
    where
        T: State,
        I: Fn(&S) -> T + Send + Sync + 'static,
        O: Fn(&mut S, T) + Send + Sync + 'static,
    {
        self.subgraph_checked(name, graph, into, move |state: &mut S, child: T| {
            from(state, child);
            Ok(())
        })
    }

    /// [`subgraph`](Self::subgraph), its `from` able to refuse the child's state: its error
    /// fails the node.
    pub(crate) fn subgraph_checked<T, I, O>(
        mut self,
        name: impl Into<String>,
        graph: CompiledGraph<T>,
        into: I,
        from: O,
    ) -> Self
    where
        T: State,
        I: Fn(&S) -> T + Send + Sync + 'static,
        O: Fn(&mut S, T) -> NodeResult + Send + Sync + 'static,
    {
        self.nodes
            .push(Arc::new(SubgraphNode::new(name.into(), graph, into, from)));
        self
    }

    /// Adds a plain edge: when `from` finishes, `to` runs in the next superstep.
    ///
    /// Several edges out of one node fan out; use [`START`] and [`END`] for the ends.
    pub fn edge(mut self, from: impl Into<String>, to: impl Into<String>) -> Self {
        self.edges.push((from.into(), to.into()));
        self
    }

    /// Adds a conditional edge: after `from` runs, `router` picks among `targets`.
    ///
    /// The router sees the state as merged at the end of the step. Choosing a target that was
    /// not declared fails the run with [`RunError::UndeclaredRoute`](crate::error::RunError).
    pub fn branch<R, F, T>(
        mut self,
        from: impl Into<String>,
        targets: impl IntoIterator<Item = T>,
        router: F,
    ) -> Self
    where
        T: Into<String>,
        F: Fn(&S) -> R + Send + Sync + 'static,
        R: Into<Route>,
    {
        self.branches.push(BranchDecl {
            from: from.into(),
            targets: targets.into_iter().map(Into::into).collect(),
            router: Arc::new(move |state: &S| router(state).into()),
        });
        self
    }

    /// Adds an explicit join: `target` runs once every node in `sources` has run.
    ///
    /// The sources may run in different supersteps. A run that ends before all of them ran
    /// (some sit on branches that exclude each other) completes without running `target`,
    /// and logs a warning (target `loomflow`) naming the join's target and the sources that
    /// did not run. To run a node after any one of several, use plain edges instead.
    pub fn join<T: Into<String>>(
        mut self,
        sources: impl IntoIterator<Item = T>,
        target: impl Into<String>,
    ) -> Self {
        self.joins.push(JoinDecl {
            sources: sources.into_iter().map(Into::into).collect(),
            target: target.into(),
        });
        self
    }

    /// Declares how concurrent writes to one top-level state field combine.
    ///
    /// Without a reducer, two nodes of one superstep that change the same field fail the step.
    ///
    /// `field` is the field's name as serialized (after serde's renames). When the state is a
    /// struct deriving `Deserialize`, [`compile`](Graph::compile) reports a field it does not
    /// have; other states (maps, `serde_json::Value`, structs with a flattened field) are not
    /// checked. A field gets one reducer: declaring a second is reported too. A state that is
    /// not a JSON object (a number, a `Vec`) is one field, named
    /// [`WHOLE_STATE`](crate::graph::WHOLE_STATE).
    pub fn reducer(mut self, field: impl Into<String>, reducer: Reducer) -> Self {
        self.reducers.push((field.into(), reducer));
        self
    }

    /// Sets the default recursion limit for runs of this graph: how many supersteps one
    /// execution (an invoke, a resume, a recover) may run. A run that suspends and is resumed
    /// counts afresh from its resume, so a conversation that asks every turn runs as long as
    /// it lasts; a loop that never suspends is stopped.
    pub fn recursion_limit(mut self, limit: u64) -> Self {
        self.recursion_limit = limit;
        self
    }

    /// Validates the graph and freezes it for running.
    ///
    /// # Errors
    ///
    /// [`GraphError::Invalid`] listing every problem found, each naming its node: duplicate or
    /// reserved names, edges or branches naming unknown nodes, no entry, nodes unreachable from
    /// `START`, nodes with no path to `END`, two reducers for one field, a reducer for a field
    /// the state does not have.
    pub fn compile(self) -> Result<CompiledGraph<S>, GraphError> {
        CompiledGraph::from_builder(self)
    }
}

pub(crate) fn is_reserved(name: &str) -> bool {
    name.is_empty() || name == START || name == END
}

pub(crate) fn problem_unknown(name: &str, context: String) -> GraphProblem {
    GraphProblem::UnknownNode {
        name: name.to_owned(),
        context,
    }
}
