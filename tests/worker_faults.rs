//! A worker meets code and input that go wrong:
//! - a state whose `Deserialize` panics on the submitted input fails its run, with the panic
//!   named, and lets the thread go, whether the worker runs in the background or inline;
//! - a resume request the run refuses does not keep it from the one that came meanwhile,
//!   and the worker reports the run interrupted, with why it refused;
//! - a state the store cannot write fails its run once (SQLite);
//! - a run whose failure could not be recorded (the store failed) is let go at once, not
//!   held until its lease runs out (SQLite).
//!
//! On the memory store and SQLite.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

#[path = "support/faulty_store.rs"]
mod faulty_store;
#[path = "support/unwritable.rs"]
mod unwritable;

use loomflow::prelude::*;
use loomflow::runtime::{RunState, SqliteStore};
use serde::Deserializer;
use tokio::sync::Notify;

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

/// A node that asks for a yes or no; the second time it runs (the first resume), it says it
/// has started and waits to be told to go on before it reads its answer.
fn asking_held(entered: Arc<Notify>, go_on: Arc<Notify>) -> CompiledGraph<bool> {
    let runs = Arc::new(AtomicU32::new(0));
    Graph::new("asking")
        .node_fn("ask", move |yes: &mut bool, ctx| {
            let (entered, go_on, runs) = (entered.clone(), go_on.clone(), runs.clone());
            Box::pin(async move {
                if runs.fetch_add(1, Ordering::SeqCst) == 1 {
                    entered.notify_one();
                    go_on.notified().await;
                }
                *yes = ctx.interrupt("yes or no?")?;
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
        .unwrap()
}

/// A resume request that comes while the run refuses another (its value is not a bool) is
/// applied: the run, left interrupted, is woken for it, on the memory store too, which
/// keeps resume requests only in the process.
async fn a_request_sent_while_another_is_refused_is_applied(runtime: Runtime) {
    let (entered, go_on) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let graph = asking_held(Arc::clone(&entered), Arc::clone(&go_on));
    let handle = Worker::builder(&runtime)
        .graph(&graph)
        // Far longer than the test: only wake-ups drive the worker.
        .poll_interval(Duration::from_secs(3_600))
        .build()
        .start();
    runtime.submit("asking", "q", false).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let state = async |thread| runtime.run(thread).await.unwrap().record.state;
    while state("q").await != RunState::Interrupted {
        assert!(tokio::time::Instant::now() < deadline, "never interrupted");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    runtime.request_resume("q", "not a bool").await.unwrap();
    entered.notified().await;
    runtime.request_resume("q", true).await.unwrap();
    go_on.notify_one();
    while state("q").await != RunState::Completed {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the second request was never applied: {:?}",
            runtime.run("q").await.unwrap().record
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(runtime.get_state::<bool>("q").await.unwrap(), Some(true));
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_sent_while_another_is_refused_is_applied_on_the_memory_store() {
    a_request_sent_while_another_is_refused_is_applied(Runtime::in_memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_sent_while_another_is_refused_is_applied_on_sqlite() {
    let db = loomflow_tests::TempDb::new("worker-refused-request");
    let runtime = Runtime::with_store(SqliteStore::open(db.path()).unwrap());
    a_request_sent_while_another_is_refused_is_applied(runtime).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_sqlite_cannot_write_fails_its_run_once() {
    let db = loomflow_tests::TempDb::new("worker-unwritable");
    let runtime = Runtime::with_store(SqliteStore::open(db.path()).unwrap());
    unwritable::a_state_that_cannot_be_written_fails_its_run_once(&runtime).await;
}

/// The worker fails a run (its input cannot be read) and the store fails the write that
/// records it: the run is let go at once, not held for its hour-long lease, and the
/// worker's next look fails it again, this time recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_the_store_could_not_record_lets_the_run_go_at_once() {
    let db = loomflow_tests::TempDb::new("worker-finish-fault");
    let (store, faults) = faulty_store::FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder()
        .store(store)
        .lease(Duration::from_secs(3_600))
        .build();
    let graph = breaking();
    runtime.submit("breaking", "f-1", BROKEN).await.unwrap();
    faults.fail_next_finish();
    let worker = Worker::builder(&runtime).graph(&graph).build();
    let executed = worker.run_until_idle().await.unwrap();
    let record = runtime.run("f-1").await.unwrap().record;
    assert_eq!(record.lease_owner, None, "let go, not held: {record:?}");
    assert_eq!(
        (executed, record.attempts),
        (2, 2),
        "claimed again: {record:?}"
    );
    failed_by_the_panic(&runtime, "f-1").await;
}

/// One node that counts.
fn plain() -> CompiledGraph<u32> {
    Graph::new("plain")
        .node_sync("one", |n: &mut u32| *n += 1)
        .edge(START, "one")
        .edge("one", END)
        .compile()
        .unwrap()
}

/// Asks for an amount; an amount over 100 fails the step.
fn limited() -> CompiledGraph<u32> {
    Graph::new("limited")
        .node_fn("amount", |n: &mut u32, ctx| {
            Box::pin(async move {
                let amount: u32 = ctx.interrupt("amount?")?;
                if amount > 100 {
                    return Err(format!("{amount} is over the limit").into());
                }
                *n = amount;
                Ok(())
            })
        })
        .edge(START, "amount")
        .edge("amount", END)
        .compile()
        .unwrap()
}

/// A resume request the run refuses (a value of the wrong type, or one its resumed step
/// fails with) leaves the run interrupted, and the worker's report says so, with why.
async fn a_refused_request_is_reported_interrupted(runtime: Runtime) {
    let graph = limited();
    let reports = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&reports);
    let worker = Worker::builder(&runtime)
        .graph(&graph)
        .on_finished(move |report| {
            let error = report.error.clone().unwrap_or_default();
            seen.lock().unwrap().push((report.state, error));
        })
        .build();
    runtime.submit("limited", "q", 0).await.unwrap();
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    for refused in [json!("not a number"), json!(500)] {
        runtime.request_resume("q", refused).await.unwrap();
        assert_eq!(worker.run_until_idle().await.unwrap(), 1);
        let record = runtime.run("q").await.unwrap().record;
        assert_eq!(record.state, RunState::Interrupted, "{record:?}");
    }
    runtime.request_resume("q", 50).await.unwrap();
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    let reports = reports.lock().unwrap().clone();
    let states: Vec<RunState> = reports.iter().map(|(state, _)| *state).collect();
    assert_eq!(
        states,
        [
            RunState::Interrupted,
            RunState::Interrupted,
            RunState::Interrupted,
            RunState::Completed
        ],
        "{reports:?}"
    );
    assert!(reports[1].1.contains("amount"), "{reports:?}");
    assert!(reports[2].1.contains("over the limit"), "{reports:?}");
}

/// A resume given its value directly whose step fails leaves the question open, as a
/// refused request does: the run stays interrupted and takes the next answer sent as a
/// request. The answer an operator queued before is dropped all the same (the resume
/// answered instead of it: carried on, it would redo with another input what the failed
/// step did). Before, the run was marked failed and a new request was refused.
async fn a_direct_resume_that_fails_takes_the_next_request(runtime: Runtime) {
    let graph = limited();
    let worker = Worker::builder(&runtime).graph(&graph).build();
    runtime.submit("limited", "d", 0).await.unwrap();
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    runtime.request_resume("d", 70).await.unwrap();
    let failed = graph.resume(&runtime, "d", 500).await.unwrap();
    assert!(matches!(failed, RunOutcome::Failed { .. }), "{failed:?}");
    let record = runtime.run("d").await.unwrap().record;
    assert_eq!(record.state, RunState::Interrupted, "{record:?}");
    // A worker the queued 70 woke finds nothing to apply.
    worker.run_until_idle().await.unwrap();
    let record = runtime.run("d").await.unwrap().record;
    assert_eq!(
        record.state,
        RunState::Interrupted,
        "the queued 70 is dropped: {record:?}"
    );
    runtime.request_resume("d", 50).await.unwrap();
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    let record = runtime.run("d").await.unwrap().record;
    assert_eq!(record.state, RunState::Completed, "{record:?}");
    assert_eq!(runtime.get_state::<u32>("d").await.unwrap(), Some(50));
}

#[tokio::test]
async fn a_direct_resume_that_fails_takes_the_next_request_on_the_memory_store() {
    a_direct_resume_that_fails_takes_the_next_request(Runtime::in_memory()).await;
}

#[tokio::test]
async fn a_direct_resume_that_fails_takes_the_next_request_on_sqlite() {
    let db = loomflow_tests::TempDb::new("worker-direct-resume-fails");
    let runtime = Runtime::sqlite(db.path()).unwrap();
    a_direct_resume_that_fails_takes_the_next_request(runtime).await;
}

#[tokio::test]
async fn a_refused_request_is_reported_interrupted_on_the_memory_store() {
    a_refused_request_is_reported_interrupted(Runtime::in_memory()).await;
}

#[tokio::test]
async fn a_refused_request_is_reported_interrupted_on_sqlite() {
    let db = loomflow_tests::TempDb::new("worker-refused-report");
    a_refused_request_is_reported_interrupted(Runtime::sqlite(db.path()).unwrap()).await;
}

/// A run whose newest checkpoint the store cannot decode fails, naming why, instead of being
/// let go and claimed again at once, for ever: `run_until_idle` returns.
#[tokio::test]
async fn a_run_whose_checkpoint_is_corrupt_fails_once() {
    let db = loomflow_tests::TempDb::new("worker-corrupt");
    let runtime = Runtime::sqlite(db.path()).unwrap();
    let graph = limited();
    let worker = Worker::builder(&runtime).graph(&graph).build();
    runtime.submit("limited", "c", 0).await.unwrap();
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    runtime.request_resume("c", 50).await.unwrap();
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    let newest = "UPDATE checkpoints SET body = 'not json' \
                  WHERE id = (SELECT MAX(id) FROM checkpoints WHERE thread = 'c')";
    assert_eq!(conn.execute(newest, []).unwrap(), 1);
    let ran = tokio::time::timeout(Duration::from_secs(20), worker.run_until_idle()).await;
    assert_eq!(ran.expect("run_until_idle returns").unwrap(), 1);
    // The row alone: the run's newest checkpoint does not decode.
    let record = runtime.store().get_run("c").await.unwrap().unwrap();
    assert_eq!(record.state, RunState::Failed, "{record:?}");
    assert!(record.error.unwrap_or_default().contains("corrupt"));
}

/// A worker whose loop panicked (a store's bug, outside any run) says so when shut down,
/// rather than returning `Ok` as if it had served until then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_loop_panicked_says_so_at_shutdown() {
    let db = loomflow_tests::TempDb::new("worker-loop-panic");
    let (store, faults) = faulty_store::FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::with_store(store);
    faults.panic_next_claim();
    let graph = limited();
    let handle = Worker::builder(&runtime)
        .graph(&graph)
        .poll_interval(Duration::from_millis(10))
        .build()
        .start();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while faults.claim_panic_armed() {
        assert!(tokio::time::Instant::now() < deadline, "never claimed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let stopped = tokio::time::timeout(Duration::from_secs(10), handle.shutdown()).await;
    match stopped.expect("the shutdown returns") {
        Err(loomflow::runtime::RuntimeError::WorkerPanicked { message }) => {
            assert!(
                message.contains("a store bug in claim_next_run"),
                "{message}"
            );
        }
        other => panic!("expected WorkerPanicked, got {other:?}"),
    }
}

/// `wait` takes the signal `go`; `slow` then holds until `hold` is notified, while
/// `holding` says so.
fn held_after_signal(
    hold: Arc<Notify>,
    holding: Arc<std::sync::atomic::AtomicBool>,
) -> CompiledGraph<u32> {
    Graph::new("held")
        .node_fn("wait", |n: &mut u32, ctx| {
            Box::pin(async move {
                *n += ctx.wait_for_signal::<u32>("go").await?;
                Ok(())
            })
        })
        .node_fn("slow", move |_: &mut u32, _ctx| {
            let (hold, holding) = (Arc::clone(&hold), Arc::clone(&holding));
            Box::pin(async move {
                if holding.load(Ordering::SeqCst) {
                    hold.notified().await;
                }
                Ok(())
            })
        })
        .edge(START, "wait")
        .edge("wait", "slow")
        .edge("slow", END)
        .compile()
        .unwrap()
}

/// A caller that stops waiting for `run_until_idle` (a timeout around it) while it executes
/// one signalled run leaves the other signalled runs to the next call: on the memory store,
/// which keeps signals only in the mailbox, nothing else finds them. Before, they were
/// dropped with the call, and those runs waited for ever.
#[tokio::test]
async fn a_run_until_idle_dropped_part_way_leaves_its_untried_signalled_runs() {
    let runtime = Runtime::in_memory();
    let hold = Arc::new(Notify::new());
    let holding = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let graph = held_after_signal(Arc::clone(&hold), Arc::clone(&holding));
    let worker = Worker::builder(&runtime)
        .graph(&graph)
        .park_grace(Duration::ZERO)
        .build();
    for thread in ["t1", "t2", "t3"] {
        runtime.submit("held", thread, 0).await.unwrap();
    }
    assert_eq!(worker.run_until_idle().await.unwrap(), 3, "each suspends");
    for (i, thread) in ["t1", "t2", "t3"].into_iter().enumerate() {
        runtime.signal(thread, "go", 1 + i as u32).await.unwrap();
    }
    let stopped = tokio::time::timeout(Duration::from_millis(300), worker.run_until_idle()).await;
    assert!(stopped.is_err(), "held in the first run: {stopped:?}");
    holding.store(false, Ordering::SeqCst);
    hold.notify_waiters();
    worker.run_until_idle().await.unwrap();
    for (i, thread) in ["t1", "t2", "t3"].into_iter().enumerate() {
        let record = runtime.run(thread).await.unwrap().record;
        assert_eq!(record.state, RunState::Completed, "{thread}: {record:?}");
        let done: u32 = runtime.get_state(thread).await.unwrap().unwrap();
        assert_eq!(done, 1 + i as u32, "{thread}");
    }
}

/// A panic in the worker's `on_finished` callback (the user's code) is logged, and the
/// worker goes on: the call returns, the next run is executed.
#[tokio::test]
async fn a_panicking_on_finished_does_not_stop_the_worker() {
    let runtime = Runtime::in_memory();
    let graph = plain();
    let reports = Arc::new(AtomicU32::new(0));
    let worker = Worker::builder(&runtime)
        .graph(&graph)
        .on_finished({
            let reports = Arc::clone(&reports);
            move |_| {
                reports.fetch_add(1, Ordering::SeqCst);
                panic!("a bug in the callback");
            }
        })
        .build();
    runtime.submit("plain", "a", 0).await.unwrap();
    runtime.submit("plain", "b", 0).await.unwrap();
    assert_eq!(worker.run_until_idle().await.unwrap(), 2);
    assert_eq!(reports.load(Ordering::SeqCst), 2);
    for thread in ["a", "b"] {
        assert_eq!(
            runtime.run(thread).await.unwrap().record.state,
            RunState::Completed
        );
    }
}

/// A store that stops answering while the worker's loop asks it (a connection dead without
/// a word: PostgreSQL waits for the TCP timeout) holds a shutdown no longer than its
/// timeout (here shorter than the 5 s a store is given in any case); a run executing
/// meanwhile is asked to let go when the stop is asked, not once the store answers, and
/// lets go at its next step (reported), rather than being aborted. Asked again, the same
/// store answers and the run goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_does_not_answer_holds_a_shutdown_no_longer_than_its_timeout() {
    let db = loomflow_tests::TempDb::new("worker-shutdown-hung-store");
    let (store, faults) = faulty_store::FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).build();
    // A long run of short steps: about a minute while `slow`.
    let slow = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let ticking = Arc::clone(&slow);
    let graph = Graph::new("ticks")
        .recursion_limit(2_000)
        .node_fn("tick", move |n: &mut u32, _ctx| {
            let slow = ticking.load(Ordering::SeqCst);
            Box::pin(async move {
                if slow {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                *n += 1;
                Ok(())
            })
        })
        .edge(START, "tick")
        .branch(
            "tick",
            ["tick", END],
            |n: &u32| {
                if *n < 1_000 { "tick" } else { END }
            },
        )
        .compile()
        .unwrap();
    runtime.submit("ticks", "t-1", 0).await.unwrap();
    let reports = Arc::new(AtomicU32::new(0));
    let (looking, held) = faults.hold_next_wake_read();
    let worker = Worker::builder(&runtime)
        .graph(&graph)
        .shutdown_timeout(Duration::from_millis(200))
        .on_finished({
            let reports = Arc::clone(&reports);
            move |report| {
                assert_eq!(report.state, RunState::Running, "{report:?}");
                reports.fetch_add(1, Ordering::SeqCst);
            }
        })
        .build();
    let handle = worker.start();
    // The first look claims the run, then asks for the next wake time: held.
    looking.await.unwrap();
    let shutdown = tokio::time::timeout(Duration::from_secs(30), handle.shutdown()).await;
    assert!(shutdown.is_ok(), "the shutdown waited for the store");
    shutdown.unwrap().unwrap();
    assert_eq!(
        reports.load(Ordering::SeqCst),
        1,
        "let go at its step, not aborted"
    );
    drop(held);
    let ticked: u32 = runtime.get_state("t-1").await.unwrap().unwrap();
    assert!(ticked < 1_000, "{ticked}");
    slow.store(false, Ordering::SeqCst);
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    let done = runtime.run("t-1").await.unwrap().record;
    assert_eq!(done.state, RunState::Completed, "{done:?}");
}

/// A shutdown timeout too long to add to a time (`Duration::MAX`: never abort) waits for the
/// store as long as it takes: the worker does not panic, and the shutdown returns once the
/// store answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_that_never_aborts_waits_for_the_store() {
    let db = loomflow_tests::TempDb::new("worker-shutdown-never");
    let (store, faults) = faulty_store::FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).build();
    let graph = plain();
    let (looking, held) = faults.hold_next_wake_read();
    let handle = Worker::builder(&runtime)
        .graph(&graph)
        .shutdown_timeout(Duration::MAX)
        .build()
        .start();
    looking.await.unwrap();
    let shutdown = tokio::spawn(handle.shutdown());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!shutdown.is_finished(), "gave up on the store");
    drop(held);
    let stopped = tokio::time::timeout(Duration::from_secs(30), shutdown).await;
    stopped.expect("the shutdown returned").unwrap().unwrap();
}

/// Executions that died holding a run (here: claims taken and never let go, their leases
/// run out) are counted as the next takes it over; once as many died in a row as
/// `max_lapses`, the worker fails the run rather than run it, or cancels it if a cancel was
/// asked for. A limit of 0 is taken as 1 (0 would fail every run), and `None` runs it
/// however often its executions died.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_executions_died_is_failed_at_the_limit() {
    let graph = plain();
    // `deaths` executions claim the run in turn, each once the last one's lease ran out.
    let died = async |runtime: &Runtime, thread: &str, deaths: u64| {
        runtime.submit("plain", thread, 0).await.unwrap();
        for n in 0..deaths {
            let now = 10 * n + 1;
            let owner = format!("dead-{n}");
            runtime
                .store()
                .claim(thread, &owner, now + 4, now)
                .await
                .unwrap();
        }
        runtime.run(thread).await.unwrap().record.lapses
    };
    let runtime = Runtime::in_memory();
    assert_eq!(
        died(&runtime, "f", 2).await,
        1,
        "the second took over from the first"
    );
    died(&runtime, "g", 3).await;
    let worker = Worker::builder(&runtime).graph(&graph).build();
    assert_eq!(worker.run_until_idle().await.unwrap(), 2);
    assert_eq!(
        runtime.get_state::<u32>("f").await.unwrap(),
        Some(1),
        "under the limit"
    );
    let g = runtime.run("g").await.unwrap().record;
    assert_eq!(g.state, RunState::Failed, "{g:?}");
    assert!(g.error.unwrap().contains("last 3 executions in a row"));

    let runtime = Runtime::in_memory();
    died(&runtime, "c", 3).await;
    runtime.cancel("c").await.unwrap();
    died(&runtime, "z", 0).await;
    let strict = Worker::builder(&runtime)
        .graph(&graph)
        .max_lapses(Some(0))
        .build();
    strict.run_until_idle().await.unwrap();
    assert_eq!(
        runtime.run("c").await.unwrap().record.state,
        RunState::Cancelled
    );
    assert_eq!(
        runtime.get_state::<u32>("z").await.unwrap(),
        Some(1),
        "0 is taken as 1"
    );

    let runtime = Runtime::in_memory();
    died(&runtime, "n", 9).await;
    let patient = Worker::builder(&runtime)
        .graph(&graph)
        .max_lapses(None)
        .build();
    patient.run_until_idle().await.unwrap();
    assert_eq!(runtime.get_state::<u32>("n").await.unwrap(), Some(1));
}

/// A cancel asked while an execution that then died held the run is carried out by the
/// worker that finds the run at its lapse limit as `Runtime::cancel` carries one out: the
/// newest checkpoint is written again as cancelled, so that carrying the run on is refused.
/// Before, only the row said cancelled: `recover` took the suspended checkpoint and ran
/// the run to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_carried_out_at_the_lapse_limit_cannot_be_carried_on() {
    let graph: CompiledGraph<u32> = Graph::new("napping")
        .node_fn("nap", |n: &mut u32, ctx| {
            Box::pin(async move {
                ctx.sleep(Duration::from_millis(1)).or_suspend().await?;
                *n += 1;
                Ok(())
            })
        })
        .edge(START, "nap")
        .edge("nap", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let suspended = graph.invoke(&runtime, "c", 0).await.unwrap();
    assert_eq!(suspended.interrupts().len(), 1, "{suspended:?}");
    // Three executions died holding it, long ago; a fourth holds it now.
    for n in 0..3 {
        let owner = format!("dead-{n}");
        let now = 10 * n + 1;
        runtime
            .store()
            .claim("c", &owner, now + 4, now)
            .await
            .unwrap();
    }
    let now = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    runtime
        .store()
        .claim("c", "dead-3", now + 200, now)
        .await
        .unwrap();
    let asked = runtime.cancel("c").await.unwrap();
    assert!(asked.cancel_requested, "{asked:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;

    let worker = Worker::builder(&runtime).graph(&graph).build();
    worker.run_until_idle().await.unwrap();
    let row = runtime.run("c").await.unwrap().record;
    assert_eq!(row.state, RunState::Cancelled, "{row:?}");
    let newest = runtime.list_checkpoints("c").await.unwrap();
    assert_eq!(
        newest.last().unwrap().status,
        loomflow::runtime::RunStatus::Cancelled
    );
    let again = graph.recover(&runtime, "c").await;
    assert!(
        matches!(again, Err(loomflow::RunError::Cancelled { .. })),
        "{again:?}"
    );
}
