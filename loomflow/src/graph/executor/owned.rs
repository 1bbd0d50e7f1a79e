//! Snapshots kept as values, for a store that keeps checkpoints in memory.
//!
//! The executor hands such a store a copy of what the snapshot holds instead of its JSON.
//! The store builds the JSON body only when someone reads the checkpoint through the
//! [`Store`](crate::runtime::Store) API; a resume or a recovery in the same process reads the
//! values back as they are, so that an interrupt and its resume never go through JSON.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::body::body_of;
use super::checkpoint::{PendingWrite, Snapshot, SnapshotRef};
use super::kept_interrupt::KeptInterrupt;
use crate::graph::State;
use crate::graph::compiled::CompiledInner;
use crate::runtime::Interrupt;
use crate::runtime::store::SnapshotSource;

/// A snapshot, owned. A run keeps one a step: what most steps leave out is boxed apart.
pub(super) struct OwnedSnapshot<S> {
    graph: Arc<CompiledInner<S>>,
    state: S,
    next: Next,
    /// `None` for a plain step, the common case, which keeps the snapshot small.
    rest: Option<Box<Rest>>,
    describe: bool,
}

/// What a step may leave besides its state and next nodes.
struct Rest {
    /// Progress of the graph's joins; empty for a graph without any.
    joins: Box<[Vec<bool>]>,
    suspended: Option<Suspended>,
    trace: Option<Arc<str>>,
}

/// What a suspended step leaves behind: its finished siblings, the interrupts, and the
/// resume values given so far.
struct Suspended {
    pending_writes: Vec<PendingWrite>,
    /// The interrupts, kept small: a suspended run is kept as long as it waits.
    interrupts: KeptInterrupts,
    resume_values: Option<BTreeMap<String, Vec<Value>>>,
}

impl<S: State> OwnedSnapshot<S> {
    /// A copy of `snapshot`, written by an execution of `graph` with this `traceparent`.
    pub(super) fn of(
        graph: &Arc<CompiledInner<S>>,
        snapshot: &SnapshotRef<'_, S>,
        trace: Option<&Arc<str>>,
    ) -> Self {
        let suspended = Suspended::of(graph, snapshot);
        let plain = snapshot.joins.is_empty() && suspended.is_none() && trace.is_none();
        Self {
            graph: Arc::clone(graph),
            state: snapshot.state.clone(),
            next: Next::of(snapshot.next),
            rest: (!plain).then(|| {
                Box::new(Rest {
                    joins: snapshot.joins.into(),
                    suspended,
                    trace: trace.cloned(),
                })
            }),
            describe: snapshot.describe,
        }
    }

    /// The snapshot `source` keeps, if it is one of these: what a resume or a recovery of
    /// `g` reads instead of decoding a body. `None` for a snapshot of another state type,
    /// which the caller reads from its body as any other.
    ///
    /// The state goes through JSON, as it would through a durable store: a field the state
    /// does not serialize (`#[serde(skip)]`) starts afresh after a resume, whichever store
    /// the run used. It comes back typed, through bytes rather than a tree of values.
    /// Everything else is handed back as it was kept.
    ///
    /// A snapshot kept by `g` itself names no graph (there is no change to check), gives
    /// its next nodes as indexes, and without `payloads` its interrupts come back with
    /// `null` payloads: a resume needs only what identifies them, and a payload may be
    /// large.
    // On every resume's path: inlined, it costs about 100 instructions less a cycle
    // (`cycles interrupt_resume`).
    #[inline]
    pub(super) fn read(
        source: &dyn SnapshotSource,
        g: &CompiledInner<S>,
        payloads: bool,
    ) -> Option<serde_json::Result<ReadBack<S>>> {
        let owned = source.as_any().downcast_ref::<Self>()?;
        let suspended = owned.suspended();
        let state = match through_json(&owned.state) {
            Ok(state) => state,
            Err(e) => return Some(Err(e)),
        };
        let same_graph = std::ptr::eq(&*owned.graph, g);
        let (indexes, names) = match same_graph {
            true => (Some(owned.next.as_slice().to_vec()), Vec::new()),
            false => {
                let names = owned.next.as_slice().iter();
                let names = names.map(|&i| owned.graph.nodes[i].name.to_string());
                (None, names.collect())
            }
        };
        let interrupts = match suspended {
            None => Vec::new(),
            Some(s) => match s.interrupts(&owned.graph, payloads) {
                Ok(interrupts) => interrupts,
                Err(e) => return Some(Err(e)),
            },
        };
        Some(Ok(ReadBack {
            state,
            next: indexes,
            snapshot: Snapshot {
                state: Value::Null,
                next: names,
                joins: owned.joins().to_vec(),
                pending_writes: suspended
                    .map(|s| s.pending_writes.clone())
                    .unwrap_or_default(),
                interrupts,
                resume_values: suspended
                    .and_then(|s| s.resume_values.clone())
                    .unwrap_or_default(),
                graph: (!same_graph).then(|| owned.graph.fingerprint.to_string()),
                graph_description: (owned.describe && !same_graph)
                    .then(|| owned.graph.description.clone()),
                trace: owned.trace().map(str::to_owned),
            },
        }))
    }

    /// The snapshot to build the body from, its interrupts those given (with payloads).
    fn as_ref<'a>(&'a self, interrupts: &'a [Interrupt]) -> SnapshotRef<'a, S> {
        let suspended = self.suspended();
        SnapshotRef {
            g: &self.graph,
            state: &self.state,
            next: self.next.as_slice(),
            joins: self.joins(),
            pending_writes: suspended.map_or(&[], |s| &s.pending_writes),
            interrupts,
            resume_values: suspended.and_then(|s| s.resume_values.as_ref()),
            describe: self.describe,
        }
    }
}

impl<S> OwnedSnapshot<S> {
    fn joins(&self) -> &[Vec<bool>] {
        self.rest.as_deref().map_or(&[], |rest| &rest.joins)
    }

    fn suspended(&self) -> Option<&Suspended> {
        self.rest
            .as_deref()
            .and_then(|rest| rest.suspended.as_ref())
    }

    fn trace(&self) -> Option<&str> {
        self.rest.as_deref().and_then(|rest| rest.trace.as_deref())
    }
}

/// A kept snapshot read back by [`OwnedSnapshot::read`].
pub(super) struct ReadBack<S> {
    /// The state, through JSON.
    pub(super) state: S,
    /// The nodes that run next, as indexes into the nodes of the graph that kept the
    /// snapshot, when that graph reads it; for another, `None`, and their names are in
    /// `snapshot.next`.
    pub(super) next: Option<Vec<usize>>,
    /// The rest; its `state` is `null`.
    pub(super) snapshot: Snapshot,
}

/// `state` as a store that keeps JSON hands it back.
fn through_json<S: State>(state: &S) -> serde_json::Result<S> {
    crate::json_text::through(state)
}

impl Suspended {
    /// What `snapshot`, of `g`, leaves behind, if anything.
    fn of<S>(g: &CompiledInner<S>, snapshot: &SnapshotRef<'_, S>) -> Option<Self> {
        let plain = snapshot.pending_writes.is_empty()
            && snapshot.interrupts.is_empty()
            && snapshot.resume_values.is_none();
        (!plain).then(|| Self {
            pending_writes: snapshot.pending_writes.to_vec(),
            interrupts: KeptInterrupts::of(g, snapshot.interrupts),
            resume_values: snapshot.resume_values.cloned(),
        })
    }

    /// The interrupts, as raised in `g`; their payloads `null` unless `payloads`.
    fn interrupts<S>(
        &self,
        g: &CompiledInner<S>,
        payloads: bool,
    ) -> serde_json::Result<Vec<Interrupt>> {
        let kept = self.interrupts.as_slice();
        let mut interrupts = Vec::with_capacity(kept.len());
        for kept in kept {
            interrupts.push(kept.interrupt(g, payloads)?);
        }
        Ok(interrupts)
    }
}

/// A suspended step's interrupts: most steps suspend on one, which is kept in the
/// snapshot's own allocation rather than in one more.
enum KeptInterrupts {
    One(KeptInterrupt),
    Many(Box<[KeptInterrupt]>),
}

impl KeptInterrupts {
    /// Keeps `interrupts`, raised in `g`.
    fn of<S>(g: &CompiledInner<S>, interrupts: &[Interrupt]) -> Self {
        match interrupts {
            [one] => Self::One(KeptInterrupt::of(g, one)),
            many => Self::Many(many.iter().map(|i| KeptInterrupt::of(g, i)).collect()),
        }
    }

    fn as_slice(&self) -> &[KeptInterrupt] {
        match self {
            Self::One(one) => std::slice::from_ref(one),
            Self::Many(many) => many,
        }
    }
}

/// The nodes that run next, as indexes into the graph's nodes: most steps lead to one,
/// which is kept without an allocation.
enum Next {
    One(usize),
    Many(Box<[usize]>),
}

impl Next {
    fn of(next: &[usize]) -> Self {
        match next {
            [one] => Self::One(*one),
            many => Self::Many(many.into()),
        }
    }

    fn as_slice(&self) -> &[usize] {
        match self {
            Self::One(one) => std::slice::from_ref(one),
            Self::Many(many) => many,
        }
    }
}

impl<S: State> SnapshotSource for OwnedSnapshot<S> {
    fn body(&self) -> serde_json::Result<Value> {
        let interrupts = match self.suspended() {
            Some(suspended) => suspended.interrupts(&self.graph, true)?,
            None => Vec::new(),
        };
        body_of(&self.as_ref(&interrupts), self.trace())
    }

    fn fingerprint(&self) -> &Arc<str> {
        &self.graph.fingerprint
    }

    fn graph_name(&self) -> Option<&Arc<str>> {
        self.describe.then_some(&self.graph.name)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::super::checkpoint::tests::one_node_graph;
    use super::*;
    use crate::graph::{END, Graph, START};

    /// A run keeps a snapshot per step: with a one-word state, 48 bytes.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_kept_snapshot_of_a_small_state_is_48_bytes() {
        assert_eq!(std::mem::size_of::<OwnedSnapshot<u64>>(), 48);
    }

    /// A state read back on resume is the state written, floats included: it goes through
    /// JSON text, which reads floats back exactly only with serde_json's `float_roundtrip`
    /// (on for the workspace; this crate's tests run without the features that would turn
    /// it on anyway).
    #[test]
    fn floats_in_the_state_read_back_exactly() {
        let written = vec![0.000_216_599_397_130_613_38, 1_859_062_658_947_177.0, 0.1];
        assert_eq!(through_json(&written).unwrap(), written);
    }

    /// Each part boxed apart reads back alone: a plain step keeps no box, joins or a
    /// `traceparent` alone keep one, and the body says what the snapshot held.
    #[test]
    fn a_snapshot_keeps_only_the_parts_it_has() {
        let graph = one_node_graph();
        let trace: Arc<str> = Arc::from("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        let joins = [vec![true, false]];
        let plain = SnapshotRef::new(&*graph.inner, &7, &[0]);
        let with_joins = SnapshotRef::new(&*graph.inner, &7, &[0]).joins(&joins);
        let cases = [
            (OwnedSnapshot::of(&graph.inner, &plain, None), false, false),
            (
                OwnedSnapshot::of(&graph.inner, &with_joins, None),
                true,
                false,
            ),
            (
                OwnedSnapshot::of(&graph.inner, &plain, Some(&trace)),
                false,
                true,
            ),
        ];
        for (owned, has_joins, has_trace) in cases {
            assert_eq!(owned.rest.is_some(), has_joins || has_trace);
            assert!(owned.suspended().is_none());
            let body = Snapshot::decode(owned.body().unwrap(), "t").unwrap();
            let read = OwnedSnapshot::<u32>::read(&owned, &one_node_graph().inner, true)
                .unwrap()
                .unwrap()
                .snapshot;
            let expected: &[Vec<bool>] = if has_joins { &joins } else { &[] };
            assert_eq!(body.joins, expected);
            assert_eq!(read.joins, expected);
            let expected = has_trace.then(|| trace.to_string());
            assert_eq!(body.trace, expected);
            assert_eq!(read.trace, expected);
            assert!(body.interrupts.is_empty() && read.interrupts.is_empty());
        }
    }

    #[test]
    fn a_kept_snapshot_reads_back_as_its_body_decodes() {
        let graph = one_node_graph();
        let interrupts: Vec<Interrupt> = serde_json::from_value(json!([
            {"id": "a#1", "node": "a", "index": 1, "payload": {"ask": "ok?"}}
        ]))
        .unwrap();
        let values = BTreeMap::from([("a".to_owned(), vec![json!("first")])]);
        let writes = [PendingWrite {
            node: "b".into(),
            state: json!(5),
            changed: None,
        }];
        let joins = [vec![true, false]];
        let snapshot = SnapshotRef::new(&*graph.inner, &7, &[0])
            .joins(&joins)
            .suspended(&writes, &interrupts, &values);
        let trace: Arc<str> = Arc::from("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        let owned = OwnedSnapshot::of(&graph.inner, &snapshot, Some(&trace));

        // Read for another compiled graph: everything, the graph it was kept by included,
        // its next nodes by name.
        let kept = OwnedSnapshot::<u32>::read(&owned, &one_node_graph().inner, true)
            .unwrap()
            .unwrap();
        let decoded = Snapshot::decode(owned.body().unwrap(), "t").unwrap();
        assert_eq!(json!(kept.state), decoded.state);
        assert_eq!(kept.next, None);
        let kept = kept.snapshot;
        assert_eq!(kept.next, decoded.next);
        assert_eq!(kept.joins, decoded.joins);
        assert_eq!(kept.pending_writes, decoded.pending_writes);
        assert_eq!(kept.interrupts, decoded.interrupts);
        assert_eq!(kept.resume_values, decoded.resume_values);
        assert_eq!(kept.graph, decoded.graph);
        assert_eq!(kept.graph_description, decoded.graph_description);
        assert_eq!(kept.trace, decoded.trace);

        // Read for the graph that kept it: no graph to check against, next nodes as
        // indexes, and without payloads, interrupts that say only who they are.
        let mine = OwnedSnapshot::<u32>::read(&owned, &graph.inner, false)
            .unwrap()
            .unwrap();
        assert_eq!(mine.state, 7);
        assert_eq!(mine.next, Some(vec![0]));
        let mine = mine.snapshot;
        assert_eq!((mine.graph, mine.graph_description), (None, None));
        assert!(mine.next.is_empty());
        assert_eq!(mine.interrupts.len(), 1);
        let (read, full) = (&mine.interrupts[0], &kept.interrupts[0]);
        assert_eq!(
            (&read.id, &read.node, read.index, &read.payload),
            (&full.id, &full.node, full.index, &Value::Null)
        );

        // A graph of another state type reads the body instead.
        let strings = Graph::new("s")
            .node_sync("a", |s: &mut String| s.push('a'))
            .edge(START, "a")
            .edge("a", END)
            .compile()
            .unwrap();
        assert!(OwnedSnapshot::<String>::read(&owned, &strings.inner, true).is_none());
    }
}
