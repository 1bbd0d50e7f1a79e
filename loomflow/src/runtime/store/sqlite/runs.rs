//! The `runs` table: one row per thread for its current run, with the lease that lets at
//! most one execution at a time carry it on, and the writes made under that lease.
//!
//! Every operation here is one request to the writer thread, so it runs inside one
//! `BEGIN IMMEDIATE` transaction: the lease check and the write it guards cannot be split by
//! another connection (another process on the same file). A write whose lease is lost
//! answers [`Outcome::LeaseLost`] without writing anything, so the rest of its group commits.

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use super::followed::Followed;
use super::leases::{Write, claim, fence, release};
use super::rows::record_from_row;
use super::run_rows::{
    RUN_COLUMNS, fence_and_follow, follow, next_runnable, read_record, submit, waiting_run,
};
use super::writer::{self, CheckpointRow, JournalRow, Op, Outcome};
use super::{SqliteStore, checkpoint_row, journal_row, to_i64, unexpected};
use crate::runtime::store::audit::AuditRow;
use crate::runtime::store::{
    AuditEntry, Checkpoint, Claim, JournalKey, RowUpdate, RunState, StoreError,
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
        /// Runnable at once (see `Store::release_runnable`), not at the run's wake time.
        runnable: bool,
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
    /// With a thread and the signal sent to it: `claim_waiting_run`; without,
    /// `claim_next_run`.
    ClaimRunnable {
        waiting: Option<(String, String)>,
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
            // A claimed take checks the claim of the journal's thread (not the session's).
            Self::PutJournal { row, .. } | Self::TakeSignal { journal: row, .. } => &row.thread,
            Self::TryTakeSignal { session, .. } => session,
            Self::Submit { thread, .. }
            | Self::RequestCancel { thread, .. }
            | Self::Finish { thread, .. } => thread,
            Self::ClaimRunnable { waiting, .. } => waiting
                .as_ref()
                .map_or("(next run)", |(thread, _)| thread.as_str()),
        }
    }

    /// See `Op::needs_sync`: taking, renewing and letting go of a claim record no work.
    pub(super) fn needs_sync(&self) -> bool {
        match self {
            Self::Claim { .. }
            | Self::Release { .. }
            | Self::Renew { .. }
            | Self::ClaimRunnable { .. } => false,
            Self::PutCheckpoint { row, .. } => row.needs_sync,
            Self::PutJournal { .. }
            | Self::TakeSignal { .. }
            | Self::TryTakeSignal { .. }
            | Self::Submit { .. }
            | Self::RequestCancel { .. }
            | Self::Finish { .. } => true,
        }
    }

    pub(super) fn apply(
        &self,
        conn: &Connection,
        followed: &mut Followed,
        now_ms: i64,
    ) -> rusqlite::Result<Outcome> {
        match self {
            Self::Claim {
                thread,
                owner,
                until_ms,
                now_ms: asked_at,
            } => {
                followed.forget(thread);
                claim(conn, thread, owner, *until_ms, *asked_at)
            }
            Self::Release {
                thread,
                owner,
                runnable,
            } => {
                followed.forget(thread);
                release(conn, thread, owner, *runnable, now_ms)?;
                Ok(Outcome::Done)
            }
            Self::Renew {
                thread,
                owner,
                until_ms,
            } => Ok(
                if fence(conn, (thread, owner), *until_ms, now_ms, Write::Renewal)? {
                    Outcome::Done
                } else {
                    Outcome::LeaseLost
                },
            ),
            Self::PutCheckpoint {
                row,
                owner,
                until_ms,
                update,
            } => {
                let held = match (update, until_ms) {
                    // A step that leaves the row saying what the step before made it say
                    // renews the lease only (see `followed.rs`).
                    (Some(update), Some(until))
                        if followed.unchanged(&row.thread, owner, row.run, update) =>
                    {
                        fence(conn, (&row.thread, owner), *until, now_ms, Write::Progress)?
                    }
                    // A step of a running run: one UPDATE renews the lease and files it.
                    (Some(update), Some(until)) => {
                        let held = fence_and_follow(
                            conn,
                            &row.thread,
                            owner,
                            *until,
                            now_ms,
                            row.run,
                            update,
                        )?;
                        if held {
                            followed.note(&row.thread, owner, row.run, update);
                        }
                        held
                    }
                    _ => {
                        if until_ms.is_none() {
                            followed.forget(&row.thread);
                        }
                        let until = until_ms.unwrap_or(0);
                        let held =
                            fence(conn, (&row.thread, owner), until, now_ms, Write::Progress)?;
                        if held && let Some(update) = update {
                            follow(conn, &row.thread, row.run, update)?;
                        }
                        held
                    }
                };
                if !held {
                    return Ok(Outcome::LeaseLost);
                }
                if until_ms.is_none() {
                    release(conn, &row.thread, owner, false, now_ms)?;
                }
                Ok(Outcome::Id(writer::put_checkpoint(conn, row)?))
            }
            Self::PutJournal {
                row,
                owner,
                until_ms,
            } => {
                if !fence(
                    conn,
                    (&row.thread, owner),
                    *until_ms,
                    now_ms,
                    Write::Progress,
                )? {
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
                if !fence(
                    conn,
                    (&journal.thread, owner),
                    *until_ms,
                    now_ms,
                    Write::Progress,
                )? {
                    return Ok(Outcome::LeaseLost);
                }
                let taken = writer::take_signal(conn, session, *seq, now_ms, journal.run)?;
                if taken {
                    writer::put_journal(conn, journal)?;
                }
                Ok(Outcome::Taken(taken))
            }
            Self::TryTakeSignal { session, seq } => Ok(Outcome::Taken(writer::take_signal(
                conn, session, *seq, now_ms, 0,
            )?)),
            Self::Submit {
                thread,
                graph,
                input,
                now_ms,
            } => {
                followed.forget(thread);
                submit(conn, thread, graph, input, *now_ms)
            }
            Self::ClaimRunnable {
                waiting,
                graphs,
                owner,
                until_ms,
                now_ms,
                due_ms,
            } => {
                let chosen = match waiting {
                    Some((thread, signal)) => waiting_run(conn, (thread, signal), graphs, *now_ms)?,
                    None => next_runnable(conn, graphs, *now_ms, *due_ms)?,
                };
                let Some(thread) = chosen else {
                    return Ok(Outcome::Runnable(Box::new(None)));
                };
                followed.forget(&thread);
                conn.prepare_cached(
                    "UPDATE runs SET lease_owner = ?2, lease_until_ms = ?3,
                                     attempts = attempts + 1, updated_at_ms = ?4,
                                     lapses = lapses + (lease_owner IS NOT NULL),
                                     runnable_at_ms = CASE WHEN status IN ('waiting', 'sleeping', 'interrupted') THEN 0 ELSE runnable_at_ms END
                     WHERE thread = ?1",
                )?
                .execute(params![thread, owner, until_ms, now_ms])?;
                let claimed = conn
                    .prepare_cached(&format!(
                        "SELECT {RUN_COLUMNS}, input FROM runs WHERE thread = ?1"
                    ))?
                    .query_row([&thread], |row| Ok((record_from_row(row), row.get(15)?)))
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
                followed.forget(thread);
                let finished = conn
                    .prepare_cached(
                        "UPDATE runs SET status = ?3, error = ?4, runnable_at_ms = NULL,
                                         wake_at_ms = NULL, waiting_on = NULL, input = NULL,
                                         cancel_requested = 0, lease_owner = NULL,
                                         lease_until_ms = 0, lapses = 0, updated_at_ms = ?5
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

fn lease_lost(thread: &str, owner: &str) -> StoreError {
    StoreError::LeaseLost {
        thread: thread.to_owned(),
        owner: owner.to_owned(),
    }
}

impl SqliteStore {
    /// Queues `op` (when it could be built) and maps its outcome.
    pub(super) fn run_op<'a, T: Send + 'a>(
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
        runnable: bool,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let op = Ok(RunOp::Release {
            thread: thread.to_owned(),
            owner: owner.to_owned(),
            runnable,
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
                row: checkpoint_row(&checkpoint, self.retention)?,
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
        audit: &[AuditEntry],
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let thread = key.thread.clone();
        let op = (|| {
            let mut row = journal_row(key, value)?;
            row.audit = AuditRow::all(audit)?;
            Ok(RunOp::PutJournal {
                until_ms: to_i64(lease_until_ms, "lease expiry", &thread)?,
                row,
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

pub(super) fn done(outcome: Outcome) -> Result<(), Outcome> {
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
