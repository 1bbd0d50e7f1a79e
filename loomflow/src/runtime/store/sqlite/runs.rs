//! The `runs` table: one row per thread for its current run, with the lease that lets at
//! most one execution at a time carry it on, and the writes made under that lease.
//!
//! Every operation here is one request to the writer thread, so it runs inside one
//! `BEGIN IMMEDIATE` transaction: the lease check and the write it guards cannot be split by
//! another connection (another process on the same file). A write whose lease is lost
//! answers [`Outcome::LeaseLost`] without writing anything, so the rest of its group commits.

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use super::writer::{self, CheckpointRow, JournalRow, Op, Outcome};
use super::{SqliteStore, checkpoint_row, journal_row, to_i64, unexpected};
use crate::runtime::store::{Checkpoint, Claim, JournalKey, StoreError};
use futures_util::future::BoxFuture;

/// Migration step 1 -> 2: the `runs` table. Columns for the graph's name and fingerprint,
/// and for richer statuses, come with the worker.
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
    },
    Renew {
        thread: String,
        owner: String,
        until_ms: i64,
    },
    /// With no expiry, the claim is released after the write.
    PutCheckpoint {
        row: CheckpointRow,
        owner: String,
        until_ms: Option<i64>,
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
            } => {
                if !fence(conn, &row.thread, owner, until_ms.unwrap_or(0), now_ms)? {
                    return Ok(Outcome::LeaseLost);
                }
                if row.namespace.is_empty() {
                    conn.prepare_cached("UPDATE runs SET run = ?2, status = ?3 WHERE thread = ?1")?
                        .execute(params![row.thread, row.run, row.status])?;
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
        }
    }
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
                                 attempts = attempts + ?4, updated_at_ms = ?5
                 WHERE thread = ?1",
            )?
            .execute(params![thread, owner, until_ms, taken_over, now_ms])?;
        }
    }
    Ok(Outcome::Claim(Claim::Claimed))
}

fn release(conn: &Connection, thread: &str, owner: &str, now_ms: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE runs SET lease_owner = NULL, lease_until_ms = 0, updated_at_ms = ?3
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
