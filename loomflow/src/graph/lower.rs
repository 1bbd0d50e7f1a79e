//! Lowering: from the builder's declarations (names) to the [`Topology`] and the routers
//! (indexes).
//!
//! Lowering never reports anything: it skips what does not resolve, and validation
//! (`validate.rs`) says why. So a graph with problems still lowers, and the passes that walk
//! the topology can report everything else that is wrong with it.

use std::collections::HashMap;
use std::sync::Arc;

use petgraph::graph::NodeIndex;

use crate::graph::builder::{BranchDecl, JoinDecl, Router, is_reserved};
use crate::graph::node::Node;
use crate::graph::topology::{Link, Topology, Vertex};
use crate::graph::{END, START};

/// Node names and the index each stands for: the first declaration of each name that is
/// not reserved.
pub(crate) struct Names<'a>(HashMap<&'a str, usize>);

impl<'a> Names<'a> {
    pub(crate) fn new<S: 'static>(nodes: &'a [Arc<dyn Node<S>>]) -> Self {
        let mut index = HashMap::with_capacity(nodes.len());
        for (i, node) in nodes.iter().enumerate() {
            if !is_reserved(node.name()) {
                index.entry(node.name()).or_insert(i);
            }
        }
        Self(index)
    }

    /// The index of the node called `name`.
    pub(crate) fn get(&self, name: &str) -> Option<usize> {
        self.0.get(name).copied()
    }

    /// Whether `name` can start an edge: `START` or a node.
    pub(crate) fn is_source(&self, name: &str) -> bool {
        name == START || self.0.contains_key(name)
    }

    /// Whether `name` can end an edge: `END` or a node.
    pub(crate) fn is_target(&self, name: &str) -> bool {
        name == END || self.0.contains_key(name)
    }

    fn source(&self, topology: &Topology, name: &str) -> Option<NodeIndex> {
        if name == START {
            Some(topology.start())
        } else {
            self.get(name).map(|i| topology.node(i))
        }
    }

    fn target(&self, topology: &Topology, name: &str) -> Option<NodeIndex> {
        if name == END {
            Some(topology.end())
        } else {
            self.get(name).map(|i| topology.node(i))
        }
    }
}

/// A branch, lowered: the router, and where each of its labels leads.
pub(crate) struct CompiledBranch<S> {
    /// Hashed with foldhash: a step that leaves through a branch looks its label up here.
    pub(crate) targets: HashMap<String, Vertex, foldhash::fast::RandomState>,
    pub(crate) router: Router<S>,
}

/// What lowering produces.
pub(crate) struct Lowered<S> {
    pub(crate) topology: Topology,
    /// The branch out of each vertex that has one, by vertex index (nodes, `START`, `END`).
    pub(crate) branches: Vec<Option<CompiledBranch<S>>>,
}

/// Lowers the declarations of a graph of `nodes` nodes, in declaration order: plain edges,
/// then branches, then joins.
pub(crate) fn lower<S>(
    nodes: usize,
    names: &Names<'_>,
    edges: &[(String, String)],
    branches: &[BranchDecl<S>],
    joins: &[JoinDecl],
) -> Lowered<S> {
    let mut topology = Topology::new(nodes);
    let mut routers: Vec<Option<CompiledBranch<S>>> = (0..nodes + 2).map(|_| None).collect();

    for (from, to) in edges {
        if let (Some(from), Some(to)) = (names.source(&topology, from), names.target(&topology, to))
        {
            topology.add_edge(from, to, Link::Plain);
        }
    }

    for branch in branches {
        let Some(from) = names.source(&topology, &branch.from) else {
            continue;
        };
        // A second branch out of one node is a problem; the first one stands.
        if routers[from.index()].is_some() {
            continue;
        }
        let mut targets = HashMap::with_capacity_and_hasher(
            branch.targets.len(),
            foldhash::fast::RandomState::default(),
        );
        for label in &branch.targets {
            if let Some(to) = names.target(&topology, label) {
                let link = Link::Branch {
                    label: label.clone(),
                };
                topology.add_edge(from, to, link);
                targets.insert(label.clone(), topology.vertex(to));
            }
        }
        routers[from.index()] = Some(CompiledBranch {
            targets,
            router: Arc::clone(&branch.router),
        });
    }

    for join in joins {
        let Some(target) = names.target(&topology, &join.target) else {
            continue;
        };
        let mut sources = Vec::with_capacity(join.sources.len());
        for source in &join.sources {
            if let Some(i) = names.get(source)
                && !sources.contains(&i)
            {
                sources.push(i);
            }
        }
        if !sources.is_empty() {
            topology.add_join(&sources, target);
        }
    }

    Lowered {
        topology,
        branches: routers,
    }
}
