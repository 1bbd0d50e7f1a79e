//! The [`Worker`]: owns runs and carries them on by itself.
//!
//! A worker registers compiled graphs by name and, in a loop, claims from the store the runs
//! of those graphs that should go on now, and executes each until it completes or suspends:
//! - runs submitted with [`Runtime::submit`] (from any process on the store);
//! - suspended runs whose signal arrived;
//! - suspended runs whose timer ([`Context::sleep`](crate::Context::sleep)) or deadline is due;
//! - runs whose lease expired because the process executing them died. Finished supersteps
//!   and journaled steps are not run again. A run whose executions died this way three
//!   times in a row, without writing a step between, is failed rather than run a fourth
//!   time: it would likely take the next worker down too (see
//!   [`WorkerBuilder::max_lapses`]).
//!
//! Claims are the same leases every execution takes (see
//! [`RuntimeBuilder::lease`](crate::runtime::RuntimeBuilder::lease)): at most one execution
//! of a run at a time, across workers, processes and direct calls such as `recover`; a worker
//! that lost its lease stops without writing. A run whose execution panics outside a node's
//! body (in its state's `Deserialize`, say) is failed, the panic named in its error, and let
//! go; a node's own panic fails the run as any error of the node does.
//!
//! # Waiting costs nothing
//!
//! In a run a worker executes, a [`wait_for_signal`](crate::Context::wait_for_signal) with
//! nothing to receive parks in memory for a short grace ([`WorkerBuilder::park_grace`],
//! default 50 ms), then suspends the run: nothing is held in memory or in a task while it
//! waits. A wait's `.timeout(d)` is stored as a deadline, at which the worker carries the run
//! on and the wait returns [`SignalError::Timeout`](crate::SignalError::Timeout). A sleep
//! longer than the grace suspends the run until it is due.
//!
//! # Wake-ups
//!
//! A signal or a submit in the worker's own process wakes it at once, and wakes only a run
//! that waits for that signal's name; on PostgreSQL, so does another process's
//! (`LISTEN/NOTIFY`). Every worker of the process hears of it, so several workers, each with
//! graphs of its own, each carry on the runs of theirs. On the memory store, which keeps
//! signals only in the process's mailbox, a worker also looks there, the first time it looks
//! for work, for the runs signalled before it was built (while no worker existed).
//! Otherwise another process's write is noticed by polling a cheap change counter of the
//! store (SQLite's `PRAGMA data_version`) every
//! [`poll_interval`](WorkerBuilder::poll_interval) (default 100 ms): an idle worker costs
//! one such probe per interval, whatever the number of waiting runs; it queries for work
//! only when something changed, a timer is due, or half a lease has passed (a lease running
//! out changes nothing in the store).
//!
//! Timers and wait deadlines wake the worker when they are due, whatever the poll interval:
//! it naps no longer than until the earliest it knows of, those of the runs it suspended and
//! those the store held when it last looked for work (a timer another process sets is known
//! from the look its write prompts: at once on PostgreSQL, within the poll interval
//! otherwise).
//!
//! A store that fails a claim (a locked SQLite file past its busy timeout, a PostgreSQL
//! server that restarts) is tried again within a second, or the poll interval if shorter,
//! and the failure is logged (`tracing`, at `warn`).

mod handle;
mod lapsed;
mod nap;
mod panicked;
mod registry;
mod running;
mod serve;
mod untried;

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::watch;

use crate::graph::{CompiledGraph, State};
use crate::runtime::claim::RunClaim;
use crate::runtime::clock::{now_ms, unix_ms};
use crate::runtime::wakes::WakeInbox;
use crate::runtime::{ClaimedRun, Runtime, RuntimeError};

pub use handle::WorkerHandle;
pub use lapsed::DEFAULT_MAX_LAPSES;
use registry::Registered;
pub use registry::RunReport;
use serve::serve;
use untried::Untried;

/// How soon a worker tries its store again after a claim (or the read of the next wake time)
/// failed, at most: sooner if its poll interval is shorter.
const STORE_RETRY: Duration = Duration::from_secs(1);

type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// How long a wait with nothing to receive parks in memory, by default, before it suspends
/// the run.
pub const DEFAULT_PARK_GRACE: Duration = Duration::from_millis(50);

type OnFinished = Box<dyn Fn(&RunReport) + Send + Sync>;

/// Configures a [`Worker`]; see [`Worker::builder`].
#[must_use]
pub struct WorkerBuilder {
    runtime: Runtime,
    graphs: HashMap<String, Arc<dyn Registered>>,
    concurrency: usize,
    poll_interval: Duration,
    park_grace: Duration,
    lease: Option<Duration>,
    shutdown_timeout: Duration,
    max_lapses: Option<u32>,
    on_finished: Option<OnFinished>,
    allow_graph_change: bool,
}

impl std::fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("graphs", &self.graphs.keys().collect::<Vec<_>>())
            .field("concurrency", &self.concurrency)
            .field("poll_interval", &self.poll_interval)
            .field("park_grace", &self.park_grace)
            .finish_non_exhaustive()
    }
}

impl WorkerBuilder {
    /// Registers `graph` under its name ([`CompiledGraph::name`]): the worker runs the runs
    /// of that name. A second graph of the same name replaces the first, with a warning.
    pub fn graph<S: State>(mut self, graph: &CompiledGraph<S>) -> Self {
        let name = graph.name().to_owned();
        if self.graphs.insert(name, Arc::new(graph.clone())).is_some() {
            tracing::warn!(graph = graph.name(), "a graph of this name is replaced");
        }
        self
    }

    /// How many runs execute at once (default 16; at least 1).
    pub fn concurrency(mut self, runs: usize) -> Self {
        self.concurrency = runs.max(1);
        self
    }

    /// How often to check the store for what other processes wrote (default: the runtime's
    /// [`poll_interval`](crate::runtime::RuntimeBuilder::poll_interval), 100 ms): the
    /// longest a run that another process made runnable waits before the worker sees it.
    /// Timers and wait deadlines the worker knows of fire when due, not at the next poll
    /// (see [Wake-ups](crate::worker#wake-ups)).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// How long a wait with nothing to receive parks in memory before it suspends the run
    /// (default 50 ms); a sleep longer than this suspends at once. Zero suspends at once.
    pub fn park_grace(mut self, grace: Duration) -> Self {
        self.park_grace = grace;
        self
    }

    /// The lease of the worker's claims (default: the runtime's, 30 s). Heartbeats renew it
    /// every third of its length; a worker that dies lets its runs go once it runs out.
    /// Bounded as [`RuntimeBuilder::lease`](crate::runtime::RuntimeBuilder::lease) bounds it.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(crate::runtime::claim::bounded_lease(lease));
        self
    }

    /// How long [`WorkerHandle::shutdown`] lets running runs reach their next stop before
    /// aborting them (default 30 s). An aborted run's lease is released, or runs out.
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// Fails a run rather than run it again once this many executions in a row lost its
    /// lease without letting it go (default [`DEFAULT_MAX_LAPSES`], 3): each one's process
    /// died while it ran (a crash, an abort, running out of memory) or stopped renewing.
    /// Such a run, run again, would likely take the next worker down too, and the one after
    /// that. A lapse is counted when another execution takes the run over after the lease
    /// ran out ([`RunRecord::lapses`](crate::runtime::RunRecord::lapses)); writing a step
    /// or a journal entry, or letting the run go (a graceful shutdown hands it back), counts
    /// from 0 again. The failed run keeps its checkpoints: `recover` carries it on (a run
    /// that had written none, in [`Durability::Exit`](crate::runtime::Durability::Exit)
    /// before its first step, has nothing to carry on: submit it again). At least 1; `None`
    /// runs it again however often its executions die.
    pub fn max_lapses(mut self, lapses: Option<u32>) -> Self {
        self.max_lapses = lapses.map(|lapses| lapses.max(1));
        self
    }

    /// Carries on runs whose checkpoints a graph of another structure wrote (a deploy that
    /// changed a registered graph), as
    /// [`RunBuilder::allow_graph_change`](crate::RunBuilder::allow_graph_change) does for
    /// one run. Off by default: such a run then fails with
    /// [`RunError::GraphChanged`](crate::RunError::GraphChanged), naming what changed, and
    /// `recover(..).allow_graph_change()` carries it on. Turn it on for a change known to
    /// be compatible with every waiting run (a node added after where they stand).
    pub fn allow_graph_change(mut self, allow: bool) -> Self {
        self.allow_graph_change = allow;
        self
    }

    /// Called after each execution the worker makes, with how it ended: to log, to count,
    /// to print `completed <thread>`.
    pub fn on_finished(mut self, f: impl Fn(&RunReport) + Send + Sync + 'static) -> Self {
        self.on_finished = Some(Box::new(f));
        self
    }

    /// Builds the worker.
    pub fn build(self) -> Worker {
        let mut names: Vec<String> = self.graphs.keys().cloned().collect();
        names.sort();
        // From now on, this process's signals and submits tell the worker.
        let wakes = self.runtime.wakes().listen();
        Worker {
            inner: Arc::new(WorkerInner {
                lease: self.lease.unwrap_or(self.runtime.lease()),
                runtime: self.runtime,
                graphs: self.graphs,
                names,
                concurrency: self.concurrency,
                poll_interval: self.poll_interval,
                park_grace: self.park_grace,
                shutdown_timeout: self.shutdown_timeout,
                max_lapses: self.max_lapses,
                on_finished: self.on_finished,
                allow_graph_change: self.allow_graph_change,
                looked: AtomicBool::new(false),
                wakes,
            }),
        }
    }
}

/// Claims runs from the store and carries them on. Cheap to clone.
///
/// Run it in the background with [`start`](Self::start), or, in tests and single-process
/// apps, in the caller's task with [`run_until_idle`](Self::run_until_idle) (the inline
/// mode: the same claims and semantics, nothing running in the background).
///
/// # Examples
///
/// ```
/// use loomflow::prelude::*;
/// use loomflow::runtime::RunState;
///
/// #[derive(Clone, Default, Serialize, Deserialize)]
/// struct Refund { approved: bool }
///
/// #[node]
/// async fn approval(state: &mut Refund, ctx: &Context) -> loomflow::Result<()> {
///     state.approved = ctx.wait_for_signal("approve").await?;
///     Ok(())
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
/// let graph = Graph::new("refund")
///     .node(approval)
///     .edge(START, "approval")
///     .edge("approval", END)
///     .compile()?;
/// let runtime = Runtime::in_memory();
/// let worker = Worker::builder(&runtime).graph(&graph).build();
///
/// runtime.submit("refund", "order-7", Refund::default()).await?;
/// worker.run_until_idle().await?;           // starts it; it suspends, waiting
/// assert_eq!(runtime.run("order-7").await?.record.state, RunState::Waiting);
///
/// runtime.signal("order-7", "approve", true).await?;
/// worker.run_until_idle().await?;           // the signal wakes it
/// assert_eq!(runtime.run("order-7").await?.record.state, RunState::Completed);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Worker {
    inner: Arc<WorkerInner>,
}

struct WorkerInner {
    runtime: Runtime,
    graphs: HashMap<String, Arc<dyn Registered>>,
    /// The registered names, for store queries.
    names: Vec<String>,
    concurrency: usize,
    poll_interval: Duration,
    park_grace: Duration,
    lease: Duration,
    shutdown_timeout: Duration,
    max_lapses: Option<u32>,
    on_finished: Option<OnFinished>,
    allow_graph_change: bool,
    /// Whether it has looked in the mailbox for the runs signalled before it listened.
    looked: AtomicBool,
    /// This process's signals and submits, as they reach this worker.
    wakes: Arc<WakeInbox>,
}

impl Drop for WorkerInner {
    fn drop(&mut self) {
        self.runtime.wakes().unlisten(&self.wakes);
    }
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("graphs", &self.inner.names)
            .field("concurrency", &self.inner.concurrency)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// Configures a worker on `runtime` (its store, clock and lease).
    pub fn builder(runtime: &Runtime) -> WorkerBuilder {
        WorkerBuilder {
            runtime: runtime.clone(),
            graphs: HashMap::new(),
            concurrency: 16,
            poll_interval: runtime.poll_interval(),
            park_grace: DEFAULT_PARK_GRACE,
            lease: None,
            shutdown_timeout: Duration::from_secs(30),
            max_lapses: Some(DEFAULT_MAX_LAPSES),
            on_finished: None,
            allow_graph_change: false,
        }
    }

    /// The names of the graphs it runs, sorted.
    pub fn graphs(&self) -> &[String] {
        &self.inner.names
    }

    /// Runs the worker in a background task until [`WorkerHandle::shutdown`].
    ///
    /// Must be called within a tokio runtime.
    pub fn start(&self) -> WorkerHandle {
        let (stop, stopped) = watch::channel(false);
        let inner = Arc::clone(&self.inner);
        WorkerHandle {
            stop,
            task: Some(tokio::spawn(serve(inner, stopped))),
        }
    }

    /// The inline mode: claims and executes, in the caller's task, every run that can go on
    /// now, one after another, until none is left; returns how many executions it made.
    ///
    /// Signals sent and runs submitted before the call are seen; so are timers due by the
    /// runtime's clock. Waits still park for the grace before suspending.
    ///
    /// # Errors
    ///
    /// A store failure while looking for work (a run's own failure is recorded on the run).
    /// The signalled runs it had not tried yet are tried by the next call.
    pub async fn run_until_idle(&self) -> Result<usize> {
        let inner = &self.inner;
        let mut executed = 0;
        inner.runtime.prune_if_due().await;
        // Threads signalled in this process not tried yet, with the signals' names: taking
        // them empties the list, and on a store that keeps no signals nothing else finds
        // their runs. Given back however the call ends (an error, a caller that stops
        // waiting), for the next call.
        let mut signalled = Untried::new(&inner.wakes);
        loop {
            let Some((run, claim)) = inner.next_run(&mut signalled).await? else {
                return Ok(executed);
            };
            inner.execute(run, claim).await;
            executed += 1;
        }
    }
}

/// Gives back what a look for unrecorded signals took, unless it finished.
struct LookAgain<'a> {
    inner: &'a WorkerInner,
    first: bool,
    overflowed: bool,
}

impl Drop for LookAgain<'_> {
    fn drop(&mut self) {
        if self.first {
            self.inner.looked.store(false, Ordering::Release);
        }
        if self.overflowed {
            self.inner.wakes.put_back_overflowed();
        }
    }
}

impl WorkerInner {
    /// Claims the next run [`Worker::run_until_idle`] executes: a signalled one first (from
    /// `signalled`, and what came since), then any that can go on. On a failure, `signalled`
    /// keeps the ones not tried, the one whose claim failed first.
    async fn next_run(
        &self,
        signalled: &mut VecDeque<(String, String)>,
    ) -> Result<Option<(ClaimedRun, RunClaim)>> {
        self.runtime.refresh_signals().await?;
        signalled.extend(self.unrecorded_signals().await?);
        signalled.extend(self.wakes.take_signalled());
        // Taken off the queue once its claim is made: a call dropped while it is made
        // leaves it there.
        while let Some((thread, name)) = signalled.front().cloned() {
            let claimed = self.claim(Some((&thread, &name))).await?;
            signalled.pop_front();
            if let Some(run) = claimed {
                return Ok(Some(run));
            }
        }
        self.claim(None).await
    }

    /// The threads signalled that this process's wake-ups did not tell the worker of, with
    /// the signals' names, on a store that keeps no signals (the memory store, whose claims
    /// cannot find them): the runs signalled before the worker began to listen (while no
    /// worker existed), looked for in the mailbox the first time it looks for work, and
    /// again should the wake-ups have overflowed. Nothing otherwise.
    async fn unrecorded_signals(&self) -> Result<Vec<(String, String)>> {
        let first = !self.looked.swap(true, Ordering::AcqRel);
        let overflowed = self.wakes.take_overflowed();
        if !(first | overflowed) {
            return Ok(Vec::new());
        }
        // Looked for again the next time should this look not finish: it failed, or it
        // was dropped half way (a shutdown past its timeout).
        let mut again = LookAgain {
            inner: self,
            first,
            overflowed,
        };
        let found = self.runtime.signalled_in_mailbox(&self.names).await;
        if found.is_ok() {
            (again.first, again.overflowed) = (false, false);
        }
        found
    }

    /// Claims `thread` if it waits for the signal `name` sent to it, or else the next run
    /// that can go on.
    async fn claim(
        &self,
        signalled: Option<(&str, &str)>,
    ) -> Result<Option<(ClaimedRun, RunClaim)>> {
        let owner = self.runtime.next_owner().to_text();
        let now = now_ms();
        let until = now.saturating_add(u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX));
        let store = self.runtime.store();
        let claimed = match signalled {
            Some((thread, name)) => {
                store
                    .claim_waiting_run(thread, name, &self.names, &owner, until, now)
                    .await?
            }
            None => {
                let due = unix_ms(self.runtime.now());
                store
                    .claim_next_run(&self.names, &owner, until, now, due)
                    .await?
            }
        };
        Ok(claimed.map(|run| {
            let claim = self.runtime.adopt_claim(
                &run.record.thread,
                owner,
                self.lease,
                until,
                Some(self.park_grace),
            );
            // A cancel asked for while another execution held the run, which let it go
            // (suspended) before it learnt of it: the run stops before its first step.
            if run.record.cancel_requested {
                claim.request_cancel();
            }
            (run, claim)
        }))
    }

    /// Executes a claimed run to its next stop and reports how it ended; returns when the
    /// run is due again, if it suspended on a timer or a wait with a deadline.
    async fn execute(&self, run: ClaimedRun, claim: RunClaim) -> Option<u64> {
        let graph_name = run.record.graph.clone().unwrap_or_default();
        let Some(graph) = self.graphs.get(&graph_name) else {
            // Claims are asked for registered graphs only; let it go for whoever runs it.
            if let Err(error) = claim.release().await {
                tracing::warn!(%error, "could not release a run");
            }
            return None;
        };
        let (lapses, cancel) = (run.record.lapses, run.record.cancel_requested);
        let (report, wake_at_ms) = if self.max_lapses.is_some_and(|max| lapses >= u64::from(max)) {
            let report = match cancel {
                true => lapsed::cancel(&self.runtime, claim, &run.record, graph_name).await,
                false => lapsed::fail(claim, graph_name, lapses).await,
            };
            (report, None)
        } else {
            let allow = self.allow_graph_change;
            let execution = graph.execute(&self.runtime, run, claim.clone(), allow);
            match AssertUnwindSafe(execution).catch_unwind().await {
                Ok(stopped) => stopped,
                Err(panic) => (
                    panicked::fail(&self.runtime, claim, graph_name, panic).await,
                    None,
                ),
            }
        };
        match &report.error {
            Some(error) => {
                tracing::warn!(thread = %report.thread, graph = %report.graph, state = %report.state, %error, "worker run ended with an error");
            }
            None => {
                tracing::debug!(thread = %report.thread, graph = %report.graph, state = %report.state, "worker run stopped");
            }
        }
        // The user's code: its panic is logged, and the worker goes on.
        if let Some(on_finished) = &self.on_finished
            && let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| on_finished(&report)))
        {
            let message = crate::sync::panic_message(&*panic);
            let thread = &report.thread;
            tracing::error!(%thread, %message, "the worker's on_finished callback panicked");
        }
        wake_at_ms
    }
}
