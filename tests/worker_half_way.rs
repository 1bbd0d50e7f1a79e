//! A worker's execution that stops half way (aborted by a shutdown, handed back) after
//! taking what its run waited for: the run is let go runnable at once, as after a crash,
//! and the next worker carries it on. Memory, SQLite and PostgreSQL (skipped without
//! `LOOMFLOW_PG_URL`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/postgres.rs"]
mod postgres;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use loomflow::prelude::*;
use loomflow::runtime::{PostgresStore, RunState, SqliteStore};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Job {
    got: Option<u32>,
}

/// Until `thread`'s run is in `state`, for at most `secs`; whether it got there.
async fn reaches(runtime: &Runtime, thread: &str, state: RunState, secs: u64) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Ok(info) = runtime.run(thread).await
            && info.record.state == state
        {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A node receives its signal (consumed and journaled), then works past the worker's
/// `shutdown_timeout`: the shutdown aborts it. Nothing else will ever wake the run, so the
/// next worker must find it runnable, and it completes with the signal it took.
async fn aborted_after_its_signal_is_carried_on(runtime: Runtime, next: Runtime) {
    let executions = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&executions);
    let graph: CompiledGraph<Job> = Graph::new("long")
        .node_fn("wait", move |job: &mut Job, ctx| {
            let seen = Arc::clone(&seen);
            Box::pin(async move {
                job.got = Some(ctx.wait_for_signal::<u32>("go").await?);
                // The first execution to get here works for a minute.
                if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                }
                Ok(())
            })
        })
        .edge(START, "wait")
        .edge("wait", END)
        .compile()
        .unwrap();
    let worker = Worker::builder(&runtime)
        .graph(&graph)
        .poll_interval(Duration::from_millis(10))
        .park_grace(Duration::ZERO)
        .shutdown_timeout(Duration::from_millis(200))
        .build();
    runtime.submit("long", "s-1", Job::default()).await.unwrap();
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    assert!(reaches(&runtime, "s-1", RunState::Waiting, 0).await);
    let handle = worker.start();
    runtime.signal("s-1", "go", 3).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while executions.load(Ordering::SeqCst) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "never received");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    handle.shutdown().await.unwrap();
    drop(worker);
    let row = runtime.run("s-1").await.unwrap().record;
    let worker = Worker::builder(&next)
        .graph(&graph)
        .poll_interval(Duration::from_millis(10))
        .park_grace(Duration::ZERO)
        .build();
    let handle = worker.start();
    let done = reaches(&next, "s-1", RunState::Completed, 10).await;
    let after = next.run("s-1").await.unwrap().record;
    handle.shutdown().await.unwrap();
    assert!(
        done,
        "after the aborting shutdown: {row:?}\n10 s later, with another worker: {after:?}"
    );
    let job: Job = next.get_state("s-1").await.unwrap().unwrap();
    assert_eq!(job.got, Some(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_a_run_aborted_after_taking_its_signal_is_carried_on() {
    let runtime = Runtime::in_memory();
    aborted_after_its_signal_is_carried_on(runtime.clone(), runtime).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_a_run_aborted_after_taking_its_signal_is_carried_on() {
    let db = loomflow_tests::TempDb::new("aborted-after-signal");
    let open = || Runtime::with_store(SqliteStore::open(db.path()).unwrap());
    aborted_after_its_signal_is_carried_on(open(), open()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_run_aborted_after_taking_its_signal_is_carried_on() {
    let Some(db) = postgres::TempPgDb::create("half-way").await else {
        return;
    };
    let open = async || Runtime::with_store(PostgresStore::connect(&db.url).await.unwrap());
    aborted_after_its_signal_is_carried_on(open().await, open().await).await;
}

/// A shutdown that aborts a run still working has released its lease by the time it
/// returns, as its rustdoc says: a `recover` right after is not told the thread is busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborting_shutdown_returns_with_the_lease_released() {
    let db = loomflow_tests::TempDb::new("abort-release");
    let runtime = Runtime::with_store(SqliteStore::open(db.path()).unwrap());
    let graph: CompiledGraph<Job> = Graph::new("busy")
        .node_fn("work", |job: &mut Job, _ctx| {
            Box::pin(async move {
                tokio::time::sleep(Duration::from_secs(60)).await;
                job.got = Some(1);
                Ok(())
            })
        })
        .edge(START, "work")
        .edge("work", END)
        .compile()
        .unwrap();
    let worker = Worker::builder(&runtime)
        .graph(&graph)
        .poll_interval(Duration::from_millis(10))
        .shutdown_timeout(Duration::from_millis(100))
        .build();
    let handle = worker.start();
    runtime.submit("busy", "b-1", Job::default()).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while (runtime.run("b-1").await.unwrap().record.lease_owner).is_none() {
        assert!(tokio::time::Instant::now() < deadline, "never claimed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    handle.shutdown().await.unwrap();
    let row = runtime.run("b-1").await.unwrap().record;
    assert!(row.lease_owner.is_none(), "still held: {row:?}");
}

/// A run in `Durability::Exit` on SQLite whose graph is `first` (given with its first
/// node, named `first`), then `two`, which says it began and holds until told, then
/// `three`; and a worker for it. `stop_in_two` shuts a started worker down while `two`
/// holds, and lets `two` finish: the run is handed back at that step's end.
struct HeldInTwo {
    runtime: Runtime,
    worker: Worker,
    entered: Arc<tokio::sync::Notify>,
    go_on: Arc<tokio::sync::Notify>,
    _db: loomflow_tests::TempDb,
}

impl HeldInTwo {
    fn new(db: &str, first: Graph<u32>) -> Self {
        let db = loomflow_tests::TempDb::new(db);
        let runtime = Runtime::builder()
            .store(SqliteStore::open(db.path()).unwrap())
            .durability(loomflow::runtime::Durability::Exit)
            .build();
        let entered = Arc::new(tokio::sync::Notify::new());
        let go_on = Arc::new(tokio::sync::Notify::new());
        let graph = {
            let (entered, go_on) = (Arc::clone(&entered), Arc::clone(&go_on));
            first
                .node_fn("two", move |n: &mut u32, _ctx| {
                    let (entered, go_on) = (Arc::clone(&entered), Arc::clone(&go_on));
                    Box::pin(async move {
                        entered.notify_one();
                        go_on.notified().await;
                        *n += 10;
                        Ok(())
                    })
                })
                .node_sync("three", |n: &mut u32| *n += 100)
                .edge(START, "first")
                .edge("first", "two")
                .edge("two", "three")
                .edge("three", END)
                .compile()
                .unwrap()
        };
        let worker = Worker::builder(&runtime)
            .graph(&graph)
            .poll_interval(Duration::from_millis(10))
            .build();
        Self {
            runtime,
            worker,
            entered,
            go_on,
            _db: db,
        }
    }

    async fn stop_in_two(&self) {
        let handle = self.worker.start();
        self.entered.notified().await;
        let stopping = tokio::spawn(handle.shutdown());
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.go_on.notify_one();
        stopping.await.unwrap().unwrap();
    }
}

/// A run in `Durability::Exit` handed back by a graceful shutdown at a step's end is carried
/// on from there by the next worker: the steps it finished do not run again. Before, it had
/// written nothing, and the next worker started it over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exit_run_handed_back_is_carried_on_from_its_last_step() {
    let ran = Arc::new(AtomicUsize::new(0));
    let first = Graph::new("steps").node_sync("first", {
        let ran = Arc::clone(&ran);
        move |n: &mut u32| {
            ran.fetch_add(1, Ordering::SeqCst);
            *n += 1;
        }
    });
    let held = HeldInTwo::new("exit-hand-back", first);
    let runtime = &held.runtime;
    runtime.submit("steps", "e-1", 0).await.unwrap();
    held.stop_in_two().await;
    let row = runtime.run("e-1").await.unwrap().record;
    assert_eq!(row.state, RunState::Running, "handed back: {row:?}");
    // The next worker carries it on from `three`; `two` would wait for ever if run again.
    let done = tokio::time::timeout(Duration::from_secs(10), held.worker.run_until_idle());
    assert_eq!(done.await.unwrap().unwrap(), 1);
    assert_eq!(
        runtime.run("e-1").await.unwrap().record.state,
        RunState::Completed
    );
    assert_eq!(runtime.get_state::<u32>("e-1").await.unwrap(), Some(111));
    assert_eq!(ran.load(Ordering::SeqCst), 1, "`first` ran once");
}

/// An `Exit` run resumed by a queued answer and handed back a step later is let go at once,
/// carried on from where it stood with its answer: the answer it took is spent, and does not
/// hold the run until its lease runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exit_run_handed_back_after_its_answer_is_let_go_at_once() {
    let asked = Arc::new(AtomicUsize::new(0));
    let first = Graph::new("answered").node_fn("first", {
        let asked = Arc::clone(&asked);
        move |n: &mut u32, ctx| {
            let asked = Arc::clone(&asked);
            Box::pin(async move {
                asked.fetch_add(1, Ordering::SeqCst);
                *n += ctx.interrupt::<u32>(serde_json::json!("how many?"))?;
                Ok(())
            })
        }
    });
    let held = HeldInTwo::new("exit-hand-back-answer", first);
    let runtime = &held.runtime;
    runtime.submit("answered", "a-1", 0).await.unwrap();
    assert_eq!(held.worker.run_until_idle().await.unwrap(), 1);
    assert_eq!(
        runtime.run("a-1").await.unwrap().record.state,
        RunState::Interrupted
    );
    runtime.request_resume("a-1", 1).await.unwrap();
    held.stop_in_two().await;
    let row = runtime.run("a-1").await.unwrap().record;
    assert_eq!(row.state, RunState::Running, "{row:?}");
    assert!(row.lease_owner.is_none(), "let go at once: {row:?}");
    let done = tokio::time::timeout(Duration::from_secs(10), held.worker.run_until_idle());
    assert_eq!(done.await.unwrap().unwrap(), 1);
    assert_eq!(runtime.get_state::<u32>("a-1").await.unwrap(), Some(111));
    assert_eq!(
        asked.load(Ordering::SeqCst),
        2,
        "asked, then answered: not again"
    );
}
