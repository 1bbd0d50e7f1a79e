//! A type-erased description of a compiled graph: what Mermaid renders and tools inspect.

use std::sync::Arc;

use petgraph::visit::EdgeRef;

use crate::graph::topology::{Link, Topology, Vertex};

/// The structure of a compiled graph, independent of its state type.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GraphShape {
    /// The graph's name.
    pub name: String,
    /// Nodes in declaration order; [`Endpoint::Node`] indexes into this.
    pub nodes: Vec<NodeShape>,
    /// The vertices and edges: what the executor routes through and Mermaid draws.
    pub(crate) topology: Topology,
}

impl GraphShape {
    /// Plain and branch edges, in declaration order.
    pub fn edges(&self) -> Vec<EdgeShape> {
        let t = &self.topology;
        t.edges()
            .filter_map(|e| {
                let kind = match e.weight() {
                    Link::Plain => EdgeKind::Plain,
                    Link::Branch { label } => EdgeKind::Branch {
                        label: label.clone(),
                    },
                    Link::JoinSource { .. } | Link::JoinTarget => return None,
                };
                Some(EdgeShape {
                    from: Endpoint::of(t.vertex(e.source()))?,
                    to: Endpoint::of(t.vertex(e.target()))?,
                    kind,
                })
            })
            .collect()
    }

    /// Explicit joins, in declaration order.
    pub fn joins(&self) -> Vec<JoinShape> {
        let t = &self.topology;
        (0..t.join_sizes().len())
            .filter_map(|j| {
                Some(JoinShape {
                    sources: t.join_sources(j),
                    target: Endpoint::of(t.join_target(j))?,
                })
            })
            .collect()
    }
}

/// One node of a [`GraphShape`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeShape {
    /// The node's name.
    pub name: String,
    /// Its description, if any.
    pub description: Option<String>,
    /// Markers such as `"waits for signal"`.
    pub markers: Vec<&'static str>,
    /// The wrapped graph, when the node is a subgraph.
    pub subgraph: Option<Arc<GraphShape>>,
}

/// Where an edge starts or ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// The graph's entry.
    Start,
    /// The graph's exit.
    End,
    /// A node, by index into [`GraphShape::nodes`].
    Node(usize),
}

impl Endpoint {
    /// The endpoint a vertex stands for; joins are not endpoints.
    fn of(vertex: Vertex) -> Option<Self> {
        match vertex {
            Vertex::Start => Some(Self::Start),
            Vertex::End => Some(Self::End),
            Vertex::Node(i) => Some(Self::Node(i)),
            Vertex::Join(_) => None,
        }
    }
}

/// An edge of a [`GraphShape`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EdgeShape {
    /// Source.
    pub from: Endpoint,
    /// Target.
    pub to: Endpoint,
    /// Plain or conditional.
    pub kind: EdgeKind,
}

/// Whether an edge always fires or is chosen by a branch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EdgeKind {
    /// Always taken.
    Plain,
    /// Taken when the branch's router picks it; the label is the route's name.
    Branch {
        /// The route's label.
        label: String,
    },
}

/// A join: `target` runs once every source has run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct JoinShape {
    /// Indexes of the source nodes.
    pub sources: Vec<usize>,
    /// Where the join leads.
    pub target: Endpoint,
}
