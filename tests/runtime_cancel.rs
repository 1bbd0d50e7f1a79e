//! Runs that are busy when something is asked of them: `Runtime::cancel` while a node goes
//! on to suspend or a run is in its last step, and a run waiting for a busy thread's claim
//! under paused time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::sync::Arc;
use std::time::Duration;

use loomflow::RunError;
use loomflow::prelude::*;
use loomflow::runtime::{PostgresStore, RunState, RunStatus, SqliteStore};
use tokio::sync::Semaphore;

#[path = "support/postgres.rs"]
mod postgres;

/// `work` waits for the test's go-ahead (a step doing work no cancel interrupts, such as a
/// model call), then does `then`: ask for a value, or finish. `after` runs next.
fn busy_graph(gate: Arc<Semaphore>, then: &'static str) -> CompiledGraph<u32> {
    Graph::new("busy")
        .node_fn("work", move |n: &mut u32, ctx| {
            let gate = Arc::clone(&gate);
            Box::pin(async move {
                gate.acquire().await.unwrap().forget();
                if then == "ask" {
                    *n += ctx.interrupt::<u32>(json!("how many?"))?;
                } else {
                    *n += 1;
                }
                Ok(())
            })
        })
        .node_sync("after", |n: &mut u32| *n += 100)
        .edge(START, "work")
        .edge("work", "after")
        .edge("after", END)
        .compile()
        .unwrap()
}

/// Both stores, on a fresh thread each.
fn runtimes(db: &loomflow_tests::TempDb) -> [(&'static str, Runtime); 2] {
    [
        ("memory", Runtime::in_memory()),
        (
            "sqlite",
            Runtime::with_store(SqliteStore::open(db.path()).unwrap()),
        ),
    ]
}

/// Two runtimes on the SQLite file of `db`, as two processes would have.
fn two_processes(db: &loomflow_tests::TempDb) -> (Runtime, Runtime) {
    let open = || Runtime::with_store(SqliteStore::open(db.path()).unwrap());
    (open(), open())
}

/// Until `thread`'s run is on its row and running.
async fn until_running(runtime: &Runtime, thread: &str) {
    loop {
        if let Ok(info) = runtime.run(thread).await
            && info.record.state == RunState::Running
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `child` as the one node of a graph.
fn in_parent(child: CompiledGraph<u32>) -> CompiledGraph<u32> {
    Graph::new("parent")
        .subgraph("sub", child, |n: &u32| *n, |n: &mut u32, m: u32| *n = m)
        .edge(START, "sub")
        .edge("sub", END)
        .compile()
        .unwrap()
}

/// Cancels `thread`'s run, opens `gate` by `permits`, and checks that `run` ended
/// cancelled, as its row says.
async fn cancel_and_see_it_stop(
    (label, runtime): (&str, &Runtime),
    thread: &str,
    run: loomflow::graph::RunHandle<u32>,
    gate: &Semaphore,
    permits: usize,
) {
    runtime.cancel(thread).await.unwrap();
    gate.add_permits(permits);
    let stopped = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .unwrap_or_else(|_| panic!("{label}: the run did not stop"));
    assert!(
        matches!(stopped, Err(RunError::Cancelled { .. })),
        "{label}: {stopped:?}"
    );
    let info = runtime.run(thread).await.unwrap();
    assert_eq!(info.record.state, RunState::Cancelled, "{label}");
}

/// The status of the newest checkpoint of a subgraph of `thread`.
async fn newest_child_status(runtime: &Runtime, thread: &str) -> Option<RunStatus> {
    let checkpoints = runtime.list_checkpoints(thread).await.unwrap();
    let child = checkpoints.iter().rev().find(|c| !c.namespace.is_empty());
    child.map(|c| c.status)
}

/// A node that suspends after the run was asked to stop does not leave the run waiting
/// for an answer: the run is cancelled where that step started, and a resume is refused.
#[tokio::test]
async fn a_run_asked_to_stop_that_then_suspends_is_cancelled() {
    let db = loomflow_tests::TempDb::new("cancel-then-suspend");
    for (label, runtime) in runtimes(&db) {
        let gate = Arc::new(Semaphore::new(0));
        let graph = busy_graph(Arc::clone(&gate), "ask");
        let run = graph.start(&runtime, "t", 0);
        until_running(&runtime, "t").await;
        cancel_and_see_it_stop((label, &runtime), "t", run, &gate, 1).await;
        let info = runtime.run("t").await.unwrap();
        assert!(info.interrupts.is_empty(), "{label}: {:?}", info.interrupts);
        let resumed = graph.resume(&runtime, "t", 5u32).await;
        assert!(
            matches!(resumed, Err(RunError::Cancelled { .. })),
            "{label}: {resumed:?}"
        );

        // A run cancelled while it waits for its answer is refused alike.
        gate.add_permits(1);
        let waiting = graph.invoke(&runtime, "u", 0).await.unwrap();
        assert_eq!(waiting.interrupts().len(), 1, "{label}");
        runtime.cancel("u").await.unwrap();
        let resumed = graph.resume(&runtime, "u", 5u32).await;
        assert!(
            matches!(resumed, Err(RunError::Cancelled { .. })),
            "{label}: {resumed:?}"
        );
    }
}

/// `wait_if_busy` measures its patience on tokio's clock: under paused time (a test of
/// timeouts) a busy thread is given up on once the virtual time has passed, at once in real
/// time, instead of spinning until as much real time went by.
#[tokio::test(start_paused = true)]
async fn waiting_for_a_busy_thread_follows_paused_time() {
    let runtime = Runtime::in_memory();
    let gate = Arc::new(Semaphore::new(0));
    let graph = busy_graph(Arc::clone(&gate), "finish");
    let first = graph.start(&runtime, "t", 0);
    until_running(&runtime, "t").await;
    let real = std::time::Instant::now();
    let second = graph
        .run(&runtime, "t", 0)
        .wait_if_busy(Duration::from_secs(120))
        .await;
    assert!(matches!(second, Err(RunError::Busy { .. })), "{second:?}");
    assert!(
        real.elapsed() < Duration::from_secs(60),
        "gave up after {:?} of real time",
        real.elapsed()
    );
    gate.add_permits(1);
    assert_eq!(first.await.unwrap().completed().unwrap(), 101);
}

/// A cancel that comes while an `Exit` run (not on its row yet) is in its last step finds
/// the run completed: the run is not stopped mid-node, and `cancel` returns its row as soon
/// as it has let go, not after giving up on it.
#[tokio::test(start_paused = true)]
async fn a_cancel_during_an_exit_runs_last_step_returns_once_the_run_completes() {
    let runtime = Runtime::in_memory();
    let gate = Arc::new(Semaphore::new(0));
    let last = Arc::clone(&gate);
    let graph: CompiledGraph<u32> = Graph::new("last")
        .node_fn("work", move |n: &mut u32, _ctx| {
            let gate = Arc::clone(&last);
            Box::pin(async move {
                gate.acquire().await.unwrap().forget();
                *n += 1;
                Ok(())
            })
        })
        .edge(START, "work")
        .edge("work", END)
        .compile()
        .unwrap();
    let run = graph
        .run(&runtime, "t", 0)
        .durability(Durability::Exit)
        .start();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let asked = tokio::time::Instant::now();
    let cancel = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.cancel("t").await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    gate.add_permits(1);
    let row = cancel.await.unwrap().unwrap();
    assert_eq!(row.state, RunState::Completed);
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "cancel returned after {:?}",
        asked.elapsed()
    );
    assert_eq!(run.await.unwrap().completed().unwrap(), 1);
}

/// `work` waits for the test's go-ahead, then `wait` waits for the signal `go`: under a
/// worker with no grace, it suspends at once.
fn work_then_wait(gate: Arc<Semaphore>) -> CompiledGraph<u32> {
    Graph::new("work-then-wait")
        .node_fn("work", move |n: &mut u32, _ctx| {
            let gate = Arc::clone(&gate);
            Box::pin(async move {
                gate.acquire().await.unwrap().forget();
                *n += 1;
                Ok(())
            })
        })
        .node_fn("wait", |n: &mut u32, ctx| {
            Box::pin(async move {
                *n += ctx.wait_for_signal::<u32>("go").await?;
                Ok(())
            })
        })
        .edge(START, "work")
        .edge("work", "wait")
        .edge("wait", END)
        .compile()
        .unwrap()
}

/// A cancel asked for from another process while a worker executes the run is on the run's
/// row; the worker's execution learns it only at its runtime's next look at the store. A run
/// that suspends before then looks at its row first, and is cancelled instead of waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_from_another_process_is_not_lost_when_the_run_suspends() {
    let db = loomflow_tests::TempDb::new("cancel-elsewhere-then-suspend");
    let (here, elsewhere) = two_processes(&db);
    let gate = Arc::new(Semaphore::new(0));
    let graph = work_then_wait(Arc::clone(&gate));
    let worker = Worker::builder(&here)
        .graph(&graph)
        .poll_interval(Duration::from_millis(10))
        .park_grace(Duration::ZERO)
        .build();
    let handle = worker.start();
    elsewhere
        .submit("work-then-wait", "t", json!(0))
        .await
        .unwrap();
    until_running(&elsewhere, "t").await;
    let asked = elsewhere.cancel("t").await.unwrap();
    assert!(asked.cancel_requested, "{asked:?}");
    gate.add_permits(1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let row = loop {
        let row = elsewhere.run("t").await.unwrap().record;
        if row.state.is_finished() || row.state == RunState::Waiting {
            break row;
        }
        assert!(tokio::time::Instant::now() < deadline, "{row:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    handle.shutdown().await.unwrap();
    assert_eq!(row.state, RunState::Cancelled, "{row:?}");
}

/// A worker for up to `concurrency` runs of `parked`, whose node waits in memory for a
/// signal that does not come (a minute's park grace; under a minute's lease its heartbeat
/// beats every 20 s).
fn parked_worker(here: &Runtime, concurrency: usize) -> Worker {
    let graph = Graph::new("parked")
        .node_fn("wait", |_: &mut u32, ctx| {
            Box::pin(async move {
                let _: u32 = ctx.wait_for_signal("never").await?;
                Ok(())
            })
        })
        .edge(START, "wait")
        .edge("wait", END)
        .compile()
        .unwrap();
    Worker::builder(here)
        .graph(&graph)
        .concurrency(concurrency)
        .lease(Duration::from_secs(60))
        .park_grace(Duration::from_secs(60))
        .poll_interval(Duration::from_millis(10))
        // The runs still parked when the test ends are not waited for.
        .shutdown_timeout(Duration::from_millis(100))
        .build()
}

/// Forty runs execute in one worker while another process keeps writing to the store, so
/// that its change probe moves at every look, and every look reads rows: a cancel still
/// reaches whichever run it is for within a few looks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reaches_any_of_many_runs_while_the_store_keeps_changing() {
    let db = loomflow_tests::TempDb::new("cancel-many-busy");
    let (here, elsewhere) = two_processes(&db);
    let handle = parked_worker(&here, 64).start();
    let threads: Vec<String> = (0..40).map(|i| format!("t{i}")).collect();
    for thread in &threads {
        elsewhere.submit("parked", thread, json!(0)).await.unwrap();
    }
    for thread in &threads {
        until_running(&elsewhere, thread).await;
    }
    let writing = elsewhere.clone();
    let noise = tokio::spawn(async move {
        for tick in 0u32.. {
            writing.signal("noise", "tick", tick).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    for thread in threads.iter().step_by(3) {
        cancelled_soon("sqlite", &elsewhere, thread).await;
    }
    noise.abort();
    handle.shutdown().await.unwrap();
}

/// Two hundred runs execute in one worker, and another process cancels them all: the
/// worker's runtime (which looks at the store every second) reads their rows in one query,
/// so every cancel reaches its run within a look or two, not one look for every few runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancels_of_hundreds_of_runs_reach_them_together() {
    const RUNS: usize = 200;
    let db = loomflow_tests::TempDb::new("cancel-hundreds");
    let here = Runtime::builder()
        .store(SqliteStore::open(db.path()).unwrap())
        .poll_interval(Duration::from_secs(1))
        .build();
    let elsewhere = Runtime::with_store(SqliteStore::open(db.path()).unwrap());
    let handle = parked_worker(&here, RUNS).start();
    let threads: Vec<String> = (0..RUNS).map(|i| format!("t{i}")).collect();
    for thread in &threads {
        elsewhere.submit("parked", thread, json!(0)).await.unwrap();
    }
    for thread in &threads {
        until_running(&elsewhere, thread).await;
    }
    for thread in &threads {
        assert!(elsewhere.cancel(thread).await.unwrap().cancel_requested);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    for thread in &threads {
        until_cancelled("200 runs", &elsewhere, thread, deadline).await;
    }
    handle.shutdown().await.unwrap();
}

/// A worker executes a run of `parked` (see `parked_worker`). A cancel from another process
/// reaches it as soon as the worker's runtime sees the store change, not at the next
/// heartbeat.
async fn a_cancel_from_another_process_reaches_a_running_node_before_the_heartbeat(
    label: &str,
    here: Runtime,
    elsewhere: Runtime,
) {
    let handle = parked_worker(&here, 16).start();
    // A run executing for a while, then one that has only just started when it is cancelled
    // (the look that sees that change may find it too new to read).
    elsewhere.submit("parked", "old", json!(0)).await.unwrap();
    until_running(&elsewhere, "old").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    elsewhere.submit("parked", "new", json!(0)).await.unwrap();
    until_running(&elsewhere, "new").await;
    cancelled_soon(label, &elsewhere, "new").await;
    // Quiet again: what the worker's runtime notices next is this cancel's change alone.
    tokio::time::sleep(Duration::from_millis(500)).await;
    cancelled_soon(label, &elsewhere, "old").await;
    handle.shutdown().await.unwrap();
}

/// Cancels `thread`'s run from `elsewhere`, and sees it cancelled within 5 s.
async fn cancelled_soon(label: &str, elsewhere: &Runtime, thread: &str) {
    let asked = elsewhere.cancel(thread).await.unwrap();
    assert!(asked.cancel_requested, "{label}: {asked:?}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    until_cancelled(label, elsewhere, thread, deadline).await;
}

/// Returns once `thread`'s run is cancelled, as `runtime` reads its row; fails past
/// `deadline`.
async fn until_cancelled(
    label: &str,
    runtime: &Runtime,
    thread: &str,
    deadline: tokio::time::Instant,
) {
    loop {
        let row = runtime.run(thread).await.unwrap().record;
        if row.state == RunState::Cancelled {
            return;
        }
        let waited = tokio::time::Instant::now() < deadline;
        assert!(waited, "{label}: not cancelled in time: {row:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_a_cancel_from_another_process_reaches_a_running_node_before_the_heartbeat() {
    let db = loomflow_tests::TempDb::new("cancel-elsewhere-parked");
    let (here, elsewhere) = two_processes(&db);
    a_cancel_from_another_process_reaches_a_running_node_before_the_heartbeat(
        "sqlite", here, elsewhere,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_cancel_from_another_process_reaches_a_running_node_before_the_heartbeat() {
    let Some(db) = postgres::TempPgDb::create("cancel-elsewhere-parked").await else {
        return;
    };
    let open = async || Runtime::with_store(PostgresStore::connect(&db.url).await.unwrap());
    a_cancel_from_another_process_reaches_a_running_node_before_the_heartbeat(
        "postgres",
        open().await,
        open().await,
    )
    .await;
}

/// A run whose row asks it to stop when a worker claims it (the cancel came as the
/// execution that held it let go) is cancelled by that worker, not carried on.
#[tokio::test]
async fn a_worker_does_not_carry_on_a_run_its_row_asks_to_stop() {
    let db = loomflow_tests::TempDb::new("cancel-on-the-row");
    let runtime = Runtime::with_store(SqliteStore::open(db.path()).unwrap());
    let gate = Arc::new(Semaphore::new(1));
    let graph = work_then_wait(gate);
    let worker = Worker::builder(&runtime)
        .graph(&graph)
        .park_grace(Duration::ZERO)
        .build();
    runtime
        .submit("work-then-wait", "t", json!(0))
        .await
        .unwrap();
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    assert_eq!(
        runtime.run("t").await.unwrap().record.state,
        RunState::Waiting
    );
    runtime.store().request_cancel("t", 0).await.unwrap();
    runtime.signal("t", "go", 5u32).await.unwrap();
    worker.run_until_idle().await.unwrap();
    let row = runtime.run("t").await.unwrap().record;
    assert_eq!(row.state, RunState::Cancelled, "{row:?}");
    let state: u32 = runtime.get_state("t").await.unwrap().unwrap();
    assert_eq!(state, 1, "the wait took nothing");
}

/// Two runtimes share one in-memory store: the other runtime's cancel lands on the run's
/// row, and the run that then suspends reads it there, as on a durable store.
#[tokio::test]
async fn a_cancel_from_another_runtime_on_a_shared_memory_store_is_not_lost() {
    let store: Arc<dyn loomflow::runtime::Store> = Arc::new(loomflow::runtime::MemoryStore::new());
    let here = Runtime::builder().shared_store(Arc::clone(&store)).build();
    let elsewhere = Runtime::builder().shared_store(store).build();
    let gate = Arc::new(Semaphore::new(0));
    let run = busy_graph(Arc::clone(&gate), "ask").start(&here, "t", 0);
    until_running(&elsewhere, "t").await;
    assert!(elsewhere.cancel("t").await.unwrap().cancel_requested);
    gate.add_permits(1);
    let stopped = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("the run did not stop");
    assert!(
        matches!(stopped, Err(RunError::Cancelled { .. })),
        "{stopped:?}"
    );
    let row = elsewhere.run("t").await.unwrap().record;
    assert_eq!(row.state, RunState::Cancelled, "{row:?}");
}

/// An interrupted run whose row asks it to stop (the cancel came as its execution let go)
/// is not carried on by a direct resume either: the resume is refused as cancelled, as a
/// worker would cancel it.
#[tokio::test]
async fn a_direct_resume_does_not_carry_on_a_run_its_row_asks_to_stop() {
    let db = loomflow_tests::TempDb::new("cancel-row-resume");
    let runtime = Runtime::with_store(SqliteStore::open(db.path()).unwrap());
    // Room for the node to run again, should the resume carry the run on.
    let graph = busy_graph(Arc::new(Semaphore::new(2)), "ask");
    let waiting = graph.invoke(&runtime, "t", 0).await.unwrap();
    assert_eq!(waiting.interrupts().len(), 1);
    runtime.store().request_cancel("t", 0).await.unwrap();
    let resumed = graph.resume(&runtime, "t", 5u32).await;
    assert!(
        matches!(resumed, Err(RunError::Cancelled { .. })),
        "{resumed:?}"
    );
    let row = runtime.run("t").await.unwrap().record;
    assert_eq!(row.state, RunState::Cancelled, "{row:?}");
    // No step ran: the audit log does not say the run was carried past its question.
    let log = runtime.audit("t").await.unwrap();
    let resumed: Vec<_> = (log.iter())
        .filter(|e| e.kind == loomflow::runtime::AuditKind::Resume)
        .collect();
    assert!(resumed.is_empty(), "{resumed:?}");
}

/// A run cancelled while a subgraph node runs stops before the subgraph's next superstep,
/// as it would before its own: the child's loop does not run on to its end first, and its
/// newest checkpoint records that it was cancelled.
#[tokio::test]
async fn a_cancel_stops_a_subgraph_before_its_next_step() {
    let db = loomflow_tests::TempDb::new("cancel-subgraph");
    for (label, runtime) in runtimes(&db) {
        let gate = Arc::new(Semaphore::new(1));
        let steps = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (g, s) = (Arc::clone(&gate), Arc::clone(&steps));
        let child = Graph::new("looping")
            .node_fn("work", move |n: &mut u32, _ctx| {
                let (gate, steps) = (Arc::clone(&g), Arc::clone(&s));
                Box::pin(async move {
                    gate.acquire().await.unwrap().forget();
                    steps.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    *n += 1;
                    Ok(())
                })
            })
            .edge(START, "work")
            .branch(
                "work",
                ["work", END],
                |n: &u32| if *n < 20 { "work" } else { END },
            )
            .recursion_limit(50)
            .compile()
            .unwrap();
        let run = in_parent(child).start(&runtime, "t", 0);
        // The child's first step has run, and its second waits for the gate.
        while steps.load(std::sync::atomic::Ordering::SeqCst) < 1 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        until_running(&runtime, "t").await;
        cancel_and_see_it_stop((label, &runtime), "t", run, &gate, 100).await;
        let ran = steps.load(std::sync::atomic::Ordering::SeqCst);
        assert!(
            ran <= 2,
            "{label}: the subgraph ran {ran} steps after the cancel"
        );
        // The subgraph's own newest checkpoint says so too.
        let status = newest_child_status(&runtime, "t").await;
        assert_eq!(status, Some(RunStatus::Cancelled), "{label}");
    }
}

/// A subgraph whose node goes on to suspend after the run was asked to stop records its
/// cancellation, as its parent does, rather than a suspension nobody will answer.
#[tokio::test]
async fn a_subgraph_asked_to_stop_that_then_suspends_is_cancelled() {
    let db = loomflow_tests::TempDb::new("cancel-subgraph-suspend");
    for (label, runtime) in runtimes(&db) {
        let gate = Arc::new(Semaphore::new(0));
        let run = in_parent(busy_graph(Arc::clone(&gate), "ask")).start(&runtime, "t", 0);
        until_running(&runtime, "t").await;
        cancel_and_see_it_stop((label, &runtime), "t", run, &gate, 1).await;
        let status = newest_child_status(&runtime, "t").await;
        assert_eq!(status, Some(RunStatus::Cancelled), "{label}");
    }
}

/// A cancel asked for a run whose execution then died stays on the thread's row; a new run
/// started on the thread (a fresh input) is not that run, and is not cancelled by it,
/// whatever its durability: `Sync` makes the row its own with its first checkpoint, and
/// `Exit`, which writes none until it ends, does so at once when the row still asks a stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_left_by_a_dead_run_does_not_stop_the_threads_next_run() {
    let db = loomflow_tests::TempDb::new("stale-cancel-exit");
    let sqlite =
        || -> Arc<dyn loomflow::runtime::Store> { Arc::new(SqliteStore::open(db.path()).unwrap()) };
    let memory: Arc<dyn loomflow::runtime::Store> = Arc::new(loomflow::runtime::MemoryStore::new());
    for stores in [[sqlite(), sqlite()], [Arc::clone(&memory), memory]] {
        for durability in [Durability::Exit, Durability::Sync] {
            let [here, elsewhere] = stores.clone().map(|store| {
                Runtime::builder()
                    .shared_store(store)
                    .lease(Duration::from_millis(300))
                    .build()
            });
            left_cancel_then_new_run(&here, &elsewhere, durability).await;
        }
    }
}

async fn left_cancel_then_new_run(here: &Runtime, elsewhere: &Runtime, durability: Durability) {
    let gate = Arc::new(Semaphore::new(0));
    let held = Arc::clone(&gate);
    let graph: CompiledGraph<u32> = Graph::new("slow")
        .node_fn("work", move |n: &mut u32, _ctx| {
            let gate = Arc::clone(&held);
            Box::pin(async move {
                if *n == 0 {
                    // The first run: held until it is dropped, as a process that dies.
                    gate.acquire().await.unwrap().forget();
                } else {
                    // Longer than the heartbeat, which reads the row's cancel flag.
                    tokio::time::sleep(Duration::from_millis(600)).await;
                }
                *n += 1;
                Ok(())
            })
        })
        .node_sync("after", |n: &mut u32| *n += 1)
        .edge(START, "work")
        .edge("work", "after")
        .edge("after", END)
        .compile()
        .unwrap();
    let first = graph.start(here, "t", 0);
    until_running(elsewhere, "t").await;
    let asked = elsewhere.cancel("t").await.unwrap();
    assert!(asked.cancel_requested, "{asked:?}");
    first.abort();
    let _ = first.await;
    let row = elsewhere.run("t").await.unwrap().record;
    assert!(row.cancel_requested, "{row:?}");

    let second = graph
        .run(here, "t", 10)
        .durability(durability)
        .wait_if_busy(Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(second.completed().unwrap(), 12);
    let row = elsewhere.run("t").await.unwrap().record;
    assert_eq!(row.state, RunState::Completed, "{row:?}");
    assert!(!row.cancel_requested, "{row:?}");
    // The next round starts on a thread of its own.
    elsewhere.delete_thread("t").await.unwrap();
}
