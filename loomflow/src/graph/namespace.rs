//! [`Namespace`]: where a run of a (sub)graph files its checkpoints and journal entries.

use std::fmt;
use std::sync::Arc;

/// The path of subgraph invocations from the top-level graph down to one run: each segment
/// is a subgraph node's name and the parent's superstep it ran in.
///
/// Stores keep it as a string, `outer:2/inner:1` ([`Display`](fmt::Display), empty at the
/// top level): the step makes each invocation's checkpoints and journal its own, so a
/// subgraph in a loop never replays its previous invocation. People see `outer/inner`
/// ([`path`](Namespace::path)). Both forms are built once, when the namespace is made, and
/// never parsed back: a node name may contain `/` or `:`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Namespace {
    segments: Vec<Segment>,
    /// The stored form, `outer:2/inner:1`.
    stored: Arc<str>,
    /// The display form, `outer/inner`.
    path: Arc<str>,
}

/// One subgraph invocation: the subgraph node and the parent's superstep.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Segment {
    node: Arc<str>,
    step: u64,
}

impl Namespace {
    /// The top-level graph's namespace (empty).
    pub(crate) fn root() -> Self {
        Self::default()
    }

    /// The namespace of subgraph node `node` invoked at superstep `step` of this run.
    pub(crate) fn child(&self, node: &str, step: u64) -> Self {
        let mut segments = self.segments.clone();
        segments.push(Segment {
            node: Arc::from(node),
            step,
        });
        let stored = stored_child(&self.stored, node, step);
        let path = segments
            .iter()
            .map(|s| &*s.node)
            .collect::<Vec<_>>()
            .join("/");
        Self {
            stored: Arc::from(stored),
            path: Arc::from(path),
            segments,
        }
    }

    /// Whether this is the top-level graph's namespace.
    pub(crate) fn is_root(&self) -> bool {
        self.segments.is_empty()
    }

    /// The stored form, `outer:2/inner:1` (empty at the top level).
    pub(crate) fn as_str(&self) -> &str {
        &self.stored
    }

    /// The display form without steps, `outer/inner`: what event node names are prefixed
    /// with.
    pub(crate) fn path(&self) -> &str {
        &self.path
    }
}

/// The stored form of [`Namespace::child`], from its parent's stored form.
pub(crate) fn stored_child(parent: &str, node: &str, step: u64) -> String {
    match parent.is_empty() {
        true => format!("{node}:{step}"),
        false => format!("{parent}/{node}:{step}"),
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.stored)
    }
}

#[cfg(test)]
mod tests {
    use super::Namespace;

    #[test]
    fn stored_and_display_forms() {
        let root = Namespace::root();
        assert!(root.is_root());
        assert_eq!(root.to_string(), "");
        assert_eq!(root.path(), "");

        let inner = root.child("outer", 2).child("inner", 1);
        assert!(!inner.is_root());
        assert_eq!(inner.to_string(), "outer:2/inner:1");
        assert_eq!(inner.as_str(), "outer:2/inner:1");
        assert_eq!(inner.path(), "outer/inner");
    }

    #[test]
    fn names_with_separators_are_not_reparsed() {
        // The old string parsing read `a:b:3` as node `a:b`, but `x:7` inside a name as a
        // step: a name is now whatever the user wrote.
        let ns = Namespace::root().child("a:b", 3).child("x/y:7", 1);
        assert_eq!(ns.to_string(), "a:b:3/x/y:7:1");
        assert_eq!(ns.path(), "a:b/x/y:7");
    }
}
