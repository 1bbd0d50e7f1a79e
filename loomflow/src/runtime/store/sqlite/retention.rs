//! Retention on SQLite: a thread cut down to its newest checkpoints as a run ends (see
//! [`SqliteOptions::retention`](super::SqliteOptions::retention)).

use rusqlite::Connection;

use crate::runtime::store::retention::{StoredRow, due, stored_rows_dropped};

/// Deletes the oldest checkpoints of `thread` past `limit`, but those retention keeps
/// whatever their age, once the thread is [`due`]; returns how many went.
///
/// A row whose columns do not read as they should leaves the thread as it is: a commit does
/// not fail for rows it only meant to tidy.
pub(super) fn prune_thread(conn: &Connection, thread: &str, limit: usize) -> rusqlite::Result<u64> {
    let count: i64 = conn
        .prepare_cached("SELECT count(*) FROM checkpoints WHERE thread = ?1")?
        .query_row([thread], |row| row.get(0))?;
    if !due(count, limit) {
        return Ok(0);
    }
    let mut select = conn.prepare_cached(
        "SELECT id, run, namespace, status FROM checkpoints WHERE thread = ?1 ORDER BY id",
    )?;
    let read = select.query_map([thread], |row| {
        let status: String = row.get(3)?;
        Ok(StoredRow::read(
            row.get(0)?,
            row.get(1)?,
            row.get(2)?,
            &status,
        ))
    })?;
    let mut rows = Vec::new();
    for row in read {
        match row? {
            Some(row) => rows.push(row),
            None => return Ok(0),
        }
    }
    let mut delete = conn.prepare_cached("DELETE FROM checkpoints WHERE id = ?1")?;
    let mut deleted = 0;
    for id in stored_rows_dropped(rows, limit) {
        deleted += u64::try_from(delete.execute([id])?).unwrap_or_default();
    }
    Ok(deleted)
}
