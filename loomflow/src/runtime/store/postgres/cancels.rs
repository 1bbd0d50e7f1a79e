//! Which of the runs a process executes are asked to stop: [`PostgresStore::read_cancels`],
//! one statement for all of them.

use std::collections::HashSet;
use std::sync::Arc;

use deadpool_postgres::GenericClient;

use super::PostgresStore;
use super::error::Fail;
use super::rows::get;
use crate::runtime::store::StoreError;

impl PostgresStore {
    /// Those of `threads` whose row asks to stop, in one statement.
    pub(super) async fn read_cancels(
        &self,
        threads: &[Arc<str>],
    ) -> Result<Vec<Arc<str>>, StoreError> {
        let names: Vec<&str> = threads.iter().map(|thread| &**thread).collect();
        const LABEL: &str = "(runs)";
        let rows = async {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(
                    "SELECT thread FROM loomflow_runs
                     WHERE cancel_requested AND status IS NOT NULL
                       AND thread = ANY($1::text[])",
                )
                .await?;
            Ok(client.query(&stmt, &[&names]).await?)
        }
        .await
        .map_err(|e: Fail| e.read(LABEL))?;
        let asked = (rows.iter())
            .map(|row| get::<String>(row, 0, LABEL))
            .collect::<Result<HashSet<String>, StoreError>>()?;
        // The callers' own names back, rather than new copies of them.
        Ok(threads
            .iter()
            .filter(|thread| asked.contains(&***thread))
            .cloned()
            .collect())
    }
}
