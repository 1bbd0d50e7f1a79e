//! The audit log's table: rows appended in the transaction of what they describe, read by
//! thread, pruned by age.

use rusqlite::{Connection, params};

use super::SqliteStore;
use super::writer::{Op, Outcome};
use crate::runtime::store::audit::AuditRow;
use crate::runtime::store::{AuditEntry, AuditKind, AuditQuery, StoreError};
use futures_util::future::BoxFuture;

/// Schema version 4 -> 5: the audit log. Its ids are rowids (not `AUTOINCREMENT`, which
/// rewrites `sqlite_sequence` on every insert); pruning never deletes the newest row
/// ([`prune`]), so ids still increase. The index by time serves pruning (entries may be appended with times of their
/// own, so id order is not time order).
pub(super) const MIGRATION: &str = "
    CREATE TABLE audit (
        id INTEGER PRIMARY KEY,
        thread TEXT NOT NULL,
        run INTEGER NOT NULL,
        at_ms INTEGER NOT NULL,
        kind TEXT NOT NULL,
        subject TEXT NOT NULL,
        actor TEXT,
        detail TEXT
    );
    CREATE INDEX audit_by_thread ON audit (thread, id);
    CREATE INDEX audit_by_time ON audit (at_ms);";

/// Appends rows, in the caller's transaction.
pub(super) fn append(conn: &Connection, rows: &[AuditRow]) -> rusqlite::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut insert = conn.prepare_cached(
        "INSERT INTO audit (thread, run, at_ms, kind, subject, actor, detail)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    for row in rows {
        insert.execute(params![
            row.thread,
            row.run,
            row.at_ms,
            row.kind,
            row.subject,
            row.actor,
            row.detail
        ])?;
    }
    Ok(())
}

fn read(
    conn: &Connection,
    query: &AuditQuery,
) -> rusqlite::Result<Result<Vec<AuditEntry>, StoreError>> {
    let limit = query
        .limit
        .map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
    let after = i64::try_from(query.after_id).unwrap_or(i64::MAX);
    let mut statement = conn.prepare_cached(
        "SELECT id, thread, run, at_ms, kind, subject, actor, detail FROM audit
         WHERE id > ?1 AND (?2 IS NULL OR thread = ?2) AND (?3 IS NULL OR kind = ?3)
         ORDER BY id LIMIT ?4",
    )?;
    let rows = statement.query_map(
        params![
            after,
            query.thread,
            query.kind.map(AuditKind::as_str),
            limit
        ],
        |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, i64>(2)?,
                row.get::<_, i64>(3)?,
                row.get::<_, String>(4)?,
                row.get::<_, String>(5)?,
                row.get::<_, Option<String>>(6)?,
                row.get::<_, Option<String>>(7)?,
            ))
        },
    )?;
    let mut entries = Vec::new();
    for row in rows {
        let (id, thread, run, at_ms, kind, subject, actor, detail) = row?;
        let corrupt = |message: String| StoreError::Corrupt {
            thread: thread.clone(),
            message,
        };
        let Some(kind) = AuditKind::parse(&kind) else {
            return Ok(Err(corrupt(format!(
                "audit entry {id} has unknown kind {kind:?}"
            ))));
        };
        let detail = match detail.as_deref().map(crate::json_depth::from_str) {
            None => serde_json::Value::Object(serde_json::Map::new()),
            Some(Ok(detail)) => detail,
            Some(Err(e)) => {
                return Ok(Err(corrupt(format!("detail of audit entry {id}: {e}"))));
            }
        };
        let mut entry = AuditEntry::new(thread, kind, subject, detail)
            .run(u64::try_from(run).unwrap_or_default())
            .at_ms(u64::try_from(at_ms).unwrap_or_default())
            .actor(actor);
        entry.id = u64::try_from(id).unwrap_or_default();
        entries.push(entry);
    }
    Ok(Ok(entries))
}

/// Deletes rows older than `before_ms`, in the caller's transaction, but the newest row:
/// a rowid is the largest one in the table plus one, so deleting the row with the largest
/// would hand its id (and those below it) out again, and a reader paging with `after_id`
/// would pass over the new entries. The newest row stays until a newer one is written.
pub(super) fn prune(conn: &Connection, before_ms: i64) -> rusqlite::Result<u64> {
    let deleted = conn
        .prepare_cached("DELETE FROM audit WHERE at_ms < ?1 AND id < (SELECT max(id) FROM audit)")?
        .execute([before_ms])?;
    Ok(deleted as u64)
}

impl SqliteStore {
    pub(super) fn append_audit_rows(
        &self,
        entries: Vec<AuditEntry>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        let thread = entries
            .first()
            .map(|e| e.thread.clone())
            .unwrap_or_default();
        let rows = match AuditRow::all(&entries) {
            Ok(rows) => rows,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        let written = self.write(Op::AppendAudit(rows));
        Box::pin(async move {
            match written.await? {
                Outcome::Done => Ok(()),
                other => Err(super::unexpected(&thread, &other)),
            }
        })
    }

    pub(super) fn read_audit<'a>(
        &'a self,
        query: &'a AuditQuery,
    ) -> BoxFuture<'a, Result<Vec<AuditEntry>, StoreError>> {
        // Named in an error: the thread read, or the log as a whole.
        let thread = query.thread.as_deref().unwrap_or("(audit)").to_owned();
        let query = query.clone();
        self.read(&thread, move |conn| read(conn, &query))
    }

    pub(super) fn prune_audit_rows(
        &self,
        before_ms: u64,
    ) -> BoxFuture<'_, Result<u64, StoreError>> {
        let before = i64::try_from(before_ms).unwrap_or(i64::MAX);
        let written = self.write(Op::PruneAudit(before));
        Box::pin(async move {
            match written.await? {
                Outcome::Count(n) => Ok(n),
                other => Err(super::unexpected("(audit)", &other)),
            }
        })
    }
}
