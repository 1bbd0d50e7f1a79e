//! A graph's identity: a description of its structure, one fact a line, and a fingerprint
//! of it. A run records the fingerprint; resuming it with a graph whose structure changed is
//! refused (see [`RunError::GraphChanged`](crate::RunError::GraphChanged)), naming what
//! changed.

use std::borrow::Cow;
use std::collections::BTreeSet;

use crate::graph::shape::{EdgeKind, Endpoint, GraphShape};

/// The facts that make up a graph's structure, in declaration order: its nodes (a subgraph
/// with the fingerprint of its own facts, its edges and branch routes sorted: the order they
/// were declared in is no part of a subgraph's structure, as it is none of a graph's, see
/// [`same_but_for_edge_order`]), edges, branch routes and joins. Names are written as they
/// are (see [`written`]), so that the facts read as plain text.
pub(crate) fn describe(shape: &GraphShape) -> Vec<String> {
    describe_with(shape, Children::EdgeOrderFree)
}

/// The facts as descriptions stored before subgraphs were fingerprinted without their edge
/// order wrote them: each subgraph with the fingerprint of its facts in declaration order.
/// A run that recorded one of those carries on with the same graph.
pub(crate) fn describe_as_declared(shape: &GraphShape) -> Vec<String> {
    describe_with(shape, Children::AsDeclared)
}

/// How a description fingerprints its subgraphs.
#[derive(Clone, Copy)]
enum Children {
    EdgeOrderFree,
    AsDeclared,
}

fn describe_with(shape: &GraphShape, children: Children) -> Vec<String> {
    let name = |end: &Endpoint| match end {
        Endpoint::Start => "START".to_owned(),
        Endpoint::End => "END".to_owned(),
        Endpoint::Node(i) => shape
            .nodes
            .get(*i)
            .map_or_else(|| format!("#{i}"), |n| written(&n.name).into_owned()),
    };
    let mut lines = Vec::new();
    for node in &shape.nodes {
        let name = written(&node.name);
        lines.push(match &node.subgraph {
            Some(child) => {
                let facts = describe_with(child, children);
                let fingerprint = match children {
                    Children::EdgeOrderFree => {
                        fingerprint_of(&edges_sorted(&facts).cloned().collect::<Vec<_>>())
                    }
                    Children::AsDeclared => fingerprint_of(&facts),
                };
                format!("subgraph {name} {fingerprint}")
            }
            None => format!("node {name}"),
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

/// A node's name as a description writes it: as it is, unless it would read as the graph's
/// `START` or `END`, or is empty or starts with a quote: then as a JSON string (`"END"`).
/// Other names are never quoted, so the descriptions (and fingerprints) of graphs stored
/// before stay as they were; [`Description::read`] tells their names apart by the nodes it
/// knows.
fn written(name: &str) -> Cow<'_, str> {
    if matches!(name, "" | "START" | "END") || name.starts_with('"') {
        Cow::Owned(serde_json::to_string(name).unwrap_or_default())
    } else {
        Cow::Borrowed(name)
    }
}

/// One end of an edge as a description names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Named {
    Start,
    End,
    /// A node, by its position among the description's nodes.
    Node(usize),
}

/// A description read back: what [`describe`] wrote, as its parts.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Description {
    /// The nodes in order: each name, and whether it is a subgraph.
    pub(crate) nodes: Vec<(String, bool)>,
    pub(crate) edges: Vec<(Named, Named)>,
    /// Branch routes: from, to, label.
    pub(crate) branches: Vec<(Named, Named, String)>,
    /// Joins: their sources, their target.
    pub(crate) joins: Vec<(Vec<Named>, Named)>,
}

impl Description {
    /// Reads `lines`, skipping those it does not know. A node's name may hold what the lines
    /// use as separators (` -> `, ` + `, ` (`): an edge is read as names of known nodes,
    /// the longest that fits first.
    pub(crate) fn read<L: AsRef<str>>(lines: &[L]) -> Self {
        let mut read = Self::default();
        // Each node as lines write it, and what it reads as.
        let mut known: Vec<(String, Named)> = vec![
            ("START".to_owned(), Named::Start),
            ("END".to_owned(), Named::End),
        ];
        for line in lines {
            let line = line.as_ref();
            let (as_written, subgraph) = if let Some(name) = line.strip_prefix("node ") {
                (name, false)
            } else if let Some(rest) = line.strip_prefix("subgraph ") {
                // `subgraph <name> <fingerprint>`: the fingerprint is the last word.
                (rest.rsplit_once(' ').map_or(rest, |(name, _)| name), true)
            } else {
                continue;
            };
            let name = match serde_json::from_str::<String>(as_written) {
                Ok(name) if written(&name) == as_written => name,
                _ => as_written.to_owned(),
            };
            known.push((as_written.to_owned(), Named::Node(read.nodes.len())));
            read.nodes.push((name, subgraph));
        }
        // Longest first: of `a` and `a -> b`, an edge from `a -> b` is tried first.
        known.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
        let starts = |text: &str| -> Vec<(Named, usize)> {
            known
                .iter()
                .filter(|(name, _)| text.starts_with(name.as_str()))
                .map(|(name, named)| (*named, name.len()))
                .collect()
        };
        // `<name> -> <name><tail>`: the two ends and what follows the second.
        let pair = |text: &str, tail: &dyn Fn(&str) -> bool| -> Option<(Named, Named, usize)> {
            for (from, used) in starts(text) {
                let Some(rest) = text[used..].strip_prefix(" -> ") else {
                    continue;
                };
                for (to, used_to) in starts(rest) {
                    if tail(&rest[used_to..]) {
                        return Some((from, to, text.len() - rest.len() + used_to));
                    }
                }
            }
            None
        };
        for line in lines {
            let line = line.as_ref();
            if let Some(rest) = line.strip_prefix("edge ") {
                if let Some((from, to, _)) = pair(rest, &str::is_empty) {
                    read.edges.push((from, to));
                }
            } else if let Some(rest) = line.strip_prefix("branch ") {
                let labelled = |tail: &str| tail.starts_with(" (") && tail.ends_with(')');
                if let Some((from, to, used)) = pair(rest, &labelled) {
                    let label = &rest[used + 2..rest.len() - 1];
                    read.branches.push((from, to, label.to_owned()));
                }
            } else if let Some(rest) = line.strip_prefix("join ")
                && let Some(join) = join_of(rest, &starts)
            {
                read.joins.push(join);
            }
        }
        read
    }
}

/// `<source> + <source> … -> <target>`, its names read by `starts` (the known names `text`
/// may start with, longest first, with their lengths).
fn join_of(
    text: &str,
    starts: &dyn Fn(&str) -> Vec<(Named, usize)>,
) -> Option<(Vec<Named>, Named)> {
    for (source, used) in starts(text) {
        let rest = &text[used..];
        if let Some(rest) = rest.strip_prefix(" + ")
            && let Some((mut sources, target)) = join_of(rest, starts)
        {
            sources.insert(0, source);
            return Some((sources, target));
        }
        if let Some(rest) = rest.strip_prefix(" -> ")
            && let Some(&(target, _)) = starts(rest).iter().find(|(_, n)| *n == rest.len())
        {
            return Some((vec![source], target));
        }
    }
    None
}

/// A stable fingerprint of a description: FNV-1a, 64 bits, as 16 hex digits. Stable across
/// builds, platforms and Rust versions (unlike `std`'s hashers), so stored ones compare.
pub(crate) fn fingerprint_of(lines: &[String]) -> String {
    let mut hash = crate::stable_hash::StableHash::new();
    for line in lines {
        hash.bytes(line.as_bytes()).bytes(b"\n");
    }
    format!("{:016x}", hash.finish())
}

/// Whether `now` describes the graph `before` did but for the order its edges and branch
/// routes were declared in, or an edge or route declared twice, which nothing in a run
/// depends on (the nodes a step leads to are taken once each, in the order of the nodes).
/// The order of the nodes and of the joins (and of a join's sources) is part of what a
/// checkpoint records.
pub(crate) fn same_but_for_edge_order(before: &[String], now: &[String]) -> bool {
    edges_sorted(before).eq(edges_sorted(now))
}

/// `lines` with their edges and branch routes sorted, each once, after the other facts (in
/// their order).
fn edges_sorted(lines: &[String]) -> impl Iterator<Item = &String> {
    let is_edge = |line: &&String| line.starts_with("edge ") || line.starts_with("branch ");
    let mut edges: Vec<&String> = lines.iter().filter(is_edge).collect();
    edges.sort_unstable();
    edges.dedup();
    lines.iter().filter(move |line| !is_edge(line)).chain(edges)
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
        changes.push("the order of nodes or joins".to_owned());
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
        // Stored fingerprints compare with those of later builds: FNV-1a of the lines, each
        // ended by a newline, whatever the build.
        let two = ["node a".to_owned(), "node b".to_owned()];
        assert_eq!(fingerprint_of(&two), "faeeb2a716fb8700");
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

    #[test]
    fn only_the_order_of_edges_and_routes_may_change() {
        let before = lines(&[
            "node a",
            "node b",
            "edge START -> a",
            "branch a -> b (b)",
            "branch a -> END (END)",
            "join a + b -> END",
        ]);
        let reordered = lines(&[
            "node a",
            "node b",
            "branch a -> END (END)",
            "join a + b -> END",
            "edge START -> a",
            "branch a -> b (b)",
        ]);
        assert!(same_but_for_edge_order(&before, &reordered));
        let nodes_swapped = lines(&[
            "node b",
            "node a",
            "edge START -> a",
            "branch a -> b (b)",
            "branch a -> END (END)",
            "join a + b -> END",
        ]);
        assert!(!same_but_for_edge_order(&before, &nodes_swapped));
        assert_eq!(
            changes(&before, &nodes_swapped),
            ["the order of nodes or joins"]
        );
        let one_edge_more = [before.clone(), lines(&["edge b -> END"])].concat();
        assert!(!same_but_for_edge_order(&before, &one_edge_more));
        // An edge, or a branch route, declared twice: the topology keeps it once.
        let twice = [before.clone(), lines(&["edge START -> a"])].concat();
        assert!(same_but_for_edge_order(&before, &twice));
        let route_twice = [before.clone(), lines(&["branch a -> b (b)"])].concat();
        assert!(same_but_for_edge_order(&route_twice, &before));
    }

    fn lines(text: &[&str]) -> Vec<String> {
        text.iter().map(|l| (*l).to_owned()).collect()
    }

    #[test]
    fn only_names_that_read_as_something_else_are_quoted() {
        // Stored descriptions of ordinary graphs, and so their fingerprints, are unchanged.
        assert_eq!(written("ask"), "ask");
        assert_eq!(
            written("draft -> review (human) + more"),
            "draft -> review (human) + more"
        );
        assert_eq!(written("END"), "\"END\"");
        assert_eq!(written("START"), "\"START\"");
        assert_eq!(written(""), "\"\"");
        assert_eq!(written("\"q\""), "\"\\\"q\\\"\"");
    }

    #[test]
    fn a_description_reads_back_names_that_hold_its_separators() {
        let read = Description::read(&lines(&[
            "node draft -> review",
            "node ship",
            "node a + b",
            "subgraph review (human) 0123456789abcdef",
            "node \"END\"",
            "edge START -> draft -> review",
            "edge draft -> review -> ship",
            "branch ship -> review (human) (review (human))",
            "edge \"END\" -> END",
            "join a + b + ship -> \"END\"",
            "something else",
        ]));
        assert_eq!(
            read.nodes,
            [
                ("draft -> review".to_owned(), false),
                ("ship".to_owned(), false),
                ("a + b".to_owned(), false),
                ("review (human)".to_owned(), true),
                ("END".to_owned(), false),
            ]
        );
        assert_eq!(
            read.edges,
            [
                (Named::Start, Named::Node(0)),
                (Named::Node(0), Named::Node(1)),
                (Named::Node(4), Named::End),
            ]
        );
        assert_eq!(
            read.branches,
            [(Named::Node(1), Named::Node(3), "review (human)".to_owned())]
        );
        assert_eq!(
            read.joins,
            [(vec![Named::Node(2), Named::Node(1)], Named::Node(4))]
        );
    }
}
