//! The schema version and its migrations.
//!
//! Tables are named `loomflow_*`, so that they can live in a schema an application also
//! uses; they go where the connection's `search_path` puts new tables (`public` by default;
//! `options=-csearch_path=...` in the connection string picks another).

use deadpool_postgres::Object;

use super::error::Fail;
use super::target::Target;
use crate::runtime::store::StoreError;

/// The schema this build writes. Bump it and append to [`MIGRATIONS`] together.
pub(super) const SCHEMA_VERSION: i64 = 7;

/// The advisory lock (a transaction-level one, released at commit) that lets one process at
/// a time migrate: "loomflow" in ASCII.
const MIGRATION_LOCK: i64 = 0x6c6f_6f6d_666c_6f77;

/// `MIGRATIONS[v]` takes a database from version `v` to `v + 1`; version 0 has no loomflow
/// tables.
///
/// The layout follows the SQLite store's (see `sqlite/schema.rs` and `sqlite/runs.rs`):
/// the fields queries filter on are columns, the executor's snapshot is one opaque JSON
/// `body`, values are JSON text. Differences: identities instead of rowids, `waiting_on`
/// is a `TEXT[]` (so `name = ANY(waiting_on)` finds the runs a signal wakes), and the
/// pending-signal index is by sequence number, the order workers read them in.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [
    // 0 -> 1
    "CREATE TABLE loomflow_meta (schema_version BIGINT NOT NULL);
     INSERT INTO loomflow_meta (schema_version) VALUES (0);
     CREATE TABLE loomflow_checkpoints (
         id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
         thread TEXT NOT NULL,
         run BIGINT NOT NULL,
         namespace TEXT NOT NULL,
         step BIGINT NOT NULL,
         status TEXT NOT NULL,
         body TEXT NOT NULL,
         error TEXT
     );
     CREATE INDEX loomflow_checkpoints_by_thread
         ON loomflow_checkpoints (thread, namespace, id);
     CREATE TABLE loomflow_journal (
         thread TEXT NOT NULL,
         run BIGINT NOT NULL,
         namespace TEXT NOT NULL,
         step BIGINT NOT NULL,
         node TEXT NOT NULL,
         name TEXT NOT NULL,
         occurrence BIGINT NOT NULL,
         value TEXT NOT NULL,
         PRIMARY KEY (thread, run, namespace, step, node, name, occurrence)
     );
     CREATE TABLE loomflow_signals (
         seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
         session TEXT NOT NULL,
         name TEXT NOT NULL,
         payload TEXT,
         idempotency_key TEXT,
         sent_at_ms BIGINT NOT NULL,
         consumed_at_ms BIGINT
     );
     CREATE UNIQUE INDEX loomflow_signals_by_key
         ON loomflow_signals (session, name, idempotency_key)
         WHERE idempotency_key IS NOT NULL;
     CREATE INDEX loomflow_signals_pending
         ON loomflow_signals (seq) WHERE consumed_at_ms IS NULL;
     CREATE INDEX loomflow_signals_consumed
         ON loomflow_signals (consumed_at_ms) WHERE consumed_at_ms IS NOT NULL;
     CREATE TABLE loomflow_runs (
         thread TEXT PRIMARY KEY,
         run BIGINT NOT NULL DEFAULT 0,
         status TEXT,
         graph TEXT,
         fingerprint TEXT,
         waiting_on TEXT[],
         wake_at_ms BIGINT,
         runnable_at_ms BIGINT,
         lease_owner TEXT,
         lease_until_ms BIGINT NOT NULL DEFAULT 0,
         attempts BIGINT NOT NULL DEFAULT 0,
         cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
         error TEXT,
         input TEXT,
         created_at_ms BIGINT NOT NULL,
         updated_at_ms BIGINT NOT NULL
     );
     CREATE INDEX loomflow_runs_by_runnable_at
         ON loomflow_runs (runnable_at_ms) WHERE runnable_at_ms IS NOT NULL;
     CREATE INDEX loomflow_runs_by_update ON loomflow_runs (updated_at_ms);",
    // 1 -> 2: the audit log (`audit.rs`).
    super::audit::MIGRATION,
    // 2 -> 3: a worker looking for a run whose signal has arrived starts from the
    // suspended runs and looks up each one's pending signals, rather than reading every
    // row the table has ever held.
    "CREATE INDEX IF NOT EXISTS loomflow_runs_suspended ON loomflow_runs (thread)
         WHERE status IN ('waiting', 'interrupted');
     CREATE INDEX IF NOT EXISTS loomflow_signals_pending_by_session
         ON loomflow_signals (session, name) WHERE consumed_at_ms IS NULL;",
    // 3 -> 4: the runs whose execution stopped part way, which a worker carries on before
    // the queued backlog: without it, finding one reads every queued row.
    "CREATE INDEX IF NOT EXISTS loomflow_runs_recovering ON loomflow_runs (updated_at_ms)
         WHERE runnable_at_ms = 0 AND status IS DISTINCT FROM 'queued';",
    // 4 -> 5: those, a queued run claimed before included (an execution in
    // `Durability::Exit` writes nothing until it ends, and its row stays queued); the
    // predicate is the claim's own.
    "DROP INDEX IF EXISTS loomflow_runs_recovering;
     CREATE INDEX loomflow_runs_recovering ON loomflow_runs (updated_at_ms)
         WHERE runnable_at_ms = 0 AND (status IS DISTINCT FROM 'queued' OR attempts > 0);",
    // 5 -> 6: the queued runs never claimed, oldest first, under the claim's own predicate:
    // without it, each claim walked every finished run by update time to the oldest queued
    // one (48 ms a claim with 200,000 finished runs, 0.06 ms with the index).
    "CREATE INDEX IF NOT EXISTS loomflow_runs_queued ON loomflow_runs (updated_at_ms)
         WHERE runnable_at_ms = 0 AND status = 'queued' AND attempts = 0;",
    // 6 -> 7: the executions in a row that lost a run's lease (`RunRecord::lapses`).
    "ALTER TABLE loomflow_runs ADD COLUMN IF NOT EXISTS lapses BIGINT NOT NULL DEFAULT 0;",
];

/// Refuses a database whose encoding cannot hold what loomflow writes: states, messages and
/// names are UTF-8 text, and a server in LATIN1 refuses an emoji in a run's state, failing
/// the run. `SQL_ASCII` keeps the bytes as sent.
pub(super) async fn check_encoding(client: &Object, target: &Target) -> Result<(), StoreError> {
    let encoding: String = client
        .query_one("SHOW server_encoding", &[])
        .await
        .and_then(|row| row.try_get(0))
        .map_err(|e| target.open_error(super::error::chain(&e)))?;
    match encoding.as_str() {
        "UTF8" | "SQL_ASCII" => Ok(()),
        other => Err(target.open_error(format!(
            "the database's encoding is {other}, which cannot hold every text loomflow keeps \
             (states, messages, names are UTF-8): create it with ENCODING 'UTF8'"
        ))),
    }
}

/// Brings the database to [`SCHEMA_VERSION`], or refuses a newer one: in one transaction,
/// under an advisory lock, so that processes starting together migrate once and a failed
/// migration leaves nothing half done.
pub(super) async fn migrate(
    client: &mut Object,
    target: &Target,
    upgrade: bool,
) -> Result<(), StoreError> {
    let open_error = |e: Fail| match e {
        Fail::Store(e) => e,
        Fail::Db(e) => target.open_error(super::error::chain(&e)),
        Fail::Pool(e) => target.open_error(super::error::chain(&e)),
    };
    // Read committed whatever the server's default: a process that waited for the lock
    // reads what the one before it committed (a snapshot from before the wait would not
    // see the tables or the version it wrote).
    let tx = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::ReadCommitted)
        .start()
        .await
        .map_err(|e| open_error(e.into()))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(|e| open_error(e.into()))?;
    let has_meta: bool = tx
        .query_one("SELECT to_regclass('loomflow_meta') IS NOT NULL", &[])
        .await
        .and_then(|row| row.try_get(0))
        .map_err(|e| open_error(e.into()))?;
    let found: i64 = if has_meta {
        tx.query_opt("SELECT schema_version FROM loomflow_meta", &[])
            .await
            .map_err(|e| open_error(e.into()))?
            .ok_or_else(|| target.open_error("the loomflow_meta table has no schema version"))?
            .try_get(0)
            .map_err(|e| open_error(e.into()))?
    } else {
        0
    };
    if !upgrade && !has_meta {
        return Err(StoreError::NotAStore {
            path: target.shown.clone(),
            reason: "the database has none of loomflow's tables".to_owned(),
        });
    }
    if !upgrade && found < SCHEMA_VERSION {
        return Err(StoreError::OlderSchema {
            path: target.shown.clone(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            path: target.shown.clone(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    let from = usize::try_from(found)
        .map_err(|_| target.open_error(format!("invalid schema version {found}")))?;
    if from == MIGRATIONS.len() {
        // Nothing to write; ending the transaction releases the lock.
        return tx.rollback().await.map_err(|e| open_error(e.into()));
    }
    for (version, migration) in MIGRATIONS.iter().enumerate().skip(from) {
        tx.batch_execute(migration).await.map_err(|e| {
            target.open_error(format!(
                "migration to schema version {}: {}",
                version + 1,
                super::error::chain(&e)
            ))
        })?;
    }
    tx.execute(
        "UPDATE loomflow_meta SET schema_version = $1",
        &[&SCHEMA_VERSION],
    )
    .await
    .map_err(|e| open_error(e.into()))?;
    tx.commit().await.map_err(|e| open_error(e.into()))
}
