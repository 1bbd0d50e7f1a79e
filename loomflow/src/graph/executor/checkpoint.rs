//! Checkpoints: the executor's snapshot of a run, and how it reaches the store.
//!
//! The store keeps rows (`{id, thread, run, namespace, step, status, body, error}`) and never
//! learns what a snapshot holds: the snapshot is [`Snapshot`], private to the executor, and
//! travels as the row's JSON `body`. Its keys `state`, `next` and `interrupts` are the
//! contract documented on [`Checkpoint`]; the rest may change with the executor.

use std::collections::BTreeMap;

use futures_util::future::Either;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;

use super::Result;
use super::body::{BodyJson, body_of};
use super::owned::OwnedSnapshot;
use crate::context::RunShared;
use crate::graph::State;
use crate::graph::compiled::CompiledInner;
use crate::graph::error::RunError;
use crate::runtime::claim::RunClaim;
use crate::runtime::store::JsonBody;
use crate::runtime::{Checkpoint, Durability, Interrupt, RunStatus};
use std::sync::Arc;

/// The finished copy of the state of a node whose siblings suspended: it is merged when the
/// step completes on resume, and the node is not run again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct PendingWrite {
    /// The node.
    pub(super) node: String,
    /// Its copy of the state when it finished.
    pub(super) state: Value,
    /// The top-level fields it changed, worked out as it finished (when its copy and the
    /// step's state still shared their hashers); `None` in checkpoints written before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) changed: Option<Vec<String>>,
}

/// A run's snapshot as read back: from a checkpoint's body, or from a snapshot the
/// in-memory store kept as values (see [`owned`](super::owned)).
///
/// Bodies written before the snapshot was private (SQLite schema version 1) have the same
/// keys, so they read back unchanged.
#[derive(Debug, Deserialize)]
pub(super) struct Snapshot {
    /// The state after the step (for an interrupted run, the state the step began with).
    pub(super) state: Value,
    /// The nodes that run next; for an interrupted run, the step to run again.
    #[serde(default)]
    pub(super) next: Vec<String>,
    /// Progress of each join (which sources have run), in declaration order.
    #[serde(default)]
    pub(super) joins: Vec<Vec<bool>>,
    /// Finished siblings of interrupted nodes.
    #[serde(default)]
    pub(super) pending_writes: Vec<PendingWrite>,
    /// Interrupts waiting for a value.
    #[serde(default)]
    pub(super) interrupts: Vec<Interrupt>,
    /// Values already given to interrupted nodes, per node, in call order.
    #[serde(default)]
    pub(super) resume_values: BTreeMap<String, Vec<Value>>,
    /// The fingerprint of the graph that wrote it (absent before fingerprints).
    #[serde(default)]
    pub(super) graph: Option<String>,
    /// That graph's structure, one fact a line: kept where a run begins and where it
    /// suspends, to say what changed when the graph no longer matches.
    #[serde(default)]
    pub(super) graph_description: Option<Vec<String>>,
    /// The W3C `traceparent` of the execution that wrote it (feature `otel`).
    #[serde(default)]
    pub(super) trace: Option<String>,
}

impl Snapshot {
    /// Reads the snapshot in a checkpoint's body.
    pub(super) fn decode(body: Value, thread: &str) -> Result<Self> {
        serde_json::from_value(body)
            .map_err(|e| RunError::json(format!("checkpoint of thread {thread}"), e))
    }
}

/// A snapshot being written: borrows what the executor holds. Empty parts are left out, to
/// keep rows small (a plain step's body is `{"state":…,"next":[…],"graph":"…"}`).
pub(super) struct SnapshotRef<'a, S> {
    pub(super) g: &'a CompiledInner<S>,
    pub(super) state: &'a S,
    /// Indexes into the graph's nodes.
    pub(super) next: &'a [usize],
    pub(super) joins: &'a [Vec<bool>],
    pub(super) pending_writes: &'a [PendingWrite],
    pub(super) interrupts: &'a [Interrupt],
    pub(super) resume_values: Option<&'a BTreeMap<String, Vec<Value>>>,
    /// Whether to keep the graph's description (a run's first checkpoint, a suspension).
    pub(super) describe: bool,
}

impl<'a, S: State> SnapshotRef<'a, S> {
    /// The state and the nodes that run next (indexes into the graph's nodes), nothing
    /// pending.
    pub(super) fn new(g: &'a CompiledInner<S>, state: &'a S, next: &'a [usize]) -> Self {
        Self {
            g,
            state,
            next,
            joins: &[],
            pending_writes: &[],
            interrupts: &[],
            resume_values: None,
            describe: false,
        }
    }

    /// With the graph's structure, for saying later what changed (a run's first checkpoint).
    pub(super) fn described(mut self) -> Self {
        self.describe = true;
        self
    }

    /// Whether to keep the graph's description.
    pub(super) fn describe(mut self, describe: bool) -> Self {
        self.describe = describe;
        self
    }

    /// With the progress of each join.
    pub(super) fn joins(mut self, joins: &'a [Vec<bool>]) -> Self {
        self.joins = joins;
        self
    }

    /// With what a suspended step leaves behind: finished siblings, the interrupts, and
    /// the resume values given so far.
    pub(super) fn suspended(
        mut self,
        pending_writes: &'a [PendingWrite],
        interrupts: &'a [Interrupt],
        resume_values: &'a BTreeMap<String, Vec<Value>>,
    ) -> Self {
        self.pending_writes = pending_writes;
        self.interrupts = interrupts;
        self.resume_values = (!resume_values.is_empty()).then_some(resume_values);
        self.describe = true;
        self
    }
}

/// Which run a checkpoint belongs to.
#[derive(Clone, Copy)]
pub(super) struct RunKey<'a> {
    pub(super) thread: &'a str,
    pub(super) run: u64,
    pub(super) namespace: &'a str,
    /// The execution's `traceparent`, kept in each checkpoint's body.
    pub(super) trace: Option<&'a Arc<str>>,
    /// Whether the store takes checkpoints whose body it builds when read.
    pub(super) unserialized: bool,
    /// Whether the store writes bodies as JSON text, which it then gets as text.
    pub(super) json_bodies: bool,
}

impl<'a> RunKey<'a> {
    /// The run `shared` describes.
    pub(super) fn of(shared: &'a RunShared) -> Self {
        Self {
            thread: &shared.thread,
            run: shared.run,
            namespace: shared.namespace.as_str(),
            trace: shared.trace.as_ref(),
            unserialized: shared.runtime.store().as_memory().is_some(),
            json_bodies: shared.runtime.store().writes_json_bodies(),
        }
    }

    /// The checkpoint row of `snapshot` after superstep `step`: for a store that keeps
    /// checkpoints in memory, a copy of the snapshot's values whose body is built when read
    /// (and which a resume reads back without JSON), its `thread` left for the run's claim
    /// to name; for any other, as [`checkpoint`](Self::checkpoint).
    pub(super) fn step_checkpoint<S: State>(
        self,
        graph: &Arc<CompiledInner<S>>,
        step: u64,
        status: RunStatus,
        snapshot: &SnapshotRef<'_, S>,
    ) -> Result<Checkpoint> {
        if !self.unserialized {
            return self.checkpoint(graph, step, status, snapshot);
        }
        let owned = OwnedSnapshot::of(graph, snapshot, self.trace);
        // No copy of the thread's name: the claim the checkpoint is written under names it
        // (see `RunClaim::put_checkpoint`).
        Ok(Checkpoint::unserialized(
            String::new(),
            self.run,
            self.namespace,
            step,
            status,
            Arc::new(owned),
        ))
    }

    /// The checkpoint row of `snapshot` after superstep `step`.
    pub(super) fn checkpoint<S: State>(
        self,
        g: &CompiledInner<S>,
        step: u64,
        status: RunStatus,
        snapshot: &SnapshotRef<'_, S>,
    ) -> Result<Checkpoint> {
        let trace = self.trace.map(|trace| &**trace);
        let unwritable = |e| RunError::json(format!("state of graph {}", g.name), e);
        if self.json_bodies {
            let text = crate::json_depth::to_string(&BodyJson { snapshot, trace });
            let text = text.map_err(unwritable)?;
            let name = snapshot.describe.then_some(&g.name);
            let body = JsonBody::new(text, &g.fingerprint, name);
            return Ok(Checkpoint::unserialized(
                self.thread,
                self.run,
                self.namespace,
                step,
                status,
                Arc::new(body),
            ));
        }
        let body = body_of(snapshot, trace).map_err(unwritable)?;
        Ok(Checkpoint::new(
            self.thread,
            self.run,
            self.namespace,
            step,
            status,
            body,
        ))
    }
}

/// Writes checkpoints as the durability mode asks: in line (`Sync`), or in order through a
/// background task (`Async`) that [`finish`](CheckpointWriter::finish) waits for. Both under
/// the run's claim.
///
/// A top-level run's writes past its interrupted checkpoint spend the resume requests its
/// execution took; a subgraph's do not: its checkpoints are its own, under the parent's
/// claim, and the parent's step that runs it may still fail, leaving the run interrupted.
pub(super) enum CheckpointWriter {
    Direct {
        claim: RunClaim,
        /// Whether a write spends the resume requests taken: a top-level run's.
        spends: bool,
    },
    Background {
        /// Writes the run's start in line (see [`write_start`](CheckpointWriter::write_start)).
        claim: RunClaim,
        queue: Option<UnboundedSender<Checkpoint>>,
        task: Option<tokio::task::JoinHandle<Result<()>>>,
    },
}

impl CheckpointWriter {
    pub(super) fn new(claim: &RunClaim, durability: Durability, top_level: bool) -> Self {
        if durability != Durability::Async {
            return Self::Direct {
                claim: claim.clone(),
                spends: top_level,
            };
        }
        let (queue, mut rx) = tokio::sync::mpsc::unbounded_channel::<Checkpoint>();
        let writer = claim.clone();
        let claim = claim.clone();
        let task = tokio::spawn(async move {
            while let Some(cp) = rx.recv().await {
                claim.put_checkpoint(cp).await?;
                // Resume requests taken are spent once a checkpoint past them is written,
                // not when it is queued: should the write fail, the run is let go runnable
                // (or its lease runs out), and the next execution applies them again.
                if top_level {
                    claim.request_spent();
                }
            }
            Ok(())
        });
        Self::Background {
            claim: writer,
            queue: Some(queue),
            task: Some(task),
        }
    }

    /// Writes the checkpoint that ends the execution: in line, it releases a top-level
    /// run's claim in the same write; in the background, the claim is released after
    /// [`finish`](Self::finish). Spends the resume requests taken, as [`write`](Self::write).
    pub(super) async fn write_last(&mut self, cp: Checkpoint, shared: &RunShared) -> Result<()> {
        match self {
            Self::Direct { claim, spends } => {
                super::put_last(shared, cp).await?;
                if *spends {
                    claim.request_spent();
                }
                Ok(())
            }
            Self::Background { .. } => self.write(cp).await,
        }
    }

    /// Writes a fresh run's first checkpoint, `cp`, made as soon as the run is claimed: in
    /// line, under the lease the claim took (see [`RunClaim::put_start_checkpoint`]), in the
    /// background mode too. The run's number is the thread's once it is written: a journal
    /// entry the first step writes before it would be filed under a number that the
    /// thread's next run takes again, should the process die before the start reached the
    /// store, and that run would be handed its results.
    pub(super) fn write_start(&mut self, cp: Checkpoint) -> impl Future<Output = Result<()>> + '_ {
        let (Self::Direct { claim, .. } | Self::Background { claim, .. }) = self;
        let write = claim.put_start_checkpoint(cp);
        async move { write.await.map(drop).map_err(Into::into) }
    }

    /// Writes (or queues) a step's checkpoint, `cp`: past the interrupted checkpoint, so
    /// the resume requests the execution took are spent once it is written (see
    /// [`RunClaim::request_spent`]). Not an `async fn`, so that the checkpoint is moved
    /// straight into the write instead of into this future first.
    pub(super) fn write(&mut self, cp: Checkpoint) -> impl Future<Output = Result<()>> + '_ {
        match self {
            Self::Direct { claim, spends } => {
                let write = claim.put_checkpoint(cp);
                let (claim, spends) = (&*claim, *spends);
                Either::Left(async move {
                    write.await?;
                    if spends {
                        claim.request_spent();
                    }
                    Ok(())
                })
            }
            Self::Background { queue, .. } => {
                if let Some(queue) = queue {
                    // A send fails only if the writer stopped on an error, which `finish` reports.
                    let _ = queue.send(cp);
                }
                Either::Right(std::future::ready(Ok(())))
            }
        }
    }

    /// Waits until every queued checkpoint is written.
    pub(super) async fn finish(&mut self) -> Result<()> {
        if let Self::Background { queue, task, .. } = self {
            queue.take();
            if let Some(task) = task.take() {
                return task.await.map_err(|_| RunError::Internal {
                    problem: "background checkpoint writer stopped",
                })?;
            }
        }
        Ok(())
    }
}

/// Adds to the checkpoint the audit entries the run recorded since its last write.
pub(super) fn add_audit(shared: &RunShared, cp: &mut Checkpoint) {
    let mut audit = shared.take_audit();
    if cp.audit.is_empty() {
        cp.audit = audit;
    } else {
        cp.audit.append(&mut audit);
    }
}

#[cfg(test)]
pub(super) mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;
    use crate::graph::{CompiledGraph, END, Graph, START};

    /// `START -> a -> END`, where `a` adds one to a number: the snapshot tests' graph.
    pub(in crate::graph::executor) fn one_node_graph() -> CompiledGraph<u32> {
        Graph::new("g")
            .node_sync("a", |n: &mut u32| *n += 1)
            .edge(START, "a")
            .edge("a", END)
            .compile()
            .unwrap()
    }

    /// A store that writes text gets, for every shape of snapshot, the JSON of the body
    /// built as a value; it reads back as that value, with the graph's fingerprint, name
    /// and interrupts.
    #[test]
    fn a_body_written_as_text_is_the_serialized_value() {
        let graph = one_node_graph();
        let g = &*graph.inner;
        let trace: Arc<str> = Arc::from("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        let key = |trace, json_bodies| RunKey {
            thread: "t",
            run: 1,
            namespace: "",
            trace,
            unserialized: false,
            json_bodies,
        };
        let writes = [PendingWrite {
            node: "b".into(),
            state: json!({"z": 1, "a": [2]}),
            changed: Some(vec!["z".into()]),
        }];
        let interrupts: Vec<Interrupt> = serde_json::from_value(json!([
            {"id": "a#0", "node": "a", "index": 0, "payload": {"q": "ok?", "n": 1}, "signal": "go"}
        ]))
        .unwrap();
        let values = BTreeMap::from([("a".to_owned(), vec![json!(true)])]);
        let joins = [vec![true, false]];
        let snapshots = [
            SnapshotRef::new(g, &1, &[0]),
            SnapshotRef::new(g, &2, &[]),
            SnapshotRef::new(g, &3, &[0]).described(),
            SnapshotRef::new(g, &4, &[0])
                .joins(&joins)
                .suspended(&writes, &interrupts, &values),
        ];
        for trace in [None, Some(&trace)] {
            for snapshot in &snapshots {
                let tree = key(trace, false).checkpoint(g, 3, RunStatus::Interrupted, snapshot);
                let text = key(trace, true).checkpoint(g, 3, RunStatus::Interrupted, snapshot);
                let (tree, text) = (tree.unwrap(), text.unwrap());
                assert_eq!(text.body, Value::Null, "not built");
                let json = text.body_json().unwrap();
                assert_eq!(serde_json::from_str::<Value>(&json).unwrap(), tree.body);
                if snapshot.interrupts.is_empty() {
                    // No struct inside: the very same text.
                    assert_eq!(json, serde_json::to_string(&tree.body).unwrap());
                }
                assert_eq!(text.fingerprint(), tree.fingerprint());
                assert_eq!(text.graph_name(), tree.graph_name());
                assert_eq!(text.interrupts().unwrap(), tree.interrupts().unwrap());
                assert_eq!(text.serialized().unwrap().body, tree.body);
            }
        }
    }

    #[test]
    fn a_plain_body_holds_only_state_next_and_the_graphs_fingerprint() {
        let graph = one_node_graph();
        let g = &*graph.inner;
        let key = RunKey {
            thread: "t",
            run: 1,
            namespace: "",
            trace: None,
            unserialized: false,
            json_bodies: false,
        };
        let running = key
            .checkpoint(g, 3, RunStatus::Running, &SnapshotRef::new(g, &1, &[0]))
            .unwrap();
        let fingerprint = graph.fingerprint();
        assert_eq!(
            running.body,
            json!({ "state": 1, "next": ["a"], "graph": fingerprint })
        );
        assert_eq!(running.next(), ["a"]);
        let done = key
            .checkpoint(g, 4, RunStatus::Completed, &SnapshotRef::new(g, &2, &[]))
            .unwrap();
        assert_eq!(done.body, json!({ "state": 2, "graph": fingerprint }));
        let read = Snapshot::decode(done.body, "t").unwrap();
        assert!(read.next.is_empty() && read.interrupts.is_empty());

        // Every part of a suspended step reads back.
        let writes = [PendingWrite {
            node: "b".into(),
            state: json!(5),
            changed: None,
        }];
        let interrupts: Vec<Interrupt> = serde_json::from_value(json!([
            {"id": "a#0", "node": "a", "index": 0, "payload": "ok?"}
        ]))
        .unwrap();
        let values = BTreeMap::from([("a".to_owned(), vec![json!(true)])]);
        let joins = [vec![true, false]];
        let snapshot =
            SnapshotRef::new(g, &1, &[0])
                .joins(&joins)
                .suspended(&writes, &interrupts, &values);
        let cp = key
            .checkpoint(g, 2, RunStatus::Interrupted, &snapshot)
            .unwrap();
        assert_eq!(cp.interrupts().unwrap(), interrupts);
        let read = Snapshot::decode(cp.body, "t").unwrap();
        assert_eq!(read.state, json!(1));
        assert_eq!(read.next, ["a"]);
        assert_eq!(read.joins, joins);
        assert_eq!(read.pending_writes, writes);
        assert_eq!(read.resume_values, values);
    }

    #[test]
    fn a_body_built_when_read_is_the_body_built_at_once() {
        let graph = one_node_graph();
        let trace: Arc<str> = Arc::from("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        for (described, trace) in [(false, None), (true, Some(&trace))] {
            let eager = RunKey {
                thread: "t",
                run: 2,
                namespace: "",
                trace,
                unserialized: false,
                json_bodies: false,
            };
            let lazy = RunKey {
                unserialized: true,
                json_bodies: false,
                ..eager
            };
            let joins = [vec![true, false]];
            let snapshot = SnapshotRef::new(&*graph.inner, &7, &[0])
                .joins(&joins)
                .describe(described);
            let at_once = eager
                .step_checkpoint(&graph.inner, 3, RunStatus::Running, &snapshot)
                .unwrap();
            let later = lazy
                .step_checkpoint(&graph.inner, 3, RunStatus::Running, &snapshot)
                .unwrap();
            assert!(at_once.unserialized.is_none() && later.unserialized.is_some());
            assert_eq!(later.body, Value::Null, "not built yet");
            assert_eq!(later.fingerprint(), at_once.fingerprint());
            assert_eq!(later.graph_name(), at_once.graph_name());
            // Kept for the memory store, it leaves its thread for the claim to name.
            assert_eq!(later.thread, "");
            let mut later = later.serialized().unwrap();
            later.thread = "t".into();
            assert_eq!(later, at_once);
        }
        // A suspended snapshot is kept as values too; its body, once built, lists the
        // interrupts and what else the step leaves behind.
        let interrupts: Vec<Interrupt> = serde_json::from_value(json!([
            {"id": "a#0", "node": "a", "index": 0, "payload": "ok?"}
        ]))
        .unwrap();
        let values = BTreeMap::from([("a".to_owned(), vec![json!(true)])]);
        let writes = [PendingWrite {
            node: "b".into(),
            state: json!(5),
            changed: None,
        }];
        let suspended =
            SnapshotRef::new(&*graph.inner, &1, &[0]).suspended(&writes, &interrupts, &values);
        let key = RunKey {
            thread: "t",
            run: 1,
            namespace: "",
            trace: None,
            unserialized: true,
            json_bodies: false,
        };
        let eager = RunKey {
            unserialized: false,
            json_bodies: false,
            ..key
        };
        let kept = key
            .step_checkpoint(&graph.inner, 2, RunStatus::Interrupted, &suspended)
            .unwrap();
        assert!(kept.unserialized.is_some());
        let at_once = eager
            .checkpoint(&graph.inner, 2, RunStatus::Interrupted, &suspended)
            .unwrap();
        let mut cp = kept.serialized().unwrap();
        cp.thread = "t".into();
        assert_eq!(cp, at_once);
        assert_eq!(cp.interrupts().unwrap(), interrupts);
    }
}
