//! The writes, and the writer: the only connection that writes, and the grouped commit.
//!
//! Requests arrive over a queue. The writer thread takes every request already queued, runs
//! them all in one transaction and commits once, so that with `synchronous = FULL`
//! concurrent runs share one fsync; then it answers each request. While it waits on the
//! disk, new requests queue up and form the next group: the busier the store, the larger
//! the groups, with no timer and no added latency for a lone writer. At `NORMAL` a caller
//! who finds the connection free commits the group itself (see [`Writer::submit`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::oneshot;

use super::Synchronous;
use super::audit;
use super::committer::Committer;
use super::followed::Followed;
use super::housekeeping;
use super::runs::RunOp;
use crate::runtime::store::audit::AuditRow;
use crate::runtime::store::{Claim, DeletedThread, RunRecord, SignalPush, StoreError, Submitted};

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
    /// Whether it ends its run for good, and deletes the thread's journal (see
    /// `Checkpoint::ends_run`).
    pub(super) ends_run: bool,
    /// How many checkpoints its thread keeps once it is written (see
    /// [`SqliteOptions::retention`](super::SqliteOptions::retention)); only on a top-level
    /// row that is not `running`.
    pub(super) retain: Option<usize>,
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
    /// Who sent it, for its `signal_sent` entry (see `audit::sent_by`).
    pub(super) sent_by: Option<String>,
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
    /// Removes a pending signal nobody received: no entry says it was.
    DiscardSignal {
        session: String,
        seq: i64,
    },
    /// A claim, or a write under one (see `runs.rs`).
    Runs(RunOp),
    AppendAudit(Vec<AuditRow>),
    /// Deletes audit entries older than this (ms since the epoch).
    PruneAudit(i64),
    /// Drops pending signals sent before `before_ms` to sessions with no unfinished run,
    /// but those of `spare` (a JSON array of session names).
    PruneSignals {
        before_ms: i64,
        spare: String,
    },
    /// Deletes everything a thread keeps, if `owner` holds its run (see
    /// `Store::delete_thread`).
    DeleteThread {
        thread: String,
        owner: String,
    },
}

impl Op {
    /// The thread or session the write concerns, for error messages.
    pub(super) fn thread(&self) -> &str {
        match self {
            Self::PutCheckpoint(row) => &row.thread,
            Self::PutJournal(row) => &row.thread,
            Self::PushSignal(row) => &row.session,
            Self::TakeSignal { session, .. } | Self::DiscardSignal { session, .. } => session,
            Self::Runs(op) => op.thread(),
            Self::DeleteThread { thread, .. } => thread,
            // The entries' thread, when they name one (a run's entries all do).
            Self::AppendAudit(rows) => match rows.first() {
                Some(first) if rows.iter().all(|row| row.thread == first.thread) => &first.thread,
                _ => "(audit)",
            },
            Self::PruneAudit(_) => "(audit)",
            Self::PruneSignals { .. } => "(signals)",
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
    pub(super) fn needs_sync(&self) -> bool {
        match self {
            Self::PutCheckpoint(row) => row.needs_sync,
            Self::Runs(op) => op.needs_sync(),
            _ => true,
        }
    }

    pub(super) fn apply(
        &self,
        conn: &Connection,
        followed: &mut Followed,
        now_ms: i64,
    ) -> rusqlite::Result<Outcome> {
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
                let mut sent = AuditRow::signal_sent(
                    &row.session,
                    &row.name,
                    seq,
                    &row.payload,
                    row.idempotency_key.as_deref(),
                    row.sent_at_ms,
                );
                sent.actor = row.sent_by.clone();
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
            Self::DiscardSignal { session, seq } => {
                remove_pending(conn, session, *seq, now_ms)?;
                Ok(Outcome::Done)
            }
            Self::Runs(op) => op.apply(conn, followed, now_ms),
            Self::AppendAudit(rows) => {
                audit::append(conn, rows)?;
                Ok(Outcome::Done)
            }
            Self::PruneAudit(before_ms) => Ok(Outcome::Count(audit::prune(conn, *before_ms)?)),
            Self::PruneSignals { before_ms, spare } => Ok(Outcome::Count(prune_signals(
                conn, *before_ms, spare, now_ms,
            )?)),
            Self::DeleteThread { thread, owner } => {
                housekeeping::delete_thread(conn, followed, (thread, owner), now_ms)
            }
        }
    }
}

pub(super) fn put_checkpoint(conn: &Connection, row: &CheckpointRow) -> rusqlite::Result<u64> {
    conn.prepare_cached(
        "INSERT INTO checkpoints (id, thread, run, namespace, step, status, body, error)
         VALUES (
             (SELECT CASE WHEN checkpoint_id_floor = 0 THEN NULL
                 ELSE max(ifnull((SELECT max(id) FROM checkpoints), 0), checkpoint_id_floor) + 1
                 END FROM meta),
             ?1, ?2, ?3, ?4, ?5, ?6, ?7
         )",
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
    if let Some(limit) = row.retain {
        // Before the journal is tidied: a suspension retention drops takes what its step
        // journaled with it.
        super::retention::prune_thread(conn, &row.thread, limit)?;
    }
    if row.ends_run {
        // See `Checkpoint::ends_run`. What the step of an interrupted checkpoint journaled
        // before it suspended stays, for a fork of it to replay.
        conn.prepare_cached(
            "DELETE FROM journal WHERE thread = ?1 AND NOT EXISTS (
                 SELECT 1 FROM checkpoints c
                 WHERE c.thread = journal.thread AND c.run = journal.run
                   AND c.namespace = journal.namespace AND c.step + 1 = journal.step
                   AND c.status = 'interrupted')",
        )?
        .execute(params![row.thread])?;
    }
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
    let Some(name) = remove_pending(conn, session, seq, now_ms)? else {
        return Ok(false);
    };
    let received = AuditRow::signal_received(session, name, seq, run, now_ms);
    audit::append(conn, std::slice::from_ref(&received))?;
    Ok(true)
}

/// Removes a pending signal; returns its name if it was still pending. Without a key
/// nothing needs remembering; with one, the row stays (payload dropped) until pruned, so
/// that a retried send is still a duplicate.
fn remove_pending(
    conn: &Connection,
    session: &str,
    seq: i64,
    now_ms: i64,
) -> rusqlite::Result<Option<String>> {
    let name: Option<String> = conn
        .prepare_cached(
            "SELECT name FROM signals
             WHERE seq = ?1 AND session = ?2 AND consumed_at_ms IS NULL",
        )?
        .query_row(params![seq, session], |row| row.get(0))
        .optional()?;
    if name.is_none() {
        return Ok(None);
    }
    conn.prepare_cached(
        "DELETE FROM signals
             WHERE seq = ?1 AND session = ?2 AND idempotency_key IS NULL",
    )?
    .execute(params![seq, session])?;
    conn.prepare_cached(
        "UPDATE signals SET consumed_at_ms = ?3, payload = NULL
         WHERE seq = ?1 AND session = ?2 AND consumed_at_ms IS NULL",
    )?
    .execute(params![seq, session, now_ms])?;
    Ok(name)
}

/// Drops the pending signals sent before `before_ms` to sessions with no unfinished run
/// (none, or one that completed, failed or was cancelled), but those of `spare` (a JSON
/// array): those without an idempotency key are deleted, the others kept as consumed
/// (payload dropped) until pruned, as [`take_signal`] keeps them. Returns how many.
fn prune_signals(
    conn: &Connection,
    before_ms: i64,
    spare: &str,
    now_ms: i64,
) -> rusqlite::Result<u64> {
    const ORPHAN: &str = "consumed_at_ms IS NULL AND sent_at_ms < ?1
        AND session NOT IN (SELECT value FROM json_each(?2))
        AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.thread = signals.session
                        AND (runs.lease_owner IS NOT NULL
                             OR runs.status NOT IN ('completed', 'failed', 'cancelled')))";
    let deleted = conn
        .prepare_cached(&format!(
            "DELETE FROM signals WHERE idempotency_key IS NULL AND {ORPHAN}"
        ))?
        .execute(params![before_ms, spare])?;
    let consumed = conn
        .prepare_cached(&format!(
            "UPDATE signals SET consumed_at_ms = ?3, payload = NULL
             WHERE idempotency_key IS NOT NULL AND {ORPHAN}"
        ))?
        .execute(params![before_ms, spare, now_ms])?;
    Ok((deleted + consumed) as u64)
}

pub(super) fn put_journal(conn: &Connection, row: &JournalRow) -> rusqlite::Result<()> {
    let inserted = conn
        .prepare_cached(
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
    // A key that has a value already keeps it, and the entries that describe it: a write
    // repeated (an acknowledgement lost) adds none again.
    match inserted {
        0 => Ok(()),
        _ => audit::append(conn, &row.audit),
    }
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
    /// What a thread's delete removed.
    Deleted(DeletedThread),
}

/// A claimed run's row (which may not decode) and its input as stored.
pub(super) type ClaimedRow = (Result<RunRecord, StoreError>, Option<String>);

/// A write and where its answer goes, once committed.
pub(super) struct Request {
    pub(super) op: Op,
    pub(super) reply: oneshot::Sender<Result<Outcome, StoreError>>,
}

/// The handle on the writer. Dropping it lets the thread commit what is queued, close the
/// connection and exit, and waits for that.
pub(super) struct Writer {
    tx: Option<mpsc::Sender<Request>>,
    shared: Arc<Shared>,
    /// The writer thread, to wake it.
    waker: std::thread::Thread,
    thread: Option<JoinHandle<()>>,
    /// Whether a caller who finds the connection free commits its write itself: at
    /// [`Synchronous::Normal`], where a commit does not wait on the disk.
    inline: bool,
}

/// What the writer thread and the callers share.
struct Shared {
    /// `None` once the thread has closed the connection.
    committer: Mutex<Option<Committer>>,
    counters: Counters,
    /// The WAL is due a checkpoint: callers queue their writes rather than commit them, so
    /// that the thread gets the connection and checkpoints before the WAL grows further.
    checkpoint_due: AtomicBool,
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
    /// Starts the thread that commits on `conn`, whose commits sync as `sync` says.
    pub(super) fn spawn(conn: Connection, sync: Synchronous) -> Result<Self, StartError> {
        let (tx, rx) = mpsc::channel();
        let committer = Committer::new(conn, sync, rx).map_err(StartError::Sqlite)?;
        let shared = Arc::new(Shared {
            committer: Mutex::new(Some(committer)),
            counters: Counters::default(),
            checkpoint_due: AtomicBool::new(false),
        });
        let for_thread = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("loomflow-sqlite-writer".into())
            .spawn(move || run(&for_thread))
            .map_err(StartError::Thread)?;
        Ok(Self {
            tx: Some(tx),
            shared,
            waker: thread.thread().clone(),
            thread: Some(thread),
            inline: sync == Synchronous::Normal,
        })
    }

    /// Writes and transactions committed so far.
    pub(super) fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// Commits a request, or queues it for the thread; either way its answer goes to its
    /// reply channel once it is committed.
    ///
    /// At [`Synchronous::Normal`] a caller who finds the connection free commits everything
    /// queued and then its own write, on its own thread: a lone run's step costs no handoff
    /// to the writer thread and back. Busy, it queues as at `FULL`, and the writes waiting
    /// together form the next group. A commit never waits on the disk there, and checkpoints
    /// of the WAL are left to the writer thread.
    pub(super) fn submit(&self, request: Request) -> Result<(), StoreError> {
        if self.inline
            && !self.shared.checkpoint_due.load(Ordering::Acquire)
            && let Ok(mut guard) = self.shared.committer.try_lock()
            && let Some(committer) = guard.as_mut()
        {
            let mut group = Vec::new();
            committer.take_queued(&mut group); // those queued earlier go first
            group.push(request);
            committer.commit_group(&mut group, &self.shared.counters);
            if committer.checkpoint_due() {
                self.shared.checkpoint_due.store(true, Ordering::Release);
                self.waker.unpark();
            }
            return Ok(());
        }
        self.tx
            .as_ref()
            .ok_or(StoreError::Closed)?
            .send(request)
            .map_err(|_| StoreError::Closed)?;
        self.waker.unpark();
        Ok(())
    }
}

/// Why the writer did not start.
#[derive(Debug)]
pub(super) enum StartError {
    Sqlite(rusqlite::Error),
    Thread(std::io::Error),
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.tx = None; // the thread sees the queue close once it has drained it
        self.waker.unpark();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the sqlite writer thread panicked");
        }
    }
}

/// The writer thread: woken by each request queued (and by a caller who finds a checkpoint
/// of the WAL due), it commits what is queued, checkpoints when due, and sleeps. Once the
/// queue is closed and empty it closes the connection.
fn run(shared: &Shared) {
    loop {
        let mut guard = crate::sync::lock(&shared.committer);
        let Some(committer) = guard.as_mut() else {
            return;
        };
        // A checkpoint a caller found due comes before more writes.
        if committer.checkpoint_due() {
            committer.checkpoint();
            shared.checkpoint_due.store(false, Ordering::Release);
        }
        let open = committer.commit_queued(&shared.counters);
        if committer.checkpoint_due() {
            committer.checkpoint();
            shared.checkpoint_due.store(false, Ordering::Release);
        }
        if !open {
            *guard = None; // closes the connection
            return;
        }
        drop(guard);
        // A request queued since is not missed: its `unpark` makes this return at once.
        std::thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(thread: &str) -> AuditRow {
        AuditRow {
            thread: thread.to_owned(),
            run: 1,
            at_ms: 0,
            kind: "interrupt",
            subject: "ask#0".to_owned(),
            actor: None,
            detail: None,
        }
    }

    /// A failed audit write names the thread its entries are about.
    #[test]
    fn an_audit_write_names_its_entries_thread() {
        assert_eq!(Op::AppendAudit(vec![row("t"), row("t")]).thread(), "t");
        assert_eq!(
            Op::AppendAudit(vec![row("t"), row("u")]).thread(),
            "(audit)"
        );
        assert_eq!(Op::AppendAudit(Vec::new()).thread(), "(audit)");
    }

    /// A failed take of a signal by a claimed run names the run's thread, whose claim it
    /// checks, not the session the signal was sent to.
    #[test]
    fn a_claimed_take_names_the_runs_thread() {
        let journal = JournalRow {
            thread: "run-thread".to_owned(),
            run: 1,
            namespace: String::new(),
            step: 1,
            node: "wait".to_owned(),
            name: "signal".to_owned(),
            occurrence: 0,
            value: "null".to_owned(),
            audit: Vec::new(),
        };
        let take = super::super::runs::RunOp::TakeSignal {
            session: "user-7".to_owned(),
            seq: 3,
            journal,
            owner: "worker".to_owned(),
            until_ms: 0,
        };
        assert_eq!(Op::Runs(take).thread(), "run-thread");
    }
}
