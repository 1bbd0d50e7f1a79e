//! A graph's identity: a description of its structure, one fact a line, and a fingerprint
//! of it. A run records the fingerprint; resuming it with a graph whose structure changed is
//! refused (see [`RunError::GraphChanged`](crate::RunError::GraphChanged)), naming what
//! changed.

use std::collections::BTreeSet;

use crate::graph::shape::{EdgeKind, Endpoint, GraphShape};

/// The facts that make up a graph's structure, in declaration order: its nodes (a subgraph
/// with its own fingerprint), edges, branch routes and joins.
pub(crate) fn describe(shape: &GraphShape) -> Vec<String> {
    let name = |end: &Endpoint| match end {
        Endpoint::Start => "START".to_owned(),
        Endpoint::End => "END".to_owned(),
        Endpoint::Node(i) => shape
            .nodes
            .get(*i)
            .map_or_else(|| format!("#{i}"), |n| n.name.clone()),
    };
    let mut lines = Vec::new();
    for node in &shape.nodes {
        lines.push(match &node.subgraph {
            Some(child) => format!(
                "subgraph {} {}",
                node.name,
                fingerprint_of(&describe(child))
            ),
            None => format!("node {}", node.name),
        });
    }
    for edge in shape.edges() {
        lines.push(match &edge.kind {
            EdgeKind::Branch { label } => format!(
                "branch {} -> {} ({label})",
                name(&edge.from),
                name(&edge.to)
            ),
            _ => format!("edge {} -> {}", name(&edge.from), name(&edge.to)),
        });
    }
    for join in shape.joins() {
        let sources: Vec<String> = join
            .sources
            .iter()
            .map(|&i| name(&Endpoint::Node(i)))
            .collect();
        lines.push(format!(
            "join {} -> {}",
            sources.join(" + "),
            name(&join.target)
        ));
    }
    lines
}

/// A stable fingerprint of a description: FNV-1a, 64 bits, as 16 hex digits. Stable across
/// builds, platforms and Rust versions (unlike `std`'s hashers), so stored ones compare.
pub(crate) fn fingerprint_of(lines: &[String]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in lines
        .iter()
        .flat_map(|l| l.bytes().chain(std::iter::once(b'\n')))
    {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// What changed between two descriptions: `removed: …` and `added: …` facts.
pub(crate) fn changes(before: &[String], now: &[String]) -> Vec<String> {
    let before_set: BTreeSet<&String> = before.iter().collect();
    let now_set: BTreeSet<&String> = now.iter().collect();
    let mut changes: Vec<String> = before
        .iter()
        .filter(|l| !now_set.contains(l))
        .map(|l| format!("removed: {l}"))
        .collect();
    changes.extend(
        now.iter()
            .filter(|l| !before_set.contains(l))
            .map(|l| format!("added: {l}")),
    );
    if changes.is_empty() {
        changes.push("the order of nodes or edges".to_owned());
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_is_stable_and_sensitive() {
        let a = vec!["node a".to_owned(), "edge START -> a".to_owned()];
        assert_eq!(fingerprint_of(&a), fingerprint_of(&a.clone()));
        assert_eq!(fingerprint_of(&a).len(), 16);
        let b = vec!["node b".to_owned(), "edge START -> b".to_owned()];
        assert_ne!(fingerprint_of(&a), fingerprint_of(&b));
        assert_eq!(
            changes(&a, &b),
            [
                "removed: node a",
                "removed: edge START -> a",
                "added: node b",
                "added: edge START -> b"
            ]
        );
    }
}
