//! The audit log's table: rows appended in the transaction of what they describe, read by
//! thread, pruned by age.

use deadpool_postgres::GenericClient;

use super::PostgresStore;
use super::error::Fail;
use super::rows::{get, to_u64};
use crate::runtime::store::audit::AuditRow;
use crate::runtime::store::{AuditEntry, AuditKind, AuditQuery, StoreError};

/// Schema version 1 -> 2: the audit log.
pub(super) const MIGRATION: &str = "
    CREATE TABLE loomflow_audit (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        thread TEXT NOT NULL,
        run BIGINT NOT NULL,
        at_ms BIGINT NOT NULL,
        kind TEXT NOT NULL,
        subject TEXT NOT NULL,
        actor TEXT,
        detail TEXT
    );
    CREATE INDEX loomflow_audit_by_thread ON loomflow_audit (thread, id);
    CREATE INDEX loomflow_audit_by_time ON loomflow_audit (at_ms);";

/// Appends rows, in the caller's transaction.
pub(super) async fn append(client: &impl GenericClient, rows: &[AuditRow]) -> Result<(), Fail> {
    if rows.is_empty() {
        return Ok(());
    }
    let insert = client
        .prepare_cached(
            "INSERT INTO loomflow_audit (thread, run, at_ms, kind, subject, actor, detail)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .await?;
    for row in rows {
        client
            .execute(
                &insert,
                &[
                    &row.thread,
                    &row.run,
                    &row.at_ms,
                    &row.kind,
                    &row.subject,
                    &row.actor,
                    &row.detail,
                ],
            )
            .await?;
    }
    Ok(())
}

impl PostgresStore {
    pub(super) async fn append_audit_rows(
        &self,
        entries: Vec<AuditEntry>,
    ) -> Result<(), StoreError> {
        let thread = entries
            .first()
            .map(|e| e.thread.clone())
            .unwrap_or_default();
        async {
            let rows = AuditRow::all(&entries)?;
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            append(&tx, &rows).await?;
            tx.commit().await?;
            Ok(())
        }
        .await
        .map_err(|e: Fail| e.write(&thread))
    }

    pub(super) async fn read_audit(
        &self,
        query: &AuditQuery,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        let label = query.thread.clone().unwrap_or_else(|| "(audit)".to_owned());
        async {
            let after = i64::try_from(query.after_id).unwrap_or(i64::MAX);
            let limit = query.limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
            let kind = query.kind.map(AuditKind::as_str);
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(
                    "SELECT id, thread, run, at_ms, kind, subject, actor, detail
                     FROM loomflow_audit
                     WHERE id > $1 AND ($2::TEXT IS NULL OR thread = $2)
                       AND ($3::TEXT IS NULL OR kind = $3)
                     ORDER BY id LIMIT $4",
                )
                .await?;
            let rows = client
                .query(&stmt, &[&after, &query.thread, &kind, &limit])
                .await?;
            let mut entries = Vec::with_capacity(rows.len());
            for row in &rows {
                let thread: String = get(row, 1, &label)?;
                let id = to_u64(get(row, 0, &thread)?, "audit id", &thread)?;
                let kind: String = get(row, 4, &thread)?;
                let corrupt = |message: String| StoreError::Corrupt {
                    thread: thread.clone(),
                    message,
                };
                let kind = AuditKind::parse(&kind).ok_or_else(|| {
                    corrupt(format!("audit entry {id} has unknown kind {kind:?}"))
                })?;
                let detail: Option<String> = get(row, 7, &thread)?;
                let detail = match detail {
                    None => serde_json::Value::Object(serde_json::Map::new()),
                    Some(detail) => serde_json::from_str(&detail)
                        .map_err(|e| corrupt(format!("detail of audit entry {id}: {e}")))?,
                };
                let run = to_u64(get(row, 2, &thread)?, "run", &thread)?;
                let at_ms = to_u64(get(row, 3, &thread)?, "at_ms", &thread)?;
                let subject: String = get(row, 5, &thread)?;
                let actor: Option<String> = get(row, 6, &thread)?;
                let mut entry = AuditEntry::new(thread.clone(), kind, subject, detail)
                    .run(run)
                    .at_ms(at_ms)
                    .actor(actor);
                entry.id = id;
                entries.push(entry);
            }
            Ok(entries)
        }
        .await
        .map_err(|e: Fail| e.read(&label))
    }

    pub(super) async fn prune_audit_rows(&self, before_ms: u64) -> Result<u64, StoreError> {
        async {
            let before = i64::try_from(before_ms).unwrap_or(i64::MAX);
            let client = self.client().await?;
            let deleted = client
                .execute("DELETE FROM loomflow_audit WHERE at_ms < $1", &[&before])
                .await?;
            Ok(deleted)
        }
        .await
        .map_err(|e: Fail| e.write("(audit)"))
    }
}
