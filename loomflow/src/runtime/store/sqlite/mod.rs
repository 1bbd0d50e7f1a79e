//! The SQLite store: one file, WAL mode, a writer thread with grouped commits.
//!
//! # Layout
//!
//! Five tables: `meta` (the schema version), `checkpoints` (one row per superstep: the
//! columns queries filter on, the error of a failed run, and the executor's snapshot as one
//! opaque JSON `body`), `journal` (results of journaled steps; the first value written for a
//! key wins), `signals` (pending signals, and consumed ones with an idempotency key for an
//! hour so that a retried send is recognised) and `runs` (one row per thread: its current
//! run and the lease of the execution carrying it on; see `runs.rs`).
//!
//! # Threads
//!
//! SQLite calls block, so they run on threads of their own. One connection writes: the
//! writer thread takes every request queued, runs the group in one transaction and commits
//! once, so that concurrent runs share an fsync (see `writer.rs`). The one exception is
//! `synchronous = NORMAL`, where a commit does not wait on the disk: a task that finds the
//! writer idle commits the group itself, which costs less than a handoff to the thread and
//! back (see `committer.rs`). Reads go to a few read connections, each on its own thread. A
//! write is answered only after its group is committed, so a read issued after a write
//! returned sees it.

mod audit;
mod backfill;
mod committer;
mod followed;
mod housekeeping;
mod leases;
mod options;
mod reader;
mod requests;
mod retention;
mod rows;
mod run_rows;
mod runs;
mod schema;
mod writer;

pub use options::{CommitStats, SqliteOptions, Synchronous};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use rusqlite::Connection;
use serde_json::Value;

use self::reader::Readers;
use self::rows::{checkpoint_row, journal_row, to_i64, to_json, unexpected};
use self::writer::{Op, Outcome, SignalRow, StartError, Writer};
use super::{
    AuditEntry, AuditQuery, Checkpoint, Claim, ClaimedRun, DeletedThread, JournalKey, RunFilter,
    RunRecord, RunState, SignalPush, Store, StoreError, StoredSignal, Submitted,
};
use futures_util::future::BoxFuture;

/// Keeps checkpoints, journal entries and signals in a SQLite file, so that runs survive
/// the process. The store of [`Runtime::sqlite`](crate::Runtime::sqlite).
///
/// Writes from every task go to one writer thread, which commits all the writes waiting
/// for it in one transaction: with [`Synchronous::Full`] a hundred concurrent runs share
/// one fsync instead of queuing for a hundred. At [`Synchronous::Normal`], where a commit
/// does not wait on the disk, a task that finds the writer idle commits the group itself,
/// sparing a lone run's every step a handoff to that thread and back; the WAL is still
/// checkpointed by the thread, never by a task. Reads run on their own threads. Dropping
/// the store commits what is queued and closes the file.
///
/// At [`Synchronous::Full`], writes that record no work are not synced on their own:
/// taking, renewing or letting go of a run's claim, and a run's input checkpoint (written
/// before any node runs). A power cut that takes them back leaves the run as if it had not
/// started; the next synced commit (the step that follows, the suspension) takes them to
/// the disk with it. An interrupt and its resume cost two fsyncs: the suspension and the
/// resumed step's completion. [`CommitStats::synced`] counts the commits that synced.
///
/// A write is queued when its method is called, not when its future is first polled, and
/// its future resolves once the write is committed: dropping the future does not cancel the
/// write. Several stores (or processes) may open one file; their writers take turns at its
/// write lock, waiting up to [`SqliteOptions::busy_timeout`].
///
/// # Examples
///
/// ```
/// use loomflow::runtime::{Checkpoint, RunStatus, SqliteStore, Store};
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let path = std::env::temp_dir().join(format!("loomflow-doc-store-{}.db", std::process::id()));
/// let store = SqliteStore::open(&path)?;
/// let body = json!({"state": {"n": 1}, "next": ["a"]});
/// let cp = Checkpoint::new("thread-1", 1, "", 0, RunStatus::Running, body);
/// let id = store.put_checkpoint(cp).await?;
/// let latest = store.latest_checkpoint("thread-1", "").await?.expect("just written");
/// assert_eq!((latest.id, latest.state()), (id, &json!({"n": 1})));
/// # drop(store);
/// # for suffix in ["", "-wal", "-shm"] { let _ = std::fs::remove_file(format!("{}{suffix}", path.display())); }
/// # Ok(()) }
/// ```
pub struct SqliteStore {
    path: PathBuf,
    /// Reads only `PRAGMA data_version`, which changes whenever anyone commits to the file.
    probe: std::sync::Mutex<Connection>,
    // Dropped in this order: readers first, then the writer, which flushes and closes last.
    readers: Readers,
    writer: Writer,
    /// [`SqliteOptions::retention`].
    retention: Option<usize>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens the store in the file at `path`, creating the file if it does not exist, with
    /// default [`SqliteOptions`]. A `sqlite:` URL names its file as
    /// [`StoreUrl`](crate::runtime::StoreUrl) reads it (`sqlite:app.db` is `app.db`).
    ///
    /// Opening blocks the calling thread for a moment (it reads the file and may migrate
    /// its schema): call it at start-up, or from `spawn_blocking`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Open`], naming the path, when the directory does not exist, the file is
    /// not a SQLite database or is corrupt, or another connection keeps it locked past the
    /// busy timeout, or `path` is a PostgreSQL URL or a `sqlite:` URL `StoreUrl` refuses;
    /// [`StoreError::NewerSchema`] when a newer loomflow wrote it.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// Opens the store in the file at `path` with the given options. See [`open`](Self::open);
    /// with [`SqliteOptions::migrate`] off, only a store at this version opens, and no file
    /// is created.
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open); with `migrate` off, [`StoreError::NotAStore`] for a missing
    /// file, a file that is not a SQLite database or one without loomflow's tables, and
    /// [`StoreError::OlderSchema`] for a store an older loomflow wrote.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self, StoreError> {
        Self::open_file(&schema::file_named(path.as_ref())?, &options)
    }

    /// Opens the store in the file at `path`, taken as it is (a `sqlite:` URL read already).
    pub(crate) fn open_file(path: &Path, options: &SqliteOptions) -> Result<Self, StoreError> {
        let (path, options) = (path.to_path_buf(), options.clone());
        let thread_error = |e: std::io::Error| StoreError::Open {
            path: schema::shown(&path),
            message: format!("cannot start a store thread: {e}"),
        };
        let conn = schema::open_writer(&path, &options)?;
        let conns = (0..options.read_connections.max(1))
            .map(|_| schema::open_reader(&path, &options))
            .collect::<Result<Vec<_>, _>>()?;
        let probe = std::sync::Mutex::new(schema::open_reader(&path, &options)?);
        let writer = Writer::spawn(conn, options.synchronous).map_err(|e| match e {
            StartError::Thread(e) => thread_error(e),
            StartError::Sqlite(e) => StoreError::Open {
                path: schema::shown(&path),
                message: e
                    .to_string()
                    .replace(&path.display().to_string(), &schema::shown(&path)),
            },
        })?;
        let readers = Readers::spawn(conns).map_err(thread_error)?;
        Ok(Self {
            path,
            probe,
            readers,
            writer,
            retention: options.retention,
        })
    }

    /// The file this store keeps its data in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many writes this store has committed, in how many transactions, and how many of
    /// those synced: with many concurrent runs, `writes / commits` is the average group a
    /// single commit (and, at [`Synchronous::Full`], a single fsync) served.
    pub fn commit_stats(&self) -> CommitStats {
        let counters = self.writer.counters();
        CommitStats {
            writes: counters.writes.load(Ordering::Relaxed),
            commits: counters.commits.load(Ordering::Relaxed),
            synced: counters.synced.load(Ordering::Relaxed),
        }
    }
}

impl Store for SqliteStore {
    fn writes_json_bodies(&self) -> bool {
        true
    }

    fn put_checkpoint(&self, checkpoint: Checkpoint) -> BoxFuture<'_, Result<u64, StoreError>> {
        let row = checkpoint_row(&checkpoint, self.retention);
        let thread = checkpoint.thread;
        match row {
            Err(e) => Box::pin(std::future::ready(Err(e))),
            Ok(row) => {
                let written = self.write(Op::PutCheckpoint(row));
                Box::pin(async move {
                    match written.await? {
                        Outcome::Id(id) => Ok(id),
                        other => Err(unexpected(&thread, &other)),
                    }
                })
            }
        }
    }

    fn latest_checkpoint<'a>(
        &'a self,
        thread: &'a str,
        namespace: &'a str,
    ) -> BoxFuture<'a, Result<Option<Checkpoint>, StoreError>> {
        let (owned_thread, namespace) = (thread.to_owned(), namespace.to_owned());
        self.read(thread, move |conn| {
            rows::read_latest_checkpoint(conn, &owned_thread, &namespace)
        })
    }

    fn get_checkpoint<'a>(
        &'a self,
        thread: &'a str,
        id: u64,
    ) -> BoxFuture<'a, Result<Option<Checkpoint>, StoreError>> {
        let owned_thread = thread.to_owned();
        // An id past SQLite's range names no row.
        let Ok(id) = i64::try_from(id) else {
            return Box::pin(std::future::ready(Ok(None)));
        };
        self.read(thread, move |conn| {
            rows::read_checkpoint(conn, &owned_thread, id)
        })
    }

    fn list_checkpoints<'a>(
        &'a self,
        thread: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Checkpoint>, StoreError>> {
        let owned_thread = thread.to_owned();
        self.read(thread, move |conn| {
            rows::read_checkpoints(conn, &owned_thread)
        })
    }

    fn put_journal(&self, key: JournalKey, value: Value) -> BoxFuture<'_, Result<(), StoreError>> {
        self.write_done(journal_row(key, &value).map(Op::PutJournal))
    }

    fn get_journal<'a>(
        &'a self,
        key: &'a JournalKey,
    ) -> BoxFuture<'a, Result<Option<Value>, StoreError>> {
        let owned = key.clone();
        self.read(&key.thread, move |conn| rows::read_journal(conn, &owned))
    }

    fn list_journal<'a>(
        &'a self,
        thread: &'a str,
        run: u64,
    ) -> BoxFuture<'a, Result<Vec<(JournalKey, Value)>, StoreError>> {
        let owned = thread.to_owned();
        self.read(thread, move |conn| rows::list_journal(conn, &owned, run))
    }

    fn push_signal(&self, signal: StoredSignal) -> BoxFuture<'_, Result<SignalPush, StoreError>> {
        let session = signal.session.clone();
        let row = (|| {
            Ok(SignalRow {
                payload: to_json(&signal.payload, &signal.session)?,
                sent_at_ms: to_i64(signal.sent_at_ms, "sent_at_ms", &signal.session)?,
                sent_by: super::audit::sent_by(&signal.name, &signal.payload),
                session: signal.session,
                name: signal.name,
                idempotency_key: signal.idempotency_key,
            })
        })();
        match row {
            Err(e) => Box::pin(std::future::ready(Err(e))),
            Ok(row) => {
                let written = self.write(Op::PushSignal(row));
                Box::pin(async move {
                    match written.await? {
                        Outcome::Push(push) => Ok(push),
                        other => Err(unexpected(&session, &other)),
                    }
                })
            }
        }
    }

    fn take_signal<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
        journal: Option<(JournalKey, Value)>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.write_done((|| {
            Ok(Op::TakeSignal {
                session: session.to_owned(),
                seq: to_i64(seq, "signal sequence number", session)?,
                journal: journal
                    .map(|(key, value)| journal_row(key, &value))
                    .transpose()?,
            })
        })())
    }

    fn discard_signal<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.write_done(to_i64(seq, "signal sequence number", session).map(|seq| {
            Op::DiscardSignal {
                session: session.to_owned(),
                seq,
            }
        }))
    }

    fn pending_signals(&self) -> BoxFuture<'_, Result<Vec<StoredSignal>, StoreError>> {
        self.signals_after(0)
    }

    fn oldest_signal<'a>(
        &'a self,
        session: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoredSignal>, StoreError>> {
        let (owned, name) = (session.to_owned(), name.to_owned());
        self.read(session, move |conn| {
            rows::read_oldest_signal(conn, &owned, &name)
        })
    }

    fn signal_key_seen<'a>(
        &'a self,
        session: &'a str,
        name: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let key = (session.to_owned(), name.to_owned(), key.to_owned());
        self.read(session, move |conn| {
            rows::read_signal_key_seen(conn, (&key.0, &key.1, &key.2))
        })
    }

    fn signals_after(&self, seq: u64) -> BoxFuture<'_, Result<Vec<StoredSignal>, StoreError>> {
        let after = i64::try_from(seq).unwrap_or(i64::MAX);
        self.read("(pending signals)", move |conn| {
            rows::read_signals_after(conn, after)
        })
    }

    fn claim<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
        lease_until_ms: u64,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        self.claim_run(thread, owner, lease_until_ms, now_ms)
    }

    fn release<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.release_run(thread, owner, false)
    }

    fn release_runnable<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.release_run(thread, owner, true)
    }

    fn renew_claim<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.renew_run(thread, owner, lease_until_ms)
    }

    fn put_checkpoint_claimed<'a>(
        &'a self,
        checkpoint: Checkpoint,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        self.put_checkpoint_fenced(checkpoint, owner, Some(lease_until_ms))
    }

    fn put_checkpoint_and_release<'a>(
        &'a self,
        checkpoint: Checkpoint,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        self.put_checkpoint_fenced(checkpoint, owner, None)
    }

    fn put_journal_claimed<'a>(
        &'a self,
        key: JournalKey,
        value: Value,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.put_journal_fenced(key, &value, &[], owner, lease_until_ms)
    }

    fn put_journal_audited<'a>(
        &'a self,
        key: JournalKey,
        value: Value,
        audit: Vec<AuditEntry>,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.put_journal_fenced(key, &value, &audit, owner, lease_until_ms)
    }

    fn append_audit(&self, entries: Vec<AuditEntry>) -> BoxFuture<'_, Result<(), StoreError>> {
        self.append_audit_rows(entries)
    }

    fn audit<'a>(
        &'a self,
        query: &'a AuditQuery,
    ) -> BoxFuture<'a, Result<Vec<AuditEntry>, StoreError>> {
        self.read_audit(query)
    }

    fn prune_audit(&self, before_ms: u64) -> BoxFuture<'_, Result<u64, StoreError>> {
        self.prune_audit_rows(before_ms)
    }

    fn prune_signals<'a>(
        &'a self,
        sent_before_ms: u64,
        spare: &'a [String],
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        self.prune_signal_rows(sent_before_ms, spare)
    }

    fn take_signal_claimed<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
        journal: (JournalKey, Value),
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.take_signal_fenced(session, seq, journal, owner, lease_until_ms)
    }

    fn try_take_signal<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.try_take(session, seq)
    }

    fn submit_run<'a>(
        &'a self,
        thread: &'a str,
        graph: &'a str,
        input: Value,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Submitted, StoreError>> {
        self.submit(thread, graph, &input, now_ms)
    }

    fn claim_next_run<'a>(
        &'a self,
        graphs: &'a [String],
        owner: &'a str,
        lease_until_ms: u64,
        now_ms: u64,
        due_ms: u64,
    ) -> BoxFuture<'a, Result<Option<ClaimedRun>, StoreError>> {
        self.claim_runnable(None, graphs, owner, lease_until_ms, (now_ms, due_ms))
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
        self.claim_runnable(
            Some((thread, signal)),
            graphs,
            owner,
            lease_until_ms,
            (now_ms, 0),
        )
    }

    fn get_run<'a>(
        &'a self,
        thread: &'a str,
    ) -> BoxFuture<'a, Result<Option<RunRecord>, StoreError>> {
        self.read_run(thread)
    }

    fn cancels_requested<'a>(
        &'a self,
        threads: &'a [Arc<str>],
    ) -> BoxFuture<'a, Result<Vec<Arc<str>>, StoreError>> {
        self.read_cancels(threads)
    }

    fn list_runs<'a>(
        &'a self,
        filter: &'a RunFilter,
    ) -> BoxFuture<'a, Result<Vec<RunRecord>, StoreError>> {
        self.query_runs(filter)
    }

    fn request_cancel<'a>(
        &'a self,
        thread: &'a str,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Option<RunRecord>, StoreError>> {
        self.request_cancel_run(thread, now_ms)
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
        self.delete_claimed_thread(thread, owner)
    }

    fn next_wake_at_ms<'a>(
        &'a self,
        graphs: &'a [String],
        due_ms: u64,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        self.next_wake(graphs, due_ms)
    }

    /// `PRAGMA data_version` on a connection of its own: a few microseconds, no disk read
    /// beyond the WAL index, so a worker may ask every few milliseconds.
    fn change_counter(&self) -> Option<u64> {
        crate::sync::lock(&self.probe)
            .query_row("PRAGMA data_version", [], |row| row.get::<_, i64>(0))
            .ok()
            .and_then(|v| u64::try_from(v).ok())
    }
}
