//! The store conformance suite, run against every backend.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/faulty_store.rs"]
mod faulty_store;
#[path = "support/postgres.rs"]
mod postgres;

use std::path::PathBuf;
use std::sync::Arc;

use loomflow::runtime::store::conformance;
use loomflow::runtime::{
    MemoryStore, PostgresOptions, PostgresStore, SqliteOptions, SqliteStore, Synchronous,
};

use postgres::TempPgDb;

/// A fresh database path; removes the file and its WAL companions when dropped.
struct TempDb(PathBuf);

impl TempDb {
    fn new(name: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        Self(std::env::temp_dir().join(format!(
            "loomflow-conf-{name}-{}-{nanos}.db",
            std::process::id()
        )))
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.0.display()));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_conforms() {
    conformance::run_all_concurrent(Arc::new(MemoryStore::new())).await;
}

/// The memory store behind the fault-injecting wrapper (with no faults armed), which
/// forwards every method the memory store overrides: the wrapper the fault tests use
/// changes nothing a store promises.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fault_injecting_wrapper_conforms() {
    let (store, _faults) = faulty_store::FaultyStore::new(MemoryStore::new());
    conformance::run_all_concurrent(Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_store_conforms() {
    let db = TempDb::new("full");
    conformance::run_all_concurrent(Arc::new(SqliteStore::open(&db.0).unwrap())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_store_conforms_at_normal_with_one_reader() {
    let db = TempDb::new("normal");
    let options = SqliteOptions::default()
        .synchronous(Synchronous::Normal)
        .read_connections(1);
    conformance::run_all_concurrent(Arc::new(SqliteStore::open_with(&db.0, options).unwrap()))
        .await;
}

#[tokio::test(flavor = "current_thread")]
async fn sqlite_store_conforms_on_a_current_thread_runtime() {
    let db = TempDb::new("current");
    conformance::run_all_concurrent(Arc::new(SqliteStore::open(&db.0).unwrap())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_store_keeps_data_across_reopen() {
    let db = TempDb::new("reopen");
    conformance::check_reopen(|| SqliteStore::open(&db.0).unwrap()).await;
}

// PostgreSQL: on the server `LOOMFLOW_PG_URL` names (`.ci/postgres` starts one), each test
// in a database of its own; skipped, saying so, without it.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_conforms() {
    let Some(db) = TempPgDb::create("conformance").await else {
        return;
    };
    let store = PostgresStore::connect(&db.url).await.unwrap();
    conformance::run_all_concurrent(Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_conforms_with_one_connection_and_no_listener() {
    let Some(db) = TempPgDb::create("conformance").await else {
        return;
    };
    let options = PostgresOptions::default().pool_size(1).notifications(false);
    let store = PostgresStore::connect_with(&db.url, options).await.unwrap();
    conformance::run_all_concurrent(Arc::new(store)).await;
}

#[tokio::test(flavor = "current_thread")]
async fn postgres_store_conforms_on_a_current_thread_runtime() {
    let Some(db) = TempPgDb::create("conformance").await else {
        return;
    };
    let store = PostgresStore::connect(&db.url).await.unwrap();
    conformance::run_all_concurrent(Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_keeps_data_across_reconnect() {
    let Some(db) = TempPgDb::create("conformance").await else {
        return;
    };
    // `check_reopen` opens synchronously; connecting is async.
    let open = || {
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(PostgresStore::connect(&db.url))
        })
        .unwrap()
    };
    conformance::check_reopen(open).await;
}
