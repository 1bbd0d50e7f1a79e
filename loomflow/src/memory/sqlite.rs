//! [`SqliteMemory`]: items in a SQLite table, searched with an FTS5 index.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use super::backend::{check_metadata, check_new, check_text, distinct, from_ms, now_ms, words};
use super::matching::edges_trimmed;
use super::{Memory, MemoryError, MemoryId, MemoryItem, Scope};
use crate::graph::BoxFuture;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS loomflow_memory (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    scope_kind TEXT NOT NULL,
    scope_id TEXT NOT NULL,
    text TEXT NOT NULL,
    metadata TEXT NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS loomflow_memory_scope
    ON loomflow_memory (scope_kind, scope_id, created_ms, id);
CREATE VIRTUAL TABLE IF NOT EXISTS loomflow_memory_fts USING fts5(
    text, content = 'loomflow_memory', content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS loomflow_memory_added AFTER INSERT ON loomflow_memory BEGIN
    INSERT INTO loomflow_memory_fts (rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER IF NOT EXISTS loomflow_memory_removed AFTER DELETE ON loomflow_memory BEGIN
    INSERT INTO loomflow_memory_fts (loomflow_memory_fts, rowid, text)
        VALUES ('delete', old.id, old.text);
END;
";

/// Long-term memory in a SQLite database (feature `sqlite`), searched with an FTS5
/// full-text index (Porter stemming, diacritics folded) and ranked by BM25.
///
/// Diacritics are folded, so `cafe` finds `café` (and the reverse); `PostgresMemory`
/// does not fold them. BM25's statistics (how rare a word is, how long items are) are those
/// of the whole index, every scope's items together: what other scopes hold changes a
/// scope's scores and can change its order (and so which items make the first `k`), though
/// never which of its items match.
/// [`MemoryItem::score`] is therefore a weak side channel on other scopes' contents: do not
/// show scores to a user who must learn nothing of other users' memories.
///
/// It may share a file with [`SqliteStore`](crate::runtime::SqliteStore): its tables are
/// its own (`loomflow_memory*`). Cheap to clone; clones share one connection, used from
/// tokio's blocking pool.
#[derive(Clone)]
pub struct SqliteMemory {
    connection: Arc<Mutex<Connection>>,
}

impl std::fmt::Debug for SqliteMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteMemory").finish_non_exhaustive()
    }
}

fn failed(operation: impl Into<String>) -> impl FnOnce(rusqlite::Error) -> MemoryError {
    let operation = operation.into();
    move |source| MemoryError::backend("sqlite", operation, source)
}

impl SqliteMemory {
    /// Opens (or creates) the memory in the SQLite file at `path`, in WAL mode.
    ///
    /// # Errors
    ///
    /// [`MemoryError::Backend`] when the file cannot be opened or the tables created.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, MemoryError> {
        let path = path.as_ref();
        let operation = format!("open {}", path.display());
        let connection = Connection::open(path).map_err(failed(&operation))?;
        connection
            .busy_timeout(Duration::from_secs(5))
            .map_err(failed(&operation))?;
        connection
            .pragma_update(None, "journal_mode", "WAL")
            .map_err(failed(&operation))?;
        Self::with_connection(connection, &operation)
    }

    /// A memory that lives as long as the value (for tests and examples).
    ///
    /// # Errors
    ///
    /// [`MemoryError::Backend`] when SQLite cannot create the tables.
    pub fn in_memory() -> Result<Self, MemoryError> {
        let connection = Connection::open_in_memory().map_err(failed("open in memory"))?;
        Self::with_connection(connection, "open in memory")
    }

    fn with_connection(connection: Connection, operation: &str) -> Result<Self, MemoryError> {
        connection
            .execute_batch(SCHEMA)
            .map_err(failed(format!("{operation} (creating its tables)")))?;
        Ok(Self {
            connection: Arc::new(Mutex::new(connection)),
        })
    }

    /// Runs `f` on the connection in tokio's blocking pool.
    async fn with<T, F>(&self, operation: String, f: F) -> Result<T, MemoryError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let connection = Arc::clone(&self.connection);
        let job = operation.clone();
        tokio::task::spawn_blocking(move || {
            let mut connection = crate::sync::lock(&connection);
            f(&mut connection).map_err(failed(job))
        })
        .await
        .map_err(|e| MemoryError::backend("sqlite", operation, e))?
    }
}

fn insert(
    tx: &rusqlite::Transaction<'_>,
    scope: &Scope,
    text: &str,
    metadata: &str,
    created_ms: i64,
) -> rusqlite::Result<MemoryId> {
    tx.execute(
        "INSERT INTO loomflow_memory (scope_kind, scope_id, text, metadata, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5)",
        params![scope.kind(), scope.id(), text, metadata, created_ms],
    )?;
    Ok(MemoryId(tx.last_insert_rowid()))
}

fn item(scope: &Scope, row: &rusqlite::Row<'_>, score: f64) -> rusqlite::Result<MemoryItem> {
    let metadata: String = row.get(2)?;
    Ok(MemoryItem {
        id: MemoryId(row.get(0)?),
        scope: scope.clone(),
        text: row.get(1)?,
        metadata: crate::json_depth::from_str(&metadata).unwrap_or(Value::Null),
        created_at: from_ms(row.get(3)?),
        score,
    })
}

impl Memory for SqliteMemory {
    fn remember<'a>(
        &'a self,
        scope: &'a Scope,
        text: &'a str,
        metadata: Value,
    ) -> BoxFuture<'a, Result<MemoryId, MemoryError>> {
        Box::pin(async move {
            let metadata = check_new(scope, text, metadata)?.to_string();
            let (scope, text) = (scope.clone(), text.to_owned());
            self.with(format!("remember for {scope}"), move |c| {
                let tx = c.transaction()?;
                let id = insert(&tx, &scope, &text, &metadata, now_ms())?;
                tx.commit()?;
                Ok(id)
            })
            .await
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
            // Each word quoted: FTS5 operators in the query are plain words.
            let matching = words
                .iter()
                .map(|w| format!("\"{w}\""))
                .collect::<Vec<_>>()
                .join(" OR ");
            let scope = scope.clone();
            let limit = i64::try_from(k).unwrap_or(i64::MAX);
            self.with(format!("recall for {scope}"), move |c| {
                let mut statement = c.prepare_cached(
                    "SELECT m.id, m.text, m.metadata, m.created_ms, bm25(loomflow_memory_fts)
                     FROM loomflow_memory_fts JOIN loomflow_memory m ON m.id = loomflow_memory_fts.rowid
                     WHERE loomflow_memory_fts MATCH ?1 AND m.scope_kind = ?2 AND m.scope_id = ?3
                     ORDER BY bm25(loomflow_memory_fts), m.created_ms DESC, m.id DESC
                     LIMIT ?4",
                )?;
                let rows = statement.query_map(
                    params![matching, scope.kind(), scope.id(), limit],
                    |row| {
                        // BM25 is lower for better matches; the score is higher for them.
                        let rank: f64 = row.get(4)?;
                        item(&scope, row, -rank)
                    },
                )?;
                rows.collect()
            })
            .await
        })
    }

    fn forget<'a>(
        &'a self,
        scope: &'a Scope,
        id: MemoryId,
    ) -> BoxFuture<'a, Result<bool, MemoryError>> {
        Box::pin(async move {
            scope.checked()?;
            let scope = scope.clone();
            self.with(format!("forget item {id} of {scope}"), move |c| {
                let removed = c.execute(
                    "DELETE FROM loomflow_memory WHERE id = ?1 AND scope_kind = ?2 AND scope_id = ?3",
                    params![id.0, scope.kind(), scope.id()],
                )?;
                Ok(removed > 0)
            })
            .await
        })
    }

    fn forget_all<'a>(&'a self, scope: &'a Scope) -> BoxFuture<'a, Result<u64, MemoryError>> {
        Box::pin(async move {
            scope.checked()?;
            let scope = scope.clone();
            self.with(format!("forget everything of {scope}"), move |c| {
                let removed = c.execute(
                    "DELETE FROM loomflow_memory WHERE scope_kind = ?1 AND scope_id = ?2",
                    params![scope.kind(), scope.id()],
                )?;
                Ok(removed as u64)
            })
            .await
        })
    }

    fn count<'a>(&'a self, scope: &'a Scope) -> BoxFuture<'a, Result<u64, MemoryError>> {
        Box::pin(async move {
            scope.checked()?;
            let scope = scope.clone();
            self.with(format!("count the items of {scope}"), move |c| {
                let count: i64 = c.query_row(
                    "SELECT count(*) FROM loomflow_memory WHERE scope_kind = ?1 AND scope_id = ?2",
                    params![scope.kind(), scope.id()],
                    |row| row.get(0),
                )?;
                Ok(u64::try_from(count).unwrap_or(0))
            })
            .await
        })
    }

    fn holds_text<'a>(
        &'a self,
        scope: &'a Scope,
        text: &'a str,
    ) -> BoxFuture<'a, Result<bool, MemoryError>> {
        Box::pin(async move {
            scope.checked()?;
            let (scope, text) = (scope.clone(), edges_trimmed(text).to_owned());
            self.with(format!("look for a text in {scope}"), move |c| {
                // SQLite's `lower` folds ASCII letters only, as the trait says.
                c.query_row(
                    "SELECT EXISTS (SELECT 1 FROM loomflow_memory
                     WHERE scope_kind = ?1 AND scope_id = ?2
                       AND lower(trim(text, ' ' || char(9, 10, 11, 12, 13))) = lower(?3))",
                    params![scope.kind(), scope.id(), text],
                    |row| row.get(0),
                )
            })
            .await
        })
    }

    fn list<'a>(
        &'a self,
        scope: &'a Scope,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<MemoryItem>, MemoryError>> {
        Box::pin(async move {
            scope.checked()?;
            let scope = scope.clone();
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            self.with(format!("list the items of {scope}"), move |c| {
                let mut statement = c.prepare_cached(
                    "SELECT id, text, metadata, created_ms FROM loomflow_memory
                     WHERE scope_kind = ?1 AND scope_id = ?2
                     ORDER BY created_ms, id LIMIT ?3",
                )?;
                let rows = statement
                    .query_map(params![scope.kind(), scope.id(), limit], |row| {
                        item(&scope, row, 0.0)
                    })?;
                rows.collect()
            })
            .await
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
            let old = distinct(old);
            let (owned, texts) = (scope.clone(), texts.to_vec());
            let replaced = self
                .with(format!("replace items of {scope}"), move |c| {
                    let scope = owned;
                    let tx = c.transaction()?;
                    let mut newest: Option<i64> = None;
                    let mut missing = Vec::new();
                    for id in old {
                        let created = tx
                            .query_row(
                                "DELETE FROM loomflow_memory
                             WHERE id = ?1 AND scope_kind = ?2 AND scope_id = ?3
                             RETURNING created_ms",
                                params![id.0, scope.kind(), scope.id()],
                                |row| row.get::<_, i64>(0),
                            )
                            .optional()?;
                        match created {
                            Some(ms) => newest = newest.max(Some(ms)),
                            None => missing.push(id),
                        }
                    }
                    if !missing.is_empty() {
                        // Dropped uncommitted: the transaction rolls back.
                        return Ok(Err(missing));
                    }
                    let created_ms = newest.unwrap_or_else(now_ms);
                    let ids = texts
                        .iter()
                        .map(|text| insert(&tx, &scope, text, &metadata, created_ms))
                        .collect::<rusqlite::Result<Vec<_>>>()?;
                    tx.commit()?;
                    Ok(Ok(ids))
                })
                .await?;
            replaced.map_err(|missing| MemoryError::Gone {
                scope: scope.clone(),
                missing,
            })
        })
    }
}
