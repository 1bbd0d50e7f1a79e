//! [`CompiledGraph`]: a validated graph, ready to run.

use std::collections::HashMap;
use std::sync::Arc;

use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::{Dfs, Reversed};

use crate::graph::builder::{Graph, Router, is_reserved, problem_unknown};
use crate::graph::error::RunError;
use crate::graph::error::{GraphError, GraphProblem};
use crate::graph::merge::Reducer;
use crate::graph::node::Node;
use crate::graph::shape::{EdgeKind, EdgeShape, Endpoint, GraphShape, JoinShape, NodeShape};
use crate::graph::{END, START, State};

type Result<T, E = RunError> = std::result::Result<T, E>;

/// Where an edge leads at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    Node(usize),
    End,
}

pub(crate) struct CompiledBranch<S> {
    pub(crate) targets: Vec<(String, Target)>,
    pub(crate) router: Router<S>,
}

/// What follows a node (or `START`).
pub(crate) struct Outgoing<S> {
    pub(crate) next: Vec<Target>,
    pub(crate) branch: Option<CompiledBranch<S>>,
    /// (join index, position of this node among the join's sources)
    pub(crate) joins: Vec<(usize, usize)>,
}

impl<S> Default for Outgoing<S> {
    fn default() -> Self {
        Self {
            next: Vec::new(),
            branch: None,
            joins: Vec::new(),
        }
    }
}

pub(crate) struct CompiledNode<S> {
    pub(crate) name: Arc<str>,
    pub(crate) node: Arc<dyn Node<S>>,
    pub(crate) out: Outgoing<S>,
}

pub(crate) struct CompiledJoin {
    pub(crate) sources: usize,
    pub(crate) target: Target,
}

pub(crate) struct CompiledInner<S> {
    pub(crate) name: String,
    pub(crate) nodes: Vec<CompiledNode<S>>,
    pub(crate) entry: Outgoing<S>,
    pub(crate) joins: Vec<CompiledJoin>,
    pub(crate) reducers: HashMap<String, Reducer>,
    pub(crate) recursion_limit: u64,
    pub(crate) shape: Arc<GraphShape>,
}

/// A validated graph over state `S`. Cheap to clone; run it as often as you like.
///
/// Produced by [`Graph::compile`]. Run it with [`invoke`](CompiledGraph::invoke),
/// [`start`](CompiledGraph::start), [`stream`](CompiledGraph::stream) or the configurable
/// [`run`](CompiledGraph::run); draw it with [`to_mermaid`](CompiledGraph::to_mermaid).
pub struct CompiledGraph<S> {
    pub(crate) inner: Arc<CompiledInner<S>>,
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

    /// Node names in declaration order.
    pub fn node_names(&self) -> impl Iterator<Item = &str> {
        self.inner.nodes.iter().map(|n| &*n.name)
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
        } = graph;
        let mut problems = Vec::new();

        let mut index: HashMap<String, usize> = HashMap::with_capacity(nodes.len());
        for (i, node) in nodes.iter().enumerate() {
            let node_name = node.name();
            if is_reserved(node_name) {
                problems.push(GraphProblem::ReservedName {
                    name: node_name.to_owned(),
                });
            } else if index.insert(node_name.to_owned(), i).is_some() {
                let dup = GraphProblem::DuplicateNode {
                    name: node_name.to_owned(),
                };
                if !problems.contains(&dup) {
                    problems.push(dup);
                }
            }
        }

        let mut entry: Outgoing<S> = Outgoing::default();
        let mut outs: Vec<Outgoing<S>> = (0..nodes.len()).map(|_| Outgoing::default()).collect();
        let mut shape_edges = Vec::new();

        // Resolves a name used as a source; `None` when it is END or unknown (reported).
        let source = |name: &str, problems: &mut Vec<GraphProblem>, ctx: String| {
            if name == START {
                Some(Endpoint::Start)
            } else if let Some(&i) = index.get(name) {
                Some(Endpoint::Node(i))
            } else if name == END {
                None
            } else {
                problems.push(problem_unknown(name, ctx));
                None
            }
        };
        let target = |name: &str| -> Option<Target> {
            if name == END {
                Some(Target::End)
            } else {
                index.get(name).map(|&i| Target::Node(i))
            }
        };

        for (from, to) in &edges {
            if from == END || to == START {
                problems.push(GraphProblem::MisdirectedEdge {
                    from: from.clone(),
                    to: to.clone(),
                });
                continue;
            }
            let src = source(from, &mut problems, format!("edge {from} -> {to}"));
            let Some(dst) = target(to) else {
                problems.push(problem_unknown(to, format!("edge {from} -> {to}")));
                continue;
            };
            let Some(src) = src else { continue };
            let out = match src {
                Endpoint::Start => &mut entry,
                Endpoint::Node(i) => &mut outs[i],
                Endpoint::End => continue,
            };
            if !out.next.contains(&dst) {
                out.next.push(dst);
                shape_edges.push(EdgeShape {
                    from: src,
                    to: endpoint(dst),
                    kind: EdgeKind::Plain,
                });
            }
        }

        for branch in branches {
            let from = branch.from;
            let Some(src) = source(&from, &mut problems, format!("branch from {from}")) else {
                if from == END {
                    problems.push(GraphProblem::MisdirectedEdge {
                        from: from.clone(),
                        to: branch.targets.join("|"),
                    });
                }
                continue;
            };
            if branch.targets.is_empty() {
                problems.push(GraphProblem::EmptyBranch { from: from.clone() });
            }
            let mut targets = Vec::with_capacity(branch.targets.len());
            for t in &branch.targets {
                match target(t) {
                    Some(dst) => {
                        shape_edges.push(EdgeShape {
                            from: src,
                            to: endpoint(dst),
                            kind: EdgeKind::Branch { label: t.clone() },
                        });
                        targets.push((t.clone(), dst));
                    }
                    None => problems.push(GraphProblem::UnknownBranchTarget {
                        from: from.clone(),
                        target: t.clone(),
                    }),
                }
            }
            let out = match src {
                Endpoint::Start => &mut entry,
                Endpoint::Node(i) => &mut outs[i],
                Endpoint::End => continue,
            };
            if out.branch.is_some() {
                problems.push(GraphProblem::DuplicateBranch { node: from.clone() });
                continue;
            }
            out.branch = Some(CompiledBranch {
                targets,
                router: branch.router,
            });
        }

        let mut compiled_joins = Vec::new();
        let mut shape_joins = Vec::new();
        for join in &joins {
            let context = format!("join into {}", join.target);
            let dst = target(&join.target);
            if dst.is_none() {
                problems.push(problem_unknown(&join.target, context.clone()));
            }
            let mut sources = Vec::new();
            for s in &join.sources {
                match index.get(s) {
                    Some(&i) if !sources.contains(&i) => sources.push(i),
                    Some(_) => {}
                    None => problems.push(problem_unknown(s, context.clone())),
                }
            }
            let (Some(dst), false) = (dst, sources.is_empty()) else {
                continue;
            };
            let j = compiled_joins.len();
            for (pos, &s) in sources.iter().enumerate() {
                outs[s].joins.push((j, pos));
            }
            compiled_joins.push(CompiledJoin {
                sources: sources.len(),
                target: dst,
            });
            shape_joins.push(JoinShape {
                sources,
                target: endpoint(dst),
            });
        }

        if entry.next.is_empty() && entry.branch.is_none() {
            problems.push(GraphProblem::NoEntry);
        } else {
            check_paths(&nodes, &entry, &outs, &compiled_joins, &mut problems);
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
            edges: shape_edges,
            joins: shape_joins,
        });
        let compiled_nodes = nodes
            .into_iter()
            .zip(outs)
            .map(|(node, out)| CompiledNode {
                name: Arc::from(node.name()),
                node,
                out,
            })
            .collect();
        Ok(Self {
            inner: Arc::new(CompiledInner {
                name,
                nodes: compiled_nodes,
                entry,
                joins: compiled_joins,
                reducers: reducers.into_iter().collect(),
                recursion_limit,
                shape,
            }),
        })
    }
}

fn endpoint(target: Target) -> Endpoint {
    match target {
        Target::Node(i) => Endpoint::Node(i),
        Target::End => Endpoint::End,
    }
}

/// Reports nodes unreachable from START and nodes with no path to END.
fn check_paths<S: 'static>(
    nodes: &[Arc<dyn Node<S>>],
    entry: &Outgoing<S>,
    outs: &[Outgoing<S>],
    joins: &[CompiledJoin],
    problems: &mut Vec<GraphProblem>,
) {
    let mut g: DiGraph<(), ()> = DiGraph::with_capacity(nodes.len() + 2, 0);
    let ids: Vec<NodeIndex> = (0..nodes.len()).map(|_| g.add_node(())).collect();
    let start = g.add_node(());
    let end = g.add_node(());
    let to_index = |t: &Target| match t {
        Target::Node(i) => ids[*i],
        Target::End => end,
    };
    let add_out = |g: &mut DiGraph<(), ()>, from: NodeIndex, out: &Outgoing<S>| {
        for t in &out.next {
            g.add_edge(from, to_index(t), ());
        }
        if let Some(b) = &out.branch {
            for (_, t) in &b.targets {
                g.add_edge(from, to_index(t), ());
            }
        }
        for &(j, _) in &out.joins {
            g.add_edge(from, to_index(&joins[j].target), ());
        }
    };
    add_out(&mut g, start, entry);
    for (i, out) in outs.iter().enumerate() {
        add_out(&mut g, ids[i], out);
    }

    let mut reachable = vec![false; g.node_count()];
    let mut dfs = Dfs::new(&g, start);
    while let Some(n) = dfs.next(&g) {
        reachable[n.index()] = true;
    }
    let mut reaches_end = vec![false; g.node_count()];
    let reversed = Reversed(&g);
    let mut dfs = Dfs::new(reversed, end);
    while let Some(n) = dfs.next(reversed) {
        reaches_end[n.index()] = true;
    }
    for (i, node) in nodes.iter().enumerate() {
        let name = node.name().to_owned();
        let already_reported = problems.iter().any(|p| {
            matches!(p, GraphProblem::DuplicateNode { name: n } | GraphProblem::ReservedName { name: n } if *n == name)
        });
        if already_reported {
            continue;
        }
        if !reachable[ids[i].index()] {
            problems.push(GraphProblem::Unreachable { name });
        } else if !reaches_end[ids[i].index()] {
            problems.push(GraphProblem::NoPathToEnd { name });
        }
    }
}
