//! The writer thread: the only connection that writes, and the grouped commit.
//!
//! Requests arrive over a channel. The thread takes every request already queued (up to
//! [`MAX_GROUP`]), runs them all in one transaction and commits once, so that with
//! `synchronous = FULL` concurrent runs share one fsync; then it answers each request. While
//! it waits on the disk, new requests queue up and form the next group: the busier the
//! store, the larger the groups, with no timer and no added latency for a lone writer.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use tokio::sync::oneshot;

use super::Synchronous;
use super::audit;
use super::runs::RunOp;
use crate::runtime::store::audit::AuditRow;
use crate::runtime::store::{Claim, RunRecord, SignalPush, StoreError, Submitted};

/// The most requests committed together; bounds the time any one of them waits.
const MAX_GROUP: usize = 1024;

/// A consumed signal's idempotency key is kept at least this long.
const KEEP_CONSUMED_MS: i64 = 3_600_000;

/// How often the writer deletes consumed signals older than [`KEEP_CONSUMED_MS`].
const PRUNE_EVERY_MS: i64 = 60_000;

/// A checkpoint, ready for its row.
pub(super) struct CheckpointRow {
    pub(super) thread: String,
    pub(super) run: i64,
    pub(super) namespace: String,
    pub(super) step: i64,
    pub(super) status: &'static str,
    pub(super) body: String,
    pub(super) error: Option<String>,
    /// Audit entries written with it.
    pub(super) audit: Vec<AuditRow>,
    /// Whether its commit must reach the disk before it is answered (see
    /// [`Op::needs_sync`]).
    pub(super) needs_sync: bool,
}

/// A journal entry, ready for its row.
pub(super) struct JournalRow {
    pub(super) thread: String,
    pub(super) run: i64,
    pub(super) namespace: String,
    pub(super) step: i64,
    pub(super) node: String,
    pub(super) name: String,
    pub(super) occurrence: i64,
    pub(super) value: String,
    /// Audit entries written with it (a tool call's).
    pub(super) audit: Vec<AuditRow>,
}

/// A signal, ready for its row.
pub(super) struct SignalRow {
    pub(super) session: String,
    pub(super) name: String,
    pub(super) payload: String,
    pub(super) idempotency_key: Option<String>,
    pub(super) sent_at_ms: i64,
}

/// One write.
pub(super) enum Op {
    PutCheckpoint(CheckpointRow),
    PutJournal(JournalRow),
    PushSignal(SignalRow),
    TakeSignal {
        session: String,
        seq: i64,
        journal: Option<JournalRow>,
    },
    /// A claim, or a write under one (see `runs.rs`).
    Runs(RunOp),
    AppendAudit(Vec<AuditRow>),
    /// Deletes audit entries older than this (ms since the epoch).
    PruneAudit(i64),
}

impl Op {
    /// The thread or session the write concerns, for error messages.
    fn thread(&self) -> &str {
        match self {
            Self::PutCheckpoint(row) => &row.thread,
            Self::PutJournal(row) => &row.thread,
            Self::PushSignal(row) => &row.session,
            Self::TakeSignal { session, .. } => session,
            Self::Runs(op) => op.thread(),
            Self::AppendAudit(_) | Self::PruneAudit(_) => "(audit)",
        }
    }

    /// Whether the write must be on the disk before it is answered, when the store syncs
    /// each commit ([`Synchronous::Full`](super::Synchronous::Full)).
    ///
    /// Writes that only take, renew or let go of a claim, and the checkpoint of a run's
    /// input, record no work: a power cut that takes them back leaves every run as if they
    /// had not been made (a claim lost with its process is one that ran out). A group of
    /// such writes alone is committed without an fsync; the next synced commit takes them
    /// to the disk with it, the WAL being written in order.
    fn needs_sync(&self) -> bool {
        match self {
            Self::PutCheckpoint(row) => row.needs_sync,
            Self::Runs(op) => op.needs_sync(),
            _ => true,
        }
    }

    fn apply(&self, conn: &Connection, now_ms: i64) -> rusqlite::Result<Outcome> {
        match self {
            Self::PutCheckpoint(row) => Ok(Outcome::Id(put_checkpoint(conn, row)?)),
            Self::PutJournal(row) => {
                put_journal(conn, row)?;
                Ok(Outcome::Done)
            }
            Self::PushSignal(row) => {
                let inserted = conn
                    .prepare_cached(
                        "INSERT OR IGNORE INTO signals
                         (session, name, payload, idempotency_key, sent_at_ms)
                         VALUES (?1, ?2, ?3, ?4, ?5)",
                    )?
                    .execute(params![
                        row.session,
                        row.name,
                        row.payload,
                        row.idempotency_key,
                        row.sent_at_ms
                    ])?;
                if inserted == 0 {
                    return Ok(Outcome::Push(SignalPush::Duplicate));
                }
                let seq = conn.last_insert_rowid();
                let sent = AuditRow::signal_sent(
                    &row.session,
                    &row.name,
                    seq,
                    &row.payload,
                    row.idempotency_key.as_deref(),
                    row.sent_at_ms,
                );
                audit::append(conn, std::slice::from_ref(&sent))?;
                Ok(Outcome::Push(SignalPush::Stored(
                    u64::try_from(seq).unwrap_or_default(),
                )))
            }
            Self::TakeSignal {
                session,
                seq,
                journal,
            } => {
                let run = journal.as_ref().map_or(0, |row| row.run);
                take_signal(conn, session, *seq, now_ms, run)?;
                if let Some(row) = journal {
                    put_journal(conn, row)?;
                }
                Ok(Outcome::Done)
            }
            Self::Runs(op) => op.apply(conn, now_ms),
            Self::AppendAudit(rows) => {
                audit::append(conn, rows)?;
                Ok(Outcome::Done)
            }
            Self::PruneAudit(before_ms) => Ok(Outcome::Count(audit::prune(conn, *before_ms)?)),
        }
    }
}

pub(super) fn put_checkpoint(conn: &Connection, row: &CheckpointRow) -> rusqlite::Result<u64> {
    conn.prepare_cached(
        "INSERT INTO checkpoints (thread, run, namespace, step, status, body, error)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        row.thread,
        row.run,
        row.namespace,
        row.step,
        row.status,
        row.body,
        row.error
    ])?;
    // Row ids are positive, so the conversion only guards against the impossible.
    let id = u64::try_from(conn.last_insert_rowid()).unwrap_or_default();
    audit::append(conn, &row.audit)?;
    Ok(id)
}

/// Consumes a pending signal, auditing its receipt by `run` (0 outside one); returns
/// whether it was still pending.
pub(super) fn take_signal(
    conn: &Connection,
    session: &str,
    seq: i64,
    now_ms: i64,
    run: i64,
) -> rusqlite::Result<bool> {
    let name: Option<String> = conn
        .prepare_cached(
            "SELECT name FROM signals
             WHERE seq = ?1 AND session = ?2 AND consumed_at_ms IS NULL",
        )?
        .query_row(params![seq, session], |row| row.get(0))
        .optional()?;
    let Some(name) = name else {
        return Ok(false);
    };
    // Without a key nothing needs remembering; with one, the row stays (payload dropped)
    // until pruned, so that a retried send is still a duplicate.
    let deleted = conn
        .prepare_cached(
            "DELETE FROM signals
             WHERE seq = ?1 AND session = ?2 AND idempotency_key IS NULL",
        )?
        .execute(params![seq, session])?;
    let consumed = conn
        .prepare_cached(
            "UPDATE signals SET consumed_at_ms = ?3, payload = NULL
             WHERE seq = ?1 AND session = ?2 AND consumed_at_ms IS NULL",
        )?
        .execute(params![seq, session, now_ms])?;
    let received = AuditRow::signal_received(session, name, seq, run, now_ms);
    audit::append(conn, std::slice::from_ref(&received))?;
    Ok(deleted + consumed > 0)
}

pub(super) fn put_journal(conn: &Connection, row: &JournalRow) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT OR IGNORE INTO journal
         (thread, run, namespace, step, node, name, occurrence, value)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        row.thread,
        row.run,
        row.namespace,
        row.step,
        row.node,
        row.name,
        row.occurrence,
        row.value
    ])?;
    audit::append(conn, &row.audit)
}

/// What a write produced.
#[derive(Debug)]
pub(super) enum Outcome {
    /// A new checkpoint's id.
    Id(u64),
    /// Nothing to report.
    Done,
    /// How many rows a delete removed.
    Count(u64),
    /// What `push_signal` did.
    Push(SignalPush),
    /// What `claim` found.
    Claim(Claim),
    /// Whether a signal was still pending when it was taken.
    Taken(bool),
    /// A write under a claim found the lease held by someone else; nothing was written.
    LeaseLost,
    /// What `submit_run` did (or a row that did not decode).
    Submitted(Box<Result<Submitted, StoreError>>),
    /// The run a worker claimed (its row, which may not decode, and its input), if any.
    Runnable(Box<Option<ClaimedRow>>),
    /// A run's row after a change.
    Record(Box<Option<Result<RunRecord, StoreError>>>),
}

/// A claimed run's row (which may not decode) and its input as stored.
pub(super) type ClaimedRow = (Result<RunRecord, StoreError>, Option<String>);

/// A write and where its answer goes, once committed.
pub(super) struct Request {
    pub(super) op: Op,
    pub(super) reply: oneshot::Sender<Result<Outcome, StoreError>>,
}

/// The handle on the writer thread. Dropping it lets the thread commit what is queued, close
/// the connection and exit, and waits for that.
pub(super) struct Writer {
    tx: Option<mpsc::Sender<Request>>,
    thread: Option<JoinHandle<()>>,
    counters: Arc<Counters>,
}

/// What the writer has done so far.
#[derive(Debug, Default)]
pub(super) struct Counters {
    /// Writes committed.
    pub(super) writes: AtomicU64,
    /// Transactions committed.
    pub(super) commits: AtomicU64,
    /// Transactions committed with an fsync of their own (see `Op::needs_sync`).
    pub(super) synced: AtomicU64,
}

impl Writer {
    /// Starts the thread that owns `conn`, whose commits sync as `sync` says.
    pub(super) fn spawn(conn: Connection, sync: Synchronous) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let counters = Arc::new(Counters::default());
        let shared = Arc::clone(&counters);
        let thread = std::thread::Builder::new()
            .name("loomflow-sqlite-writer".into())
            .spawn(move || run(Syncing::new(conn, sync), &rx, &shared))?;
        Ok(Self {
            tx: Some(tx),
            thread: Some(thread),
            counters,
        })
    }

    /// Writes and transactions committed so far.
    pub(super) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Queues a request.
    pub(super) fn send(&self, request: Request) -> Result<(), StoreError> {
        self.tx
            .as_ref()
            .ok_or(StoreError::Closed)?
            .send(request)
            .map_err(|_| StoreError::Closed)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.tx = None; // the thread sees the channel close once it has drained it
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the sqlite writer thread panicked");
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The writer's connection and the `synchronous` level it is at.
///
/// At [`Synchronous::Full`], a group whose writes record no work (`Op::needs_sync`) is
/// committed at `NORMAL`: SQLite's level is per connection and read at each commit. In WAL
/// mode the next commit at `FULL` syncs the log up to its own end, taking the unsynced
/// commits before it to the disk as well.
struct Syncing {
    conn: Connection,
    /// Whether the store syncs each commit at all.
    full: bool,
    /// Whether the connection is at `FULL` now.
    at_full: bool,
}

impl Syncing {
    fn new(conn: Connection, sync: Synchronous) -> Self {
        let full = sync == Synchronous::Full;
        Self {
            conn,
            full,
            at_full: full,
        }
    }

    /// Sets the level for the next commit; whether that commit syncs.
    fn prepare(&mut self, group: &[Request]) -> bool {
        let sync = self.full && group.iter().any(|request| request.op.needs_sync());
        if self.full && sync != self.at_full {
            let level = if sync { "FULL" } else { "NORMAL" };
            match self.conn.pragma_update(None, "synchronous", level) {
                Ok(()) => self.at_full = sync,
                // Left as it was: at FULL, the commit syncs anyway.
                Err(error) => tracing::warn!(%error, level, "could not set the sync level"),
            }
        }
        self.at_full
    }
}

fn run(mut conn: Syncing, rx: &mpsc::Receiver<Request>, counters: &Counters) {
    let mut last_prune = i64::MIN;
    let mut group = Vec::new();
    while let Ok(first) = rx.recv() {
        group.push(first);
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(request) => group.push(request),
                Err(_) => break,
            }
        }
        let now = now_ms();
        if now.saturating_sub(last_prune) >= PRUNE_EVERY_MS {
            last_prune = now;
            prune(&conn.conn, now);
        }
        commit_group(&mut conn, &mut group, now, counters);
    }
}

/// Commits `group` and answers every request in it, leaving it empty.
///
/// A write that fails (a constraint, a trigger) is answered with its error and the group
/// is run again without it, so it does not take the others down; a failure of the
/// transaction itself (the disk, a lock held past the busy timeout) is every write's.
fn commit_group(conn: &mut Syncing, group: &mut Vec<Request>, now_ms: i64, counters: &Counters) {
    while !group.is_empty() {
        let synced = conn.prepare(group);
        match commit(&mut conn.conn, group, now_ms) {
            Ok(outcomes) => {
                counters.commits.fetch_add(1, Ordering::Relaxed);
                if synced {
                    counters.synced.fetch_add(1, Ordering::Relaxed);
                }
                counters
                    .writes
                    .fetch_add(outcomes.len() as u64, Ordering::Relaxed);
                for (request, outcome) in group.drain(..).zip(outcomes) {
                    // The caller may have stopped waiting; its write is committed anyway.
                    let _ = request.reply.send(Ok(outcome));
                }
            }
            Err(Failure::Op(index, error)) => {
                let request = group.remove(index);
                let _ = request.reply.send(Err(write_error(&request.op, &error)));
            }
            Err(Failure::Transaction(error)) => {
                for request in group.drain(..) {
                    let _ = request.reply.send(Err(write_error(&request.op, &error)));
                }
            }
        }
    }
}

fn write_error(op: &Op, error: &rusqlite::Error) -> StoreError {
    StoreError::Write {
        thread: op.thread().to_owned(),
        message: error.to_string(),
    }
}

/// Why a group did not commit.
enum Failure {
    /// The write at this index failed.
    Op(usize, rusqlite::Error),
    /// Beginning or committing the transaction failed.
    Transaction(rusqlite::Error),
}

/// Runs the group's writes in one transaction and commits it: one fsync for them all.
fn commit(conn: &mut Connection, group: &[Request], now_ms: i64) -> Result<Vec<Outcome>, Failure> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(Failure::Transaction)?;
    let outcomes = group
        .iter()
        .enumerate()
        .map(|(i, request)| {
            request.op.apply(&tx, now_ms).map_err(|e| {
                if concerns_one_write(&e) {
                    Failure::Op(i, e)
                } else {
                    Failure::Transaction(e)
                }
            })
        })
        .collect::<Result<Vec<_>, _>>()?; // dropping `tx` rolls the group back
    tx.commit().map_err(Failure::Transaction)?;
    Ok(outcomes)
}

/// Whether an error is about the write that hit it (a constraint, a trigger, a value too
/// big) rather than about the database (the disk is full, an I/O error, a lock): only the
/// former is worth retrying the group without that write.
fn concerns_one_write(error: &rusqlite::Error) -> bool {
    match error {
        rusqlite::Error::SqliteFailure(e, _) => matches!(
            e.code,
            rusqlite::ErrorCode::ConstraintViolation
                | rusqlite::ErrorCode::TooBig
                | rusqlite::ErrorCode::TypeMismatch
        ),
        _ => true, // errors rusqlite raises itself are about the statement's values
    }
}

/// Forgets consumed signals whose key has been remembered long enough. Best effort: a
/// failure is logged and retried at the next prune.
fn prune(conn: &Connection, now_ms: i64) {
    let result = conn
        .prepare_cached(
            "DELETE FROM signals WHERE consumed_at_ms IS NOT NULL AND consumed_at_ms < ?1",
        )
        .and_then(|mut stmt| stmt.execute([now_ms.saturating_sub(KEEP_CONSUMED_MS)]));
    if let Err(error) = result {
        tracing::warn!(%error, "pruning consumed signals failed");
    }
}
