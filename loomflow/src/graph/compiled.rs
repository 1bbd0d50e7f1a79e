//! [`CompiledGraph`]: a validated graph, ready to run.
//!
//! `compile()` checks the declarations (`validate.rs`), lowers them to a petgraph
//! [`Topology`] (`lower.rs`), checks the topology, and freezes the result.

use std::collections::HashMap;
use std::sync::Arc;

use crate::graph::builder::Graph;
use crate::graph::error::{GraphError, GraphProblem};
use crate::graph::fields::state_fields;
use crate::graph::lower::{CompiledBranch, Lowered, Names, lower};
use crate::graph::merge::Reducer;
use crate::graph::node::Node;
use crate::graph::shape::{GraphShape, NodeShape};
use crate::graph::topology::{Topology, Vertex};
use crate::graph::validate::{self, Declared};
use crate::graph::{START, State};
use crate::runtime::{Runtime, RuntimeError};

pub(crate) struct CompiledNode<S> {
    pub(crate) name: Arc<str>,
    pub(crate) node: Arc<dyn Node<S>>,
}

pub(crate) struct CompiledInner<S> {
    pub(crate) name: Arc<str>,
    pub(crate) nodes: Vec<CompiledNode<S>>,
    /// Node name -> index into `nodes` (foldhash: looked up as a run resumes, no attacker
    /// chooses a graph's node names).
    pub(crate) index: HashMap<Arc<str>, usize, foldhash::fast::RandomState>,
    /// The branch out of each vertex that has one, by vertex index.
    pub(crate) branches: Vec<Option<CompiledBranch<S>>>,
    pub(crate) reducers: HashMap<String, Reducer>,
    pub(crate) recursion_limit: u64,
    /// The structure, with the topology the executor routes through.
    pub(crate) shape: Arc<GraphShape>,
    /// The structure, one fact a line (see [`identity`](crate::graph::identity)).
    pub(crate) description: Vec<String>,
    /// A fingerprint of `description`, recorded by every checkpoint.
    pub(crate) fingerprint: Arc<str>,
    /// Whether any node runs a subgraph: most graphs have none, and a run asks of its
    /// interrupts' nodes as it suspends and resumes.
    pub(crate) has_subgraphs: bool,
    /// How long a run of the graph may take as another graph's node.
    pub(crate) time_limit: Option<TimeLimit>,
    /// The span a run of the graph as another graph's node runs in.
    pub(crate) embedded_span: Option<EmbeddedSpan>,
}

/// The span of a graph's run as another graph's node: made for the thread, and marked
/// failed when the run fails (not when it is cancelled or handed back).
#[derive(Clone)]
pub(crate) struct EmbeddedSpan {
    pub(crate) make: Arc<dyn Fn(&str) -> tracing::Span + Send + Sync>,
    pub(crate) failed: Arc<MarkFailed>,
}

/// Marks an embedded run's span failed with its error: the run's, or the node's (a time
/// limit's).
pub(crate) type MarkFailed =
    dyn Fn(&tracing::Span, &(dyn std::error::Error + 'static)) + Send + Sync;

/// How long a graph's run may take as another graph's node, and the error its node fails
/// with past that, made for the thread (see `SubgraphNode`).
#[derive(Clone)]
pub(crate) struct TimeLimit {
    pub(crate) after: std::time::Duration,
    pub(crate) error: Arc<dyn Fn(&str) -> crate::graph::NodeError + Send + Sync>,
}

impl<S> CompiledInner<S> {
    /// The index of the node called `name`.
    pub(crate) fn node_index(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// The vertices and edges.
    pub(crate) fn topology(&self) -> &Topology {
        &self.shape.topology
    }

    /// The name of a vertex routes leave from: a node's, or `START`.
    pub(crate) fn vertex_name(&self, vertex: Vertex) -> &str {
        match vertex {
            Vertex::Node(i) => &self.nodes[i].name,
            Vertex::Start => START,
            Vertex::End => crate::graph::END,
            Vertex::Join(_) => "(join)",
        }
    }
}

/// A validated graph over state `S`. Cheap to clone; run it as often as you like.
///
/// Produced by [`Graph::compile`]. Run it with [`invoke`](CompiledGraph::invoke),
/// [`start`](CompiledGraph::start), [`stream`](CompiledGraph::stream) or the configurable
/// [`run`](CompiledGraph::run); draw it with [`to_mermaid`](CompiledGraph::to_mermaid).
pub struct CompiledGraph<S> {
    pub(crate) inner: Arc<CompiledInner<S>>,
}

impl<S: State> CompiledInner<S> {
    /// Whether the node called `name` is a subgraph: its interrupts are its child run's.
    pub(crate) fn is_subgraph(&self, name: &str) -> bool {
        self.has_subgraphs
            && self
                .node_index(name)
                .is_some_and(|i| self.nodes[i].node.subgraph_shape().is_some())
    }
}

impl<S> Clone for CompiledGraph<S> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<S> std::fmt::Debug for CompiledGraph<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledGraph")
            .field("name", &self.inner.name)
            .field("nodes", &self.inner.nodes.len())
            .finish_non_exhaustive()
    }
}

impl<S: State> CompiledGraph<S> {
    /// The graph's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The graph's structure, independent of its state type.
    pub fn shape(&self) -> &Arc<GraphShape> {
        &self.inner.shape
    }

    /// A fingerprint of the graph's structure (nodes, edges, branches, joins, subgraphs):
    /// runs record it, and resuming a run whose graph changed is refused unless the run is
    /// told [`allow_graph_change`](crate::RunBuilder::allow_graph_change).
    pub fn fingerprint(&self) -> &str {
        &self.inner.fingerprint
    }

    /// Node names in declaration order.
    pub fn node_names(&self) -> impl Iterator<Item = &str> {
        self.inner.nodes.iter().map(|n| &*n.name)
    }

    /// Queues a run of this graph on `thread` from `input`, for a
    /// [`Worker`](crate::Worker) that registered it to start:
    /// [`Runtime::submit`] under the graph's own name, with an input of its state type.
    ///
    /// # Errors
    ///
    /// As [`Runtime::submit`].
    ///
    /// # Examples
    ///
    /// ```
    /// use loomflow::prelude::*;
    /// use loomflow::runtime::RunState;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
    /// let graph = Graph::new("refund")
    ///     .node_sync("pay", |n: &mut u32| *n += 1)
    ///     .edge(START, "pay")
    ///     .edge("pay", END)
    ///     .compile()?;
    /// let runtime = Runtime::in_memory();
    /// graph.submit(&runtime, "order-7", 40).await?;
    /// let row = runtime.run("order-7").await?.record;
    /// assert_eq!((row.state, row.graph.as_deref()), (RunState::Queued, Some("refund")));
    /// # Ok(()) }
    /// ```
    pub async fn submit(
        &self,
        runtime: &Runtime,
        thread: &str,
        input: S,
    ) -> Result<(), RuntimeError> {
        runtime.submit(&self.inner.name, thread, input).await
    }

    pub(crate) fn from_builder(graph: Graph<S>) -> Result<Self, GraphError> {
        let Graph {
            name,
            nodes,
            edges,
            branches,
            joins,
            reducers,
            recursion_limit,
            time_limit,
            embedded_span,
        } = graph;
        let names = Names::new(&nodes);
        let declared = Declared {
            nodes: &nodes,
            names: &names,
            edges: &edges,
            branches: &branches,
            joins: &joins,
            reducers: &reducers,
            state_fields: state_fields::<S>(),
        };
        let mut problems: Vec<GraphProblem> = Vec::new();
        validate::declarations(&declared, &mut problems);
        let Lowered {
            topology,
            branches: routers,
        } = lower(nodes.len(), &names, &edges, &branches, &joins);
        validate::topology(&declared, &topology, &mut problems);
        // No run could take a step.
        if recursion_limit == 0 {
            problems.push(GraphProblem::ZeroRecursionLimit);
        }
        if !problems.is_empty() {
            return Err(GraphError::Invalid {
                graph: name,
                problems,
            });
        }

        let shape = Arc::new(GraphShape {
            name: name.clone(),
            nodes: nodes
                .iter()
                .map(|n| NodeShape {
                    name: n.name().to_owned(),
                    description: n.description().map(str::to_owned),
                    markers: n.markers().to_vec(),
                    subgraph: n.subgraph_shape(),
                })
                .collect(),
            topology,
        });
        let description = crate::graph::identity::describe(&shape);
        let fingerprint = crate::graph::identity::fingerprint_of(&description);
        let nodes: Vec<CompiledNode<S>> = nodes
            .into_iter()
            .map(|node| CompiledNode {
                name: Arc::from(node.name()),
                node,
            })
            .collect();
        let index = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (Arc::clone(&n.name), i))
            .collect();
        let has_subgraphs = nodes.iter().any(|n| n.node.subgraph_shape().is_some());
        Ok(Self {
            inner: Arc::new(CompiledInner {
                name: name.into(),
                nodes,
                index,
                branches: routers,
                reducers: reducers.into_iter().collect(),
                recursion_limit,
                shape,
                description,
                fingerprint: fingerprint.into(),
                has_subgraphs,
                time_limit,
                embedded_span,
            }),
        })
    }
}
