//! [`Topology`]: a compiled graph's vertices and edges, as a petgraph graph.
//!
//! One graph serves three readers: the executor routes through it after every superstep,
//! validation walks it (reachability from `START`, a path to `END`), and Mermaid draws it.
//!
//! Vertex indexes are fixed by construction: node `i` (declaration order) is vertex `i`,
//! then `START`, `END`, and join `j` is the vertex after them. Edge indexes follow
//! declaration order: plain edges, branch edges, then each join's edges.

use petgraph::Direction;
use petgraph::graph::{DiGraph, EdgeReference, NodeIndex};
use petgraph::visit::{Dfs, EdgeRef, Reversed};

/// A vertex of the topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vertex {
    /// A node, by index into the graph's nodes.
    Node(usize),
    /// The graph's entry.
    Start,
    /// The graph's exit.
    End,
    /// An explicit join, by declaration order.
    Join(usize),
}

/// An edge of the topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Link {
    /// Always taken when its source ran.
    Plain,
    /// Taken when its source's router picks `label` (the target's name as declared).
    Branch { label: String },
    /// From a source of a join to the join: records that the source ran.
    JoinSource { position: usize },
    /// From a join to its target: taken once every source of the join has run.
    JoinTarget,
}

/// The vertices and edges of a compiled graph.
#[derive(Debug, Clone)]
pub(crate) struct Topology {
    graph: DiGraph<Vertex, Link>,
    nodes: usize,
    /// The number of sources of each join.
    join_sources: Vec<usize>,
}

impl Topology {
    /// A topology of `nodes` nodes, `START` and `END`, and no edges.
    pub(crate) fn new(nodes: usize) -> Self {
        let mut graph = DiGraph::with_capacity(nodes + 2, nodes + 2);
        for i in 0..nodes {
            graph.add_node(Vertex::Node(i));
        }
        graph.add_node(Vertex::Start);
        graph.add_node(Vertex::End);
        Self {
            graph,
            nodes,
            join_sources: Vec::new(),
        }
    }

    /// The vertex of node `i`.
    pub(crate) fn node(&self, i: usize) -> NodeIndex {
        debug_assert!(i < self.nodes);
        NodeIndex::new(i)
    }

    /// The entry's vertex.
    pub(crate) fn start(&self) -> NodeIndex {
        NodeIndex::new(self.nodes)
    }

    /// The exit's vertex.
    pub(crate) fn end(&self) -> NodeIndex {
        NodeIndex::new(self.nodes + 1)
    }

    /// What a vertex stands for.
    pub(crate) fn vertex(&self, index: NodeIndex) -> Vertex {
        self.graph[index]
    }

    /// Adds an edge; a plain edge that already exists is not added twice.
    pub(crate) fn add_edge(&mut self, from: NodeIndex, to: NodeIndex, link: Link) {
        if link == Link::Plain
            && self
                .graph
                .edges_connecting(from, to)
                .any(|e| *e.weight() == Link::Plain)
        {
            return;
        }
        self.graph.add_edge(from, to, link);
    }

    /// Adds a join from `sources` (node indexes, each once) into `target`.
    pub(crate) fn add_join(&mut self, sources: &[usize], target: NodeIndex) {
        let join = self.graph.add_node(Vertex::Join(self.join_sources.len()));
        self.join_sources.push(sources.len());
        for (position, &source) in sources.iter().enumerate() {
            self.graph
                .add_edge(self.node(source), join, Link::JoinSource { position });
        }
        self.graph.add_edge(join, target, Link::JoinTarget);
    }

    /// The number of sources of each join, in declaration order.
    pub(crate) fn join_sizes(&self) -> &[usize] {
        &self.join_sources
    }

    /// The vertex of join `j`.
    pub(crate) fn join(&self, j: usize) -> NodeIndex {
        NodeIndex::new(self.nodes + 2 + j)
    }

    /// The edges leaving `from`, with where they lead.
    pub(crate) fn outgoing(&self, from: NodeIndex) -> impl Iterator<Item = (&Link, Vertex)> {
        self.graph
            .edges_directed(from, Direction::Outgoing)
            .map(|e| (e.weight(), self.graph[e.target()]))
    }

    /// Where join `j` leads.
    pub(crate) fn join_target(&self, j: usize) -> Vertex {
        self.outgoing(self.join(j))
            .find_map(|(link, to)| (*link == Link::JoinTarget).then_some(to))
            .unwrap_or(Vertex::End)
    }

    /// The sources of join `j`, in the order they were declared.
    pub(crate) fn join_sources(&self, j: usize) -> Vec<usize> {
        let mut sources: Vec<(usize, usize)> = self
            .graph
            .edges_directed(self.join(j), Direction::Incoming)
            .filter_map(|e| match (e.weight(), self.graph[e.source()]) {
                (Link::JoinSource { position }, Vertex::Node(i)) => Some((*position, i)),
                _ => None,
            })
            .collect();
        sources.sort_unstable();
        sources.into_iter().map(|(_, i)| i).collect()
    }

    /// Every edge, in declaration order.
    pub(crate) fn edges(&self) -> impl Iterator<Item = EdgeReference<'_, Link>> {
        self.graph.edge_references()
    }

    /// Whether anything leaves `START`.
    pub(crate) fn has_entry(&self) -> bool {
        self.graph
            .edges_directed(self.start(), Direction::Outgoing)
            .next()
            .is_some()
    }

    /// Which vertices a run may reach from `START`, by vertex index. A join is reached once
    /// every one of its sources is, as it fires only when they all have run: a join waiting
    /// on a node that only its own target leads to never fires.
    pub(crate) fn reachable_from_start(&self) -> Vec<bool> {
        let mut seen = vec![false; self.graph.node_count()];
        // The edges from sources into each join, by vertex index, not walked yet.
        let mut waiting = vec![0usize; self.graph.node_count()];
        for edge in self.graph.edge_references() {
            if matches!(edge.weight(), Link::JoinSource { .. }) {
                waiting[edge.target().index()] += 1;
            }
        }
        let mut next = vec![self.start()];
        while let Some(vertex) = next.pop() {
            if std::mem::replace(&mut seen[vertex.index()], true) {
                continue;
            }
            for edge in self.graph.edges_directed(vertex, Direction::Outgoing) {
                let to = edge.target();
                if matches!(edge.weight(), Link::JoinSource { .. }) {
                    waiting[to.index()] -= 1;
                    if waiting[to.index()] > 0 {
                        continue;
                    }
                }
                if !seen[to.index()] {
                    next.push(to);
                }
            }
        }
        seen
    }

    /// Which vertices have a path to `END`, by vertex index.
    pub(crate) fn reaching_end(&self) -> Vec<bool> {
        let mut seen = vec![false; self.graph.node_count()];
        let reversed = Reversed(&self.graph);
        let mut dfs = Dfs::new(reversed, self.end());
        while let Some(n) = dfs.next(reversed) {
            seen[n.index()] = true;
        }
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vertices_have_fixed_indexes_and_walks_follow_joins() {
        let mut t = Topology::new(3);
        assert_eq!(t.vertex(t.node(2)), Vertex::Node(2));
        assert_eq!(t.vertex(t.start()), Vertex::Start);
        assert_eq!(t.vertex(t.end()), Vertex::End);
        t.add_edge(t.start(), t.node(0), Link::Plain);
        t.add_edge(t.start(), t.node(0), Link::Plain);
        t.add_edge(t.node(0), t.node(1), Link::Branch { label: "b".into() });
        let end = t.end();
        t.add_join(&[0, 1], end);
        assert_eq!(t.vertex(t.join(0)), Vertex::Join(0));
        assert_eq!(t.join_sources(0), [0, 1]);
        assert_eq!(t.join_target(0), Vertex::End);
        assert_eq!(t.join_sizes(), [2]);
        assert_eq!(
            t.outgoing(t.start()).count(),
            1,
            "plain edges are not doubled"
        );

        let reached = t.reachable_from_start();
        let to_end = t.reaching_end();
        assert!(reached[0] && reached[1] && !reached[2]);
        assert!(to_end[0] && to_end[1] && !to_end[2]);
    }
}
