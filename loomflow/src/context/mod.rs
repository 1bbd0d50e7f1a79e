//! [`Context`]: what a node knows about its run, and how it talks to the world.

mod journal;
mod signal;
mod signal_accept;
mod timer;
mod waits_beside;

pub use signal::WaitForSignal;
pub use timer::Sleep;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::event::{Event, EventKind};
use crate::graph::namespace::Namespace;
use crate::graph::{BoxFuture, RunError};
use crate::runtime::claim::RunClaim;
use crate::runtime::mailbox::Taking;
use crate::runtime::{AuditEntry, AuditKind, Durability, Interrupt, Runtime, StoreError};

type Result<T, E = RunError> = std::result::Result<T, E>;

/// What every node of one run shares.
pub(crate) struct RunShared {
    pub(crate) thread: Arc<str>,
    /// The run's number within its thread.
    pub(crate) run: u64,
    pub(crate) runtime: Runtime,
    /// Where stream events go; `None` when nobody listens.
    pub(crate) events: Option<crate::event::EventSink>,
    /// Where the run files its checkpoints and journal: the root for the top-level graph.
    pub(crate) namespace: Namespace,
    /// The run's durability mode (the runtime's, or the run's own override).
    pub(crate) durability: Durability,
    /// The claim every write of the run is made under.
    pub(crate) claim: RunClaim,
    /// Audit entries recorded by the run's nodes and not written yet: they go with the next
    /// journal entry or checkpoint the run writes.
    pub(crate) audit: Mutex<Vec<AuditEntry>>,
    /// The W3C `traceparent` of this execution's `run` span (feature `otel`), kept in its
    /// checkpoints so that the execution carrying the run on can link to it.
    pub(crate) trace: Option<Arc<str>>,
    /// The id of the checkpoint this execution carried on from; 0 for a fresh run.
    pub(crate) resumed_from: u64,
}

impl Drop for RunShared {
    /// A top-level run closes its thread's signal session, if something opened it, when it
    /// stops: what it did not receive goes back to pending.
    fn drop(&mut self) {
        if self.namespace.is_root() {
            self.claim.close_session();
        }
    }
}

impl RunShared {
    /// Queues an audit entry for the run's next write, filling in its run.
    pub(crate) fn record_audit(&self, mut entry: AuditEntry) {
        // An entry that names no thread is the run's: the claim it is written under names
        // it (the memory store shares its own name for the thread).
        if entry.run == 0 {
            entry.run = self.run;
        }
        crate::sync::lock(&self.audit).push(entry);
    }

    /// The audit entries recorded and not written yet.
    pub(crate) fn take_audit(&self) -> Vec<AuditEntry> {
        let mut queued = crate::sync::lock(&self.audit);
        if queued.is_empty() {
            Vec::new()
        } else {
            std::mem::take(&mut *queued)
        }
    }

    /// [`take_audit`](Self::take_audit), but the `resume` entries of the suspension being
    /// carried on stay queued: they are written with the checkpoint that carries the run past
    /// it. Written with a journaled step before that, a crash in between would leave them in
    /// the log, and the execution recovering the run would record them again.
    pub(crate) fn take_audit_but_resumes(&self) -> Vec<AuditEntry> {
        let mut queued = crate::sync::lock(&self.audit);
        if !queued.iter().any(|e| e.kind == AuditKind::Resume) {
            return std::mem::take(&mut *queued);
        }
        let (resumes, rest) = queued
            .drain(..)
            .partition(|e: &AuditEntry| e.kind == AuditKind::Resume);
        *queued = resumes;
        rest
    }

    /// Forgets every queued `resume` entry: the run stops before any step carried it past
    /// what it was suspended on.
    pub(crate) fn forget_resumes(&self) {
        crate::sync::lock(&self.audit).retain(|e| e.kind != AuditKind::Resume);
    }

    /// Forgets the queued `resume` entries of `interrupts`: the run suspends on them again,
    /// so it was not carried past them (a recover that found nothing to receive).
    pub(crate) fn forget_resumes_of<'a>(&self, interrupts: impl Iterator<Item = &'a str>) {
        let mut queued = crate::sync::lock(&self.audit);
        for id in interrupts {
            queued.retain(|e| e.kind != AuditKind::Resume || e.subject != id);
        }
    }

    /// Whether anyone listens to the run's events (a stream).
    pub(crate) fn has_listener(&self) -> bool {
        self.events.is_some()
    }

    /// Sends an event to the stream, if there is one. The node name is prefixed with the
    /// namespace so that events from inside subgraphs say where they come from.
    ///
    /// Run-level events (`step`, `done`, `error`: no node) of a subgraph are not sent: the
    /// stream is the parent run's, which has its own.
    ///
    /// Inlined: with nobody listening (the common case), the event is dropped where it was
    /// made, which for most kinds costs nothing.
    #[inline]
    pub(crate) fn emit(&self, step: u64, node: Option<&str>, kind: EventKind) {
        if self.events.is_some() {
            self.send(step, node, kind);
        }
    }

    fn send(&self, step: u64, node: Option<&str>, kind: EventKind) {
        if node.is_none() && !self.namespace.is_root() {
            return;
        }
        if let Some(events) = &self.events {
            let node = node.map(|n| {
                if self.namespace.is_root() {
                    n.to_owned()
                } else {
                    format!("{}/{n}", self.namespace.path())
                }
            });
            // A closed receiver means the listener went away; the run carries on regardless.
            events.send(Event::new(step, node, kind));
        }
    }
}

/// A node's handle on its run: identity, events, interrupts, journaled steps and (through
/// the runtime) the world.
///
/// The executor makes one per node per superstep and passes it by reference.
pub struct Context {
    run: Arc<RunShared>,
    node: Arc<str>,
    step: u64,
    /// Values given to this node's interrupts on resume, in call order.
    resume: Vec<Value>,
    control: Mutex<NodeControl>,
}

/// Emits events as one node of one run; see [`Context::events`].
#[derive(Clone)]
pub(crate) struct NodeEvents {
    run: Arc<RunShared>,
    node: Arc<str>,
    step: u64,
}

impl NodeEvents {
    pub(crate) fn emit(&self, kind: EventKind) {
        self.run.emit(self.step, Some(&self.node), kind);
    }

    /// See [`Context::event_room`].
    pub(crate) async fn room(&self) -> Result<()> {
        let Some(events) = &self.run.events else {
            return Ok(());
        };
        let claim = &self.run.claim;
        claim.unless_cancelled(events.room()).await?;
        // Room made as the cancel came (the reader gave up on the stream for the run's
        // outcome) stops the node all the same.
        claim.unless_cancelled(std::future::ready(())).await
    }
}

impl std::fmt::Debug for NodeEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeEvents")
            .field("node", &self.node)
            .field("step", &self.step)
            .finish_non_exhaustive()
    }
}

/// What a node left for the executor once it has run (see [`Context::finish`]).
pub(crate) struct Finished {
    pub(crate) bad_resume: Option<RunError>,
    pub(crate) suspension: Vec<Interrupt>,
    pub(crate) store_failure: Option<StoreError>,
}

/// What a node did that the executor must know about, whatever the node returned.
#[derive(Default)]
struct NodeControl {
    interrupts_called: usize,
    /// What the node suspended on: one interrupt or wait, or a subgraph's pending ones.
    suspension: Vec<Interrupt>,
    /// A resume value that did not deserialize: the resume was a bad request, not a
    /// failure of the node.
    bad_resume: Option<RunError>,
    /// Hashed with foldhash: std's default hasher draws its keys from a thread-local on
    /// every map made, and a context is made per node per step.
    occurrences: HashMap<String, u32, foldhash::fast::FixedState>,
    /// The journal writes of consumed signals that a dropped wait left under way: the
    /// node's step is not over, and its checkpoint not written, until they have ended.
    journaling: Vec<Taking>,
    /// The first failure in passing of the store that one of the node's calls met (see
    /// [`Context::noted`]): a node that then fails, whatever its error's type, failed
    /// because the store did.
    store_failure: Option<StoreError>,
    /// The signal waits under way (see [`waits_beside`]).
    waits_under_way: Vec<waits_beside::WaitUnderWay>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("thread", &self.run.thread)
            .field("node", &self.node)
            .field("step", &self.step)
            .finish_non_exhaustive()
    }
}

impl Context {
    pub(crate) fn new(run: Arc<RunShared>, node: Arc<str>, step: u64, resume: Vec<Value>) -> Self {
        Self {
            run,
            node,
            step,
            resume,
            control: Mutex::new(NodeControl::default()),
        }
    }

    fn control(&self) -> MutexGuard<'_, NodeControl> {
        // The critical sections cannot panic, so a poisoned lock still holds sound data.
        crate::sync::lock(&self.control)
    }

    /// Whether anyone listens to the run's events (a stream): lets callers skip building
    /// events nobody reads.
    pub(crate) fn has_listener(&self) -> bool {
        self.run.has_listener()
    }

    /// Emits an event as this node.
    pub(crate) fn emit_kind(&self, kind: EventKind) {
        self.run.emit(self.step, Some(&self.node), kind);
    }

    /// A handle that emits events as this node and outlives the borrow of the context (a
    /// tool's context keeps one).
    pub(crate) fn events(&self) -> NodeEvents {
        NodeEvents {
            run: Arc::clone(&self.run),
            node: Arc::clone(&self.node),
            step: self.step,
        }
    }

    /// Waits until the run's event stream has room for another event: at once unless the
    /// run is streamed with [`stream_bounded`](crate::graph::RunBuilder::stream_bounded) and
    /// that many events wait unread. A node that emits many events
    /// ([`emit`](Self::emit) never waits) calls it before each, to keep to the pace of the
    /// stream's reader instead of piling events up in memory.
    ///
    /// # Errors
    ///
    /// [`RunError::Cancelled`] when the run is cancelled while it waits, and the lease's
    /// error when another execution took the run over: the node stops there, and the run
    /// with it.
    ///
    /// # Examples
    ///
    /// ```
    /// use loomflow::prelude::*;
    ///
    /// #[node]
    /// async fn scan(state: &mut Vec<u32>, ctx: &Context) -> loomflow::Result<()> {
    ///     for (index, item) in state.iter().enumerate() {
    ///         ctx.event_room().await?;
    ///         ctx.emit("scanned", json!({ "index": index, "item": item }));
    ///     }
    ///     Ok(())
    /// }
    /// # let _ = Graph::new("g").node(scan);
    /// ```
    pub async fn event_room(&self) -> Result<()> {
        self.events().room().await
    }

    /// The run's event stream, for a subgraph run started by this node.
    pub(crate) fn event_sender(&self) -> Option<crate::event::EventSink> {
        self.run.events.clone()
    }

    /// The run's durability mode, which a subgraph run started by this node keeps.
    pub(crate) fn durability(&self) -> Durability {
        self.run.durability
    }

    /// The run's claim, which a subgraph run started by this node executes under.
    pub(crate) fn claim(&self) -> &RunClaim {
        &self.run.claim
    }

    /// What the node left for the executor once it has run: a resume value it could not
    /// use (the resume is refused), the interrupts it suspended on (empty when none), and
    /// the store's failure in passing one of its calls met. Consumes the context, so no
    /// lock is taken.
    pub(crate) fn finish(self) -> Finished {
        let control = self
            .control
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Finished {
            bad_resume: control.bad_resume,
            suspension: control.suspension,
            store_failure: control.store_failure,
        }
    }

    /// Runs `work`, whose store failures its caller handles itself, without noting them.
    pub(crate) async fn unnoted<T>(&self, work: impl std::future::Future<Output = T>) -> T {
        let before = self.control().store_failure.take();
        let done = work.await;
        self.control().store_failure = before;
        done
    }

    /// `result`, a call of the node's: a failure in passing of the store it holds is noted
    /// first, so that the node's failure is taken for the store's whatever error type the
    /// node wraps it in (`anyhow`, an error enum of its own), and its run is let go to be
    /// carried on rather than failed.
    pub(crate) fn noted<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(RunError::Store(error)) = &result
            && let Some(copy) = error.passing_copy()
        {
            self.control().store_failure.get_or_insert(copy);
        }
        result
    }

    /// Once the node has run: the end of the journal writes its dropped waits left under
    /// way, which the step's checkpoint must follow; `None` when there are none, the common
    /// case. Boxed, as it is rare: a run's future keeps no room for it. No lock is taken.
    pub(crate) fn journal_writes_ended(&mut self) -> Option<BoxFuture<'static, ()>> {
        let control = self
            .control
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if control.journaling.is_empty() {
            return None;
        }
        let writes = std::mem::take(&mut control.journaling);
        Some(Box::pin(async move {
            for mut write in writes {
                write.outcome().await;
            }
        }))
    }

    /// Records that this node (a subgraph) suspends on its child run's pending interrupts;
    /// each keeps its id, payload and signal, and is filed under this node so that a resume
    /// value for it comes back here.
    pub(crate) fn suspend_on_child(&self, interrupts: Vec<Interrupt>) -> RunError {
        let mut control = self.control();
        if control.suspension.is_empty() {
            control.suspension = interrupts
                .into_iter()
                .map(|child| Interrupt {
                    node: String::from(&*self.node),
                    ..child
                })
                .collect();
        }
        RunError::Suspended {
            node: String::from(&*self.node),
        }
    }

    /// The id of the checkpoint this execution carried on from; 0 for a fresh run. A child
    /// checkpoint newer than it was written by an execution that went further.
    pub(crate) fn resumed_from(&self) -> u64 {
        self.run.resumed_from
    }

    /// The resume values given for this node's child interrupts (a subgraph node), by
    /// interrupt id.
    pub(crate) fn child_resume_values(&self) -> BTreeMap<String, Value> {
        match self.resume.first() {
            Some(Value::Object(values)) => values
                .iter()
                .map(|(id, value)| (id.clone(), value.clone()))
                .collect(),
            _ => BTreeMap::new(),
        }
    }

    fn qualified_node(&self) -> std::borrow::Cow<'_, str> {
        if self.run.namespace.is_root() {
            std::borrow::Cow::Borrowed(&self.node)
        } else {
            std::borrow::Cow::Owned(format!("{}/{}", self.run.namespace, self.node))
        }
    }

    /// Suspends the run to ask the outside world for a value; on resume, returns it.
    ///
    /// On a first run this records an [`Interrupt`] carrying `payload` and returns
    /// [`RunError::Suspended`]: propagate it with `?`. The executor then writes a checkpoint, stops
    /// the run and reports [`RunOutcome::Interrupted`](crate::RunOutcome::Interrupted); the
    /// process may exit. [`CompiledGraph::resume`](crate::CompiledGraph::resume) runs the node
    /// again from its start, and this time its k-th `interrupt` call returns the k-th resume
    /// value, deserialized into `T`. Code before the interrupt therefore runs again: put side
    /// effects in [`step`](Context::step) so they run once.
    ///
    /// Catching the error does not cancel the suspension: the node is suspended whatever it
    /// returns, and a warning names it.
    ///
    /// # Errors
    ///
    /// [`RunError::Suspended`] on a first run; [`RunError::ResumeValue`] when the value given on
    /// resume does not deserialize into `T`.
    ///
    /// # Examples
    ///
    /// ```
    /// use loomflow::prelude::*;
    ///
    /// #[derive(Clone, Default, Serialize, Deserialize)]
    /// struct Draft { text: String, approved: bool }
    ///
    /// #[node]
    /// async fn review(state: &mut Draft, ctx: &Context) -> loomflow::Result<()> {
    ///     state.approved = ctx.interrupt::<bool>(json!({ "question": "publish?", "text": state.text }))?;
    ///     Ok(())
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
    /// let graph = Graph::new("g").node(review).edge(START, "review").edge("review", END).compile()?;
    /// let runtime = Runtime::in_memory();
    /// let outcome = graph.invoke(&runtime, "t1", Draft::default()).await?;
    /// assert!(matches!(outcome, RunOutcome::Interrupted { .. }));
    ///
    /// let done = graph.resume(&runtime, "t1", true).await?.completed()?;
    /// assert!(done.approved);
    /// # Ok(()) }
    /// ```
    pub fn interrupt<T: DeserializeOwned>(&self, payload: impl Serialize) -> Result<T> {
        let mut control = self.control();
        let index = control.interrupts_called;
        control.interrupts_called += 1;
        if let Some(value) = self.resume.get(index) {
            let bad = |source| RunError::ResumeValue {
                node: self.qualified_node().into_owned(),
                index,
                expected: crate::type_name::readable::<T>(),
                source,
            };
            return T::deserialize(value).map_err(|source| {
                if control.bad_resume.is_none()
                    && let Err(again) = T::deserialize(value)
                {
                    control.bad_resume = Some(bad(again));
                }
                bad(source)
            });
        }
        if control.suspension.is_empty() {
            let unwritable =
                |e| RunError::json(format!("interrupt payload of node {}", self.node), e);
            let payload = serde_json::to_value(payload).map_err(unwritable)?;
            // Kept in the checkpoint's body, inside its list of interrupts: refused here,
            // whichever store the run uses, rather than when a durable store writes it.
            if !crate::json_depth::value_fits(&payload, 3) {
                return Err(unwritable(crate::json_depth::too_deep()));
            }
            control.suspension.push(Interrupt {
                id: crate::numbered::numbered(&self.qualified_node(), index as u64),
                node: String::from(&*self.node),
                index,
                payload,
                signal: None,
                wake_at_ms: None,
            });
        }
        Err(RunError::Suspended {
            node: String::from(&*self.node),
        })
    }

    /// Queues an audit entry: it is written with the node's next journaled step, or with the
    /// step's checkpoint.
    pub(crate) fn record_audit(&self, entry: AuditEntry) {
        self.run.record_audit(entry);
    }

    /// The thread (session) the run belongs to.
    pub fn thread(&self) -> &str {
        &self.run.thread
    }

    /// The running node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The run's number within its thread, from 1.
    pub fn run_number(&self) -> u64 {
        self.run.run
    }

    /// The superstep, counted from 1.
    pub fn superstep(&self) -> u64 {
        self.step
    }

    /// The checkpoint namespace: empty at the top level; inside a subgraph, the subgraph
    /// node's name and the parent's superstep, `parent:3`, nested as `outer:2/inner:1`. Each
    /// invocation of a subgraph has its own, so journaled steps never leak between them.
    pub fn namespace(&self) -> &str {
        self.run.namespace.as_str()
    }

    /// The run's namespace, for a subgraph run started by this node.
    pub(crate) fn run_namespace(&self) -> &Namespace {
        &self.run.namespace
    }

    /// The runtime the run is on.
    pub fn runtime(&self) -> &Runtime {
        &self.run.runtime
    }

    /// Surfaces a custom event on the run's stream and to `tracing`.
    ///
    /// A payload that cannot be serialized is sent as `null` and logged. It never waits,
    /// not even for a bounded stream's reader: a node that emits many events waits for
    /// [`event_room`](Self::event_room) before each.
    ///
    /// # Examples
    ///
    /// ```
    /// use loomflow::prelude::*;
    ///
    /// #[node]
    /// async fn fetch(state: &mut Vec<u32>, ctx: &Context) -> loomflow::Result<()> {
    ///     ctx.emit("progress", json!({ "done": state.len() }));
    ///     Ok(())
    /// }
    ///
    /// let graph = Graph::new("g").node(fetch).edge(START, "fetch").edge("fetch", END);
    /// # let _ = graph;
    /// ```
    pub fn emit(&self, name: impl Into<String>, data: impl Serialize) {
        let name = name.into();
        let data = serde_json::to_value(data).unwrap_or_else(|error| {
            tracing::warn!(node = %self.node, event = %name, %error, "event payload did not serialize");
            serde_json::Value::Null
        });
        tracing::debug!(node = %self.node, step = self.step, event = %name, %data, "custom event");
        self.run.emit(
            self.step,
            Some(&self.node),
            EventKind::Custom { name, data },
        );
    }
}
