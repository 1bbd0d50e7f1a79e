//! A worker meets code that goes wrong outside a node's body: a state whose `Deserialize`
//! panics on the submitted input fails its run, with the panic named, and lets the thread
//! go, whether the worker runs in the background or inline. On the memory store and SQLite.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::time::Duration;

use loomflow::prelude::*;
use loomflow::runtime::{RunState, SqliteStore};
use serde::Deserializer;

/// A state that cannot be read when `broken` is set: its `Deserialize` panics when the
/// worker reads the submitted input, which is outside any node's guarded body.
#[derive(Clone, Debug, Default, Serialize)]
struct Fragile {
    broken: bool,
}

impl<'de> Deserialize<'de> for Fragile {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Plain {
            broken: bool,
        }
        let Plain { broken } = Plain::deserialize(deserializer)?;
        if broken {
            panic!("a state that cannot be read");
        }
        Ok(Self { broken })
    }
}

const BROKEN: Fragile = Fragile { broken: true };

fn breaking() -> CompiledGraph<Fragile> {
    Graph::new("breaking")
        .node_sync("break", |state: &mut Fragile| state.broken = false)
        .edge(START, "break")
        .edge("break", END)
        .compile()
        .unwrap()
}

/// The run is failed with the panic named, and nothing holds its thread.
async fn failed_by_the_panic(runtime: &Runtime, thread: &str) {
    let record = runtime.run(thread).await.unwrap().record;
    assert_eq!(record.state, RunState::Failed, "{record:?}");
    let error = record.error.unwrap_or_default();
    assert!(
        error.contains("breaking") && error.contains("a state that cannot be read"),
        "{error}"
    );
    assert_eq!(record.lease_owner, None, "the thread is let go");
}

async fn a_panic_in_the_background_fails_the_run(runtime: Runtime) {
    let graph = breaking();
    let reports = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = std::sync::Arc::clone(&reports);
    let handle = Worker::builder(&runtime)
        .graph(&graph)
        .poll_interval(Duration::from_millis(20))
        .on_finished(move |report| seen.lock().unwrap().push(report.state))
        .build()
        .start();
    runtime.submit("breaking", "b-1", BROKEN).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while runtime.run("b-1").await.unwrap().record.state != RunState::Failed {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run was never failed: {:?}",
            runtime.run("b-1").await.unwrap().record
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    failed_by_the_panic(&runtime, "b-1").await;
    // The worker goes on with other runs, and stops when asked.
    runtime.submit("breaking", "b-2", BROKEN).await.unwrap();
    while runtime.run("b-2").await.unwrap().record.state != RunState::Failed {
        assert!(tokio::time::Instant::now() < deadline, "b-2 never failed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::timeout(Duration::from_secs(10), handle.shutdown())
        .await
        .expect("the worker stops")
        .unwrap();
    assert_eq!(
        *reports.lock().unwrap(),
        [RunState::Failed, RunState::Failed]
    );
}

async fn a_panic_inline_fails_the_run(runtime: Runtime) {
    let graph = breaking();
    let worker = Worker::builder(&runtime).graph(&graph).build();
    runtime.submit("breaking", "i-1", BROKEN).await.unwrap();
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    failed_by_the_panic(&runtime, "i-1").await;
    assert_eq!(worker.run_until_idle().await.unwrap(), 0, "not tried again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_memory_store() {
    a_panic_in_the_background_fails_the_run(Runtime::in_memory()).await;
    a_panic_inline_fails_the_run(Runtime::in_memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite() {
    let db = loomflow_tests::TempDb::new("worker-panic");
    let runtime = Runtime::with_store(SqliteStore::open(db.path()).unwrap());
    a_panic_in_the_background_fails_the_run(runtime.clone()).await;
    a_panic_inline_fails_the_run(runtime).await;
}
