//! Queuing a run for a worker: [`PostgresStore::submit`].

use deadpool_postgres::GenericClient;
use serde_json::Value;

use super::PostgresStore;
use super::error::Fail;
use super::rows::{get, to_i64, to_json};
use super::runs::{CLAIM_TRIES, record_from_row};
use crate::runtime::store::{RunRecord, StoreError, Submitted};

/// [`RUN_COLUMNS`](super::runs::RUN_COLUMNS) as a submit reads them: a row with no status (claimed, never written)
/// reads as running.
const ACTIVE_COLUMNS: &str =
    "thread, run, graph, fingerprint, COALESCE(status, 'running'), waiting_on, wake_at_ms,
    lease_owner, lease_until_ms, attempts, cancel_requested, error, created_at_ms,
    updated_at_ms, lapses";

/// `thread`'s row as a refused submit reports it, and whether a checkpoint was written to
/// it: a row an execution claimed and has not written to yet (no status) reads as running.
async fn read_active(
    client: &impl GenericClient,
    thread: &str,
) -> Result<Option<(RunRecord, bool)>, Fail> {
    let stmt = client
        .prepare_cached(&format!(
            "SELECT {ACTIVE_COLUMNS}, status IS NOT NULL FROM loomflow_runs WHERE thread = $1"
        ))
        .await?;
    let Some(row) = client.query_opt(&stmt, &[&thread]).await? else {
        return Ok(None);
    };
    Ok(Some((record_from_row(&row)?, get(&row, 15, thread)?)))
}

impl PostgresStore {
    pub(super) async fn submit(
        &self,
        thread: &str,
        graph: &str,
        input: &Value,
        now_ms: u64,
    ) -> Result<Submitted, StoreError> {
        async {
            let input = to_json(input, thread)?;
            let now = to_i64(now_ms, "time", thread)?;
            let client = self.client().await?;
            // One statement queues the run: a thread without a row gets one; a row whose
            // run finished and that nobody holds (or one that never ran) is replaced.
            let queue = client
                .prepare_cached(
                    "WITH queued AS (
                         INSERT INTO loomflow_runs AS r (thread, status, graph, input,
                             runnable_at_ms, created_at_ms, updated_at_ms)
                         VALUES ($1, 'queued', $2, $3, 0, $4, $4)
                         ON CONFLICT (thread) DO UPDATE SET
                             status = 'queued', graph = $2, input = $3, runnable_at_ms = 0,
                             fingerprint = NULL, waiting_on = NULL, wake_at_ms = NULL,
                             cancel_requested = FALSE, error = NULL, lease_owner = NULL,
                             lease_until_ms = 0, attempts = 0, lapses = 0, created_at_ms = $4,
                             updated_at_ms = $4
                         WHERE (r.status IS NULL
                                OR r.status IN ('completed', 'failed', 'cancelled'))
                           AND (r.lease_owner IS NULL OR r.lease_until_ms <= $4)
                         RETURNING 1)
                     SELECT pg_notify('loomflow_changes', '') FROM queued",
                )
                .await?;
            // Refused: the run is unfinished or held, and the caller is told which. It may
            // finish between the two statements: then queuing is tried again, a few times
            // at most.
            for _ in 0..CLAIM_TRIES {
                if client
                    .query_opt(&queue, &[&thread, &graph, &input, &now])
                    .await?
                    .is_some()
                {
                    return Ok(Submitted::Queued);
                }
                if let Some((record, written)) = read_active(&client, thread).await? {
                    let held = record.lease_owner.is_some()
                        && i64::try_from(record.lease_until_ms).unwrap_or(i64::MAX) > now;
                    if (written && !record.state.is_finished()) || held {
                        return Ok(Submitted::Active(Box::new(record)));
                    }
                }
            }
            Err(Fail::Store(StoreError::Write {
                thread: thread.to_owned(),
                message: format!("the run changed state {CLAIM_TRIES} times during a submit"),
            }))
        }
        .await
        .map_err(|e: Fail| e.write(thread))
    }
}
