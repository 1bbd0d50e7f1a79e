//! The runtime: where runs keep their checkpoints (and, later, their signals and timers).
//!
//! The executor reaches storage only through [`Runtime`]; swapping the store behind it does
//! not change graph code.

mod audit;
pub(crate) mod claim;
pub(crate) mod clock;
mod delete;
mod error;
mod extensions;
mod fork;
pub(crate) mod handover;
mod housekeeping;
mod kept_signals;
pub mod mailbox;
pub(crate) mod owner;
mod removals;
mod resume_requests;
mod runs;
mod seen;
mod signal_receive;
mod signal_watch;
pub(crate) mod signals;
pub mod store;
pub(crate) mod store_told;
pub(crate) mod wakes;

use std::sync::Arc;

pub use clock::{Clock, ManualClock, SystemClock, Utc};
pub use error::RuntimeError;
pub(crate) use resume_requests::ResumeRequest;
pub use runs::RunInfo;

use serde::de::DeserializeOwned;

#[doc(inline)]
pub use mailbox::{Delivery, Mailbox, MailboxConfig, SessionGuard, SignalError, SignalOptions};
pub use store::{
    AuditEntry, AuditKind, AuditQuery, BadRunCursor, Checkpoint, Claim, ClaimedRun, DeletedThread,
    Interrupt, JournalKey, MemoryStore, RunCursor, RunFilter, RunRecord, RunState, RunStatus,
    SignalPush, Store, StoreError, StoreUrl, StoredSignal, Submitted,
};
#[cfg(feature = "sqlite")]
pub use store::{CommitStats, SqliteOptions, SqliteStore, Synchronous};
#[cfg(feature = "postgres")]
pub use store::{PostgresOptions, PostgresStore};

/// The result of a runtime call.
type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// When a run's checkpoints reach the store, and what a crash can cost.
///
/// Whatever the mode, a run whose lease another execution took over (this process stalled
/// past it) runs no further step: it learns it from its next write, or from the lease's
/// heartbeat before its next step, and ends with
/// [`StoreError::LeaseLost`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// Each superstep's checkpoint is written before the next step starts. A crash loses at
    /// most the step in progress. The slowest mode, and the default.
    #[default]
    Sync,
    /// Checkpoints are written in the background while the next step runs. A crash can lose
    /// the last few steps, which then run again on recovery.
    Async,
    /// One checkpoint when the run stops (completes, fails or suspends). A crash loses the
    /// whole run so far; the fastest mode, for short runs that are cheap to redo. A run a
    /// worker hands back (its graceful shutdown) at its own step's end writes where it
    /// stands first, and the next worker carries it on from there; one handed back inside a
    /// subgraph's step starts over from its last checkpoint.
    ///
    /// A run that journals (a [`Context::step`](crate::Context::step), a signal received, a
    /// timed wait's deadline) also writes its start, unsynced, before its first journal
    /// entry: the run is then on its row while it runs, a recover carries it on from its
    /// start without doing its journaled steps again, and the thread's next run does not
    /// take its number (and with it, its journal). So does a run started over one that never
    /// ended (its process died, or it was suspended), at once: the row then stops asking for
    /// a cancel meant for the run before it.
    Exit,
}

struct RuntimeInner {
    store: Arc<dyn Store>,
    durability: Durability,
    mailbox: Mailbox,
    /// Stored signals on their way out of the store (see [`signals`]).
    removals: Arc<removals::Removals>,
    /// Set once a durable store's signals are in the mailbox.
    signals_loaded: tokio::sync::OnceCell<()>,
    /// State that layers above the runtime attach to it.
    extensions: extensions::Extensions,
    /// How long a claim on a run lasts without renewal.
    lease: std::time::Duration,
    /// This runtime's part of every claim's owner id.
    owner: Arc<str>,
    /// Numbers this runtime's executions, for their owner ids.
    executions: std::sync::atomic::AtomicU64,
    /// The time timers compare against.
    clock: Arc<dyn Clock>,
    /// The claims executing in this process, for cancels.
    live_claims: claim::LiveClaims,
    /// Wake-ups for this process's workers.
    wakes: wakes::Wakes,
    /// Which stored signals are already in (or through) the mailbox: see
    /// [`seen::Seen`].
    signals_seen: tokio::sync::Mutex<seen::Seen>,
    /// How often to look for signals other processes stored.
    poll_interval: std::time::Duration,
    /// Set once the task that looks for them runs.
    watching: std::sync::atomic::AtomicBool,
    /// How long audit entries are kept, and when workers last pruned what they prune.
    housekeeping: housekeeping::Housekeeping,
}

/// Builds a [`Runtime`]; see [`Runtime::builder`].
#[must_use]
#[derive(Default)]
pub struct RuntimeBuilder {
    store: Option<Arc<dyn Store>>,
    durability: Option<Durability>,
    signals: MailboxConfig,
    lease: Option<std::time::Duration>,
    clock: Option<Arc<dyn Clock>>,
    poll_interval: Option<std::time::Duration>,
    audit_retention: Option<std::time::Duration>,
}

/// How often, by default, a runtime on a durable store looks for signals that other
/// processes stored, and a worker for runs they made runnable.
pub const DEFAULT_POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

impl std::fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("durability", &self.durability)
            .field("signals", &self.signals)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl RuntimeBuilder {
    /// The store (default: a new [`MemoryStore`]).
    pub fn store(mut self, store: impl Store) -> Self {
        self.store = Some(Arc::new(store));
        self
    }

    /// A store the caller keeps a handle on too, to share it between runtimes or to read
    /// what only its own type tells ([`SqliteStore::commit_stats`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use loomflow::runtime::{MemoryStore, Runtime};
    ///
    /// let store = Arc::new(MemoryStore::new());
    /// let runtime = Runtime::builder().shared_store(store.clone()).build();
    /// # let _ = runtime;
    /// ```
    pub fn shared_store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// The durability mode runs use unless they set their own (default [`Durability::Sync`]).
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = Some(durability);
        self
    }

    /// Bounds and limits of the signal mailbox: `max_pending_signal_sessions` (default
    /// 10,000), `pending_signal_ttl` (default one hour), payload size (default 1 MiB); `None`
    /// lifts a bound.
    pub fn signals(mut self, config: MailboxConfig) -> Self {
        self.signals = config;
        self
    }

    /// How long an execution's claim on its run lasts without being renewed (default 30 s).
    ///
    /// Every execution of a run (a start, a resume, a recover) claims the run's thread
    /// first, so that at most one process at a time carries a run on; the claim is renewed
    /// at every write and by a heartbeat every third of the lease. If the process holding it
    /// dies, the run stays claimed until the lease expires: only then may another process
    /// recover it (callers that come sooner get [`RunError::Busy`](crate::RunError::Busy),
    /// or wait with `wait_if_busy`). A shorter lease lets a crashed run be taken over
    /// sooner; a process stalled for longer than the lease (a paused VM, a blocked
    /// executor) loses it, and stops at its next write.
    ///
    /// Values under a millisecond are raised to one, and values over a century lowered to
    /// one (stores keep expiry times as signed 64-bit milliseconds).
    pub fn lease(mut self, lease: std::time::Duration) -> Self {
        self.lease = Some(claim::bounded_lease(lease));
        self
    }

    /// How often to look for what other processes wrote to the store (default 100 ms): the
    /// longest a signal another process sends takes to reach a wait parked here, or a
    /// cancel it asks for to reach a run executing here, and the default of
    /// [`WorkerBuilder::poll_interval`](crate::worker::WorkerBuilder::poll_interval).
    ///
    /// The look is a cheap change probe (SQLite's `PRAGMA data_version`, PostgreSQL's
    /// notifications); the signals, or the rows of the runs executing here, are read only
    /// when it moved. Only a runtime with a durable store that has a parked wait, a run
    /// executing, or a worker, looks at all. Values under a millisecond are raised to one.
    pub fn poll_interval(mut self, interval: std::time::Duration) -> Self {
        self.poll_interval = Some(interval.max(std::time::Duration::from_millis(1)));
        self
    }

    /// How long audit entries are kept (default: for ever). Workers on this runtime delete
    /// older ones, at most once a minute; [`Runtime::prune_audit`] does it on demand.
    pub fn audit_retention(mut self, keep: std::time::Duration) -> Self {
        self.audit_retention = Some(keep);
        self
    }

    /// The clock timers read (default: [`SystemClock`]); tests pass a [`ManualClock`].
    ///
    /// Signals this runtime sends are stamped with it too: a timed wait compares the stamp
    /// with its deadline, and the pending TTL and [`Runtime::prune_signals`] age signals by
    /// it.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Builds the runtime.
    pub fn build(self) -> Runtime {
        let store = self.store.unwrap_or_else(|| Arc::new(MemoryStore::new()));
        let removals = removals::Removals::new(Arc::clone(&store));
        let poll_interval = self.poll_interval.unwrap_or(DEFAULT_POLL_INTERVAL);
        // Another process may ask a run executing here to stop: see `LiveClaims`.
        let probe_every = store.is_durable().then_some(poll_interval);
        let hook = {
            // The mailbox reports the stored signals it drops; the store forgets them.
            let removals = Arc::clone(&removals);
            Box::new(move |dropped| removals.push_dropped(dropped))
        };
        Runtime {
            inner: Arc::new(RuntimeInner {
                store,
                durability: self.durability.unwrap_or_default(),
                mailbox: Mailbox::with_drop_hook(self.signals, hook),
                removals,
                signals_loaded: tokio::sync::OnceCell::new(),
                extensions: extensions::Extensions::default(),
                lease: self.lease.unwrap_or(claim::DEFAULT_LEASE),
                owner: Arc::from(claim::runtime_owner_id()),
                executions: std::sync::atomic::AtomicU64::new(1),
                clock: self.clock.unwrap_or_else(|| Arc::new(SystemClock)),
                live_claims: claim::LiveClaims::new(probe_every),
                wakes: wakes::Wakes::default(),
                signals_seen: tokio::sync::Mutex::new(seen::Seen::default()),
                poll_interval,
                watching: std::sync::atomic::AtomicBool::new(false),
                housekeeping: housekeeping::Housekeeping::new(self.audit_retention),
            }),
        }
    }
}

/// Owns storage for runs. Cheap to clone; clones share everything.
///
/// # Examples
///
/// ```
/// use loomflow::Runtime;
///
/// let runtime = Runtime::in_memory();
/// let same = runtime.clone();
/// # let _ = same;
/// ```
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<RuntimeInner>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("durability", &self.inner.durability)
            .field("lease", &self.inner.lease)
            .finish_non_exhaustive()
    }
}

impl Default for Runtime {
    fn default() -> Self {
        Self::in_memory()
    }
}

impl Runtime {
    /// A runtime that keeps everything in memory: for tests, and for runs that need not
    /// survive the process.
    pub fn in_memory() -> Self {
        Self::with_store(MemoryStore::new())
    }

    /// A runtime over any [`Store`], with default settings.
    pub fn with_store(store: impl Store) -> Self {
        Self::builder().store(store).build()
    }

    /// Configures a runtime: its store, durability mode and signal bounds.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loomflow::runtime::{Durability, MailboxConfig, MemoryStore, Runtime};
    ///
    /// let runtime = Runtime::builder()
    ///     .store(MemoryStore::new())
    ///     .durability(Durability::Exit)
    ///     .signals(
    ///         MailboxConfig::default()
    ///             .max_pending_signal_sessions(Some(1_000))
    ///             .pending_signal_ttl(Some(Duration::from_secs(600))),
    ///     )
    ///     .build();
    /// assert_eq!(runtime.durability(), Durability::Exit);
    /// ```
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    pub(crate) fn mailbox(&self) -> &Mailbox {
        &self.inner.mailbox
    }

    /// The runtime's instance of `T`, made on first use: per-runtime state of the layers
    /// above (the tool layer keeps the approvals waiting in this process here).
    pub(crate) fn extension<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        self.inner.extensions.get_or_default()
    }

    pub(crate) fn removals(&self) -> &Arc<removals::Removals> {
        &self.inner.removals
    }

    pub(crate) fn signals_loaded(&self) -> &tokio::sync::OnceCell<()> {
        &self.inner.signals_loaded
    }

    /// A durable runtime over the SQLite file at `path`, created if it does not exist; see
    /// [`SqliteStore`] (and [`SqliteStore::open_with`] with [`Runtime::with_store`] for
    /// other settings).
    ///
    /// # Examples
    ///
    /// ```
    /// use loomflow::Runtime;
    ///
    /// # fn main() -> loomflow::Result<()> {
    /// let path = std::env::temp_dir().join(format!("loomflow-doc-runtime-{}.db", std::process::id()));
    /// let runtime = Runtime::sqlite(&path)?;
    /// # drop(runtime);
    /// # for suffix in ["", "-wal", "-shm"] { let _ = std::fs::remove_file(format!("{}{suffix}", path.display())); }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`SqliteStore::open`]: a missing directory, a file that is not a SQLite database
    /// or is corrupt or locked, or one written by a newer loomflow.
    #[cfg(feature = "sqlite")]
    pub fn sqlite(path: impl AsRef<std::path::Path>) -> Result<Self> {
        Ok(Self::with_store(SqliteStore::open(path)?))
    }

    /// A durable runtime over the PostgreSQL database at `url`, whose loomflow tables are
    /// created or migrated on the way; see [`PostgresStore`] (and
    /// [`PostgresStore::connect_with`] with [`Runtime::with_store`] for other settings).
    ///
    /// Async, unlike `Runtime::sqlite`: connecting talks to the server. Call it from
    /// within a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use loomflow::Runtime;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
    /// let runtime = Runtime::postgres("postgres://loomflow@127.0.0.1:5432/flows").await?;
    /// # drop(runtime);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`PostgresStore::connect`]: a connection string that does not parse, a server that
    /// cannot be reached or refuses the login, a failed migration, or tables written by a
    /// newer loomflow.
    #[cfg(feature = "postgres")]
    pub async fn postgres(url: &str) -> Result<Self> {
        Ok(Self::with_store(PostgresStore::connect(url).await?))
    }

    /// A durable runtime over the store `url` names, as a deployment's configuration names
    /// it: `postgres://…` (or libpq `key=value` pairs), `sqlite:PATH` or a path, or `memory:`
    /// (see [`StoreUrl`]); created or migrated on the way, as [`Runtime::sqlite`] and
    /// [`Runtime::postgres`] do. Set other options with
    /// `Runtime::builder().shared_store(StoreUrl::parse(url)?.open().await?)`.
    ///
    /// # Examples
    ///
    /// ```
    /// use loomflow::Runtime;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
    /// let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| "memory:".to_owned());
    /// let runtime = Runtime::open(&url).await?;
    /// # drop(runtime);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`StoreUrl::parse`] and [`StoreUrl::open`]: a string that names no store loomflow
    /// opens, a store whose cargo feature is off, and what opening it meets.
    pub async fn open(url: &str) -> Result<Self> {
        let store = StoreUrl::parse(url)?.open().await?;
        Ok(Self::builder().shared_store(store).build())
    }

    /// The durability mode runs use unless they set their own.
    pub fn durability(&self) -> Durability {
        self.inner.durability
    }

    /// How long an execution's claim on its run lasts without renewal; see
    /// [`RuntimeBuilder::lease`].
    pub fn lease(&self) -> std::time::Duration {
        self.inner.lease
    }

    /// The signal mailbox's bounds and limits (the largest payload, among others).
    pub fn signal_config(&self) -> &MailboxConfig {
        self.inner.mailbox.config()
    }

    /// How often it looks for what other processes wrote; see
    /// [`RuntimeBuilder::poll_interval`].
    pub fn poll_interval(&self) -> std::time::Duration {
        self.inner.poll_interval
    }

    /// Now, by the runtime's [`Clock`].
    pub fn now(&self) -> std::time::SystemTime {
        self.inner.clock.now()
    }

    /// The runtime's [`Clock`].
    pub(crate) fn clock(&self) -> &dyn Clock {
        &*self.inner.clock
    }

    /// The store behind this runtime.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The state of a thread's newest checkpoint, typed.
    ///
    /// # Errors
    ///
    /// A store failure, or a state that does not deserialize into `S`.
    pub async fn get_state<S: DeserializeOwned>(&self, thread: &str) -> Result<Option<S>> {
        let Some(mut checkpoint) = self
            .inner
            .store
            .latest_checkpoint(thread, "")
            .await
            .map_err(RuntimeError::from)?
        else {
            return Ok(None);
        };
        let state = checkpoint
            .body
            .get_mut("state")
            .map(serde_json::Value::take)
            .unwrap_or_default();
        crate::json::from_value_at(state, || format!("state of thread {thread}"))
            .map(Some)
            .map_err(|(what, e)| RuntimeError::json(what, e))
    }

    /// Every checkpoint of a thread the store keeps, oldest first: the durable stores keep
    /// all unless their options set a retention (`SqliteOptions::retention`); the memory
    /// store drops old ones (see [Retention](MemoryStore#retention)).
    ///
    /// # Errors
    ///
    /// A store failure.
    pub async fn list_checkpoints(&self, thread: &str) -> Result<Vec<Checkpoint>> {
        self.inner
            .store
            .list_checkpoints(thread)
            .await
            .map_err(RuntimeError::from)
    }

    /// The interrupts a thread's newest run is suspended on (empty when it is not, a run
    /// that ended over its interrupted checkpoint included: failed by a worker, say).
    ///
    /// # Errors
    ///
    /// A store failure, or a checkpoint whose interrupts do not decode.
    pub async fn pending_interrupts(&self, thread: &str) -> Result<Vec<Interrupt>> {
        match self.inner.store.latest_checkpoint(thread, "").await? {
            Some(cp) if cp.status == RunStatus::Interrupted => {
                let row = self.inner.store.get_run(thread).await?;
                let ended = row.is_some_and(|row| row.run == cp.run && row.state.is_finished());
                Ok(if ended { Vec::new() } else { cp.interrupts()? })
            }
            _ => Ok(Vec::new()),
        }
    }
}
