//! The `runs` table: one row per thread for its current run, with the lease that lets at
//! most one execution at a time carry it on, and the writes made under that lease.
//!
//! Every operation here is one request to the writer thread, so it runs inside one
//! `BEGIN IMMEDIATE` transaction: the lease check and the write it guards cannot be split by
//! another connection (another process on the same file). A write whose lease is lost
//! answers [`Outcome::LeaseLost`] without writing anything, so the rest of its group commits.

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use super::rows::{corrupt, to_json, to_u64};
use super::writer::{self, CheckpointRow, JournalRow, Op, Outcome};
use super::{SqliteStore, checkpoint_row, journal_row, to_i64, unexpected};
use crate::runtime::store::{
    Checkpoint, Claim, ClaimedRun, JournalKey, RowUpdate, RunFilter, RunRecord, RunState,
    StoreError, Submitted,
};
use futures_util::future::BoxFuture;

/// Migration step 2 -> 3: the `runs` table and its leases.
pub(super) const MIGRATION: &str = "
    CREATE TABLE runs (
        thread TEXT PRIMARY KEY,
        run INTEGER NOT NULL DEFAULT 0,
        status TEXT,
        lease_owner TEXT,
        lease_until_ms INTEGER NOT NULL DEFAULT 0,
        attempts INTEGER NOT NULL DEFAULT 0,
        created_at_ms INTEGER NOT NULL,
        updated_at_ms INTEGER NOT NULL
    ) WITHOUT ROWID;";

/// Migration step 3 -> 4: what workers and run queries need. `status` becomes a
/// [`RunState`] word; `runnable_at_ms` is when a worker may carry the run on without a
/// signal (0 for queued and running runs, the wake time of a suspended one, NULL for a
/// finished one), indexed so that finding work reads only runnable rows. Rows suspended
/// before this version stay `interrupted` with no wake time: `recover` carries them on.
pub(super) const MIGRATION_WORKER: &str = "
    ALTER TABLE runs ADD COLUMN graph TEXT;
    ALTER TABLE runs ADD COLUMN fingerprint TEXT;
    ALTER TABLE runs ADD COLUMN waiting_on TEXT;
    ALTER TABLE runs ADD COLUMN wake_at_ms INTEGER;
    ALTER TABLE runs ADD COLUMN runnable_at_ms INTEGER;
    ALTER TABLE runs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE runs ADD COLUMN error TEXT;
    ALTER TABLE runs ADD COLUMN input TEXT;
    UPDATE runs SET runnable_at_ms = 0 WHERE status = 'running';
    CREATE INDEX runs_by_runnable_at ON runs (runnable_at_ms) WHERE runnable_at_ms IS NOT NULL;
    CREATE INDEX runs_by_update ON runs (updated_at_ms);
    CREATE INDEX signals_pending ON signals (session, name) WHERE consumed_at_ms IS NULL;";

/// The columns [`record_from_row`] reads, in order.
const RUN_COLUMNS: &str = "thread, run, graph, fingerprint, status, waiting_on, wake_at_ms,
    lease_owner, lease_until_ms, attempts, cancel_requested, error, created_at_ms,
    updated_at_ms";

/// A claim, or a write under one.
pub(super) enum RunOp {
    Claim {
        thread: String,
        owner: String,
        until_ms: i64,
        now_ms: i64,
    },
    Release {
        thread: String,
        owner: String,
    },
    Renew {
        thread: String,
        owner: String,
        until_ms: i64,
    },
    /// With no expiry, the claim is released after the write. A top-level checkpoint
    /// carries what it says about the run's row.
    PutCheckpoint {
        row: CheckpointRow,
        owner: String,
        until_ms: Option<i64>,
        update: Option<RowUpdate>,
    },
    PutJournal {
        row: JournalRow,
        owner: String,
        until_ms: i64,
    },
    TakeSignal {
        session: String,
        seq: i64,
        journal: JournalRow,
        owner: String,
        until_ms: i64,
    },
    TryTakeSignal {
        session: String,
        seq: i64,
    },
    Submit {
        thread: String,
        graph: String,
        input: String,
        now_ms: i64,
    },
    /// With a thread: `claim_waiting_run`; without, `claim_next_run`.
    ClaimRunnable {
        thread: Option<String>,
        /// A JSON array of graph names.
        graphs: String,
        owner: String,
        until_ms: i64,
        now_ms: i64,
        due_ms: i64,
    },
    RequestCancel {
        thread: String,
        now_ms: i64,
    },
    Finish {
        thread: String,
        owner: String,
        state: RunState,
        error: Option<String>,
    },
}

impl RunOp {
    /// The thread or session the operation concerns, for error messages.
    pub(super) fn thread(&self) -> &str {
        match self {
            Self::Claim { thread, .. }
            | Self::Release { thread, .. }
            | Self::Renew { thread, .. } => thread,
            Self::PutCheckpoint { row, .. } => &row.thread,
            Self::PutJournal { row, .. } => &row.thread,
            Self::TakeSignal { session, .. } | Self::TryTakeSignal { session, .. } => session,
            Self::Submit { thread, .. }
            | Self::RequestCancel { thread, .. }
            | Self::Finish { thread, .. } => thread,
            Self::ClaimRunnable { thread, .. } => thread.as_deref().unwrap_or("(next run)"),
        }
    }

    pub(super) fn apply(&self, conn: &Connection, now_ms: i64) -> rusqlite::Result<Outcome> {
        match self {
            Self::Claim {
                thread,
                owner,
                until_ms,
                now_ms: asked_at,
            } => claim(conn, thread, owner, *until_ms, *asked_at),
            Self::Release { thread, owner } => {
                release(conn, thread, owner, now_ms)?;
                Ok(Outcome::Done)
            }
            Self::Renew {
                thread,
                owner,
                until_ms,
            } => Ok(if fence(conn, thread, owner, *until_ms, now_ms)? {
                Outcome::Done
            } else {
                Outcome::LeaseLost
            }),
            Self::PutCheckpoint {
                row,
                owner,
                until_ms,
                update,
            } => {
                if !fence(conn, &row.thread, owner, until_ms.unwrap_or(0), now_ms)? {
                    return Ok(Outcome::LeaseLost);
                }
                if let Some(update) = update {
                    follow(conn, &row.thread, row.run, update)?;
                }
                if until_ms.is_none() {
                    release(conn, &row.thread, owner, now_ms)?;
                }
                Ok(Outcome::Id(writer::put_checkpoint(conn, row)?))
            }
            Self::PutJournal {
                row,
                owner,
                until_ms,
            } => {
                if !fence(conn, &row.thread, owner, *until_ms, now_ms)? {
                    return Ok(Outcome::LeaseLost);
                }
                writer::put_journal(conn, row)?;
                Ok(Outcome::Done)
            }
            Self::TakeSignal {
                session,
                seq,
                journal,
                owner,
                until_ms,
            } => {
                if !fence(conn, &journal.thread, owner, *until_ms, now_ms)? {
                    return Ok(Outcome::LeaseLost);
                }
                let taken = writer::take_signal(conn, session, *seq, now_ms)?;
                if taken {
                    writer::put_journal(conn, journal)?;
                }
                Ok(Outcome::Taken(taken))
            }
            Self::TryTakeSignal { session, seq } => Ok(Outcome::Taken(writer::take_signal(
                conn, session, *seq, now_ms,
            )?)),
            Self::Submit {
                thread,
                graph,
                input,
                now_ms,
            } => submit(conn, thread, graph, input, *now_ms),
            Self::ClaimRunnable {
                thread,
                graphs,
                owner,
                until_ms,
                now_ms,
                due_ms,
            } => {
                let chosen = match thread {
                    Some(thread) => waiting_run(conn, thread, graphs, *now_ms)?,
                    None => next_runnable(conn, graphs, *now_ms, *due_ms)?,
                };
                let Some(thread) = chosen else {
                    return Ok(Outcome::Runnable(Box::new(None)));
                };
                conn.prepare_cached(
                    "UPDATE runs SET lease_owner = ?2, lease_until_ms = ?3,
                                     attempts = attempts + 1, updated_at_ms = ?4,
                                     runnable_at_ms = CASE WHEN status IN ('waiting', 'sleeping', 'interrupted') THEN 0 ELSE runnable_at_ms END
                     WHERE thread = ?1",
                )?
                .execute(params![thread, owner, until_ms, now_ms])?;
                let claimed = conn
                    .prepare_cached(&format!(
                        "SELECT {RUN_COLUMNS}, input FROM runs WHERE thread = ?1"
                    ))?
                    .query_row([&thread], |row| Ok((record_from_row(row), row.get(14)?)))
                    .optional()?;
                Ok(Outcome::Runnable(Box::new(claimed)))
            }
            Self::RequestCancel { thread, now_ms } => {
                conn.prepare_cached(
                    "UPDATE runs SET cancel_requested = 1, updated_at_ms = ?2
                     WHERE thread = ?1 AND status IN ('queued', 'running', 'waiting',
                                                      'sleeping', 'interrupted')",
                )?
                .execute(params![thread, now_ms])?;
                Ok(Outcome::Record(Box::new(read_record(conn, thread)?)))
            }
            Self::Finish {
                thread,
                owner,
                state,
                error,
            } => {
                let finished = conn
                    .prepare_cached(
                        "UPDATE runs SET status = ?3, error = ?4, runnable_at_ms = NULL,
                                         wake_at_ms = NULL, waiting_on = NULL, input = NULL,
                                         cancel_requested = 0, lease_owner = NULL,
                                         lease_until_ms = 0, updated_at_ms = ?5
                         WHERE thread = ?1 AND lease_owner = ?2",
                    )?
                    .execute(params![thread, owner, state.as_str(), error, now_ms])?;
                Ok(if finished > 0 {
                    Outcome::Done
                } else {
                    Outcome::LeaseLost
                })
            }
        }
    }
}

/// Makes `thread`'s row follow a top-level checkpoint of run `run`.
fn follow(conn: &Connection, thread: &str, run: i64, update: &RowUpdate) -> rusqlite::Result<()> {
    let waiting_on = (!update.waiting_on.is_empty())
        .then(|| serde_json::to_string(&update.waiting_on).unwrap_or_default());
    let wake = update.wake_at_ms.and_then(|ms| i64::try_from(ms).ok());
    let runnable = update
        .runnable_at_ms()
        .and_then(|ms| i64::try_from(ms).ok());
    conn.prepare_cached(
        "UPDATE runs SET run = ?2, status = ?3, waiting_on = ?4, wake_at_ms = ?5,
                         runnable_at_ms = ?6, graph = COALESCE(?7, graph),
                         fingerprint = COALESCE(?8, fingerprint), error = ?9, input = NULL,
                         cancel_requested = cancel_requested AND ?10
         WHERE thread = ?1",
    )?
    .execute(params![
        thread,
        run,
        update.state.as_str(),
        waiting_on,
        wake,
        runnable,
        update.graph,
        update.fingerprint,
        update.error,
        !update.state.is_finished(),
    ])?;
    Ok(())
}

fn submit(
    conn: &Connection,
    thread: &str,
    graph: &str,
    input: &str,
    now_ms: i64,
) -> rusqlite::Result<Outcome> {
    if let Some(record) = read_record(conn, thread)? {
        let record = match record {
            Ok(record) => record,
            Err(e) => return Ok(Outcome::Submitted(Box::new(Err(e)))),
        };
        let held = record.lease_owner.is_some()
            && i64::try_from(record.lease_until_ms).unwrap_or(i64::MAX) > now_ms;
        if !record.state.is_finished() || held {
            return Ok(Outcome::Submitted(Box::new(Ok(Submitted::Active(
                Box::new(record),
            )))));
        }
    }
    conn.prepare_cached(
        "INSERT INTO runs (thread, status, graph, input, runnable_at_ms, created_at_ms,
                           updated_at_ms)
         VALUES (?1, 'queued', ?2, ?3, 0, ?4, ?4)
         ON CONFLICT (thread) DO UPDATE SET
             status = 'queued', graph = ?2, input = ?3, runnable_at_ms = 0, fingerprint = NULL,
             waiting_on = NULL, wake_at_ms = NULL, cancel_requested = 0, error = NULL,
             lease_owner = NULL, lease_until_ms = 0, attempts = 0, created_at_ms = ?4,
             updated_at_ms = ?4",
    )?
    .execute(params![thread, graph, input, now_ms])?;
    Ok(Outcome::Submitted(Box::new(Ok(Submitted::Queued))))
}

/// The longest-waiting run a worker should carry on now, if any.
fn next_runnable(
    conn: &Connection,
    graphs: &str,
    now_ms: i64,
    due_ms: i64,
) -> rusqlite::Result<Option<String>> {
    // Queued and running rows have `runnable_at_ms` 0: a running one qualifies only once
    // its lease has run out.
    let due: Option<String> = conn
        .prepare_cached(
            "SELECT thread FROM runs
             WHERE runnable_at_ms IS NOT NULL AND runnable_at_ms <= ?2
               AND (lease_owner IS NULL OR lease_until_ms <= ?1)
               AND graph IN (SELECT value FROM json_each(?3))
             ORDER BY runnable_at_ms, updated_at_ms LIMIT 1",
        )?
        .query_row(params![now_ms, due_ms, graphs], |row| row.get(0))
        .optional()?;
    if due.is_some() {
        return Ok(due);
    }
    conn.prepare_cached(
        "SELECT r.thread FROM signals s JOIN runs r ON r.thread = s.session
         WHERE s.consumed_at_ms IS NULL AND r.status IN ('waiting', 'interrupted')
           AND (r.lease_owner IS NULL OR r.lease_until_ms <= ?1)
           AND r.graph IN (SELECT value FROM json_each(?2))
           AND EXISTS (SELECT 1 FROM json_each(r.waiting_on) w WHERE w.value = s.name)
         ORDER BY s.seq LIMIT 1",
    )?
    .query_row(params![now_ms, graphs], |row| row.get(0))
    .optional()
}

/// `thread`, if its run waits for a signal, is of one of `graphs`, and is free.
fn waiting_run(
    conn: &Connection,
    thread: &str,
    graphs: &str,
    now_ms: i64,
) -> rusqlite::Result<Option<String>> {
    conn.prepare_cached(
        "SELECT thread FROM runs
         WHERE thread = ?1 AND status IN ('waiting', 'interrupted')
           AND (lease_owner IS NULL OR lease_until_ms <= ?2)
           AND graph IN (SELECT value FROM json_each(?3))",
    )?
    .query_row(params![thread, now_ms, graphs], |row| row.get(0))
    .optional()
}

/// `thread`'s row; `None` when it has none or never ran.
pub(super) fn read_record(
    conn: &Connection,
    thread: &str,
) -> rusqlite::Result<Option<Result<RunRecord, StoreError>>> {
    conn.prepare_cached(&format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE thread = ?1 AND status IS NOT NULL"
    ))?
    .query_row([thread], |row| Ok(record_from_row(row)))
    .optional()
}

/// Decodes a row of [`RUN_COLUMNS`]. The outer error is SQLite's, the inner a row that
/// does not decode.
fn record_from_row(row: &rusqlite::Row<'_>) -> Result<RunRecord, StoreError> {
    let read = || -> rusqlite::Result<_> {
        Ok((
            row.get::<_, String>(0)?,
            row.get::<_, i64>(1)?,
            row.get::<_, Option<String>>(2)?,
            row.get::<_, Option<String>>(3)?,
            row.get::<_, String>(4)?,
            row.get::<_, Option<String>>(5)?,
            row.get::<_, Option<i64>>(6)?,
            row.get::<_, Option<String>>(7)?,
            row.get::<_, i64>(8)?,
            row.get::<_, i64>(9)?,
            row.get::<_, bool>(10)?,
            row.get::<_, Option<String>>(11)?,
            (row.get::<_, i64>(12)?, row.get::<_, i64>(13)?),
        ))
    };
    let (
        thread,
        run,
        graph,
        fingerprint,
        status,
        waiting_on,
        wake_at_ms,
        lease_owner,
        lease_until_ms,
        attempts,
        cancel_requested,
        error,
        (created_at_ms, updated_at_ms),
    ) = read().map_err(|e| corrupt("(runs)", e))?;
    let state = RunState::parse(&status)
        .ok_or_else(|| corrupt(&thread, format!("unknown run state {status:?}")))?;
    let waiting_on = match waiting_on {
        Some(names) => serde_json::from_str(&names)
            .map_err(|e| corrupt(&thread, format!("waiting_on of the run: {e}")))?,
        None => Vec::new(),
    };
    Ok(RunRecord {
        run: to_u64(run, "run", &thread)?,
        graph,
        fingerprint,
        state,
        waiting_on,
        wake_at_ms: wake_at_ms
            .map(|ms| to_u64(ms, "wake time", &thread))
            .transpose()?,
        lease_owner,
        lease_until_ms: to_u64(lease_until_ms.max(0), "lease expiry", &thread)?,
        attempts: to_u64(attempts, "attempts", &thread)?,
        cancel_requested,
        error,
        created_at_ms: to_u64(created_at_ms, "creation time", &thread)?,
        updated_at_ms: to_u64(updated_at_ms, "update time", &thread)?,
        thread,
    })
}

fn claim(
    conn: &Connection,
    thread: &str,
    owner: &str,
    until_ms: i64,
    now_ms: i64,
) -> rusqlite::Result<Outcome> {
    let holder: Option<(Option<String>, i64)> = conn
        .prepare_cached("SELECT lease_owner, lease_until_ms FROM runs WHERE thread = ?1")?
        .query_row([thread], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    match holder {
        None => {
            conn.prepare_cached(
                "INSERT INTO runs (thread, lease_owner, lease_until_ms, attempts, created_at_ms,
                                   updated_at_ms)
                 VALUES (?1, ?2, ?3, 1, ?4, ?4)",
            )?
            .execute(params![thread, owner, until_ms, now_ms])?;
        }
        Some((Some(holder), holder_until)) if holder != owner && holder_until > now_ms => {
            return Ok(Outcome::Claim(Claim::Busy {
                owner: holder,
                until_ms: u64::try_from(holder_until).unwrap_or_default(),
            }));
        }
        Some((holder, _)) => {
            let taken_over = i64::from(holder.as_deref() != Some(owner));
            conn.prepare_cached(
                "UPDATE runs SET lease_owner = ?2, lease_until_ms = ?3,
                                 attempts = attempts + ?4, updated_at_ms = ?5,
                                     runnable_at_ms = CASE WHEN status IN ('waiting', 'sleeping', 'interrupted') THEN 0 ELSE runnable_at_ms END
                 WHERE thread = ?1",
            )?
            .execute(params![thread, owner, until_ms, taken_over, now_ms])?;
        }
    }
    Ok(Outcome::Claim(Claim::Claimed))
}

/// Lets the run go. A suspended run claimed and let go without a new checkpoint (a
/// recover that found nothing to do, a refused resume) is runnable again only at its wake
/// time, as before the claim.
fn release(conn: &Connection, thread: &str, owner: &str, now_ms: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE runs SET lease_owner = NULL, lease_until_ms = 0, updated_at_ms = ?3,
                         runnable_at_ms = CASE
                             WHEN status IN ('waiting', 'sleeping', 'interrupted') THEN wake_at_ms
                             ELSE runnable_at_ms END
         WHERE thread = ?1 AND lease_owner = ?2",
    )?
    .execute(params![thread, owner, now_ms])?;
    Ok(())
}

/// Whether `owner` holds `thread`; if so, extends its lease.
fn fence(
    conn: &Connection,
    thread: &str,
    owner: &str,
    until_ms: i64,
    now_ms: i64,
) -> rusqlite::Result<bool> {
    let renewed = conn
        .prepare_cached(
            "UPDATE runs SET lease_until_ms = ?3, updated_at_ms = ?4
             WHERE thread = ?1 AND lease_owner = ?2",
        )?
        .execute(params![thread, owner, until_ms, now_ms])?;
    Ok(renewed > 0)
}

fn lease_lost(thread: &str, owner: &str) -> StoreError {
    StoreError::LeaseLost {
        thread: thread.to_owned(),
        owner: owner.to_owned(),
    }
}

impl SqliteStore {
    /// Queues `op` (when it could be built) and maps its outcome.
    fn run_op<'a, T: Send + 'a>(
        &'a self,
        thread: String,
        owner: Option<String>,
        op: Result<RunOp, StoreError>,
        map: impl FnOnce(Outcome) -> Result<T, Outcome> + Send + 'a,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        let op = match op {
            Ok(op) => op,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        let written = self.write(Op::Runs(op));
        Box::pin(async move {
            match written.await? {
                Outcome::LeaseLost => Err(lease_lost(&thread, owner.as_deref().unwrap_or(""))),
                outcome => map(outcome).map_err(|other| unexpected(&thread, &other)),
            }
        })
    }

    pub(super) fn claim_run<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
        lease_until_ms: u64,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        let op = (|| {
            Ok(RunOp::Claim {
                thread: thread.to_owned(),
                owner: owner.to_owned(),
                until_ms: to_i64(lease_until_ms, "lease expiry", thread)?,
                now_ms: to_i64(now_ms, "time", thread)?,
            })
        })();
        self.run_op(thread.to_owned(), None, op, |outcome| match outcome {
            Outcome::Claim(claim) => Ok(claim),
            other => Err(other),
        })
    }

    pub(super) fn release_run<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let op = Ok(RunOp::Release {
            thread: thread.to_owned(),
            owner: owner.to_owned(),
        });
        self.run_op(thread.to_owned(), None, op, done)
    }

    pub(super) fn renew_run<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let op = (|| {
            Ok(RunOp::Renew {
                thread: thread.to_owned(),
                owner: owner.to_owned(),
                until_ms: to_i64(lease_until_ms, "lease expiry", thread)?,
            })
        })();
        self.run_op(thread.to_owned(), Some(owner.to_owned()), op, done)
    }

    /// With no `lease_until_ms`, releases the claim after writing.
    pub(super) fn put_checkpoint_fenced<'a>(
        &'a self,
        checkpoint: Checkpoint,
        owner: &'a str,
        lease_until_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        let thread = checkpoint.thread.clone();
        let op = (|| {
            Ok(RunOp::PutCheckpoint {
                update: checkpoint
                    .namespace
                    .is_empty()
                    .then(|| RowUpdate::of(&checkpoint)),
                row: checkpoint_row(&checkpoint)?,
                owner: owner.to_owned(),
                until_ms: lease_until_ms
                    .map(|until| to_i64(until, "lease expiry", &thread))
                    .transpose()?,
            })
        })();
        self.run_op(
            thread,
            Some(owner.to_owned()),
            op,
            |outcome| match outcome {
                Outcome::Id(id) => Ok(id),
                other => Err(other),
            },
        )
    }

    pub(super) fn put_journal_fenced<'a>(
        &'a self,
        key: JournalKey,
        value: &Value,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let thread = key.thread.clone();
        let op = (|| {
            Ok(RunOp::PutJournal {
                until_ms: to_i64(lease_until_ms, "lease expiry", &thread)?,
                row: journal_row(key, value)?,
                owner: owner.to_owned(),
            })
        })();
        self.run_op(thread, Some(owner.to_owned()), op, done)
    }

    pub(super) fn take_signal_fenced<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
        journal: (JournalKey, Value),
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let (key, value) = journal;
        let thread = key.thread.clone();
        let op = (|| {
            Ok(RunOp::TakeSignal {
                session: session.to_owned(),
                seq: to_i64(seq, "signal sequence number", session)?,
                until_ms: to_i64(lease_until_ms, "lease expiry", &thread)?,
                journal: journal_row(key, &value)?,
                owner: owner.to_owned(),
            })
        })();
        self.run_op(thread, Some(owner.to_owned()), op, taken)
    }

    pub(super) fn try_take<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let op = (|| {
            Ok(RunOp::TryTakeSignal {
                session: session.to_owned(),
                seq: to_i64(seq, "signal sequence number", session)?,
            })
        })();
        self.run_op(session.to_owned(), None, op, taken)
    }
}

fn done(outcome: Outcome) -> Result<(), Outcome> {
    match outcome {
        Outcome::Done => Ok(()),
        other => Err(other),
    }
}

fn taken(outcome: Outcome) -> Result<bool, Outcome> {
    match outcome {
        Outcome::Taken(taken) => Ok(taken),
        other => Err(other),
    }
}

fn graph_list(graphs: &[String], thread: &str) -> Result<String, StoreError> {
    to_json(&graphs, thread)
}

type Decoded<T> = Result<T, StoreError>;

fn runnable(outcome: Outcome) -> Result<Decoded<Option<ClaimedRun>>, Outcome> {
    match outcome {
        Outcome::Runnable(claimed) => Ok((|| {
            let Some((record, input)) = *claimed else {
                return Ok(None);
            };
            let record = record?;
            let input = input
                .map(|text| {
                    serde_json::from_str(&text)
                        .map_err(|e| corrupt(&record.thread, format!("input of the run: {e}")))
                })
                .transpose()?;
            Ok(Some(ClaimedRun { record, input }))
        })()),
        other => Err(other),
    }
}

/// Flattens a row that was read but may not decode.
fn decoded<'a, T: Send + 'a>(
    read: BoxFuture<'a, Result<Decoded<T>, StoreError>>,
) -> BoxFuture<'a, Result<T, StoreError>> {
    Box::pin(async move { read.await? })
}

impl SqliteStore {
    pub(super) fn submit<'a>(
        &'a self,
        thread: &'a str,
        graph: &'a str,
        input: &Value,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Submitted, StoreError>> {
        let op = (|| {
            Ok(RunOp::Submit {
                thread: thread.to_owned(),
                graph: graph.to_owned(),
                input: to_json(input, thread)?,
                now_ms: to_i64(now_ms, "time", thread)?,
            })
        })();
        decoded(
            self.run_op(thread.to_owned(), None, op, |outcome| match outcome {
                Outcome::Submitted(submitted) => Ok(*submitted),
                other => Err(other),
            }),
        )
    }

    pub(super) fn claim_runnable<'a>(
        &'a self,
        thread: Option<&'a str>,
        graphs: &'a [String],
        owner: &'a str,
        lease_until_ms: u64,
        (now_ms, due_ms): (u64, u64),
    ) -> BoxFuture<'a, Result<Option<ClaimedRun>, StoreError>> {
        let label = thread.unwrap_or("(next run)");
        let op = (|| {
            Ok(RunOp::ClaimRunnable {
                thread: thread.map(str::to_owned),
                graphs: graph_list(graphs, label)?,
                owner: owner.to_owned(),
                until_ms: to_i64(lease_until_ms, "lease expiry", label)?,
                now_ms: to_i64(now_ms, "time", label)?,
                due_ms: to_i64(due_ms, "time", label)?,
            })
        })();
        decoded(self.run_op(label.to_owned(), None, op, runnable))
    }

    pub(super) fn request_cancel_run<'a>(
        &'a self,
        thread: &'a str,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Option<RunRecord>, StoreError>> {
        let op = (|| {
            Ok(RunOp::RequestCancel {
                thread: thread.to_owned(),
                now_ms: to_i64(now_ms, "time", thread)?,
            })
        })();
        decoded(
            self.run_op(thread.to_owned(), None, op, |outcome| match outcome {
                Outcome::Record(record) => Ok(record.transpose()),
                other => Err(other),
            }),
        )
    }

    pub(super) fn finish<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
        state: RunState,
        error: Option<String>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let op = Ok(RunOp::Finish {
            thread: thread.to_owned(),
            owner: owner.to_owned(),
            state,
            error,
        });
        self.run_op(thread.to_owned(), Some(owner.to_owned()), op, done)
    }

    pub(super) fn read_run<'a>(
        &'a self,
        thread: &'a str,
    ) -> BoxFuture<'a, Result<Option<RunRecord>, StoreError>> {
        let owned = thread.to_owned();
        self.read(thread, move |conn| {
            Ok(read_record(conn, &owned)?.transpose())
        })
    }

    pub(super) fn query_runs<'a>(
        &'a self,
        filter: &RunFilter,
    ) -> BoxFuture<'a, Result<Vec<RunRecord>, StoreError>> {
        let filter = filter.clone();
        self.read("(runs)", move |conn| {
            let limit = filter
                .limit
                .map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
            let before = filter
                .updated_before_ms
                .map(|ms| i64::try_from(ms).unwrap_or(i64::MAX));
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {RUN_COLUMNS} FROM runs
                 WHERE status IS NOT NULL
                   AND (?1 IS NULL OR status = ?1)
                   AND (?2 IS NULL OR graph = ?2)
                   AND (?3 IS NULL OR updated_at_ms < ?3)
                 ORDER BY updated_at_ms DESC, thread LIMIT ?4"
            ))?;
            let rows = stmt
                .query_map(
                    params![
                        filter.state.map(RunState::as_str),
                        filter.graph,
                        before,
                        limit
                    ],
                    |row| Ok(record_from_row(row)),
                )?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows.into_iter().collect())
        })
    }

    pub(super) fn next_wake<'a>(
        &'a self,
        graphs: &'a [String],
        due_ms: u64,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        let graphs = graph_list(graphs, "(runs)");
        let due = i64::try_from(due_ms).unwrap_or(i64::MAX);
        self.read("(runs)", move |conn| {
            let graphs = match graphs {
                Ok(graphs) => graphs,
                Err(e) => return Ok(Err(e)),
            };
            let next: Option<i64> = conn
                .prepare_cached(
                    "SELECT MIN(runnable_at_ms) FROM runs
                     WHERE runnable_at_ms > ?1 AND graph IN (SELECT value FROM json_each(?2))",
                )?
                .query_row(params![due, graphs], |row| row.get(0))?;
            Ok(Ok(next.and_then(|ms| u64::try_from(ms).ok())))
        })
    }
}
