//! Validation: one pass per rule, each a small function whose doc comment states the rule.
//!
//! The declaration passes read the builder's declarations by name; the topology passes
//! walk the lowered [`Topology`]. Every pass runs, so `compile()` reports every problem at
//! once, in pass order.

use std::collections::HashSet;
use std::sync::Arc;

use crate::graph::builder::{BranchDecl, JoinDecl, is_reserved, problem_unknown};
use crate::graph::error::{GraphProblem, shown};
use crate::graph::lower::Names;
use crate::graph::merge::Reducer;
use crate::graph::node::Node;
use crate::graph::topology::{Topology, Vertex};
use crate::graph::{END, START};

/// What a graph declares, by name.
pub(crate) struct Declared<'a, S> {
    pub(crate) nodes: &'a [Arc<dyn Node<S>>],
    pub(crate) names: &'a Names<'a>,
    pub(crate) edges: &'a [(String, String)],
    pub(crate) branches: &'a [BranchDecl<S>],
    pub(crate) joins: &'a [JoinDecl],
    pub(crate) reducers: &'a [(String, Reducer)],
    /// The state's top-level fields, when its type names them (see `fields.rs`).
    pub(crate) state_fields: Option<&'static [&'static str]>,
}

/// Runs the passes over the declarations.
pub(crate) fn declarations<S: 'static>(graph: &Declared<'_, S>, problems: &mut Vec<GraphProblem>) {
    check_node_names(graph, problems);
    check_unique_nodes(graph, problems);
    check_edge_directions(graph, problems);
    check_edge_ends(graph, problems);
    check_branch_sources(graph, problems);
    check_branch_targets(graph, problems);
    check_one_branch_per_node(graph, problems);
    check_join_ends(graph, problems);
    check_unique_reducers(graph, problems);
    check_reducer_fields(graph, problems);
}

/// Runs the passes over the lowered topology.
pub(crate) fn topology<S: 'static>(
    graph: &Declared<'_, S>,
    topology: &Topology,
    problems: &mut Vec<GraphProblem>,
) {
    if check_entry(topology, problems) {
        check_reachable(graph, topology, problems);
        check_reaches_end(graph, topology, problems);
    }
}

/// A node's name is neither empty nor `START` or `END`.
fn check_node_names<S: 'static>(graph: &Declared<'_, S>, problems: &mut Vec<GraphProblem>) {
    for node in graph.nodes {
        if is_reserved(node.name()) {
            problems.push(GraphProblem::ReservedName {
                name: node.name().to_owned(),
            });
        }
    }
}

/// No two nodes share a name (reported once per name).
fn check_unique_nodes<S: 'static>(graph: &Declared<'_, S>, problems: &mut Vec<GraphProblem>) {
    let mut seen = HashSet::with_capacity(graph.nodes.len());
    let mut reported = HashSet::new();
    for node in graph.nodes {
        let name = node.name();
        if !is_reserved(name) && !seen.insert(name) && reported.insert(name) {
            problems.push(GraphProblem::DuplicateNode {
                name: name.to_owned(),
            });
        }
    }
}

/// No edge leaves `END` or enters `START`, and no branch leaves `END`.
fn check_edge_directions<S: 'static>(graph: &Declared<'_, S>, problems: &mut Vec<GraphProblem>) {
    for (from, to) in graph.edges {
        if from == END || to == START {
            problems.push(GraphProblem::MisdirectedEdge {
                from: from.clone(),
                to: to.clone(),
            });
        }
    }
    for branch in graph.branches.iter().filter(|b| b.from == END) {
        problems.push(GraphProblem::MisdirectedEdge {
            from: branch.from.clone(),
            to: branch.targets.join("|"),
        });
    }
}

/// Both ends of an edge are declared nodes (or `START` / `END`).
fn check_edge_ends<S: 'static>(graph: &Declared<'_, S>, problems: &mut Vec<GraphProblem>) {
    for (from, to) in graph.edges {
        if from == END || to == START {
            continue; // misdirected, reported above
        }
        let context = || format!("edge {} -> {}", shown(from), shown(to));
        if !graph.names.is_source(from) {
            problems.push(problem_unknown(from, context()));
        }
        if !graph.names.is_target(to) {
            problems.push(problem_unknown(to, context()));
        }
    }
}

/// A branch leaves a declared node (or `START`).
fn check_branch_sources<S: 'static>(graph: &Declared<'_, S>, problems: &mut Vec<GraphProblem>) {
    for branch in graph.branches {
        let from = &branch.from;
        if from != END && !graph.names.is_source(from) {
            problems.push(problem_unknown(
                from,
                format!("branch from {}", shown(from)),
            ));
        }
    }
}

/// A branch declares at least one target, and each is a declared node (or `END`).
fn check_branch_targets<S: 'static>(graph: &Declared<'_, S>, problems: &mut Vec<GraphProblem>) {
    for branch in graph.branches {
        if !graph.names.is_source(&branch.from) {
            continue; // reported by `check_branch_sources` or `check_edge_directions`
        }
        if branch.targets.is_empty() {
            problems.push(GraphProblem::EmptyBranch {
                from: branch.from.clone(),
            });
        }
        for target in &branch.targets {
            if !graph.names.is_target(target) {
                problems.push(GraphProblem::UnknownBranchTarget {
                    from: branch.from.clone(),
                    target: target.clone(),
                });
            }
        }
    }
}

/// A node (or `START`) has at most one branch: one router decides where it leads.
fn check_one_branch_per_node<S: 'static>(
    graph: &Declared<'_, S>,
    problems: &mut Vec<GraphProblem>,
) {
    let mut seen = HashSet::new();
    for branch in graph.branches {
        if graph.names.is_source(&branch.from) && !seen.insert(branch.from.as_str()) {
            problems.push(GraphProblem::DuplicateBranch {
                node: branch.from.clone(),
            });
        }
    }
}

/// A join's sources are declared nodes, and its target a declared node (or `END`).
fn check_join_ends<S: 'static>(graph: &Declared<'_, S>, problems: &mut Vec<GraphProblem>) {
    for join in graph.joins {
        let context = || format!("join into {}", shown(&join.target));
        if join.sources.is_empty() {
            problems.push(GraphProblem::EmptyJoin {
                target: join.target.clone(),
            });
        }
        if !graph.names.is_target(&join.target) {
            problems.push(problem_unknown(&join.target, context()));
        }
        for source in &join.sources {
            if graph.names.get(source).is_none() {
                problems.push(problem_unknown(source, context()));
            }
        }
    }
}

/// A field has at most one reducer: a second `.reducer(field, ..)` would silently replace
/// the first.
fn check_unique_reducers<S: 'static>(graph: &Declared<'_, S>, problems: &mut Vec<GraphProblem>) {
    let mut seen = HashSet::new();
    let mut reported = HashSet::new();
    for (field, _) in graph.reducers {
        if !seen.insert(field.as_str()) && reported.insert(field.as_str()) {
            problems.push(GraphProblem::DuplicateReducer {
                field: field.clone(),
            });
        }
    }
}

/// A reducer's field is a top-level field of the state, as serialized (so after serde's
/// renames): a misspelled field would never be reduced.
///
/// Checked when the state's type names its fields: a struct deriving `Deserialize` (see
/// `fields.rs`). The fields of other states (maps, `serde_json::Value`, structs with a
/// flattened field, hand-written impls) are only known at run time, and are not checked.
fn check_reducer_fields<S: 'static>(graph: &Declared<'_, S>, problems: &mut Vec<GraphProblem>) {
    let Some(fields) = graph.state_fields else {
        return;
    };
    let mut reported = HashSet::new();
    for (field, _) in graph.reducers {
        if !fields.contains(&field.as_str()) && reported.insert(field.as_str()) {
            problems.push(GraphProblem::UnknownReducerField {
                field: field.clone(),
                fields: fields.iter().map(|&f| f.to_owned()).collect(),
            });
        }
    }
}

/// Something leaves `START`: an edge or a branch. Returns whether it does.
fn check_entry(topology: &Topology, problems: &mut Vec<GraphProblem>) -> bool {
    let has_entry = topology.has_entry();
    if !has_entry {
        problems.push(GraphProblem::NoEntry);
    }
    has_entry
}

/// Every node is reachable from `START`.
fn check_reachable<S: 'static>(
    graph: &Declared<'_, S>,
    topology: &Topology,
    problems: &mut Vec<GraphProblem>,
) {
    let reached = topology.reachable_from_start();
    // A join some of whose sources run, but not all (another waits on its own target): why
    // its target is unreachable.
    for j in 0..topology.join_sizes().len() {
        let sources = topology.join_sources(j);
        let name = |i: usize| graph.nodes.get(i).map_or("", |n| n.name()).to_owned();
        let waiting: Vec<String> = sources
            .iter()
            .filter(|&&i| !reached[topology.node(i).index()])
            .map(|&i| name(i))
            .collect();
        if !reached[topology.join(j).index()] && waiting.len() < sources.len() {
            let target = match topology.join_target(j) {
                Vertex::Node(i) => name(i),
                _ => END.to_owned(),
            };
            problems.push(GraphProblem::JoinNeverFires { target, waiting });
        }
    }
    for (i, name) in checked_nodes(graph) {
        if !reached[topology.node(i).index()] {
            problems.push(GraphProblem::Unreachable {
                name: name.to_owned(),
            });
        }
    }
}

/// Every node reachable from `START` has a path to `END` (a join is a path from each of its
/// sources to its target).
fn check_reaches_end<S: 'static>(
    graph: &Declared<'_, S>,
    topology: &Topology,
    problems: &mut Vec<GraphProblem>,
) {
    let reached = topology.reachable_from_start();
    let reaches_end = topology.reaching_end();
    for (i, name) in checked_nodes(graph) {
        let vertex = topology.node(i).index();
        if reached[vertex] && !reaches_end[vertex] {
            problems.push(GraphProblem::NoPathToEnd {
                name: name.to_owned(),
            });
        }
    }
}

/// The nodes the topology passes look at: the first declaration of each name that is not
/// reserved (the others are reported by their own passes and have no edges).
fn checked_nodes<'a, S: 'static>(
    graph: &'a Declared<'_, S>,
) -> impl Iterator<Item = (usize, &'a str)> {
    graph
        .nodes
        .iter()
        .enumerate()
        .filter(|&(i, node)| graph.names.get(node.name()) == Some(i))
        .map(|(i, node)| (i, node.name()))
}
