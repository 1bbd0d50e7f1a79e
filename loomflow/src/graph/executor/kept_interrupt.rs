//! An interrupt as a suspended step's kept snapshot holds it (see [`owned`](super::owned)):
//! a suspended run is kept as long as it waits, so its interrupts are kept small. The node
//! is an index into the graph's nodes, the id is left out when it is the node's own
//! numbering (`node#index`, which it is outside subgraphs), and the payload is JSON text,
//! a fraction of its tree of values.

use serde_json::Value;

use crate::graph::compiled::CompiledInner;
use crate::runtime::Interrupt;

pub(super) struct KeptInterrupt {
    node: KeptNode,
    index: usize,
    /// `None` for the node's own numbering.
    id: Option<Box<str>>,
    signal: Option<Box<str>>,
    wake_at_ms: Option<u64>,
    payload: Box<str>,
}

/// The interrupt's node: an index into the graph's nodes, or its name when the graph has
/// no node of that name.
enum KeptNode {
    Index(usize),
    Name(Box<str>),
}

impl KeptInterrupt {
    /// Keeps `interrupt`, raised in `g`.
    pub(super) fn of<S>(g: &CompiledInner<S>, interrupt: &Interrupt) -> Self {
        let node = match g.node_index(&interrupt.node) {
            Some(index) => KeptNode::Index(index),
            None => KeptNode::Name(interrupt.node.as_str().into()),
        };
        let own_id = is_numbering(&interrupt.id, &interrupt.node, interrupt.index);
        Self {
            node,
            index: interrupt.index,
            id: (!own_id).then(|| interrupt.id.as_str().into()),
            signal: interrupt.signal.as_deref().map(Box::from),
            wake_at_ms: interrupt.wake_at_ms,
            // A value always serializes: its map keys are strings.
            payload: crate::json_text::boxed(&interrupt.payload).unwrap_or_default(),
        }
    }

    /// The interrupt, raised in `g`; its payload `null` unless `payload`.
    pub(super) fn interrupt<S>(
        &self,
        g: &CompiledInner<S>,
        payload: bool,
    ) -> serde_json::Result<Interrupt> {
        let node = match &self.node {
            KeptNode::Index(index) => &*g.nodes[*index].name,
            KeptNode::Name(name) => name,
        };
        let id = match &self.id {
            Some(id) => String::from(&**id),
            None => crate::numbered::numbered(node, self.index as u64),
        };
        Ok(Interrupt {
            id,
            node: String::from(node),
            index: self.index,
            payload: match payload {
                true => crate::json_depth::from_str(&self.payload)?,
                false => Value::Null,
            },
            signal: self.signal.as_deref().map(String::from),
            wake_at_ms: self.wake_at_ms,
        })
    }
}

/// Whether `id` is `node#index`, as `numbered` writes it.
fn is_numbering(id: &str, node: &str, index: usize) -> bool {
    crate::numbered::is_numbered(id, node, index as u64)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::super::checkpoint::tests::one_node_graph;
    use super::*;

    fn interrupt(id: &str, node: &str, index: usize) -> Interrupt {
        serde_json::from_value(json!({
            "id": id, "node": node, "index": index, "payload": {"q": "ok?", "n": [1, 2]},
            "signal": "go", "wake_at_ms": 7
        }))
        .unwrap()
    }

    /// Every interrupt reads back as it was: the node's own numbering, a subgraph's child
    /// id, an id that only looks like a numbering, and a node the graph does not have.
    #[test]
    fn a_kept_interrupt_reads_back_as_it_was() {
        let graph = one_node_graph();
        let g = &*graph.inner;
        for written in [
            interrupt("a#0", "a", 0),
            interrupt("a#12", "a", 12),
            interrupt("sub/a#3", "a", 0),
            interrupt("a#01", "a", 1),
            interrupt("a#1", "a", 2),
            interrupt("gone#0", "gone", 0),
        ] {
            let kept = KeptInterrupt::of(g, &written);
            assert_eq!(kept.interrupt(g, true).unwrap(), written);
            let bare = kept.interrupt(g, false).unwrap();
            assert_eq!(bare.payload, Value::Null);
            assert_eq!((bare.id, bare.node), (written.id, written.node));
        }
        assert!(is_numbering("a#0", "a", 0) && is_numbering("a#10", "a", 10));
        assert!(!is_numbering("a#01", "a", 1) && !is_numbering("ab#0", "a", 0));
    }
}
