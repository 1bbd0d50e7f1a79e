//! [`PostgresMemory`]: items in a PostgreSQL table, searched with PostgreSQL's full-text
//! search (a generated `tsvector` column with a GIN index).

use deadpool_postgres::{Object, Pool};
use serde_json::Value;

use super::backend::{check_metadata, check_new, check_text, distinct, from_ms, now_ms, words};
use super::matching::edges_trimmed;
use super::{Memory, MemoryError, MemoryId, MemoryItem, Scope};
use crate::graph::BoxFuture;
use crate::runtime::{PostgresOptions, PostgresStore};

/// The transaction-level advisory lock under which the memory's table is created:
/// "loommemo" in ASCII.
const SCHEMA_LOCK: i64 = 0x6c6f_6f6d_6d65_6d6f;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS loomflow_memory (
    id BIGSERIAL PRIMARY KEY,
    scope_kind TEXT NOT NULL,
    scope_id TEXT NOT NULL,
    text TEXT NOT NULL,
    metadata TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    search TSVECTOR GENERATED ALWAYS AS (to_tsvector('english', text)) STORED
);
CREATE INDEX IF NOT EXISTS loomflow_memory_scope
    ON loomflow_memory (scope_kind, scope_id, created_ms, id);
CREATE INDEX IF NOT EXISTS loomflow_memory_search ON loomflow_memory USING GIN (search);
";

/// Long-term memory in PostgreSQL (feature `postgres`), searched with its full-text search
/// (English stemming) and ranked by `ts_rank`.
///
/// Diacritics are not folded: `cafe` does not find `café`, as it does in
/// `SqliteMemory`. A query's words are composed (NFC) and lowercased
/// before the search; an item's text is searched as stored, so text stored decomposed
/// (`e` + U+0301) is not found by the composed word. `ts_rank` reads only the matching
/// item, so other scopes' items do not change a scope's scores.
///
/// It lives in the database of a [`PostgresStore`] and shares its connection pool
/// ([`new`](Self::new)), or connects on its own ([`connect`](Self::connect)). Cheap to
/// clone.
#[derive(Clone)]
pub struct PostgresMemory {
    pool: Pool,
    server: String,
}

impl std::fmt::Debug for PostgresMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresMemory")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

fn failed(operation: impl Into<String>) -> impl FnOnce(tokio_postgres::Error) -> MemoryError {
    let operation = operation.into();
    move |source| MemoryError::backend("postgres", operation, source)
}

impl PostgresMemory {
    /// The memory in `store`'s database, over `store`'s connection pool; creates its table
    /// (`loomflow_memory`) if it is not there.
    ///
    /// # Errors
    ///
    /// [`MemoryError::Backend`] when no connection can be had or the table cannot be made.
    pub async fn new(store: &PostgresStore) -> Result<Self, MemoryError> {
        let memory = Self {
            pool: store.pool().clone(),
            server: store.server().to_owned(),
        };
        let operation = format!("create its table in {}", memory.server);
        let mut client = memory.client(&operation).await?;
        // One process at a time: processes starting together would otherwise race to create
        // the same table and types, and all but one fail.
        let tx = client
            .transaction()
            .await
            .map_err(failed(operation.clone()))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
            .await
            .map_err(failed(operation.clone()))?;
        tx.batch_execute(SCHEMA)
            .await
            .map_err(failed(operation.clone()))?;
        tx.commit().await.map_err(failed(operation))?;
        Ok(memory)
    }

    /// Connects to the database at `url` (as [`PostgresStore::connect`] does, without its
    /// change listener) and uses the memory there.
    ///
    /// # Errors
    ///
    /// [`MemoryError::Backend`] when the connection or the table set-up fails.
    pub async fn connect(url: &str) -> Result<Self, MemoryError> {
        let options = PostgresOptions::default().notifications(false);
        let store = PostgresStore::connect_with(url, options)
            .await
            .map_err(|e| MemoryError::backend("postgres", "connect", e))?;
        Self::new(&store).await
    }

    async fn client(&self, operation: &str) -> Result<Object, MemoryError> {
        self.pool
            .get()
            .await
            .map_err(|e| MemoryError::backend("postgres", operation.to_owned(), e))
    }
}

fn item(scope: &Scope, row: &tokio_postgres::Row, score: f64) -> MemoryItem {
    let metadata: String = row.get(2);
    MemoryItem {
        id: MemoryId(row.get(0)),
        scope: scope.clone(),
        text: row.get(1),
        metadata: crate::json_depth::from_str(&metadata).unwrap_or(Value::Null),
        created_at: from_ms(row.get(3)),
        score,
    }
}

const INSERT: &str =
    "INSERT INTO loomflow_memory (scope_kind, scope_id, text, metadata, created_ms)
     VALUES ($1, $2, $3, $4, $5) RETURNING id";

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Memory for PostgresMemory {
    fn remember<'a>(
        &'a self,
        scope: &'a Scope,
        text: &'a str,
        metadata: Value,
    ) -> BoxFuture<'a, Result<MemoryId, MemoryError>> {
        Box::pin(async move {
            let metadata = check_new(scope, text, metadata)?.to_string();
            let operation = format!("remember for {scope}");
            let client = self.client(&operation).await?;
            let row = client
                .query_one(
                    INSERT,
                    &[&scope.kind(), &scope.id(), &text, &metadata, &now_ms()],
                )
                .await
                .map_err(failed(operation))?;
            Ok(MemoryId(row.get(0)))
        })
    }

    fn recall<'a>(
        &'a self,
        scope: &'a Scope,
        query: &'a str,
        k: usize,
    ) -> BoxFuture<'a, Result<Vec<MemoryItem>, MemoryError>> {
        Box::pin(async move {
            scope.checked()?;
            let words = words(query);
            if words.is_empty() || k == 0 {
                return Ok(Vec::new());
            }
            // Only letters, digits and combining marks reach to_tsquery; `|` makes any word a match.
            let matching = words.join(" | ");
            let operation = format!("recall for {scope}");
            let client = self.client(&operation).await?;
            let rows = client
                .query(
                    "SELECT m.id, m.text, m.metadata, m.created_ms, ts_rank(m.search, q)::float8
                     FROM loomflow_memory m, to_tsquery('english', $1) q
                     WHERE m.scope_kind = $2 AND m.scope_id = $3 AND m.search @@ q
                     ORDER BY 5 DESC, m.created_ms DESC, m.id DESC
                     LIMIT $4",
                    &[&matching, &scope.kind(), &scope.id(), &limit(k)],
                )
                .await
                .map_err(failed(operation))?;
            Ok(rows
                .iter()
                .map(|row| item(scope, row, row.get(4)))
                .collect())
        })
    }

    fn forget<'a>(
        &'a self,
        scope: &'a Scope,
        id: MemoryId,
    ) -> BoxFuture<'a, Result<bool, MemoryError>> {
        Box::pin(async move {
            scope.checked()?;
            let operation = format!("forget item {id} of {scope}");
            let client = self.client(&operation).await?;
            let removed = client
                .execute(
                    "DELETE FROM loomflow_memory WHERE id = $1 AND scope_kind = $2 AND scope_id = $3",
                    &[&id.0, &scope.kind(), &scope.id()],
                )
                .await
                .map_err(failed(operation))?;
            Ok(removed > 0)
        })
    }

    fn forget_all<'a>(&'a self, scope: &'a Scope) -> BoxFuture<'a, Result<u64, MemoryError>> {
        Box::pin(async move {
            scope.checked()?;
            let operation = format!("forget everything of {scope}");
            let client = self.client(&operation).await?;
            client
                .execute(
                    "DELETE FROM loomflow_memory WHERE scope_kind = $1 AND scope_id = $2",
                    &[&scope.kind(), &scope.id()],
                )
                .await
                .map_err(failed(operation))
        })
    }

    fn count<'a>(&'a self, scope: &'a Scope) -> BoxFuture<'a, Result<u64, MemoryError>> {
        Box::pin(async move {
            scope.checked()?;
            let operation = format!("count the items of {scope}");
            let client = self.client(&operation).await?;
            let row = client
                .query_one(
                    "SELECT count(*) FROM loomflow_memory WHERE scope_kind = $1 AND scope_id = $2",
                    &[&scope.kind(), &scope.id()],
                )
                .await
                .map_err(failed(operation))?;
            Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
        })
    }

    fn holds_text<'a>(
        &'a self,
        scope: &'a Scope,
        text: &'a str,
    ) -> BoxFuture<'a, Result<bool, MemoryError>> {
        Box::pin(async move {
            scope.checked()?;
            let operation = format!("look for a text in {scope}");
            let client = self.client(&operation).await?;
            // Folded by `translate` rather than `lower`: ASCII letters only, as the trait says.
            let row = client
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM loomflow_memory
                     WHERE scope_kind = $1 AND scope_id = $2
                     AND translate(btrim(text, E' \\t\\n\\013\\f\\r'), $4, $5)
                         = translate($3, $4, $5))",
                    &[
                        &scope.kind(),
                        &scope.id(),
                        &edges_trimmed(text),
                        &"ABCDEFGHIJKLMNOPQRSTUVWXYZ",
                        &"abcdefghijklmnopqrstuvwxyz",
                    ],
                )
                .await
                .map_err(failed(operation))?;
            Ok(row.get::<_, bool>(0))
        })
    }

    fn list<'a>(
        &'a self,
        scope: &'a Scope,
        n: usize,
    ) -> BoxFuture<'a, Result<Vec<MemoryItem>, MemoryError>> {
        Box::pin(async move {
            scope.checked()?;
            let operation = format!("list the items of {scope}");
            let client = self.client(&operation).await?;
            let rows = client
                .query(
                    "SELECT id, text, metadata, created_ms FROM loomflow_memory
                     WHERE scope_kind = $1 AND scope_id = $2
                     ORDER BY created_ms, id LIMIT $3",
                    &[&scope.kind(), &scope.id(), &limit(n)],
                )
                .await
                .map_err(failed(operation))?;
            Ok(rows.iter().map(|row| item(scope, row, 0.0)).collect())
        })
    }

    fn replace<'a>(
        &'a self,
        scope: &'a Scope,
        old: &'a [MemoryId],
        texts: &'a [String],
        metadata: Value,
    ) -> BoxFuture<'a, Result<Vec<MemoryId>, MemoryError>> {
        Box::pin(async move {
            scope.checked()?;
            for text in texts {
                check_text(scope, text)?;
            }
            let metadata = check_metadata(scope, metadata)?.to_string();
            let operation = format!("replace items of {scope}");
            let mut client = self.client(&operation).await?;
            let tx = client
                .transaction()
                .await
                .map_err(failed(operation.clone()))?;
            let old = distinct(old);
            let ids: Vec<i64> = old.iter().map(|id| id.0).collect();
            let deleted = tx
                .query(
                    "DELETE FROM loomflow_memory
                     WHERE id = ANY($1) AND scope_kind = $2 AND scope_id = $3
                     RETURNING id, created_ms",
                    &[&ids, &scope.kind(), &scope.id()],
                )
                .await
                .map_err(failed(operation.clone()))?;
            let read = |row: &tokio_postgres::Row, at: usize| {
                row.try_get::<_, i64>(at).map_err(failed(operation.clone()))
            };
            let mut gone = std::collections::HashSet::with_capacity(deleted.len());
            let mut newest: Option<i64> = None;
            for row in &deleted {
                gone.insert(read(row, 0)?);
                newest = newest.max(Some(read(row, 1)?));
            }
            let missing: Vec<MemoryId> =
                old.into_iter().filter(|id| !gone.contains(&id.0)).collect();
            if !missing.is_empty() {
                // Dropped uncommitted: the transaction rolls back.
                return Err(MemoryError::Gone {
                    scope: scope.clone(),
                    missing,
                });
            }
            let created_ms = newest.unwrap_or_else(now_ms);
            let mut ids = Vec::with_capacity(texts.len());
            for text in texts {
                let row = tx
                    .query_one(
                        INSERT,
                        &[&scope.kind(), &scope.id(), text, &metadata, &created_ms],
                    )
                    .await
                    .map_err(failed(operation.clone()))?;
                ids.push(MemoryId(row.get(0)));
            }
            tx.commit().await.map_err(failed(operation))?;
            Ok(ids)
        })
    }
}
