//! Retention on PostgreSQL: a thread cut down to its newest checkpoints after a run ends
//! (see [`PostgresOptions::retention`](super::PostgresOptions::retention)).

use super::PostgresStore;
use super::error::{Fail, chain};
use crate::runtime::store::retention::{StoredRow, due, stored_rows_dropped};

impl PostgresStore {
    /// Cuts `thread` down to the store's retention, if it has one, after a write that may
    /// (see `retention::cuts`). A failure is logged, not returned: the run's own write was
    /// committed, and the next such write tries again.
    pub(super) async fn cut(&self, thread: &str) {
        let Some(limit) = self.retention else {
            return;
        };
        if let Err(error) = self.prune_thread(thread, limit).await {
            let error = chain(&error.write(thread));
            tracing::warn!(thread, error = %error, "pruning the thread's old checkpoints failed");
        }
    }

    /// Deletes the oldest checkpoints of `thread` past `limit`, but those retention keeps
    /// whatever their age, once the thread is [`due`]; returns how many went.
    async fn prune_thread(&self, thread: &str, limit: usize) -> Result<u64, Fail> {
        let client = self.client().await?;
        let count: i64 = client
            .query_one(
                "SELECT count(*) FROM loomflow_checkpoints WHERE thread = $1",
                &[&thread],
            )
            .await?
            .try_get(0)?;
        if !due(count, limit) {
            return Ok(0);
        }
        let stmt = client
            .prepare_cached(
                // Whether a row names the graph is read from its body, parsed only when its
                // text holds the key (`position` passes over the others). A `\u0000` in a
                // string cannot be decoded to text: read as `\u0001`, which can (in an
                // escaped backslash's text, `\\u0000`, it stays text).
                "SELECT id, run, namespace, status,
                     namespace = '' AND position('\"graph_name\":' in body) > 0
                         AND (replace(body, E'\\\\u0000', E'\\\\u0001')::json -> 'graph_name') IS NOT NULL
                 FROM loomflow_checkpoints WHERE thread = $1 ORDER BY id",
            )
            .await?;
        let mut rows = Vec::new();
        for row in client.query(&stmt, &[&thread]).await? {
            let status: &str = row.try_get(3)?;
            let ids = (row.try_get(0)?, row.try_get(1)?);
            match StoredRow::read(ids, row.try_get(2)?, status, row.try_get(4)?) {
                Some(row) => rows.push(row),
                // A row that does not read as it should: the thread is left as it is.
                None => return Ok(0),
            }
        }
        let ids = stored_rows_dropped(&rows, limit);
        if ids.is_empty() {
            return Ok(0);
        }
        let deleted = client
            .execute(
                "DELETE FROM loomflow_checkpoints WHERE thread = $1 AND id = ANY($2)",
                &[&thread, &ids],
            )
            .await?;
        Ok(deleted)
    }
}
