//! The audit log's table: rows appended in the statement of what they describe (or, for
//! entries that ride with no write, in one of their own), read by thread, pruned by age.

use std::borrow::Cow;

use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;

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

/// Appends rows, in order, in one statement.
async fn append(client: &impl GenericClient, rows: &[AuditRow]) -> Result<(), Fail> {
    if rows.is_empty() {
        return Ok(());
    }
    let columns = AuditColumns::of(rows);
    let mut params = Vec::new();
    let insert = columns.insert(&mut params, "");
    let stmt = client.prepare_cached(&insert).await?;
    client.execute(&stmt, &params).await?;
    Ok(())
}

/// `text` as the server can keep it: a NUL, which PostgreSQL's text refuses, as U+FFFD.
fn kept(text: &str) -> Cow<'_, str> {
    match text.contains('\0') {
        true => Cow::Owned(text.replace('\0', "\u{FFFD}")),
        false => Cow::Borrowed(text),
    }
}

/// Audit rows as one array per column, for `unnest`: any number of rows in one statement.
pub(super) struct AuditColumns<'a> {
    thread: Vec<&'a str>,
    run: Vec<i64>,
    at_ms: Vec<i64>,
    kind: Vec<&'static str>,
    subject: Vec<Cow<'a, str>>,
    actor: Vec<Option<Cow<'a, str>>>,
    detail: Vec<Option<&'a str>>,
}

impl<'a> AuditColumns<'a> {
    pub(super) fn of(rows: &'a [AuditRow]) -> Self {
        Self {
            thread: rows.iter().map(|r| r.thread.as_str()).collect(),
            run: rows.iter().map(|r| r.run).collect(),
            at_ms: rows.iter().map(|r| r.at_ms).collect(),
            kind: rows.iter().map(|r| r.kind).collect(),
            // Named by a model (a tool's name, an unknown tool's included) or by a person
            // (who decided, the user a run acts for): text the server cannot keep (a NUL) is
            // kept readable rather than failing the run's step, after the tool ran.
            subject: rows.iter().map(|r| kept(&r.subject)).collect(),
            actor: rows.iter().map(|r| r.actor.as_deref().map(kept)).collect(),
            detail: rows.iter().map(|r| r.detail.as_deref()).collect(),
        }
    }

    /// The `INSERT` of the rows, in their order, with `condition` (a `WHERE` clause, or
    /// nothing); its arrays are bound after `params`.
    fn insert(&'a self, params: &mut Vec<&'a (dyn ToSql + Sync)>, condition: &str) -> String {
        let first = params.len() + 1;
        params.extend([
            &self.thread as &(dyn ToSql + Sync),
            &self.run,
            &self.at_ms,
            &self.kind,
            &self.subject,
            &self.actor,
            &self.detail,
        ]);
        let [thread, run, at_ms, kind, subject, actor, detail] =
            std::array::from_fn::<usize, 7, _>(|i| first + i);
        format!(
            "INSERT INTO loomflow_audit (thread, run, at_ms, kind, subject, actor, detail)
             SELECT a.thread, a.run, a.at_ms, a.kind, a.subject, a.actor, a.detail
             FROM unnest(${thread}::text[], ${run}::bigint[], ${at_ms}::bigint[],
                         ${kind}::text[], ${subject}::text[], ${actor}::text[],
                         ${detail}::text[])
                  WITH ORDINALITY AS a(thread, run, at_ms, kind, subject, actor, detail, n)
             {condition}
             ORDER BY a.n"
        )
    }

    /// A `WITH` clause, to follow another, that inserts the rows in their order when
    /// `condition` holds; its arrays are bound after `params`. Empty for no rows.
    pub(super) fn audited(
        &'a self,
        params: &mut Vec<&'a (dyn ToSql + Sync)>,
        condition: &str,
    ) -> String {
        if self.thread.is_empty() {
            return String::new();
        }
        let insert = self.insert(params, condition);
        format!(", audited AS ({insert})")
    }

    /// [`audited`](Self::audited) after a `fenced` clause: only when the fence matched.
    pub(super) fn inserted_if_fenced(&'a self, params: &mut Vec<&'a (dyn ToSql + Sync)>) -> String {
        self.audited(params, "WHERE EXISTS (SELECT 1 FROM fenced)")
    }
}

impl PostgresStore {
    pub(super) async fn append_audit_rows(
        &self,
        entries: Vec<AuditEntry>,
    ) -> Result<(), StoreError> {
        // Named in an error: the entries' thread, when they name one (a run's all do).
        let thread = match entries.first() {
            Some(first) if entries.iter().all(|e| e.thread == first.thread) => first.thread.clone(),
            _ => "(audit)".to_owned(),
        };
        async {
            let rows = AuditRow::all(&entries)?;
            let client = self.client().await?;
            append(&client, &rows).await
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
                    Some(detail) => crate::json_depth::from_str(&detail)
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
