//! The PostgreSQL store: one database that many worker processes share.
//!
//! # Layout
//!
//! Five tables, named `loomflow_*` (see `schema.rs`): `loomflow_meta` (the schema version),
//! `loomflow_checkpoints`, `loomflow_journal` (the first value written for a key wins),
//! `loomflow_signals` (pending signals, and consumed ones with an idempotency key for an
//! hour) and `loomflow_runs` (one row per thread: its current run and the lease of the
//! execution carrying it on; see `runs.rs`). They mirror the SQLite store's tables, and
//! every operation means what it means there.
//!
//! # Connections
//!
//! A pool of tokio-postgres connections (deadpool), without TLS. Each operation takes a
//! connection for one transaction (or one statement) and gives it back; statements are
//! prepared once per connection. A write under a lease checks the lease and writes in one
//! transaction (`runs.rs`); workers claim runs with `FOR UPDATE SKIP LOCKED`. One more
//! connection, outside the pool, `LISTEN`s for the notifications writes send, for
//! [`Store::change_counter`] (`notify.rs`).

mod audit;
mod cancels;
mod checkpoints;
mod claim_sql;
mod delete;
mod error;
mod fenced;
mod notify;
mod options;
mod retention;
mod rows;
mod runs;
mod schema;
mod session;
mod signals;
mod submit;
mod target;

use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use serde_json::Value;
use tokio_postgres::NoTls;

use self::error::Fail;
use self::notify::Listener;
use self::target::Target;
use super::{
    AuditEntry, AuditQuery, Checkpoint, Claim, ClaimedRun, DeletedThread, JournalKey, RunFilter,
    RunRecord, RunState, SignalPush, Store, StoreError, StoredSignal, Submitted,
};
use futures_util::future::BoxFuture;
pub use options::PostgresOptions;

/// Keeps runs, checkpoints, journal entries and signals in a PostgreSQL database (15 or
/// newer), so that any number of worker processes, on any number of machines, share them.
/// The store of [`Runtime::postgres`](crate::Runtime::postgres).
///
/// Connecting creates the tables (named `loomflow_*`, in the connection's `search_path`)
/// or migrates them, once, whichever process gets there first. Workers claim each runnable
/// run exactly once (`FOR UPDATE SKIP LOCKED`, with leases), and learn of new work through
/// `LISTEN/NOTIFY`, polling as a fallback.
///
/// Connections have no TLS: reach a remote server through a private network or a tunnel.
/// Each operation runs as one transaction, and its future resolves once that committed.
/// Dropping the future does not undo the operation: once its statement is sent, the server
/// carries it out and commits it, as the SQLite store carries out a write queued when
/// called. A claim given up that way holds the run until its lease runs out; and the
/// connection goes back to the pool at once, so the next operation on it waits for that
/// statement to finish.
///
/// PostgreSQL text cannot hold a NUL character (`\0`), where SQLite's and memory can:
/// values are JSON text, in which a NUL is escaped, and an error message or an audit entry's
/// subject and actor (a tool name a model made up, who decided) keep U+FFFD in its place; a
/// thread, a session, a signal name or a key holding one is refused with
/// [`StoreError::Refused`] saying so. Those names are also keys of PostgreSQL indexes, which
/// take entries of at most about 2.7 KB: a thread, session, signal name, step name or
/// idempotency key longer than that is refused the same way (SQLite and memory take any).
///
/// # Examples
///
/// ```no_run
/// use loomflow::runtime::{Checkpoint, PostgresStore, RunStatus, Store};
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = PostgresStore::connect("postgres://loomflow:secret@127.0.0.1:5432/flows").await?;
/// let body = json!({"state": {"n": 1}, "next": ["a"]});
/// let cp = Checkpoint::new("thread-1", 1, "", 0, RunStatus::Running, body);
/// let id = store.put_checkpoint(cp).await?;
/// let latest = store.latest_checkpoint("thread-1", "").await?.expect("just written");
/// assert_eq!((latest.id, latest.state()), (id, &json!({"n": 1})));
/// # Ok(()) }
/// ```
pub struct PostgresStore {
    target: Target,
    pool: Pool,
    /// The `LISTEN`ing connection's task, when notifications are on.
    listener: Option<Listener>,
    /// When this store last deleted consumed signals (ms since the Unix epoch).
    last_prune: AtomicI64,
    /// [`PostgresOptions::retention`].
    retention: Option<usize>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("server", &self.target.shown)
            .field("listening", &self.listener.is_some())
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to the database at `url` with default [`PostgresOptions`], creating or
    /// migrating loomflow's tables.
    ///
    /// `url` is a libpq connection string: a URL
    /// (`postgres://user:password@host:port/dbname`) or `key=value` pairs; `sslmode=require`
    /// fails, as connections have no TLS. Call it from within a tokio runtime: the change
    /// listener is a task of it.
    ///
    /// # Errors
    ///
    /// [`StoreError::Open`] when the string does not parse, the server cannot be reached
    /// or refuses the login, or the migration fails; [`StoreError::NewerSchema`] when a
    /// newer loomflow wrote the tables. Errors show the server as
    /// `postgres://user@host:port/dbname`, never with the password.
    ///
    /// # Panics
    ///
    /// When polled outside a tokio runtime with its I/O and time drivers enabled.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, PostgresOptions::default()).await
    }

    /// Connects with the given options. See [`connect`](Self::connect); with
    /// [`PostgresOptions::migrate`] off, only a store at this version opens, and nothing is
    /// created.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect); with `migrate` off, [`StoreError::NotAStore`] for a
    /// database without loomflow's tables and [`StoreError::OlderSchema`] for a store an
    /// older loomflow wrote.
    ///
    /// # Panics
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_with(url: &str, options: PostgresOptions) -> Result<Self, StoreError> {
        let mut target = Target::parse(url)?;
        target.config.connect_timeout(options.connect_timeout);
        if target.config.get_application_name().is_none() {
            target.config.application_name("loomflow");
        }
        let manager = Manager::from_config(
            notify::probed_config(&target),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .post_create(session::read_committed())
            .max_size(options.pool_size.max(1))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .create_timeout(Some(options.connect_timeout))
            .build()
            .map_err(|e| target.open_error(e))?;
        let mut client = pool
            .get()
            .await
            .map_err(|e| target.connect_error(&e, options.migrate))?;
        schema::check_encoding(&client, &target).await?;
        schema::migrate(&mut client, &target, options.migrate).await?;
        drop(client);
        let listener = options
            .notifications
            .then(|| Listener::spawn(target.clone()));
        Ok(Self {
            target,
            pool,
            listener,
            last_prune: AtomicI64::new(i64::MIN),
            retention: options.retention,
        })
    }

    /// The server, as errors show it: `postgres://user@host:port/dbname`, without the
    /// password.
    pub fn server(&self) -> &str {
        &self.target.shown
    }

    /// The connection pool, for other tables kept in the same database.
    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    /// A connection from the pool.
    async fn client(&self) -> Result<Object, Fail> {
        Ok(self.pool.get().await?)
    }
}

impl Store for PostgresStore {
    fn writes_json_bodies(&self) -> bool {
        true
    }

    fn put_checkpoint(&self, checkpoint: Checkpoint) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(self.save_checkpoint(checkpoint))
    }

    fn latest_checkpoint<'a>(
        &'a self,
        thread: &'a str,
        namespace: &'a str,
    ) -> BoxFuture<'a, Result<Option<Checkpoint>, StoreError>> {
        Box::pin(self.newest_checkpoint(thread, namespace))
    }

    fn get_checkpoint<'a>(
        &'a self,
        thread: &'a str,
        id: u64,
    ) -> BoxFuture<'a, Result<Option<Checkpoint>, StoreError>> {
        Box::pin(self.checkpoint_by_id(thread, id))
    }

    fn list_checkpoints<'a>(
        &'a self,
        thread: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Checkpoint>, StoreError>> {
        Box::pin(self.all_checkpoints(thread))
    }

    fn put_journal(&self, key: JournalKey, value: Value) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.save_journal(key, value))
    }

    fn get_journal<'a>(
        &'a self,
        key: &'a JournalKey,
    ) -> BoxFuture<'a, Result<Option<Value>, StoreError>> {
        Box::pin(self.journal_entry(key))
    }

    fn list_journal<'a>(
        &'a self,
        thread: &'a str,
        run: u64,
    ) -> BoxFuture<'a, Result<Vec<(JournalKey, Value)>, StoreError>> {
        Box::pin(self.run_journal(thread, run))
    }

    fn push_signal(&self, signal: StoredSignal) -> BoxFuture<'_, Result<SignalPush, StoreError>> {
        Box::pin(self.store_signal(signal))
    }

    fn take_signal<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
        journal: Option<(JournalKey, Value)>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.consume_signal(session, seq, journal))
    }

    fn discard_signal<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.discard(session, seq))
    }

    fn pending_signals(&self) -> BoxFuture<'_, Result<Vec<StoredSignal>, StoreError>> {
        Box::pin(self.stored_signals_after(0))
    }

    fn oldest_signal<'a>(
        &'a self,
        session: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoredSignal>, StoreError>> {
        Box::pin(self.stored_oldest_signal(session, name))
    }

    fn signal_key_seen<'a>(
        &'a self,
        session: &'a str,
        name: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.stored_signal_key_seen(session, name, key))
    }

    fn signals_after(&self, seq: u64) -> BoxFuture<'_, Result<Vec<StoredSignal>, StoreError>> {
        Box::pin(self.stored_signals_after(seq))
    }

    fn claim<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
        lease_until_ms: u64,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        Box::pin(self.claim_thread(thread, owner, lease_until_ms, now_ms))
    }

    fn release<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.let_go(thread, owner, false)
    }

    fn release_runnable<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.let_go(thread, owner, true)
    }

    fn renew_claim<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.renew_thread(thread, owner, lease_until_ms))
    }

    fn put_checkpoint_claimed<'a>(
        &'a self,
        checkpoint: Checkpoint,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(self.checkpoint_fenced(checkpoint, owner, Some(lease_until_ms)))
    }

    fn put_checkpoint_and_release<'a>(
        &'a self,
        checkpoint: Checkpoint,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(self.checkpoint_fenced(checkpoint, owner, None))
    }

    fn put_journal_claimed<'a>(
        &'a self,
        key: JournalKey,
        value: Value,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.journal_fenced(key, value, &[], owner, lease_until_ms))
    }

    fn put_journal_audited<'a>(
        &'a self,
        key: JournalKey,
        value: Value,
        audit: Vec<AuditEntry>,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.journal_fenced(key, value, &audit, owner, lease_until_ms)
                .await
        })
    }

    fn append_audit(&self, entries: Vec<AuditEntry>) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.append_audit_rows(entries))
    }

    fn audit<'a>(
        &'a self,
        query: &'a AuditQuery,
    ) -> BoxFuture<'a, Result<Vec<AuditEntry>, StoreError>> {
        Box::pin(self.read_audit(query))
    }

    fn prune_audit(&self, before_ms: u64) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(self.prune_audit_rows(before_ms))
    }

    fn prune_signals<'a>(
        &'a self,
        sent_before_ms: u64,
        spare: &'a [String],
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(self.prune_pending(sent_before_ms, spare))
    }

    fn take_signal_claimed<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
        journal: (JournalKey, Value),
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.take_fenced(session, seq, journal, owner, lease_until_ms))
    }

    fn try_take_signal<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.consume_if_pending(session, seq))
    }

    fn submit_run<'a>(
        &'a self,
        thread: &'a str,
        graph: &'a str,
        input: Value,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Submitted, StoreError>> {
        Box::pin(async move { self.submit(thread, graph, &input, now_ms).await })
    }

    fn claim_next_run<'a>(
        &'a self,
        graphs: &'a [String],
        owner: &'a str,
        lease_until_ms: u64,
        now_ms: u64,
        due_ms: u64,
    ) -> BoxFuture<'a, Result<Option<ClaimedRun>, StoreError>> {
        Box::pin(self.claim_runnable(None, graphs, owner, lease_until_ms, (now_ms, due_ms)))
    }

    fn claim_waiting_run<'a>(
        &'a self,
        thread: &'a str,
        signal: &'a str,
        graphs: &'a [String],
        owner: &'a str,
        lease_until_ms: u64,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Option<ClaimedRun>, StoreError>> {
        Box::pin(self.claim_runnable(
            Some((thread, signal)),
            graphs,
            owner,
            lease_until_ms,
            (now_ms, 0),
        ))
    }

    fn get_run<'a>(
        &'a self,
        thread: &'a str,
    ) -> BoxFuture<'a, Result<Option<RunRecord>, StoreError>> {
        Box::pin(self.read_run(thread))
    }

    fn cancels_requested<'a>(
        &'a self,
        threads: &'a [Arc<str>],
    ) -> BoxFuture<'a, Result<Vec<Arc<str>>, StoreError>> {
        Box::pin(self.read_cancels(threads))
    }

    fn list_runs<'a>(
        &'a self,
        filter: &'a RunFilter,
    ) -> BoxFuture<'a, Result<Vec<RunRecord>, StoreError>> {
        Box::pin(self.query_runs(filter))
    }

    fn request_cancel<'a>(
        &'a self,
        thread: &'a str,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Option<RunRecord>, StoreError>> {
        Box::pin(self.cancel(thread, now_ms))
    }

    fn finish_run<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
        state: RunState,
        error: Option<String>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.finish(thread, owner, state, error)
    }

    fn delete_thread<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<DeletedThread, StoreError>> {
        Box::pin(self.delete_claimed_thread(thread, owner))
    }

    fn next_wake_at_ms<'a>(
        &'a self,
        graphs: &'a [String],
        due_ms: u64,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        Box::pin(self.next_wake(graphs, due_ms))
    }

    /// The notifications the listening connection has received: `None` while it is not
    /// connected (or [`PostgresOptions::notifications`] is off), and the worker then looks
    /// at every poll interval. Only writes that can give a worker work notify: a stored
    /// signal, a submitted run, a released or finished one.
    fn change_counter(&self) -> Option<u64> {
        self.listener.as_ref().and_then(Listener::counter)
    }

    fn change_notifier(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        self.listener.as_ref().map(Listener::notifier)
    }
}

const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<PostgresStore>();
};

#[cfg(test)]
mod tests;
