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
    // Whether a row names the graph is read from its body: `instr` passes over most rows
    // without parsing them (only a top-level key is written `"graph_name":` unescaped).
    let mut select = conn.prepare_cached(
        "SELECT id, run, namespace, status,
             namespace = '' AND instr(body, '\"graph_name\":') > 0
                 AND json_extract(body, '$.graph_name') IS NOT NULL
         FROM checkpoints WHERE thread = ?1 ORDER BY id",
    )?;
    let read = select.query_map([thread], |row| {
        let status: String = row.get(3)?;
        let ids = (row.get(0)?, row.get(1)?);
        Ok(StoredRow::read(ids, row.get(2)?, &status, row.get(4)?))
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
    for id in stored_rows_dropped(&rows, limit) {
        deleted += u64::try_from(delete.execute([id])?).unwrap_or_default();
    }
    Ok(deleted)
}
