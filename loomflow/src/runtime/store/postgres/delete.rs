//! A thread deleted under its claim: [`PostgresStore::delete_claimed_thread`], one statement.

use deadpool_postgres::GenericClient;

use super::PostgresStore;
use super::error::Fail;
use super::fenced::lease_lost;
use super::rows::{get, now_ms, to_u64};
use crate::runtime::store::{DeletedThread, StoreError};

impl PostgresStore {
    /// [`Store::delete_thread`](crate::runtime::Store::delete_thread): the run's row goes
    /// only while `owner` holds it, and the other rows only with it. A pending signal of the
    /// session that carries an idempotency key is marked consumed instead, as a discarded
    /// one is, so that the key is still remembered.
    pub(super) async fn delete_claimed_thread(
        &self,
        thread: &str,
        owner: &str,
    ) -> Result<DeletedThread, StoreError> {
        async {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(
                    "WITH held AS (
                         DELETE FROM loomflow_runs WHERE thread = $1 AND lease_owner = $2
                         RETURNING 1),
                     checkpoints AS (
                         DELETE FROM loomflow_checkpoints
                         WHERE thread = $1 AND EXISTS (SELECT 1 FROM held) RETURNING 1),
                     journal AS (
                         DELETE FROM loomflow_journal
                         WHERE thread = $1 AND EXISTS (SELECT 1 FROM held) RETURNING 1),
                     unkeyed AS (
                         DELETE FROM loomflow_signals
                         WHERE session = $1 AND consumed_at_ms IS NULL
                           AND idempotency_key IS NULL AND EXISTS (SELECT 1 FROM held)
                         RETURNING 1),
                     keyed AS (
                         UPDATE loomflow_signals SET consumed_at_ms = $3, payload = NULL
                         WHERE session = $1 AND consumed_at_ms IS NULL
                           AND idempotency_key IS NOT NULL AND EXISTS (SELECT 1 FROM held)
                         RETURNING 1)
                     SELECT (SELECT count(*) FROM checkpoints), (SELECT count(*) FROM journal),
                            (SELECT count(*) FROM unkeyed) + (SELECT count(*) FROM keyed),
                            pg_notify('loomflow_changes', '')
                     FROM held",
                )
                .await?;
            let Some(row) = client
                .query_opt(&stmt, &[&thread, &owner, &now_ms()])
                .await?
            else {
                return Err(lease_lost(thread, owner));
            };
            let count = |index, what| to_u64(get::<i64>(&row, index, thread)?, what, thread);
            Ok(DeletedThread::new(
                count(0, "checkpoint count")?,
                count(1, "journal entry count")?,
                count(2, "signal count")?,
            ))
        }
        .await
        .map_err(|e: Fail| e.write(thread))
    }
}
