//! Checkpoints and journal entries: the rows a run writes as it goes, and reads back when it
//! is resumed or replayed.

use deadpool_postgres::GenericClient;
use serde_json::Value;
use tokio_postgres::types::ToSql;

use super::PostgresStore;
use super::audit::AuditColumns;
use super::error::Fail;
use super::rows::{
    CHECKPOINT_COLUMNS, CheckpointRow, JournalRow, checkpoint_from_row, corrupt, from_json, get,
    to_u64,
};
use crate::runtime::store::{Checkpoint, JournalKey, StoreError};

/// Saves a checkpoint's row, and its audit entries, in one statement; returns its id. Ids
/// come from an identity column: they increase with every insert (a thread's checkpoints
/// are written one after another, so its ids increase in the order they were written).
pub(super) async fn insert_checkpoint(
    client: &impl GenericClient,
    row: &CheckpointRow,
) -> Result<u64, Fail> {
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&row.thread];
    params.extend(row.params_after_thread());
    let audit = AuditColumns::of(&row.audit);
    let audited = audit.audited(&mut params, "");
    let forgotten = row.forgotten_journal("$1");
    let stmt = client
        .prepare_cached(&format!(
            "WITH inserted AS (
                 INSERT INTO loomflow_checkpoints
                     (thread, run, namespace, step, status, body, error)
                 VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id
             ){audited}{forgotten}
             SELECT id FROM inserted"
        ))
        .await?;
    let inserted = client.query_one(&stmt, &params).await?;
    let id: i64 = get(&inserted, 0, &row.thread)?;
    Ok(super::rows::to_u64(id, "checkpoint id", &row.thread)?)
}

/// Records a journal entry unless its key already has one (the first value wins), and its
/// audit entries either way, in one statement.
pub(super) async fn insert_journal(
    client: &impl GenericClient,
    row: &JournalRow,
) -> Result<(), Fail> {
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&row.thread];
    params.extend(row.params_after_thread());
    let audit = AuditColumns::of(&row.audit);
    let audited = audit.audited(&mut params, "");
    let stmt = client
        .prepare_cached(&format!(
            "WITH journaled AS (
                 INSERT INTO loomflow_journal
                     (thread, run, namespace, step, node, name, occurrence, value)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                 ON CONFLICT DO NOTHING
             ){audited}
             SELECT 1"
        ))
        .await?;
    client.execute(&stmt, &params).await?;
    Ok(())
}

impl PostgresStore {
    pub(super) async fn save_checkpoint(&self, checkpoint: Checkpoint) -> Result<u64, StoreError> {
        let thread = &checkpoint.thread;
        async {
            let row = CheckpointRow::new(&checkpoint)?;
            let client = self.client().await?;
            let id = insert_checkpoint(&client, &row).await?;
            drop(client);
            if row.cuts() {
                self.cut(thread).await;
            }
            Ok(id)
        }
        .await
        .map_err(|e: Fail| e.write(thread))
    }

    pub(super) async fn newest_checkpoint(
        &self,
        thread: &str,
        namespace: &str,
    ) -> Result<Option<Checkpoint>, StoreError> {
        async {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(&format!(
                    "SELECT {CHECKPOINT_COLUMNS} FROM loomflow_checkpoints
                     WHERE thread = $1 AND namespace = $2 ORDER BY id DESC LIMIT 1"
                ))
                .await?;
            let row = client.query_opt(&stmt, &[&thread, &namespace]).await?;
            Ok(row
                .map(|row| checkpoint_from_row(&row, thread))
                .transpose()?)
        }
        .await
        .map_err(|e: Fail| e.read(thread))
    }

    pub(super) async fn checkpoint_by_id(
        &self,
        thread: &str,
        id: u64,
    ) -> Result<Option<Checkpoint>, StoreError> {
        // An id past BIGINT names no row.
        let Ok(id) = i64::try_from(id) else {
            return Ok(None);
        };
        async {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(&format!(
                    "SELECT {CHECKPOINT_COLUMNS} FROM loomflow_checkpoints
                     WHERE id = $1 AND thread = $2"
                ))
                .await?;
            let row = client.query_opt(&stmt, &[&id, &thread]).await?;
            Ok(row
                .map(|row| checkpoint_from_row(&row, thread))
                .transpose()?)
        }
        .await
        .map_err(|e: Fail| e.read(thread))
    }

    pub(super) async fn all_checkpoints(
        &self,
        thread: &str,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        async {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(&format!(
                    "SELECT {CHECKPOINT_COLUMNS} FROM loomflow_checkpoints
                     WHERE thread = $1 ORDER BY id"
                ))
                .await?;
            let rows = client.query(&stmt, &[&thread]).await?;
            Ok(rows
                .iter()
                .map(|row| checkpoint_from_row(row, thread))
                .collect::<Result<_, _>>()?)
        }
        .await
        .map_err(|e: Fail| e.read(thread))
    }

    pub(super) async fn save_journal(
        &self,
        key: JournalKey,
        value: Value,
    ) -> Result<(), StoreError> {
        let thread = key.thread.clone();
        async {
            let row = JournalRow::new(key, &value)?;
            let client = self.client().await?;
            insert_journal(&client, &row).await
        }
        .await
        .map_err(|e| e.write(&thread))
    }

    pub(super) async fn journal_entry(
        &self,
        key: &JournalKey,
    ) -> Result<Option<Value>, StoreError> {
        // A run or step past BIGINT names no entry.
        let (Ok(run), Ok(step)) = (i64::try_from(key.run), i64::try_from(key.step)) else {
            return Ok(None);
        };
        let thread = &key.thread;
        async {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(
                    "SELECT value FROM loomflow_journal
                     WHERE thread = $1 AND run = $2 AND namespace = $3 AND step = $4
                       AND node = $5 AND name = $6 AND occurrence = $7",
                )
                .await?;
            let row = client
                .query_opt(
                    &stmt,
                    &[
                        thread,
                        &run,
                        &key.namespace,
                        &step,
                        &key.node,
                        &key.name,
                        &i64::from(key.occurrence),
                    ],
                )
                .await?;
            let Some(row) = row else { return Ok(None) };
            let value: &str = get(&row, 0, thread)?;
            Ok(Some(from_json(
                value,
                thread,
                format_args!("journal entry {}", key.name),
            )?))
        }
        .await
        .map_err(|e: Fail| e.read(thread))
    }

    /// [`Store::list_journal`](crate::runtime::Store::list_journal).
    pub(super) async fn run_journal(
        &self,
        thread: &str,
        run: u64,
    ) -> Result<Vec<(JournalKey, Value)>, StoreError> {
        // A run past BIGINT has no entries.
        let Ok(stored_run) = i64::try_from(run) else {
            return Ok(Vec::new());
        };
        async {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(
                    "SELECT namespace, step, node, name, occurrence, value FROM loomflow_journal
                     WHERE thread = $1 AND run = $2",
                )
                .await?;
            let rows = client.query(&stmt, &[&thread, &stored_run]).await?;
            let mut entries = Vec::with_capacity(rows.len());
            for row in &rows {
                let step = to_u64(get(row, 1, thread)?, "journal step", thread)?;
                let occurrence: i64 = get(row, 4, thread)?;
                let occurrence = u32::try_from(occurrence).map_err(|_| {
                    corrupt(
                        thread,
                        format!("journal occurrence {occurrence} out of range"),
                    )
                })?;
                let key = JournalKey::new(
                    thread,
                    run,
                    get::<String>(row, 0, thread)?,
                    step,
                    get::<String>(row, 2, thread)?,
                    get::<String>(row, 3, thread)?,
                    occurrence,
                );
                let value: &str = get(row, 5, thread)?;
                let value = from_json(value, thread, format_args!("journal entry {}", key.name))?;
                entries.push((key, value));
            }
            Ok(entries)
        }
        .await
        .map_err(|e: Fail| e.read(thread))
    }
}
