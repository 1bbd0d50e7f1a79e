//! Starting runs and collecting their outcomes: [`RunBuilder`], [`RunHandle`], [`RunStream`].

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use futures_core::Stream;
use tokio::task::JoinHandle;

use crate::event::{Event, EventReceiver, EventSink};
use crate::graph::State;
use crate::graph::compiled::CompiledGraph;
use crate::graph::error::RunError;
use crate::graph::executor::{Execution, Start, execute};
use crate::graph::namespace::Namespace;
use crate::runtime::{Durability, Interrupt, Runtime};

type Result<T, E = RunError> = std::result::Result<T, E>;

/// How a run ended.
#[derive(Debug)]
#[non_exhaustive]
pub enum RunOutcome<S> {
    /// The run reached `END` on every path.
    Completed(S),
    /// One or more nodes suspended the run with `ctx.interrupt`. `state` is the state the
    /// suspended superstep began with; resume with
    /// [`CompiledGraph::resume`](crate::CompiledGraph::resume).
    Interrupted {
        /// The state the suspended step began with.
        state: S,
        /// What the nodes asked, with the ids to resume them by.
        interrupts: Vec<Interrupt>,
    },
    /// A node failed (returned an error, panicked), or the recursion limit was hit. `state` is
    /// the last good state: the one the failed superstep started from.
    Failed {
        /// The last good state.
        state: S,
        /// What went wrong.
        error: RunError,
    },
}

impl<S> RunOutcome<S> {
    /// The final state, or the last good one.
    pub fn state(&self) -> &S {
        match self {
            Self::Completed(state)
            | Self::Interrupted { state, .. }
            | Self::Failed { state, .. } => state,
        }
    }

    /// Consumes the outcome, returning the final or last good state.
    pub fn into_state(self) -> S {
        match self {
            Self::Completed(state)
            | Self::Interrupted { state, .. }
            | Self::Failed { state, .. } => state,
        }
    }

    /// The pending interrupts of a suspended run; empty otherwise.
    pub fn interrupts(&self) -> &[Interrupt] {
        match self {
            Self::Interrupted { interrupts, .. } => interrupts,
            _ => &[],
        }
    }

    /// Whether the run completed.
    pub fn is_completed(&self) -> bool {
        matches!(self, Self::Completed(_))
    }

    /// The final state of a completed run.
    ///
    /// # Errors
    ///
    /// The run's error when it did not complete.
    pub fn completed(self) -> Result<S> {
        match self {
            Self::Completed(state) => Ok(state),
            Self::Interrupted { interrupts, .. } => Err(RunError::Suspended {
                node: interrupts
                    .iter()
                    .map(|i| i.node.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
            Self::Failed { error, .. } => Err(error),
        }
    }
}

/// A run being configured: set options, then `.await` it, [`start`](RunBuilder::start) it in
/// the background, or [`stream`](RunBuilder::stream) its events.
///
/// # Examples
///
/// ```
/// use loomflow::prelude::*;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
/// let graph = Graph::new("loop")
///     .node_sync("inc", |n: &mut u64| *n += 1)
///     .edge(START, "inc")
///     .branch("inc", ["inc", END], |n: &u64| if *n < 40 { "inc" } else { END })
///     .compile()?;
/// let runtime = Runtime::in_memory();
///
/// // 40 supersteps is over the default limit of 25:
/// assert!(!graph.invoke(&runtime, "a", 0).await?.is_completed());
/// let outcome = graph.run(&runtime, "b", 0).recursion_limit(50).await?;
/// assert_eq!(outcome.completed()?, 40);
/// # Ok(()) }
/// ```
#[must_use = "a run does nothing until it is awaited, started or streamed"]
pub struct RunBuilder<S> {
    graph: CompiledGraph<S>,
    runtime: Runtime,
    thread: String,
    start: Start<S>,
    recursion_limit: Option<u64>,
    durability: Option<Durability>,
    allow_graph_change: bool,
    wait_if_busy: Option<Duration>,
}

impl<S> std::fmt::Debug for RunBuilder<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunBuilder")
            .field("graph", &self.graph.inner.name)
            .field("thread", &self.thread)
            .field("recursion_limit", &self.recursion_limit)
            .field("durability", &self.durability)
            .field("wait_if_busy", &self.wait_if_busy)
            .finish_non_exhaustive()
    }
}

impl<S: State> RunBuilder<S> {
    pub(crate) fn new(
        graph: CompiledGraph<S>,
        runtime: Runtime,
        thread: String,
        start: Start<S>,
    ) -> Self {
        Self {
            graph,
            runtime,
            thread,
            start,
            recursion_limit: None,
            durability: None,
            allow_graph_change: false,
            wait_if_busy: None,
        }
    }

    /// Lets a resume or recover carry on from checkpoints written by a graph whose
    /// structure has changed since (nodes, edges, branches, joins). Without it such a run is
    /// refused with [`RunError::GraphChanged`], which names what changed. Use it when the
    /// change is known to be compatible (a node added after where the run stands, say).
    pub fn allow_graph_change(mut self) -> Self {
        self.allow_graph_change = true;
        self
    }

    /// Overrides the graph's recursion limit (supersteps) for this run. A limit of 0 stops
    /// the run before its first step, with
    /// [`RunError::RecursionLimit`](crate::graph::RunError::RecursionLimit).
    ///
    /// The limit counts the supersteps of one execution of this graph. A subgraph node
    /// keeps the limit its own graph was compiled with ([`Graph::recursion_limit`]): an
    /// agent or a multi-agent shape derives its limit from its own settings (turns, rounds),
    /// which an override meant for the outer graph should not change.
    ///
    /// [`Graph::recursion_limit`]: crate::graph::Graph::recursion_limit
    pub fn recursion_limit(mut self, limit: u64) -> Self {
        self.recursion_limit = Some(limit);
        self
    }

    /// Overrides the runtime's durability mode for this run.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = Some(durability);
        self
    }

    /// When another execution holds the thread's run, waits up to `max` for it to let go
    /// (polling with a short backoff), then goes on as if it had come after it:
    /// [`recover`](crate::graph::CompiledGraph::recover) carries on from wherever that
    /// execution left the run (a caller that loses the race gets the current outcome);
    /// [`run`](crate::graph::CompiledGraph::run) starts a new run of the thread from its
    /// input, as it would have after it; a resume goes to the run as the other execution
    /// left it: [`RunError::NotInterrupted`] once it finished, or, suspended again, the new
    /// question answered by a plain `resume` (one by id is refused with
    /// [`RunError::UnknownInterrupt`]). To have two callers share one execution of a run,
    /// both use `recover(..).wait_if_busy(..)`.
    ///
    /// Without it (the default), a busy thread fails the run at once with
    /// [`RunError::Busy`]. A holder that crashed lets go when its lease expires (see
    /// [`RuntimeBuilder::lease`](crate::runtime::RuntimeBuilder::lease)).
    pub fn wait_if_busy(mut self, max: Duration) -> Self {
        self.wait_if_busy = Some(max);
        self
    }

    pub(crate) fn into_execution(self, events: Option<EventSink>) -> Execution<S> {
        let limit = self
            .recursion_limit
            .unwrap_or(self.graph.inner.recursion_limit);
        let durability = self.durability.unwrap_or(self.runtime.durability());
        Execution {
            graph: self.graph,
            thread: Arc::from(self.thread),
            runtime: self.runtime,
            events,
            namespace: Namespace::root(),
            start: self.start,
            recursion_limit: limit,
            durability,
            allow_graph_change: self.allow_graph_change,
            claim: None,
            wait_if_busy: self.wait_if_busy,
        }
    }

    /// Runs in a background task; await the handle for the outcome.
    pub fn start(self) -> RunHandle<S> {
        let execution = self.into_execution(None);
        RunHandle::spawn(execution)
    }

    /// Runs in a background task and yields its events as they happen.
    ///
    /// Dropping the stream (or the future of its [`outcome`](RunStream::outcome)) aborts the
    /// run's task: the run stops where it is, as in a crash. Its newest checkpoint stays, and
    /// a [`Worker`](crate::Worker) or a `recover` carries it on;
    /// [`Runtime::cancel`](crate::Runtime::cancel) ends it for good.
    pub fn stream(self) -> RunStream<S> {
        self.stream_with(None)
    }

    /// Like [`stream`](Self::stream), with backpressure: when `capacity` events wait unread,
    /// the run waits before its next superstep and before each streamed model chunk, so a
    /// slow reader slows the run down instead of letting events pile up in memory. A
    /// [`cancel`](crate::Runtime::cancel) does not wait for the reader: the run stops.
    pub fn stream_bounded(self, capacity: usize) -> RunStream<S> {
        self.stream_with(Some(capacity))
    }

    fn stream_with(self, capacity: Option<usize>) -> RunStream<S> {
        let (tx, rx) = EventSink::new(capacity);
        let execution = self.into_execution(Some(tx));
        RunStream {
            events: rx,
            handle: Some(RunHandle::spawn(execution)),
            finished: None,
        }
    }
}

impl<S: State> IntoFuture for RunBuilder<S> {
    type Output = Result<RunOutcome<S>>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(execute(self.into_execution(None)))
    }
}

/// A run going on in a background task. Await it for the outcome.
#[must_use = "dropping the handle detaches the run; await it for the outcome"]
pub struct RunHandle<S> {
    thread: String,
    task: JoinHandle<Result<RunOutcome<S>>>,
}

impl<S> std::fmt::Debug for RunHandle<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHandle")
            .field("thread", &self.thread)
            .field("finished", &self.task.is_finished())
            .finish_non_exhaustive()
    }
}

impl<S: State> RunHandle<S> {
    fn spawn(execution: Execution<S>) -> Self {
        Self {
            thread: execution.thread.to_string(),
            task: tokio::spawn(execute(execution)),
        }
    }

    /// Stops the run at its next await point.
    ///
    /// The run lets go of its claim on the thread as its task is torn down, which happens
    /// shortly after this returns: a start or recover on the same thread issued right away
    /// may still find it busy (use [`RunBuilder::wait_if_busy`]).
    pub fn abort(&self) {
        self.task.abort();
    }
}

impl<S> Future for RunHandle<S> {
    type Output = Result<RunOutcome<S>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.task)
            .poll(cx)
            .map(|joined| match joined {
                Ok(result) => result,
                Err(error) if error.is_panic() => Err(RunError::TaskPanicked {
                    thread: self.thread.clone(),
                    message: crate::sync::panic_message(&*error.into_panic()),
                }),
                Err(_) => Err(RunError::Cancelled {
                    thread: self.thread.clone(),
                }),
            })
    }
}

/// The events of a run as they happen; see [`RunBuilder::stream`].
///
/// The stream ends when the run's task does: after its `Done` or `Error` event, after the
/// `Interrupt` events of a suspension, and with no event of its own when the run could not
/// start or carry on (its thread busy, a store failure, a refused resume). Then
/// [`outcome`](RunStream::outcome) gives the result.
pub struct RunStream<S> {
    events: EventReceiver,
    handle: Option<RunHandle<S>>,
    /// The run's result, once the stream saw its task end: a clone of a context (a tool's
    /// spawned task) may hold the events' channel open long after, and the stream ends with
    /// the run, not with the channel.
    finished: Option<Box<Result<RunOutcome<S>>>>,
}

impl<S> std::fmt::Debug for RunStream<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunStream")
            .field("run", &self.handle)
            .finish_non_exhaustive()
    }
}

impl<S> RunStream<S> {
    /// Waits for the run to finish and returns its outcome (events not yet read are dropped).
    ///
    /// # Errors
    ///
    /// As for awaiting the run.
    pub async fn outcome(mut self) -> Result<RunOutcome<S>> {
        // Nobody reads on: a bounded stream must not hold the run back.
        self.events.close();
        if let Some(finished) = self.finished.take() {
            return *finished;
        }
        // Awaited in place: this future dropped part-way (a timeout around it) drops the
        // stream, which aborts the run, rather than leaving it to run on unwatched.
        let outcome = match self.handle.as_mut() {
            Some(handle) => handle.await,
            None => Err(RunError::Internal {
                problem: "run outcome was already taken",
            }),
        };
        self.handle = None;
        outcome
    }
}

impl<S> Drop for RunStream<S> {
    fn drop(&mut self) {
        if let Some(handle) = &self.handle {
            handle.task.abort();
        }
    }
}

impl<S> Stream for RunStream<S> {
    type Item = Event;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Event>> {
        let this = &mut *self;
        if let Poll::Ready(event) = this.events.poll_recv(cx) {
            return Poll::Ready(event);
        }
        if this.finished.is_none() {
            let Some(handle) = this.handle.as_mut() else {
                return Poll::Ready(None);
            };
            let Poll::Ready(result) = Pin::new(handle).poll(cx) else {
                return Poll::Pending;
            };
            this.handle = None;
            this.finished = Some(Box::new(result));
        }
        // The run is over: what it sent before it ended is read first.
        Poll::Ready(this.events.try_recv())
    }
}

impl<S: State> CompiledGraph<S> {
    /// Executes a run under a claim already taken in the store (a worker's): from `input`
    /// for a new run, else on from the thread's newest checkpoint.
    pub(crate) async fn run_claimed(
        &self,
        runtime: &Runtime,
        thread: String,
        input: Option<S>,
        (claim, allow_graph_change): (crate::runtime::claim::RunClaim, bool),
    ) -> Result<RunOutcome<S>> {
        let start = match input {
            Some(input) => Start::Fresh(input),
            None => Start::Recover,
        };
        let mut builder = RunBuilder::new(self.clone(), runtime.clone(), thread, start);
        builder.allow_graph_change = allow_graph_change;
        let mut execution = builder.into_execution(None);
        execution.claim = Some(claim);
        // A graph with a span of its own (an agent's `invoke_agent`) has it around a run a
        // worker carries on too, as around one its own API starts.
        let Some(embedded) = &self.inner.embedded_span else {
            return execute(execution).await;
        };
        let span = (embedded.make)(&execution.thread);
        let ran =
            tracing::Instrument::instrument(span.in_scope(|| execute(execution)), span.clone())
                .await;
        match &ran {
            Ok(RunOutcome::Failed { error, .. }) => (embedded.failed)(&span, error),
            Err(RunError::Cancelled { .. } | RunError::Yielded { .. }) | Ok(_) => {}
            Err(error) => (embedded.failed)(&span, error),
        }
        ran
    }

    /// Configures a run of this graph on `thread`, starting from `input`.
    pub fn run(&self, runtime: &Runtime, thread: impl Into<String>, input: S) -> RunBuilder<S> {
        RunBuilder::new(
            self.clone(),
            runtime.clone(),
            thread.into(),
            Start::Fresh(input),
        )
    }

    /// Resumes a thread suspended on exactly one interrupt that takes a value, giving it
    /// `value` (its siblings' waits for a signal or a timer, if any, go on waiting).
    ///
    /// The interrupted node runs again from its start; its `ctx.interrupt` call returns
    /// `value`, deserialized into the type it asks for. Siblings that finished in the
    /// suspended superstep are not run again. Configure or `.await` the returned builder.
    ///
    /// Errors surface when the run is awaited: [`RunError::Busy`] (another execution holds
    /// the run; see [`recover`](Self::recover)), [`RunError::UnknownThread`],
    /// [`RunError::NotInterrupted`], [`RunError::AmbiguousResume`] (several interrupts that
    /// take a value are pending: use [`resume_with`](Self::resume_with)),
    /// [`RunError::WaitsForSignal`] or [`RunError::WaitsForTimer`] (the only interrupt
    /// pending waits for one), [`RunError::UnserializableResume`]
    /// (`value` does not serialize), [`RunError::ResumeValue`] (it does not deserialize into
    /// the type the node asks for); each leaves the checkpoint as it was.
    pub fn resume(
        &self,
        runtime: &Runtime,
        thread: impl Into<String>,
        value: impl serde::Serialize,
    ) -> RunBuilder<S> {
        let value = serde_json::to_value(value);
        RunBuilder::new(
            self.clone(),
            runtime.clone(),
            thread.into(),
            Start::ResumeOne(value),
        )
    }

    /// Resumes some or all of a thread's pending interrupts, by id.
    ///
    /// Interrupts not given a value suspend again when their node re-runs. Errors surface
    /// when the run is awaited, as for [`resume`](Self::resume); a value that does not
    /// serialize is [`RunError::UnserializableResume`] naming its interrupt.
    pub fn resume_with<I, K, V>(
        &self,
        runtime: &Runtime,
        thread: impl Into<String>,
        values: I,
    ) -> RunBuilder<S>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: serde::Serialize,
    {
        let values = values
            .into_iter()
            .map(|(id, v)| (id.into(), serde_json::to_value(v)))
            .collect();
        RunBuilder::new(
            self.clone(),
            runtime.clone(),
            thread.into(),
            Start::Resume(values),
        )
    }

    /// Carries on a thread's newest run from its newest checkpoint: after a crash, after a
    /// failed step (which is retried), on a thread forked with
    /// [`Runtime::fork`](crate::Runtime::fork), or once the signal a suspended run waits
    /// for has been sent.
    ///
    /// Where the run stands decides what happens:
    /// - completed: returns its final state, running nothing;
    /// - suspended on a signal wait (`wait_for_signal(..).or_suspend()`): runs the waiting
    ///   node again, from its start; its wait returns the signal if it has arrived, or the
    ///   run suspends again;
    /// - suspended on [`interrupt`](crate::Context::interrupt)s only: returns them, running
    ///   nothing (answer them with [`resume`](Self::resume)). But a subgraph that took an
    ///   answer and asked again in a step its parent never wrote (the process died first)
    ///   runs again, so that the run suspends on what it asks now;
    /// - running (its process crashed) or failed: runs on from the newest checkpoint;
    ///   finished supersteps and journaled steps are not run again.
    ///
    /// A plain wait or sleep (without `or_suspend`) that a [`Worker`](crate::Worker)
    /// suspended waits in memory when a recover outside any worker carries it on, as it
    /// does in any direct run: the recover returns once the signal comes or the time is
    /// due, holding the thread's claim meanwhile.
    ///
    /// # Concurrency
    ///
    /// At most one execution carries a run on at a time, across processes: a recover (like
    /// every start and resume) claims the thread before it reads the checkpoint, and holds
    /// the claim until it stops. When another execution holds it, awaiting the run fails at
    /// once with [`RunError::Busy`], naming the holder and when its lease ends; with
    /// [`RunBuilder::wait_if_busy`] it waits for the claim instead and returns the outcome
    /// the run has reached. So two processes recovering one thread at once never run a
    /// step twice, pay twice, or both receive one signal. A process that crashed holds its
    /// claim until its lease expires (see
    /// [`RuntimeBuilder::lease`](crate::runtime::RuntimeBuilder::lease), 30 s by default).
    ///
    /// # Examples
    ///
    /// ```
    /// use loomflow::RunError;
    /// use loomflow::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
    /// let graph = Graph::new("g").node_sync("inc", |n: &mut u64| *n += 1)
    ///     .edge(START, "inc").edge("inc", END).compile()?;
    /// let runtime = Runtime::in_memory();
    /// graph.invoke(&runtime, "t", 1).await?;
    ///
    /// match graph.recover(&runtime, "t").await {
    ///     Ok(outcome) => assert_eq!(outcome.completed()?, 2),
    ///     Err(RunError::Busy { owner, until, .. }) => println!("{owner} runs it until {until:?}"),
    ///     Err(other) => return Err(other.into()),
    /// }
    /// // Or wait for whoever runs it, and take the outcome it reached:
    /// let outcome = graph.recover(&runtime, "t").wait_if_busy(Duration::from_secs(60)).await?;
    /// assert_eq!(outcome.completed()?, 2);
    /// # Ok(()) }
    /// ```
    pub fn recover(&self, runtime: &Runtime, thread: impl Into<String>) -> RunBuilder<S> {
        RunBuilder::new(self.clone(), runtime.clone(), thread.into(), Start::Recover)
    }

    /// Runs to the end in the current task.
    ///
    /// # Errors
    ///
    /// Store failures. A failing node is not an `Err`: it is [`RunOutcome::Failed`], which
    /// keeps the last good state.
    pub async fn invoke(
        &self,
        runtime: &Runtime,
        thread: impl Into<String>,
        input: S,
    ) -> Result<RunOutcome<S>> {
        // Awaited in place rather than through `RunBuilder`'s boxed future.
        execute(self.run(runtime, thread, input).into_execution(None)).await
    }

    /// Runs in a background task; await the returned handle for the outcome.
    pub fn start(&self, runtime: &Runtime, thread: impl Into<String>, input: S) -> RunHandle<S> {
        self.run(runtime, thread, input).start()
    }

    /// Runs in a background task and streams its events.
    pub fn stream(&self, runtime: &Runtime, thread: impl Into<String>, input: S) -> RunStream<S> {
        self.run(runtime, thread, input).stream()
    }
}
