//! Routing: which nodes run next, following the topology's edges, branches and joins.

use std::panic::AssertUnwindSafe;

use petgraph::graph::NodeIndex;

use super::Result;
use crate::graph::compiled::CompiledInner;
use crate::graph::error::RunError;
use crate::graph::topology::{Link, Vertex};

/// Which sources of each join have run since it last fired.
#[derive(Clone)]
pub(super) struct JoinMarks(pub(super) Vec<Vec<bool>>);

impl JoinMarks {
    pub(super) fn new<S>(g: &CompiledInner<S>) -> Self {
        Self(
            g.topology()
                .join_sizes()
                .iter()
                .map(|&n| vec![false; n])
                .collect(),
        )
    }
}

/// Follows edges, branches and joins out of the given vertices (nodes that just ran, or
/// `START`); returns the next active set in declaration order, each node once.
pub(super) fn route<S>(
    g: &CompiledInner<S>,
    from: impl IntoIterator<Item = NodeIndex>,
    state: &S,
    joins: &mut JoinMarks,
) -> Result<Vec<usize>> {
    let mut next = Vec::new();
    route_into(g, from, state, joins, &mut next)?;
    Ok(next)
}

/// [`route`], into `marked` (cleared first): a run reuses one step's buffer for the next.
pub(super) fn route_into<S>(
    g: &CompiledInner<S>,
    from: impl IntoIterator<Item = NodeIndex>,
    state: &S,
    joins: &mut JoinMarks,
    marked: &mut Vec<usize>,
) -> Result<()> {
    let topology = g.topology();
    // The nodes reached, in the order found; sorted and deduplicated at the end. A step
    // reaches a few nodes of many: this costs what it reaches, not what the graph holds.
    marked.clear();
    let mut mark = |to: Vertex| {
        if let Vertex::Node(i) = to {
            marked.push(i);
        }
    };
    for vertex in from {
        for (link, to) in topology.outgoing(vertex) {
            match (link, to) {
                (Link::Plain, to) => mark(to),
                (Link::JoinSource { position }, Vertex::Join(j)) => {
                    let marks = &mut joins.0[j];
                    marks[*position] = true;
                    if marks.iter().all(|&m| m) {
                        marks.iter_mut().for_each(|m| *m = false);
                        mark(topology.join_target(j));
                    }
                }
                // Branch edges are taken through the router, below; only joins lead on from
                // a join.
                _ => {}
            }
        }
        if let Some(Some(branch)) = g.branches.get(vertex.index()) {
            // A router is the user's code: its panic fails the step, as a node's does.
            let routed = std::panic::catch_unwind(AssertUnwindSafe(|| (branch.router)(state)))
                .map_err(|panic| RunError::RouterPanicked {
                    node: g.vertex_name(topology.vertex(vertex)).to_owned(),
                    message: crate::sync::panic_message(&*panic),
                })?;
            for chosen in routed.0 {
                match branch.targets.get(&chosen) {
                    Some(&to) => mark(to),
                    None => {
                        return Err(RunError::UndeclaredRoute {
                            node: g.vertex_name(topology.vertex(vertex)).to_owned(),
                            target: chosen,
                        });
                    }
                }
            }
        }
    }
    marked.sort_unstable();
    marked.dedup();
    Ok(())
}
