//! Deleting what runs leave behind: a whole thread, under its claim, and old signals.

use rusqlite::{Connection, OptionalExtension, params};

use super::followed::Followed;
use super::writer::{Op, Outcome};
use super::{SqliteStore, unexpected};
use crate::runtime::store::{DeletedThread, StoreError};
use futures_util::future::BoxFuture;

impl SqliteStore {
    /// [`Store::prune_signals`](crate::runtime::Store::prune_signals).
    pub(super) fn prune_signal_rows<'a>(
        &'a self,
        sent_before_ms: u64,
        spare: &'a [String],
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        let before_ms = i64::try_from(sent_before_ms).unwrap_or(i64::MAX);
        let spare = serde_json::to_string(spare).unwrap_or_default();
        let written = self.write(Op::PruneSignals { before_ms, spare });
        Box::pin(async move {
            match written.await? {
                Outcome::Count(n) => Ok(n),
                other => Err(unexpected("(signals)", &other)),
            }
        })
    }

    /// [`Store::delete_thread`](crate::runtime::Store::delete_thread).
    pub(super) fn delete_claimed_thread<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<DeletedThread, StoreError>> {
        let written = self.write(Op::DeleteThread {
            thread: thread.to_owned(),
            owner: owner.to_owned(),
        });
        Box::pin(async move {
            match written.await? {
                Outcome::Deleted(deleted) => Ok(deleted),
                Outcome::LeaseLost => Err(StoreError::LeaseLost {
                    thread: thread.to_owned(),
                    owner: owner.to_owned(),
                }),
                other => Err(unexpected(thread, &other)),
            }
        })
    }
}

/// Deletes `thread`'s rows if `owner` holds its run (see `Op::DeleteThread`). A pending
/// signal of its session that carries an idempotency key is marked consumed instead, as a
/// discarded one is, so that the key is still remembered.
pub(super) fn delete_thread(
    conn: &Connection,
    followed: &mut Followed,
    (thread, owner): (&str, &str),
    now_ms: i64,
) -> rusqlite::Result<Outcome> {
    let held = conn
        .prepare_cached("SELECT 1 FROM runs WHERE thread = ?1 AND lease_owner = ?2")?
        .query_row(params![thread, owner], |_| Ok(()))
        .optional()?;
    if held.is_none() {
        return Ok(Outcome::LeaseLost);
    }
    followed.forget(thread);
    let delete = |sql: &str| conn.prepare_cached(sql)?.execute(params![thread]);
    // The ids removed here are not handed out again (see `schema.rs`): only the newest
    // matters, as a new row's id would be one past those left.
    conn.prepare_cached(
        "UPDATE meta SET checkpoint_id_floor = max(checkpoint_id_floor,
             (SELECT max(id) FROM checkpoints))
         WHERE (SELECT max(id) FROM checkpoints WHERE thread = ?1)
             = (SELECT max(id) FROM checkpoints)",
    )?
    .execute(params![thread])?;
    let checkpoints = delete("DELETE FROM checkpoints WHERE thread = ?1")?;
    let journal_entries = delete("DELETE FROM journal WHERE thread = ?1")?;
    let pending: i64 = conn
        .prepare_cached(
            "SELECT count(*) FROM signals WHERE session = ?1 AND consumed_at_ms IS NULL",
        )?
        .query_row(params![thread], |row| row.get(0))?;
    delete(
        "DELETE FROM signals
         WHERE session = ?1 AND consumed_at_ms IS NULL AND idempotency_key IS NULL",
    )?;
    conn.prepare_cached(
        "UPDATE signals SET consumed_at_ms = ?2, payload = NULL
         WHERE session = ?1 AND consumed_at_ms IS NULL",
    )?
    .execute(params![thread, now_ms])?;
    delete("DELETE FROM runs WHERE thread = ?1")?;
    Ok(Outcome::Deleted(DeletedThread::new(
        checkpoints as u64,
        journal_entries as u64,
        u64::try_from(pending).unwrap_or_default(),
    )))
}
