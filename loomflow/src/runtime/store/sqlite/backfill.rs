//! Run rows made from a file's checkpoints as it is migrated, for threads written before
//! the runs table existed.

use rusqlite::{Connection, OptionalExtension, params};

use super::rows::{CHECKPOINT_COLUMNS, checkpoint_from_row, to_i64};
use super::run_rows::follow;
use crate::runtime::store::{Checkpoint, RowUpdate};

/// Gives every thread that has top-level checkpoints and no run row the row its newest
/// checkpoint says (its run, state, what it waits on; the graph from the run's first
/// checkpoint, when it names it), so that `run`, `runs` and workers find runs written before
/// the table existed. Part of migrating a file from version `from`. A thread whose
/// checkpoints cannot be read is left without a row (and said so): the file opens, and its
/// other threads get theirs. Past version 2 (a file an early build migrated with an empty
/// table), a thread whose checkpoints a graph did not write (no fingerprint: written outside
/// any run, `Store::put_checkpoint`) is no run, and gets none.
pub(super) fn backfill(conn: &Connection, from: usize) -> Result<(), String> {
    let runs_only = from > 2;
    let threads: Vec<String> = conn
        .prepare(
            "SELECT DISTINCT thread FROM checkpoints WHERE namespace = ''
             AND thread NOT IN (SELECT thread FROM runs)",
        )
        .and_then(|mut query| query.query_map([], |row| row.get(0))?.collect())
        .map_err(|e| format!("listing the threads that have no run row: {e}"))?;
    let now = i64::try_from(crate::runtime::clock::now_ms()).unwrap_or(i64::MAX);
    for thread in threads {
        if let Err(error) = backfill_thread(conn, &thread, now, runs_only) {
            tracing::warn!(
                thread,
                %error,
                "no run row made for the thread: its checkpoints could not be read"
            );
        }
    }
    Ok(())
}

/// [`backfill`] for one thread.
fn backfill_thread(
    conn: &Connection,
    thread: &str,
    now: i64,
    runs_only: bool,
) -> Result<(), String> {
    let read = |order: &str| -> Result<Option<Checkpoint>, String> {
        let query = format!(
            "SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE thread = ?1
             AND namespace = '' AND run = (SELECT MAX(run) FROM checkpoints
             WHERE thread = ?1 AND namespace = '') ORDER BY id {order} LIMIT 1"
        );
        let row = conn
            .query_row(&query, [thread], |row| checkpoint_from_row(row, thread))
            .optional()
            .map_err(|e| e.to_string())?;
        row.transpose().map_err(|e| e.to_string())
    };
    let (Some(first), Some(newest)) = (read("ASC")?, read("DESC")?) else {
        return Ok(());
    };
    if runs_only && first.fingerprint().is_none() {
        return Ok(());
    }
    let run = to_i64(newest.run, "run", thread).map_err(|e| e.to_string())?;
    conn.execute(
        "INSERT INTO runs (thread, run, created_at_ms, updated_at_ms) VALUES (?1, ?2, ?3, ?3)",
        params![thread, run, now],
    )
    .map_err(|e| e.to_string())?;
    follow(conn, thread, run, &RowUpdate::of(&first)).map_err(|e| e.to_string())?;
    follow(conn, thread, run, &RowUpdate::of(&newest)).map_err(|e| e.to_string())
}
