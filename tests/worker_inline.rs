//! The worker in one process: submitted runs start, signals wake suspended runs, timers and
//! wait deadlines fire by the runtime's clock, runs are listed, shown and cancelled. Both
//! stores (memory and SQLite), the inline mode and a worker in the background.
//!
//! Several runtimes on one SQLite file stand in for processes where a test needs "another
//! process" in-process; `worker_processes.rs` uses real processes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/due.rs"]
mod due;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use loomflow::prelude::*;
use loomflow::runtime::{
    Durability, ManualClock, RunFilter, RunState, RuntimeError, SqliteOptions, SqliteStore,
};
use loomflow::{RunError, SignalError};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Refund {
    order: String,
    approved: Option<bool>,
    timed_out: bool,
    reminded: bool,
}

/// `approval` waits for the signal `approve` (for an hour at most), then `pay` records
/// the refund.
fn refund_graph() -> CompiledGraph<Refund> {
    Graph::new("refund")
        .node_fn("approval", |refund: &mut Refund, ctx| {
            Box::pin(async move {
                match ctx
                    .wait_for_signal::<bool>("approve")
                    .timeout(Duration::from_secs(3_600))
                    .await
                {
                    Ok(approved) => refund.approved = Some(approved),
                    Err(RunError::Signal(SignalError::Timeout { .. })) => refund.timed_out = true,
                    Err(other) => return Err(other.into()),
                }
                Ok(())
            })
        })
        .edge(START, "approval")
        .edge("approval", END)
        .compile()
        .unwrap()
}

/// `remind` sleeps for a day, durably.
fn reminder_graph() -> CompiledGraph<Refund> {
    Graph::new("reminder")
        .node_fn("remind", |refund: &mut Refund, ctx| {
            Box::pin(async move {
                ctx.sleep(Duration::from_secs(86_400)).await?;
                refund.reminded = true;
                Ok(())
            })
        })
        .edge(START, "remind")
        .edge("remind", END)
        .compile()
        .unwrap()
}

fn input(order: &str) -> Refund {
    Refund {
        order: order.to_owned(),
        ..Refund::default()
    }
}

struct TempDb(PathBuf);

impl TempDb {
    fn new(name: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("loomflow-worker-{name}-{}.db", std::process::id()));
        let db = Self(path);
        db.remove();
        db
    }

    fn remove(&self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.0.display()));
        }
    }

    fn runtime(&self) -> Runtime {
        Runtime::with_store(SqliteStore::open(&self.0).unwrap())
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        self.remove();
    }
}

async fn state_of(runtime: &Runtime, thread: &str) -> RunState {
    runtime.run(thread).await.unwrap().record.state
}

async fn submitted_run_waits_then_a_signal_completes_it(runtime: Runtime) {
    let graph = refund_graph();
    let worker = Worker::builder(&runtime)
        .graph(&graph)
        .park_grace(Duration::ZERO)
        .build();
    runtime.submit("refund", "o-1", input("o-1")).await.unwrap();
    assert_eq!(state_of(&runtime, "o-1").await, RunState::Queued);

    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    let info = runtime.run("o-1").await.unwrap();
    assert_eq!(info.record.state, RunState::Waiting);
    assert_eq!(info.record.waiting_on, ["approve"]);
    assert_eq!(info.record.graph.as_deref(), Some("refund"));
    assert!(info.record.fingerprint.is_some());
    assert!(
        info.record.wake_at_ms.is_some(),
        "the wait's deadline is stored"
    );
    assert_eq!(info.interrupts[0].signal.as_deref(), Some("approve"));
    assert_eq!(info.state["order"], "o-1");
    assert!(
        info.record.lease_owner.is_none(),
        "a suspended run is held by nobody"
    );

    // Nothing to do until the signal comes.
    assert_eq!(worker.run_until_idle().await.unwrap(), 0);
    runtime.signal("o-1", "approve", true).await.unwrap();
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    assert_eq!(state_of(&runtime, "o-1").await, RunState::Completed);
    let done: Refund = runtime.get_state("o-1").await.unwrap().unwrap();
    assert_eq!(done.approved, Some(true));
    assert_eq!(worker.run_until_idle().await.unwrap(), 0);
}

#[tokio::test]
async fn in_memory_a_submitted_run_waits_and_a_signal_completes_it() {
    submitted_run_waits_then_a_signal_completes_it(Runtime::in_memory()).await;
}

#[tokio::test]
async fn on_sqlite_a_submitted_run_waits_and_a_signal_completes_it() {
    let db = TempDb::new("signal");
    submitted_run_waits_then_a_signal_completes_it(db.runtime()).await;
}

#[tokio::test]
async fn a_wait_deadline_fires_by_the_runtime_clock() {
    let clock = Arc::new(ManualClock::new(std::time::SystemTime::now()));
    let runtime = Runtime::builder().clock(Arc::clone(&clock)).build();
    let worker = Worker::builder(&runtime)
        .graph(&refund_graph())
        .park_grace(Duration::ZERO)
        .build();
    runtime.submit("refund", "o-2", input("o-2")).await.unwrap();
    worker.run_until_idle().await.unwrap();
    assert_eq!(state_of(&runtime, "o-2").await, RunState::Waiting);

    clock.advance(Duration::from_secs(3_599));
    assert_eq!(worker.run_until_idle().await.unwrap(), 0, "not due yet");
    clock.advance(Duration::from_secs(1));
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    assert_eq!(state_of(&runtime, "o-2").await, RunState::Completed);
    let done: Refund = runtime.get_state("o-2").await.unwrap().unwrap();
    assert!(done.timed_out, "the wait returned SignalError::Timeout");
    assert_eq!(done.approved, None);
}

/// A wait carried on after its deadline (the worker was down, or busy) ends as it would
/// have at the deadline: a signal sent by then is taken, one sent after it (by the runtime's
/// clock) is not, and stays queued for whoever waits for it next.
async fn a_wait_carried_on_late_takes_only_what_came_by_its_deadline(
    runtime: Runtime,
    clock: &ManualClock,
) {
    let worker = Worker::builder(&runtime)
        .graph(&refund_graph())
        .park_grace(Duration::ZERO)
        .build();
    for order in ["in-time", "late"] {
        runtime.submit("refund", order, input(order)).await.unwrap();
    }
    assert_eq!(worker.run_until_idle().await.unwrap(), 2);

    // Nothing runs the worker while the deadline passes.
    clock.advance(Duration::from_secs(3_599));
    runtime.signal("in-time", "approve", true).await.unwrap();
    clock.advance(Duration::from_secs(2));
    runtime.signal("late", "approve", true).await.unwrap();
    assert_eq!(worker.run_until_idle().await.unwrap(), 2);

    let in_time: Refund = runtime.get_state("in-time").await.unwrap().unwrap();
    assert_eq!(in_time.approved, Some(true));
    assert!(!in_time.timed_out);
    let late: Refund = runtime.get_state("late").await.unwrap().unwrap();
    assert!(
        late.timed_out,
        "a signal sent after the deadline ended the wait: {late:?}"
    );
    assert_eq!(late.approved, None);
    assert_eq!(state_of(&runtime, "late").await, RunState::Completed);
    assert_eq!(
        runtime.poll_signal::<bool>("late", "approve").unwrap(),
        Some(true),
        "the late signal stays queued"
    );
}

#[tokio::test]
async fn in_memory_a_wait_carried_on_late_takes_only_what_came_by_its_deadline() {
    let clock = Arc::new(ManualClock::new(std::time::SystemTime::now()));
    let runtime = Runtime::builder().clock(Arc::clone(&clock)).build();
    a_wait_carried_on_late_takes_only_what_came_by_its_deadline(runtime, &clock).await;
}

#[tokio::test]
async fn on_sqlite_a_wait_carried_on_late_takes_only_what_came_by_its_deadline() {
    let db = TempDb::new("late-signal");
    let clock = Arc::new(ManualClock::new(std::time::SystemTime::now()));
    let runtime = Runtime::builder()
        .store(SqliteStore::open(&db.0).unwrap())
        .clock(Arc::clone(&clock))
        .build();
    a_wait_carried_on_late_takes_only_what_came_by_its_deadline(runtime, &clock).await;
}

#[tokio::test]
async fn a_sleep_suspends_the_run_and_the_worker_wakes_it_when_due() {
    let db = TempDb::new("sleep");
    let clock = Arc::new(ManualClock::new(std::time::SystemTime::now()));
    let runtime = Runtime::builder()
        .store(SqliteStore::open(&db.0).unwrap())
        .clock(Arc::clone(&clock))
        .build();
    let worker = Worker::builder(&runtime).graph(&reminder_graph()).build();
    runtime
        .submit("reminder", "r-1", input("r-1"))
        .await
        .unwrap();
    worker.run_until_idle().await.unwrap();
    let info = runtime.run("r-1").await.unwrap();
    assert_eq!(info.record.state, RunState::Sleeping);
    let wake = info.record.wake_at_ms.unwrap();

    clock.advance(Duration::from_secs(86_399));
    assert_eq!(worker.run_until_idle().await.unwrap(), 0);
    assert_eq!(
        runtime.run("r-1").await.unwrap().record.wake_at_ms,
        Some(wake)
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    let done: Refund = runtime.get_state("r-1").await.unwrap().unwrap();
    assert!(done.reminded);
    assert_eq!(state_of(&runtime, "r-1").await, RunState::Completed);
}

/// A worker whose poll interval is long (one that relies on wake-ups) carries on a run it
/// suspended on a timer, and one whose wait has a deadline, when they are due: not at its
/// next poll, a minute later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_timers_and_deadlines_fire_when_due_with_a_long_poll_interval() {
    let db = TempDb::new("long-poll");
    due::timers_and_deadlines_fire_when_due(&db.runtime()).await;
}

/// A claim the store failed (the SQLite file locked by another connection past the store's
/// busy timeout) is tried again shortly: not at the next poll, a minute later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_the_store_failed_is_tried_again_shortly() {
    let db = TempDb::new("claim-retry");
    let options = SqliteOptions::default().busy_timeout(Duration::from_millis(20));
    let runtime = Runtime::with_store(SqliteStore::open_with(&db.0, options).unwrap());
    let quick = Graph::new("quick")
        .node_fn("remind", |refund: &mut Refund, _ctx| {
            Box::pin(async move {
                refund.reminded = true;
                Ok(())
            })
        })
        .edge(START, "remind")
        .edge("remind", END)
        .compile()
        .unwrap();
    runtime.submit("quick", "q-1", input("q-1")).await.unwrap();
    // Another connection holds the write lock: the worker's claims fail.
    let other = rusqlite::Connection::open(&db.0).unwrap();
    other.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let handle = Worker::builder(&runtime)
        .graph(&quick)
        .poll_interval(Duration::from_secs(60))
        .build()
        .start();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(state_of(&runtime, "q-1").await, RunState::Queued);
    other.execute_batch("COMMIT").unwrap();
    drop(other);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while state_of(&runtime, "q-1").await != RunState::Completed {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run was not claimed once the store could be written again"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    handle.shutdown().await.unwrap();
    let done: Refund = runtime.get_state("q-1").await.unwrap().unwrap();
    assert!(done.reminded);
}

#[tokio::test]
async fn a_background_worker_is_woken_at_once_by_a_signal_in_its_process() {
    let runtime = Runtime::in_memory();
    let finished = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&finished);
    let worker = Worker::builder(&runtime)
        .graph(&refund_graph())
        // A poll far longer than the test: only the in-process wake-ups can drive it.
        .poll_interval(Duration::from_secs(3_600))
        .park_grace(Duration::from_millis(10))
        .on_finished(move |report| {
            seen.lock()
                .unwrap()
                .push((report.thread.clone(), report.state));
        })
        .build();
    let handle = worker.start();
    runtime.submit("refund", "o-3", input("o-3")).await.unwrap();
    wait_for(&runtime, "o-3", RunState::Waiting).await;
    runtime.signal("o-3", "approve", false).await.unwrap();
    wait_for(&runtime, "o-3", RunState::Completed).await;
    handle.shutdown().await.unwrap();
    assert_eq!(
        *finished.lock().unwrap(),
        [
            ("o-3".to_owned(), RunState::Waiting),
            ("o-3".to_owned(), RunState::Completed)
        ]
    );
}

async fn wait_for(runtime: &Runtime, thread: &str, state: RunState) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(info) = runtime.run(thread).await
            && info.record.state == state
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{thread} never became {state}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_signal_written_by_another_runtime_on_the_file_reaches_a_parked_wait() {
    let db = TempDb::new("cross");
    let worker_side = db.runtime();
    let web_side = db.runtime();
    let worker = Worker::builder(&worker_side)
        .graph(&refund_graph())
        .poll_interval(Duration::from_millis(10))
        // Long enough that the wait is still parked in memory when the signal comes.
        .park_grace(Duration::from_secs(30))
        .build();
    let handle = worker.start();
    web_side
        .submit("refund", "o-4", input("o-4"))
        .await
        .unwrap();
    wait_for(&web_side, "o-4", RunState::Running).await;
    // The run is parked in the worker's memory; this signal goes only to the file.
    tokio::time::sleep(Duration::from_millis(50)).await;
    web_side.signal("o-4", "approve", true).await.unwrap();
    wait_for(&web_side, "o-4", RunState::Completed).await;
    handle.shutdown().await.unwrap();
    let done: Refund = web_side.get_state("o-4").await.unwrap().unwrap();
    assert_eq!(done.approved, Some(true));
}

#[tokio::test]
async fn a_signal_written_by_another_runtime_wakes_a_suspended_run() {
    let db = TempDb::new("cross-suspended");
    let worker_side = db.runtime();
    let web_side = db.runtime();
    let worker = Worker::builder(&worker_side)
        .graph(&refund_graph())
        .poll_interval(Duration::from_millis(10))
        .park_grace(Duration::ZERO)
        .build();
    let handle = worker.start();
    web_side
        .submit("refund", "o-5", input("o-5"))
        .await
        .unwrap();
    wait_for(&web_side, "o-5", RunState::Waiting).await;
    web_side.signal("o-5", "approve", true).await.unwrap();
    wait_for(&web_side, "o-5", RunState::Completed).await;
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn submitting_to_a_thread_with_an_unfinished_run_is_refused() {
    let runtime = Runtime::in_memory();
    runtime.submit("refund", "o-6", input("o-6")).await.unwrap();
    let err = runtime
        .submit("refund", "o-6", input("o-6"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RuntimeError::RunActive { thread, state: RunState::Queued } if thread == "o-6"),
        "{err}"
    );
    assert!(err.to_string().contains("o-6"), "{err}");
    let err = runtime.run("nobody").await.unwrap_err();
    assert!(matches!(err, RuntimeError::UnknownRun { .. }), "{err}");
}

/// A thread whose run finished but that an execution holds for a moment (a fork onto it, a
/// recover of the finished run) refuses a submit as busy, to be tried again: not as a run
/// that must finish first, which it has.
#[tokio::test]
async fn submitting_to_a_finished_thread_held_for_a_moment_is_busy() {
    let runtime = Runtime::in_memory();
    let worker = Worker::builder(&runtime).graph(&refund_graph()).build();
    runtime.submit("refund", "o-9", input("o-9")).await.unwrap();
    worker.run_until_idle().await.unwrap();
    runtime.signal("o-9", "approve", true).await.unwrap();
    worker.run_until_idle().await.unwrap();
    assert_eq!(state_of(&runtime, "o-9").await, RunState::Completed);
    let held = runtime.store().claim("o-9", "forking", u64::MAX / 4, 1);
    assert_eq!(held.await.unwrap(), loomflow::runtime::Claim::Claimed);
    let err = runtime
        .submit("refund", "o-9", input("o-9"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RuntimeError::Busy { thread, owner, .. } if thread == "o-9" && owner == "forking"),
        "{err}"
    );
    runtime.store().release("o-9", "forking").await.unwrap();
    runtime.submit("refund", "o-9", input("o-9")).await.unwrap();
}

#[tokio::test]
async fn an_input_that_is_not_the_graph_state_fails_the_run_naming_both() {
    let runtime = Runtime::in_memory();
    let worker = Worker::builder(&runtime).graph(&refund_graph()).build();
    runtime
        .submit("refund", "o-7", json!({"order": 7}))
        .await
        .unwrap();
    worker.run_until_idle().await.unwrap();
    let record = runtime.run("o-7").await.unwrap().record;
    assert_eq!(record.state, RunState::Failed);
    let error = record.error.unwrap();
    assert!(
        error.contains("refund") && error.contains("Refund"),
        "{error}"
    );
    // Where in the input: the field that does not fit.
    assert!(
        error.contains("at order: invalid type: integer `7`"),
        "{error}"
    );
    // A failed run is not taken again.
    assert_eq!(worker.run_until_idle().await.unwrap(), 0);
}

/// The state of graph `pay` before a deploy (`V1`) and after it (`V2`, the order's id now
/// text): one structure, two state types.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct PayV1 {
    order: u64,
    paid: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct PayV2 {
    order: String,
    paid: bool,
}

fn pay_graph<S: loomflow::State>(pay: fn(&mut S)) -> CompiledGraph<S> {
    Graph::new("pay")
        .node_sync("pay", pay)
        .edge(START, "pay")
        .edge("pay", END)
        .compile()
        .unwrap()
}

/// Version 2 of graph `pay` checks the order first: another structure.
fn checked_pay_graph<S: loomflow::State>(pay: fn(&mut S)) -> CompiledGraph<S> {
    Graph::new("pay")
        .node_sync("check", |_: &mut S| {})
        .node_sync("pay", pay)
        .edge(START, "check")
        .edge("check", "pay")
        .edge("pay", END)
        .compile()
        .unwrap()
}

/// A worker of the new version takes a run the old version submitted, whose input its state
/// type cannot read: the run fails, its input kept in a failed checkpoint, and the old
/// version's `recover` carries it on (the input was dropped with the run's row).
async fn an_input_a_new_worker_cannot_read_is_kept_for_a_recover(runtime: Runtime) {
    let v1 = pay_graph(|s: &mut PayV1| s.paid = true);
    // The new version changed the graph too: the old one's recover is no graph change.
    let v2 = checked_pay_graph(|s: &mut PayV2| s.paid = true);
    let earlier = v1.invoke(&runtime, "o-7", PayV1::default()).await.unwrap();
    assert!(earlier.completed().unwrap().paid);
    let old = PayV1 {
        order: 7,
        paid: false,
    };
    runtime.submit("pay", "o-7", &old).await.unwrap();
    let worker = Worker::builder(&runtime).graph(&v2).build();
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    let record = runtime.run("o-7").await.unwrap().record;
    assert_eq!((record.state, record.run), (RunState::Failed, 2));
    assert!(record.error.unwrap().contains("at order"));

    let recovered = v1.recover(&runtime, "o-7").await.unwrap();
    assert_eq!(
        recovered.completed().unwrap(),
        PayV1 {
            order: 7,
            paid: true
        }
    );
    assert_eq!(state_of(&runtime, "o-7").await, RunState::Completed);
}

#[tokio::test]
async fn in_memory_an_input_a_new_worker_cannot_read_is_kept_for_a_recover() {
    an_input_a_new_worker_cannot_read_is_kept_for_a_recover(Runtime::in_memory()).await;
}

#[tokio::test]
async fn on_sqlite_an_input_a_new_worker_cannot_read_is_kept_for_a_recover() {
    let db = TempDb::new("unread-input");
    an_input_a_new_worker_cannot_read_is_kept_for_a_recover(db.runtime()).await;
}

#[tokio::test]
async fn runs_of_unregistered_graphs_are_left_alone() {
    let runtime = Runtime::in_memory();
    let worker = Worker::builder(&runtime).graph(&refund_graph()).build();
    runtime
        .submit("reminder", "r-2", input("r-2"))
        .await
        .unwrap();
    assert_eq!(worker.run_until_idle().await.unwrap(), 0);
    assert_eq!(state_of(&runtime, "r-2").await, RunState::Queued);
}

#[tokio::test]
async fn runs_are_listed_by_state_and_graph() {
    let runtime = Runtime::in_memory();
    let worker = Worker::builder(&runtime)
        .graph(&refund_graph())
        .graph(&reminder_graph())
        .park_grace(Duration::ZERO)
        .build();
    for order in ["a", "b"] {
        runtime.submit("refund", order, input(order)).await.unwrap();
    }
    runtime.submit("reminder", "c", input("c")).await.unwrap();
    worker.run_until_idle().await.unwrap();
    runtime.signal("a", "approve", true).await.unwrap();
    worker.run_until_idle().await.unwrap();

    let threads = |records: Vec<loomflow::runtime::RunRecord>| {
        let mut threads: Vec<String> = records.into_iter().map(|r| r.thread).collect();
        threads.sort();
        threads
    };
    let all = runtime.runs(&RunFilter::new()).await.unwrap();
    assert_eq!(threads(all), ["a", "b", "c"]);
    let waiting = runtime
        .runs(&RunFilter::new().state(RunState::Waiting))
        .await
        .unwrap();
    assert_eq!(threads(waiting), ["b"]);
    let reminders = runtime
        .runs(&RunFilter::new().graph("reminder"))
        .await
        .unwrap();
    assert_eq!(threads(reminders), ["c"]);
    let one = runtime.runs(&RunFilter::new().limit(1)).await.unwrap();
    assert_eq!(one.len(), 1);
    let old = runtime
        .runs(&RunFilter::new().updated_before_ms(1))
        .await
        .unwrap();
    assert!(old.is_empty());
}

async fn cancel_a_waiting_run(runtime: Runtime) {
    let graph = refund_graph();
    let worker = Worker::builder(&runtime)
        .graph(&graph)
        .park_grace(Duration::ZERO)
        .build();
    runtime.submit("refund", "o-8", input("o-8")).await.unwrap();
    worker.run_until_idle().await.unwrap();
    let record = runtime.cancel("o-8").await.unwrap();
    assert_eq!(record.state, RunState::Cancelled);
    // The signal no longer wakes it, and resuming it is refused.
    runtime.signal("o-8", "approve", true).await.unwrap();
    assert_eq!(worker.run_until_idle().await.unwrap(), 0);
    let err = graph.recover(&runtime, "o-8").await.unwrap_err();
    assert!(matches!(err, RunError::Cancelled { .. }), "{err}");
    // Cancelling again changes nothing; a new run may start.
    assert_eq!(
        runtime.cancel("o-8").await.unwrap().state,
        RunState::Cancelled
    );
    runtime.submit("refund", "o-8", input("o-8")).await.unwrap();
    assert_eq!(state_of(&runtime, "o-8").await, RunState::Queued);
}

#[tokio::test]
async fn in_memory_a_waiting_run_is_cancelled() {
    cancel_a_waiting_run(Runtime::in_memory()).await;
}

#[tokio::test]
async fn on_sqlite_a_waiting_run_is_cancelled() {
    let db = TempDb::new("cancel");
    cancel_a_waiting_run(db.runtime()).await;
}

#[tokio::test]
async fn a_queued_run_is_cancelled_before_it_starts() {
    let runtime = Runtime::in_memory();
    let worker = Worker::builder(&runtime).graph(&refund_graph()).build();
    runtime.submit("refund", "o-9", input("o-9")).await.unwrap();
    assert_eq!(
        runtime.cancel("o-9").await.unwrap().state,
        RunState::Cancelled
    );
    assert_eq!(worker.run_until_idle().await.unwrap(), 0);
}

#[tokio::test]
async fn an_executing_run_stops_at_its_next_step_when_cancelled() {
    let runtime = Runtime::in_memory();
    let graph = Graph::new("counter")
        .node_fn("tick", |n: &mut u64, _ctx| {
            Box::pin(async move {
                *n += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok(())
            })
        })
        .edge(START, "tick")
        .branch("tick", ["tick", END], |n: &u64| {
            if *n < 1_000_000 { "tick" } else { END }
        })
        .compile()
        .unwrap();
    let run = graph
        .run(&runtime, "loop", 0)
        .recursion_limit(100_000)
        .start();
    wait_for(&runtime, "loop", RunState::Running).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    let record = runtime.cancel("loop").await.unwrap();
    assert!(record.cancel_requested, "{record:?}");
    let err = run.await.unwrap_err();
    assert!(matches!(err, RunError::Cancelled { .. }), "{err}");
    let record = runtime.run("loop").await.unwrap().record;
    assert_eq!(record.state, RunState::Cancelled);
    assert!(!record.cancel_requested);
    let ticks: u64 = runtime.get_state("loop").await.unwrap().unwrap();
    assert!(ticks > 0 && ticks < 100_000, "{ticks}");
}

#[tokio::test]
async fn a_run_inside_a_subgraph_suspends_and_the_worker_carries_it_on() {
    let inner = refund_graph();
    let outer = Graph::new("outer")
        .subgraph(
            "inner",
            inner,
            |r: &Refund| r.clone(),
            |r: &mut Refund, c| *r = c,
        )
        .node_sync("done", |r: &mut Refund| r.order.push_str(" done"))
        .edge(START, "inner")
        .edge("inner", "done")
        .edge("done", END)
        .compile()
        .unwrap();
    let db = TempDb::new("subgraph");
    let runtime = db.runtime();
    let worker = Worker::builder(&runtime)
        .graph(&outer)
        .park_grace(Duration::ZERO)
        .build();
    runtime.submit("outer", "s-1", input("s-1")).await.unwrap();
    worker.run_until_idle().await.unwrap();
    let info = runtime.run("s-1").await.unwrap();
    assert_eq!(info.record.state, RunState::Waiting);
    assert_eq!(info.record.waiting_on, ["approve"]);
    runtime.signal("s-1", "approve", true).await.unwrap();
    worker.run_until_idle().await.unwrap();
    let done: Refund = runtime.get_state("s-1").await.unwrap().unwrap();
    assert_eq!(
        (done.approved, done.order.as_str()),
        (Some(true), "s-1 done")
    );
}

#[tokio::test]
async fn a_run_whose_process_left_it_running_is_carried_on() {
    let db = TempDb::new("orphan");
    let runtime = Runtime::builder()
        .store(SqliteStore::open(&db.0).unwrap())
        .lease(Duration::from_millis(200))
        .build();
    let graph = refund_graph();
    // Started directly, then the task is dropped mid-wait: the row says running.
    let run = graph.start(&runtime, "o-10", input("o-10"));
    wait_for(&runtime, "o-10", RunState::Running).await;
    run.abort();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let worker = Worker::builder(&runtime)
        .graph(&graph)
        .park_grace(Duration::ZERO)
        .build();
    worker.run_until_idle().await.unwrap();
    let record = runtime.run("o-10").await.unwrap().record;
    assert_eq!(record.state, RunState::Waiting);
    assert!(record.attempts >= 2, "{record:?}");
}

#[tokio::test]
async fn a_shutdown_hands_running_runs_back_at_their_next_step() {
    let db = TempDb::new("shutdown");
    let runtime = db.runtime();
    let counter = Graph::new("counter")
        .node_fn("tick", |n: &mut u64, _ctx| {
            Box::pin(async move {
                *n += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok(())
            })
        })
        .edge(START, "tick")
        .branch(
            "tick",
            ["tick", END],
            |n: &u64| if *n < 200 { "tick" } else { END },
        )
        .recursion_limit(1_000)
        .compile()
        .unwrap();
    let reports = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&reports);
    let worker = Worker::builder(&runtime)
        .graph(&counter)
        .on_finished(move |report| seen.lock().unwrap().push(report.state))
        .build();
    let handle = worker.start();
    runtime.submit("counter", "count", 0u64).await.unwrap();
    wait_for(&runtime, "count", RunState::Running).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let asked = std::time::Instant::now();
    handle.shutdown().await.unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "the run stopped at its next step"
    );
    assert_eq!(*reports.lock().unwrap(), [RunState::Running]);
    let record = runtime.run("count").await.unwrap().record;
    assert_eq!(
        (record.state, record.lease_owner),
        (RunState::Running, None)
    );
    let halfway: u64 = runtime.get_state("count").await.unwrap().unwrap();
    assert!(halfway > 0 && halfway < 200, "{halfway}");

    // Another worker carries it on from where it stopped.
    let next = Worker::builder(&runtime).graph(&counter).build();
    assert_eq!(next.run_until_idle().await.unwrap(), 1);
    let done: u64 = runtime.get_state("count").await.unwrap().unwrap();
    assert_eq!(
        done,
        200,
        "{:?}",
        runtime.run("count").await.unwrap().record
    );
    assert_eq!(state_of(&runtime, "count").await, RunState::Completed);
}

/// A run whose step runs a subgraph is handed back at the subgraph's next step: the
/// shutdown does not wait for the subgraph's loop to end, and another worker carries the
/// subgraph on from its own checkpoint, running no step of it twice.
#[tokio::test]
async fn a_shutdown_hands_a_run_back_at_its_subgraphs_next_step() {
    let db = TempDb::new("shutdown-subgraph");
    let runtime = db.runtime();
    let ticks = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = Arc::clone(&ticks);
    let counter = Graph::new("counter")
        .node_fn("tick", move |n: &mut u64, _ctx| {
            let counted = Arc::clone(&counted);
            Box::pin(async move {
                *n += 1;
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok(())
            })
        })
        .edge(START, "tick")
        .branch(
            "tick",
            ["tick", END],
            |n: &u64| if *n < 300 { "tick" } else { END },
        )
        .recursion_limit(1_000)
        .compile()
        .unwrap();
    let nested = Graph::new("nested")
        .subgraph("count", counter, |n: &u64| *n, |n: &mut u64, m: u64| *n = m)
        .node_sync("after", |n: &mut u64| *n += 1)
        .edge(START, "count")
        .edge("count", "after")
        .edge("after", END)
        .compile()
        .unwrap();
    let worker = Worker::builder(&runtime).graph(&nested).build();
    let handle = worker.start();
    runtime.submit("nested", "count", 0u64).await.unwrap();
    while ticks.load(std::sync::atomic::Ordering::SeqCst) < 5 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let asked = ticks.load(std::sync::atomic::Ordering::SeqCst);
    handle.shutdown().await.unwrap();
    let stopped = ticks.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        stopped <= asked + 1,
        "the subgraph ran on from {asked} to {stopped} steps"
    );
    let record = runtime.run("count").await.unwrap().record;
    assert_eq!(
        (record.state, record.lease_owner.as_deref()),
        (RunState::Running, None),
        "handed back: {record:?}"
    );

    let next = Worker::builder(&runtime).graph(&nested).build();
    assert_eq!(next.run_until_idle().await.unwrap(), 1);
    let done: u64 = runtime.get_state("count").await.unwrap().unwrap();
    assert_eq!(done, 301);
    let ran = ticks.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(ran, 300, "each of the subgraph's steps ran once");
}

#[tokio::test]
async fn a_run_executing_elsewhere_stops_when_another_runtime_cancels_it() {
    let db = TempDb::new("cancel-elsewhere");
    let executing = Runtime::builder()
        .store(SqliteStore::open(&db.0).unwrap())
        // Heartbeats every 100 ms carry the request to the run.
        .lease(Duration::from_millis(300))
        .build();
    let elsewhere = db.runtime();
    let graph = Graph::new("counter")
        .node_fn("tick", |n: &mut u64, _ctx| {
            Box::pin(async move {
                *n += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok(())
            })
        })
        .edge(START, "tick")
        .branch("tick", ["tick", END], |n: &u64| {
            if *n < 1_000_000 { "tick" } else { END }
        })
        .recursion_limit(2_000_000)
        .compile()
        .unwrap();
    let run = graph.start(&executing, "far", 0);
    wait_for(&elsewhere, "far", RunState::Running).await;
    let record = elsewhere.cancel("far").await.unwrap();
    assert!(record.cancel_requested, "{record:?}");
    let stopped = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the run stops within a heartbeat or so");
    assert!(
        matches!(stopped, Err(RunError::Cancelled { .. })),
        "{stopped:?}"
    );
    assert_eq!(state_of(&elsewhere, "far").await, RunState::Cancelled);
}

/// `review` asks a person for a decision with `ctx.interrupt`.
fn review_graph() -> CompiledGraph<Refund> {
    Graph::new("review")
        .node_fn("review", |refund: &mut Refund, ctx| {
            Box::pin(async move {
                let approved: bool = ctx.interrupt(json!({"question": "refund?"}))?;
                refund.approved = Some(approved);
                Ok(())
            })
        })
        .edge(START, "review")
        .edge("review", END)
        .compile()
        .unwrap()
}

#[tokio::test]
async fn a_resume_requested_without_the_graph_is_applied_by_the_worker() {
    let db = TempDb::new("resume-request");
    let runtime = db.runtime();
    let worker = Worker::builder(&runtime).graph(&review_graph()).build();
    runtime.submit("review", "r-9", input("r-9")).await.unwrap();
    worker.run_until_idle().await.unwrap();
    let info = runtime.run("r-9").await.unwrap();
    assert_eq!(info.record.state, RunState::Interrupted);

    // A value the node cannot use: the request is consumed, the run stays interrupted.
    let operator = db.runtime();
    operator.request_resume("r-9", "not a bool").await.unwrap();
    worker.run_until_idle().await.unwrap();
    assert_eq!(state_of(&runtime, "r-9").await, RunState::Interrupted);

    // Refused, the request is spent: a recover finds the run interrupted, as it was.
    let recovered = review_graph().recover(&runtime, "r-9").await.unwrap();
    assert_eq!(recovered.interrupts().len(), 1, "{recovered:?}");

    operator.request_resume("r-9", true).await.unwrap();
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    let done: Refund = runtime.get_state("r-9").await.unwrap().unwrap();
    assert_eq!(done.approved, Some(true));
    assert_eq!(state_of(&runtime, "r-9").await, RunState::Completed);
    let err = operator.request_resume("r-9", true).await.unwrap_err();
    assert!(matches!(err, RuntimeError::NotInterrupted { .. }), "{err}");
}

#[tokio::test]
async fn recover_applies_a_waiting_resume_request() {
    let runtime = Runtime::in_memory();
    let graph = review_graph();
    let outcome = graph.invoke(&runtime, "r-10", input("r-10")).await.unwrap();
    assert_eq!(outcome.interrupts().len(), 1);
    let id = outcome.interrupts()[0].id.clone();
    runtime
        .request_resume_with("r-10", &id, false)
        .await
        .unwrap();
    let done = graph
        .recover(&runtime, "r-10")
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(done.approved, Some(false));
}

/// On the memory store, signals live only in the mailbox. One sent while the run that waits
/// for it is still held (its node suspended, a sibling still running) finds no run to wake;
/// the run wakes once its execution lets go of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_sent_while_its_run_is_still_held_wakes_it_once_let_go() {
    let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel::<()>();
    let finish = Arc::new(tokio::sync::Notify::new());
    let release = Arc::clone(&finish);
    let graph = Graph::new("siblings")
        .node_fn("wait", |n: &mut u32, ctx| {
            Box::pin(async move {
                let add: u32 = ctx.wait_for_signal("go").await?;
                *n += add;
                Ok(())
            })
        })
        .node_fn("slow", move |_n: &mut u32, _ctx| {
            let (entered, finish) = (entered_tx.clone(), Arc::clone(&release));
            Box::pin(async move {
                let _ = entered.send(());
                finish.notified().await;
                Ok(())
            })
        })
        .edge(START, "wait")
        .edge(START, "slow")
        .edge("wait", END)
        .edge("slow", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let worker = Worker::builder(&runtime)
        .graph(&graph)
        .park_grace(Duration::ZERO)
        .build()
        .start();
    runtime.submit("siblings", "s", 0).await.unwrap();
    entered.recv().await.unwrap();
    // `wait` has nothing to park on (no grace): it suspends while `slow` holds the step.
    tokio::time::sleep(Duration::from_millis(50)).await;
    runtime.signal("s", "go", 5).await.unwrap();
    finish.notify_one();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let record = loop {
        let record = runtime.run("s").await.unwrap().record;
        if record.state.is_finished() || tokio::time::Instant::now() > deadline {
            break record;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(record.state, RunState::Completed, "{record:?}");
    worker.shutdown().await.unwrap();
    assert_eq!(runtime.run("s").await.unwrap().state, json!(5));
}

/// The same when the execution that held the run lets go of it some other way than by
/// suspending: a direct resume whose resumed step failed leaves the run interrupted, and a
/// signal sent meanwhile for a sibling's wait carries it on once it is let go (it stayed in
/// the mailbox, and the run waited for it for ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_sent_while_a_failing_resume_holds_its_run_wakes_it() {
    let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel::<()>();
    let finish = Arc::new(tokio::sync::Notify::new());
    let release = Arc::clone(&finish);
    let graph = Graph::new("asks-and-waits")
        .node_fn("wait", |n: &mut u32, ctx| {
            Box::pin(async move {
                let add: u32 = ctx.wait_for_signal("go").or_suspend().await?;
                *n += add;
                Ok(())
            })
        })
        .node_fn("ask", move |_n: &mut u32, ctx| {
            let (entered, finish) = (entered_tx.clone(), Arc::clone(&release));
            Box::pin(async move {
                let _answer: u32 = ctx.interrupt("how many?")?;
                let _ = entered.send(());
                finish.notified().await;
                Err("the answer is refused".into())
            })
        })
        .edge(START, "wait")
        .edge(START, "ask")
        .edge("wait", END)
        .edge("ask", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let worker = Worker::builder(&runtime)
        .graph(&graph)
        .park_grace(Duration::ZERO)
        .build()
        .start();
    let first = graph.run(&runtime, "s", 0).await.unwrap();
    assert_eq!(first.interrupts().len(), 2, "{first:?}");
    let resuming = {
        let (graph, runtime) = (graph.clone(), runtime.clone());
        tokio::spawn(async move { graph.resume(&runtime, "s", 3u32).await })
    };
    let entering = tokio::time::timeout(Duration::from_secs(10), entered.recv()).await;
    assert!(entering.is_ok(), "{:?}", resuming.await);
    // `wait` has suspended again (nothing queued) while `ask` holds the step.
    tokio::time::sleep(Duration::from_millis(50)).await;
    runtime.signal("s", "go", 5).await.unwrap();
    finish.notify_one();
    let resumed = resuming.await.unwrap().unwrap();
    assert!(matches!(resumed, RunOutcome::Failed { .. }), "{resumed:?}");
    // The worker carries the run on with the signal: only `ask`'s question is left.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let record = loop {
        let record = runtime.run("s").await.unwrap().record;
        if record.waiting_on == ["loomflow:resume"] || tokio::time::Instant::now() > deadline {
            break record;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(record.waiting_on, ["loomflow:resume"], "{record:?}");
    worker.shutdown().await.unwrap();
}

/// On the memory store the worker learns of signals from the sends in its process: every
/// run signalled before one `run_until_idle` is carried on by that call, not only the first.
#[tokio::test]
async fn in_memory_run_until_idle_carries_on_every_signalled_run() {
    let runtime = Runtime::in_memory();
    let worker = Worker::builder(&runtime)
        .graph(&refund_graph())
        .park_grace(Duration::ZERO)
        .build();
    let orders = ["m-1", "m-2", "m-3"];
    for order in orders {
        runtime.submit("refund", order, input(order)).await.unwrap();
    }
    assert_eq!(worker.run_until_idle().await.unwrap(), 3);
    for order in orders {
        runtime.signal(order, "approve", true).await.unwrap();
    }
    assert_eq!(worker.run_until_idle().await.unwrap(), 3);
    for order in orders {
        assert_eq!(
            state_of(&runtime, order).await,
            RunState::Completed,
            "{order}"
        );
    }
}

/// The system clock, counting its reads: a worker's loop reads it once or twice a turn.
#[derive(Debug, Default)]
struct CountingClock(std::sync::atomic::AtomicUsize);

impl loomflow::runtime::Clock for CountingClock {
    fn now(&self) -> std::time::SystemTime {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        std::time::SystemTime::now()
    }
}

/// How many times a worker whose one slot is taken (its run holds it for five seconds,
/// with no checkpoint in between) reads the clock in two seconds.
async fn clock_reads_with_every_slot_taken(runtime: &Runtime, clock: &CountingClock) -> usize {
    let busy = Graph::new("busy")
        .node_fn("work", |refund: &mut Refund, _ctx| {
            Box::pin(async move {
                tokio::time::sleep(Duration::from_secs(5)).await;
                refund.reminded = true;
                Ok(())
            })
        })
        .edge(START, "work")
        .edge("work", END)
        .compile()
        .unwrap();
    let handle = Worker::builder(runtime)
        .graph(&busy)
        .concurrency(1)
        .poll_interval(Duration::from_millis(100))
        .build()
        .start();
    runtime.submit("busy", "b-1", input("b-1")).await.unwrap();
    wait_for(runtime, "b-1", RunState::Running).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = clock.0.load(std::sync::atomic::Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let reads = clock.0.load(std::sync::atomic::Ordering::Relaxed) - before;
    drop(handle);
    reads
}

/// A worker whose every slot is taken naps (a run ending wakes it): it does not turn every
/// millisecond because its own claim changed the store. About 20 turns in two seconds with
/// a 100 ms poll interval; it turned about 900 times before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_with_every_slot_taken_does_not_spin() {
    let clock = Arc::new(CountingClock::default());
    let runtime = Runtime::builder().clock(Arc::clone(&clock)).build();
    let reads = clock_reads_with_every_slot_taken(&runtime, &clock).await;
    assert!(reads < 100, "memory: {reads} clock reads in 2 s");
    let db = TempDb::new("full");
    let clock = Arc::new(CountingClock::default());
    let runtime = Runtime::builder()
        .store(SqliteStore::open(&db.0).unwrap())
        .clock(Arc::clone(&clock))
        .build();
    let reads = clock_reads_with_every_slot_taken(&runtime, &clock).await;
    assert!(reads < 100, "SQLite: {reads} clock reads in 2 s");
}

/// An idle worker on the memory store changes nothing in it: its looks that claim nothing
/// are not changes it would look at again every poll interval (scanning every run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_an_idle_worker_changes_nothing_in_the_store() {
    let runtime = Runtime::in_memory();
    let handle = Worker::builder(&runtime)
        .graph(&refund_graph())
        .park_grace(Duration::ZERO)
        .poll_interval(Duration::from_millis(20))
        .build()
        .start();
    runtime.submit("refund", "r-1", input("r-1")).await.unwrap();
    wait_for(&runtime, "r-1", RunState::Waiting).await;
    // Past the look that the suspension's own write prompts.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = runtime.store().change_counter();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        runtime.store().change_counter(),
        before,
        "25 poll intervals"
    );
    // Still awake: a signal carries the run on.
    runtime.signal("r-1", "approve", true).await.unwrap();
    wait_for(&runtime, "r-1", RunState::Completed).await;
    handle.shutdown().await.unwrap();
}

/// Two workers in one process, each with graphs of its own, on the memory store (which keeps
/// signals only in the mailbox): a signal reaches the worker of its run's graph, even when
/// the other worker looks first.
#[tokio::test]
async fn in_memory_a_signal_reaches_the_worker_of_its_runs_graph_among_several() {
    let runtime = Runtime::in_memory();
    let refunds = Worker::builder(&runtime)
        .graph(&refund_graph())
        .park_grace(Duration::ZERO)
        .build();
    let reminders = Worker::builder(&runtime).graph(&reminder_graph()).build();
    runtime.submit("refund", "r-1", input("r-1")).await.unwrap();
    assert_eq!(refunds.run_until_idle().await.unwrap(), 1);
    assert_eq!(state_of(&runtime, "r-1").await, RunState::Waiting);
    runtime.signal("r-1", "approve", true).await.unwrap();
    assert_eq!(reminders.run_until_idle().await.unwrap(), 0, "not its run");
    assert_eq!(refunds.run_until_idle().await.unwrap(), 1);
    assert_eq!(state_of(&runtime, "r-1").await, RunState::Completed);
}

/// On the memory store, signals live only in the mailbox, and nothing tells the workers of
/// a signal sent while none exists. A worker built afterwards (one per pass, as a job in a
/// long-lived process might) still finds the runs signalled before it, inline or started.
#[tokio::test]
async fn in_memory_a_signal_sent_while_no_worker_exists_is_seen_by_the_next_worker() {
    let runtime = Runtime::in_memory();
    let graph = refund_graph();
    let worker = || {
        Worker::builder(&runtime)
            .graph(&graph)
            .poll_interval(Duration::from_secs(3_600))
            .park_grace(Duration::ZERO)
            .build()
    };
    for order in ["p-1", "p-2"] {
        runtime.submit("refund", order, input(order)).await.unwrap();
    }
    assert_eq!(worker().run_until_idle().await.unwrap(), 2);
    assert_eq!(state_of(&runtime, "p-1").await, RunState::Waiting);

    runtime.signal("p-1", "approve", true).await.unwrap();
    runtime.signal("p-2", "approve", false).await.unwrap();
    assert_eq!(worker().run_until_idle().await.unwrap(), 2);
    assert_eq!(state_of(&runtime, "p-1").await, RunState::Completed);
    assert_eq!(state_of(&runtime, "p-2").await, RunState::Completed);

    runtime.submit("refund", "p-3", input("p-3")).await.unwrap();
    assert_eq!(worker().run_until_idle().await.unwrap(), 1);
    runtime.signal("p-3", "approve", true).await.unwrap();
    // Started, with a poll far longer than the test: it finds the run when it starts.
    let handle = worker().start();
    wait_for(&runtime, "p-3", RunState::Completed).await;
    handle.shutdown().await.unwrap();
}

/// A signal of a name the run does not wait for leaves it suspended: the worker does not
/// execute it (its node does not run again), and the signal it waits for still wakes it.
/// An interrupted run waits for a resume request, not for a signal.
async fn a_signal_of_another_name_leaves_a_suspended_run_alone(runtime: Runtime) {
    let entered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&entered);
    let graph = Graph::new("counted")
        .node_fn("approval", move |refund: &mut Refund, ctx| {
            let counted = Arc::clone(&counted);
            Box::pin(async move {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                refund.approved = Some(ctx.wait_for_signal::<bool>("approve").await?);
                Ok(())
            })
        })
        .edge(START, "approval")
        .edge("approval", END)
        .compile()
        .unwrap();
    let entries = || entered.load(std::sync::atomic::Ordering::SeqCst);
    let worker = Worker::builder(&runtime)
        .graph(&graph)
        .graph(&review_graph())
        .park_grace(Duration::ZERO)
        .build();
    runtime
        .submit("counted", "n-1", input("n-1"))
        .await
        .unwrap();
    runtime.submit("review", "n-2", input("n-2")).await.unwrap();
    assert_eq!(worker.run_until_idle().await.unwrap(), 2);
    assert_eq!(state_of(&runtime, "n-1").await, RunState::Waiting);
    assert_eq!(state_of(&runtime, "n-2").await, RunState::Interrupted);

    runtime.signal("n-1", "unrelated", 1).await.unwrap();
    runtime.signal("n-2", "approve", true).await.unwrap();
    assert_eq!(
        (worker.run_until_idle().await.unwrap(), entries()),
        (0, 1),
        "nothing waits for those signals"
    );
    assert_eq!(state_of(&runtime, "n-1").await, RunState::Waiting);
    assert_eq!(runtime.run("n-1").await.unwrap().record.attempts, 1);
    assert_eq!(state_of(&runtime, "n-2").await, RunState::Interrupted);

    runtime.signal("n-1", "approve", true).await.unwrap();
    runtime.request_resume("n-2", false).await.unwrap();
    assert_eq!(worker.run_until_idle().await.unwrap(), 2);
    assert_eq!(entries(), 2);
    assert_eq!(state_of(&runtime, "n-1").await, RunState::Completed);
    assert_eq!(state_of(&runtime, "n-2").await, RunState::Completed);
}

#[tokio::test]
async fn in_memory_a_signal_of_another_name_leaves_a_suspended_run_alone() {
    a_signal_of_another_name_leaves_a_suspended_run_alone(Runtime::in_memory()).await;
}

#[tokio::test]
async fn on_sqlite_a_signal_of_another_name_leaves_a_suspended_run_alone() {
    let db = TempDb::new("other-name");
    a_signal_of_another_name_leaves_a_suspended_run_alone(db.runtime()).await;
}

/// `ask` asks twice in one node; the answers make 1 × first + 100 × second.
fn asking_twice_graph() -> CompiledGraph<u32> {
    Graph::new("twice")
        .node_fn("ask", |n: &mut u32, ctx| {
            Box::pin(async move {
                let first: u32 = ctx.interrupt(json!("first?"))?;
                let second: u32 = ctx.interrupt(json!("second?"))?;
                *n = first + 100 * second;
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
        .unwrap()
}

/// Two requests sent for one question (a correction): the newest answers it, and neither
/// is left over to answer the next question, which waits for a request of its own.
#[tokio::test]
async fn of_two_resume_requests_for_one_question_the_newest_answers_it() {
    let db = TempDb::new("newest-request");
    let runtime = db.runtime();
    let graph = asking_twice_graph();
    let worker = Worker::builder(&runtime).graph(&graph).build();
    runtime.submit("twice", "t", 0).await.unwrap();
    worker.run_until_idle().await.unwrap();
    assert_eq!(
        runtime.pending_interrupts("t").await.unwrap()[0].id,
        "ask#0"
    );

    let operator = db.runtime();
    operator.request_resume("t", 1).await.unwrap();
    operator.request_resume("t", 2).await.unwrap();
    worker.run_until_idle().await.unwrap();
    let pending = runtime.pending_interrupts("t").await.unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(
        pending[0].id, "ask#1",
        "the second question waits for its own answer"
    );

    operator.request_resume("t", 3).await.unwrap();
    worker.run_until_idle().await.unwrap();
    assert_eq!(state_of(&runtime, "t").await, RunState::Completed);
    let answered: u32 = runtime.get_state("t").await.unwrap().unwrap();
    assert_eq!(
        answered, 302,
        "2 (the newest) for the first, 3 for the second"
    );
}

/// A worker that shuts down while a resumed node runs lets go of nothing it cannot give
/// back: the request it took stays with the run (its lease runs out instead), and the next
/// worker resumes with the same value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_request_taken_by_a_worker_that_shuts_down_is_applied_by_the_next() {
    static HANG: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);
    let db = TempDb::new("request-shutdown");
    let runtime = Runtime::builder()
        .store(SqliteStore::open(&db.0).unwrap())
        .lease(Duration::from_millis(300))
        .build();
    let (got_tx, mut got) = tokio::sync::mpsc::unbounded_channel::<u32>();
    let graph = Graph::new("hang")
        .node_fn("ask", move |n: &mut u32, ctx| {
            let got = got_tx.clone();
            Box::pin(async move {
                let answer: u32 = ctx.interrupt(json!("how many?"))?;
                let _ = got.send(answer);
                if HANG.load(std::sync::atomic::Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
                *n = answer;
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
        .unwrap();
    let interrupted = graph.invoke(&runtime, "t", 0).await.unwrap();
    assert_eq!(interrupted.interrupts().len(), 1);
    runtime.request_resume("t", 7).await.unwrap();

    let first = Worker::builder(&runtime)
        .graph(&graph)
        .poll_interval(Duration::from_millis(20))
        .shutdown_timeout(Duration::from_millis(50))
        .build()
        .start();
    assert_eq!(got.recv().await, Some(7));
    // The node never finishes: shutting down aborts it.
    first.shutdown().await.unwrap();
    HANG.store(false, std::sync::atomic::Ordering::SeqCst);

    let second = Worker::builder(&runtime)
        .graph(&graph)
        .poll_interval(Duration::from_millis(20))
        .build()
        .start();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while state_of(&runtime, "t").await != RunState::Completed {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the request was lost"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    second.shutdown().await.unwrap();
    let answered: u32 = runtime.get_state("t").await.unwrap().unwrap();
    assert_eq!(answered, 7);
}

/// A wait that timed out under a worker times out again when its node runs again for the
/// same step (here, to be resumed from an interrupt it raised on the timeout branch): a
/// signal that came after the deadline does not send the node down the other branch.
#[tokio::test]
async fn a_wait_that_timed_out_times_out_again_when_its_node_runs_again() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let clock = Arc::new(ManualClock::new(std::time::SystemTime::now()));
    let runtime = Runtime::builder().clock(Arc::clone(&clock)).build();
    let payments = Arc::new(AtomicU32::new(0));
    let paid = Arc::clone(&payments);
    let graph: CompiledGraph<Vec<String>> = Graph::new("approval")
        .node_fn("ask", move |log: &mut Vec<String>, ctx| {
            let paid = Arc::clone(&paid);
            Box::pin(async move {
                let approved = ctx
                    .wait_for_signal::<bool>("approve")
                    .timeout(Duration::from_secs(3_600))
                    .await;
                match approved {
                    Ok(_) => {
                        paid.fetch_add(1, Ordering::SeqCst);
                        log.push("paid".into());
                    }
                    Err(RunError::Signal(SignalError::Timeout { .. })) => {
                        let answer: String = ctx.interrupt(json!({ "escalated": true }))?;
                        log.push(format!("escalated: {answer}"));
                    }
                    Err(other) => return Err(other.into()),
                }
                // And a poll that found nothing finds nothing again.
                let late: Option<bool> = ctx.poll_signal("late").await?;
                log.push(format!("late: {late:?}"));
                let _: String = ctx.interrupt(json!({ "done?": true }))?;
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
        .unwrap();
    let worker = Worker::builder(&runtime)
        .graph(&graph)
        .park_grace(Duration::ZERO)
        .build();
    runtime
        .submit("approval", "t", Vec::<String>::new())
        .await
        .unwrap();
    worker.run_until_idle().await.unwrap();
    clock.advance(Duration::from_secs(3_601));
    worker.run_until_idle().await.unwrap();
    assert_eq!(
        runtime.run("t").await.unwrap().record.state,
        RunState::Interrupted
    );
    // The approval comes after the deadline; then a person answers the escalation.
    runtime.signal("t", "approve", true).await.unwrap();
    let outcome = graph.resume(&runtime, "t", "yes").await.unwrap();
    assert_eq!(outcome.interrupts().len(), 1, "{outcome:?}");
    // The poll found nothing; what is sent now comes after it.
    runtime.signal("t", "late", true).await.unwrap();
    let log = graph
        .resume(&runtime, "t", "done")
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(log, ["escalated: yes", "late: None"]);
    assert_eq!(payments.load(Ordering::SeqCst), 0);
}

/// A run parked inside a node (a signal wait, an in-memory sleep, inside a subgraph too)
/// stops when it is cancelled from this process, as the run is cancelled between steps:
/// its row says cancelled, and the steps after it never run.
#[tokio::test]
async fn cancel_reaches_a_run_waiting_inside_a_node() {
    fn waiting(kind: &'static str) -> CompiledGraph<u32> {
        Graph::new(kind)
            .node_fn("wait", move |n: &mut u32, ctx| {
                Box::pin(async move {
                    match kind {
                        "signal" => *n += ctx.wait_for_signal::<u32>("go").await?,
                        _ => ctx.sleep(Duration::from_secs(3_600)).await?,
                    }
                    Ok(())
                })
            })
            .node_sync("after", |n: &mut u32| *n += 100)
            .edge(START, "wait")
            .edge("wait", "after")
            .edge("after", END)
            .compile()
            .unwrap()
    }
    let db = loomflow_tests::TempDb::new("cancel-in-node");
    let sqlite = Runtime::with_store(SqliteStore::open(db.path()).unwrap());
    let inner = waiting("signal");
    let nested: CompiledGraph<u32> = Graph::new("outer")
        .subgraph("inner", inner, |n: &u32| *n, |n: &mut u32, m: u32| *n = m)
        .edge(START, "inner")
        .edge("inner", END)
        .compile()
        .unwrap();
    let cases = [
        ("signal", waiting("signal"), Runtime::in_memory()),
        ("sleep", waiting("sleep"), Runtime::in_memory()),
        ("sqlite signal", waiting("signal"), sqlite),
        ("subgraph", nested, Runtime::in_memory()),
    ];
    for (label, graph, runtime) in cases {
        let run = graph.start(&runtime, "t", 0);
        // Until the run is parked in its node.
        while runtime.run("t").await.is_err() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        runtime.cancel("t").await.unwrap();
        let stopped = tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .unwrap_or_else(|_| panic!("{label}: the run did not stop"));
        assert!(
            matches!(stopped, Err(RunError::Cancelled { .. })),
            "{label}: {stopped:?}"
        );
        let row = runtime.run("t").await.unwrap().record;
        assert_eq!(row.state, RunState::Cancelled, "{label}");
    }
}

/// Sends money.
#[tool(approval)]
fn pay_out(amount: u32) -> String {
    format!("paid {amount}")
}

/// Cancel also reaches an `Exit` run that has written nothing yet (its row still says the
/// thread's run before it), and a node waiting for a tool approval in memory.
#[tokio::test]
async fn cancel_reaches_an_exit_run_and_a_wait_for_an_approval() {
    use loomflow::model::ToolCall;
    use loomflow::tool::{DispatchContext, SignalApprover};
    let runtime = Runtime::in_memory();
    let waits = Graph::new("waits")
        .node_fn("wait", |n: &mut u32, ctx| {
            Box::pin(async move {
                *n += ctx.wait_for_signal::<u32>("go").await?;
                Ok(())
            })
        })
        .edge(START, "wait")
        .edge("wait", END)
        .compile()
        .unwrap();
    runtime.signal("t", "go", 1u32).await.unwrap();
    assert_eq!(
        waits
            .invoke(&runtime, "t", 0)
            .await
            .unwrap()
            .completed()
            .unwrap(),
        1
    );
    let exit = waits
        .run(&runtime, "t", 0)
        .durability(Durability::Exit)
        .start();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let row = runtime.cancel("t").await.unwrap();
    assert_eq!((row.run, row.state), (2, RunState::Cancelled));
    let stopped = tokio::time::timeout(Duration::from_secs(5), exit)
        .await
        .unwrap();
    assert!(
        matches!(stopped, Err(RunError::Cancelled { .. })),
        "{stopped:?}"
    );

    let host = Arc::new(
        ToolHost::new()
            .with(pay_out)
            .approval_handler(SignalApprover::new().timeout(Duration::from_secs(600))),
    );
    let approving: CompiledGraph<u32> = Graph::new("approving")
        .node_fn("tools", move |n: &mut u32, ctx| {
            let host = Arc::clone(&host);
            Box::pin(async move {
                let calls = [ToolCall::new("call-1", "pay_out", json!({ "amount": 12 }))];
                let dispatch = DispatchContext::new(ctx.thread())
                    .runtime(ctx.runtime())
                    .node(ctx);
                *n = u32::try_from(host.dispatch(&calls, dispatch).await?.len()).unwrap();
                Ok(())
            })
        })
        .edge(START, "tools")
        .edge("tools", END)
        .compile()
        .unwrap();
    let run = approving.start(&runtime, "a", 0);
    while runtime.pending_approvals("a").await.unwrap().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    runtime.cancel("a").await.unwrap();
    let stopped = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .unwrap();
    assert!(
        matches!(stopped, Err(RunError::Cancelled { .. })),
        "{stopped:?}"
    );
    assert_eq!(
        runtime.run("a").await.unwrap().record.state,
        RunState::Cancelled
    );
}

/// A resume request queued for a run that is then cancelled answers nothing afterwards: the
/// thread's next run, stopped at the same question, waits for a request of its own.
#[tokio::test]
async fn a_resume_request_of_a_cancelled_run_does_not_answer_the_next_run() {
    let db = TempDb::new("request-cancelled");
    let runtime = db.runtime();
    let graph = asking_twice_graph();
    let worker = Worker::builder(&runtime).graph(&graph).build();
    runtime.submit("twice", "t", 0).await.unwrap();
    worker.run_until_idle().await.unwrap();
    runtime.request_resume("t", 1).await.unwrap();
    runtime.cancel("t").await.unwrap();
    assert_eq!(state_of(&runtime, "t").await, RunState::Cancelled);

    runtime.submit("twice", "t", 0).await.unwrap();
    worker.run_until_idle().await.unwrap();
    let pending = runtime.pending_interrupts("t").await.unwrap();
    assert_eq!(pending.len(), 1, "the new run still asks: {pending:?}");
    assert_eq!(pending[0].id, "ask#0");
}

/// Runs signalled while every slot was taken, and not claimed when the worker shut down,
/// are carried on by its next start: a store that keeps no signals cannot point them out.
/// (`b-1` holds the only slot while `o-1` and `o-2` are signalled; once it ends, `o-1` is
/// claimed and holds the slot in turn, and `o-2` waits in the worker's queue.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signalled_runs_not_claimed_at_shutdown_are_carried_on_by_the_next_start() {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    static HOLD_BUSY: AtomicBool = AtomicBool::new(true);
    static HOLD_GATE: AtomicBool = AtomicBool::new(true);
    async fn hold(flag: &AtomicBool) {
        while flag.load(SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let runtime = Runtime::in_memory();
    let busy = Graph::new("busy")
        .node_fn("hold", |_: &mut u32, _ctx| {
            Box::pin(async {
                hold(&HOLD_BUSY).await;
                Ok(())
            })
        })
        .edge(START, "hold")
        .edge("hold", END)
        .compile()
        .unwrap();
    let gate = Graph::new("gate")
        .node_fn("gate", |_: &mut u32, ctx| {
            Box::pin(async move {
                let _: bool = ctx.wait_for_signal("go").await?;
                hold(&HOLD_GATE).await;
                Ok(())
            })
        })
        .edge(START, "gate")
        .edge("gate", END)
        .compile()
        .unwrap();
    let worker = Worker::builder(&runtime)
        .graph(&gate)
        .graph(&busy)
        .concurrency(1)
        .poll_interval(Duration::from_secs(3_600))
        .park_grace(Duration::from_millis(10))
        .shutdown_timeout(Duration::from_millis(50))
        .build();
    let handle = worker.start();
    for thread in ["o-1", "o-2"] {
        runtime.submit("gate", thread, 0).await.unwrap();
        wait_for(&runtime, thread, RunState::Waiting).await;
    }
    runtime.submit("busy", "b-1", 0).await.unwrap();
    wait_for(&runtime, "b-1", RunState::Running).await;
    for thread in ["o-1", "o-2"] {
        runtime.signal(thread, "go", true).await.unwrap();
    }
    HOLD_BUSY.store(false, SeqCst);
    wait_for(&runtime, "b-1", RunState::Completed).await;
    // Claimed: it holds the slot (its row says so only by its lease until it writes).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while runtime
        .run("o-1")
        .await
        .unwrap()
        .record
        .lease_owner
        .is_none()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "o-1 was never claimed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    handle.shutdown().await.unwrap();
    assert_eq!(state_of(&runtime, "o-2").await, RunState::Waiting);

    HOLD_GATE.store(false, SeqCst);
    let handle = worker.start();
    for thread in ["o-1", "o-2"] {
        wait_for(&runtime, thread, RunState::Completed).await;
    }
    handle.shutdown().await.unwrap();
}

/// A run resumed directly (`graph.resume`) while a resume request waits for it: the direct
/// value answers the question, and the request, answering the same question, is spent with
/// it instead of answering the run's next question, in this process or in a worker's.
#[tokio::test]
async fn a_direct_resume_spends_the_resume_requests_queued_for_its_question() {
    for memory in [true, false] {
        let db = TempDb::new("request-superseded");
        let runtime = if memory {
            Runtime::in_memory()
        } else {
            db.runtime()
        };
        let graph = asking_twice_graph();
        let worker = Worker::builder(&runtime).graph(&graph).build();
        let out = graph.invoke(&runtime, "t", 0).await.unwrap();
        assert_eq!(out.interrupts()[0].id, "ask#0");
        runtime.request_resume("t", 7).await.unwrap();

        let out = graph.resume(&runtime, "t", 3).await.unwrap();
        assert_eq!(out.interrupts()[0].id, "ask#1", "memory {memory}");
        worker.run_until_idle().await.unwrap();
        let pending = runtime.pending_interrupts("t").await.unwrap();
        assert_eq!(
            pending.len(),
            1,
            "the second question still waits: {pending:?}"
        );
        assert_eq!(pending[0].id, "ask#1");

        let done = graph
            .resume(&runtime, "t", 5)
            .await
            .unwrap()
            .completed()
            .unwrap();
        assert_eq!(done, 503, "memory {memory}");
    }
}

/// A resume request whose value the resumed step fails with (here, an amount over the
/// limit) is refused: the run stays interrupted on the same question, and a corrected
/// request, from the CLI or HTTP, carries it on. In every durability mode.
#[tokio::test]
async fn a_resume_request_the_resumed_step_fails_with_leaves_the_run_waiting() {
    for durability in [Durability::Sync, Durability::Exit] {
        let db = TempDb::new("request-fails-step");
        let runtime = Runtime::builder()
            .store(SqliteStore::open(&db.0).unwrap())
            .durability(durability)
            .build();
        let graph = Graph::new("limit")
            .node_fn("amount", |n: &mut u32, ctx| {
                Box::pin(async move {
                    let amount: u32 = ctx.interrupt(json!("amount?"))?;
                    if amount > 100 {
                        return Err(format!("{amount} is over the limit of 100").into());
                    }
                    *n = amount;
                    Ok(())
                })
            })
            .edge(START, "amount")
            .edge("amount", END)
            .compile()
            .unwrap();
        let worker = Worker::builder(&runtime).graph(&graph).build();
        runtime.submit("limit", "t", 0).await.unwrap();
        worker.run_until_idle().await.unwrap();

        runtime.request_resume("t", 500).await.unwrap();
        worker.run_until_idle().await.unwrap();
        assert_eq!(
            state_of(&runtime, "t").await,
            RunState::Interrupted,
            "{durability:?}"
        );
        let pending = runtime.pending_interrupts("t").await.unwrap();
        assert_eq!(pending[0].id, "amount#0", "{durability:?}");

        runtime.request_resume("t", 50).await.unwrap();
        worker.run_until_idle().await.unwrap();
        assert_eq!(
            state_of(&runtime, "t").await,
            RunState::Completed,
            "{durability:?}"
        );
        assert_eq!(runtime.get_state::<u32>("t").await.unwrap(), Some(50));
    }
}

/// A call past its approver's timeout no longer waits for a decision: it is not listed, and
/// a decision for it is refused (the run denies it when carried on), rather than accepted
/// and then ignored as late.
#[tokio::test]
async fn an_approval_past_its_timeout_is_not_listed_nor_decided() {
    use loomflow::model::ToolCall;
    use loomflow::tool::{ApprovalDecision, DispatchContext, SignalApprover};
    let clock = Arc::new(ManualClock::new(std::time::SystemTime::now()));
    let runtime = Runtime::builder().clock(Arc::clone(&clock)).build();
    let host = Arc::new(
        ToolHost::new()
            .with(pay_out)
            .approval_handler(SignalApprover::new().timeout(Duration::from_secs(600))),
    );
    let approving: CompiledGraph<Vec<String>> = Graph::new("approving")
        .node_fn("tools", move |out: &mut Vec<String>, ctx| {
            let host = Arc::clone(&host);
            Box::pin(async move {
                let calls = [ToolCall::new("call-1", "pay_out", json!({ "amount": 12 }))];
                let dispatch = DispatchContext::new(ctx.thread())
                    .runtime(ctx.runtime())
                    .node(ctx);
                let outcomes = host.dispatch(&calls, dispatch).await?;
                *out = outcomes.iter().map(|o| format!("{o:?}")).collect();
                Ok(())
            })
        })
        .edge(START, "tools")
        .edge("tools", END)
        .compile()
        .unwrap();
    let worker = Worker::builder(&runtime)
        .graph(&approving)
        .park_grace(Duration::ZERO)
        .build();
    runtime
        .submit("approving", "a", Vec::<String>::new())
        .await
        .unwrap();
    worker.run_until_idle().await.unwrap();
    assert_eq!(runtime.pending_approvals("a").await.unwrap().len(), 1);

    clock.advance(Duration::from_secs(601));
    assert_eq!(runtime.pending_approvals("a").await.unwrap(), []);
    let late = runtime
        .decide_approval("a", "call-1", ApprovalDecision::Allow)
        .await;
    assert!(
        matches!(
            late,
            Err(loomflow::Error::Runtime(
                RuntimeError::NoPendingApproval { .. }
            ))
        ),
        "{late:?}"
    );
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    let out: Vec<String> = runtime.get_state("a").await.unwrap().unwrap();
    assert!(out[0].contains("no approval decision within"), "{out:?}");
}

/// A deploy that changed a registered graph: by default a worker fails the runs the old
/// graph suspended (`GraphChanged`); one built with `allow_graph_change(true)` carries them
/// on with the new graph.
#[tokio::test]
async fn a_worker_allowed_a_graph_change_carries_on_runs_the_old_graph_suspended() {
    let runtime = Runtime::in_memory();
    let before = Worker::builder(&runtime).graph(&refund_graph()).build();
    for order in ["o-changed", "o-allowed"] {
        runtime.submit("refund", order, input(order)).await.unwrap();
    }
    before.run_until_idle().await.unwrap();
    for order in ["o-changed", "o-allowed"] {
        assert_eq!(state_of(&runtime, order).await, RunState::Waiting);
    }
    drop(before);
    // The new graph: a node added after the wait.
    let changed = Graph::new("refund")
        .node_fn("approval", |refund: &mut Refund, ctx| {
            Box::pin(async move {
                refund.approved = Some(ctx.wait_for_signal::<bool>("approve").await?);
                Ok(())
            })
        })
        .node_sync("remind", |refund: &mut Refund| refund.reminded = true)
        .edge(START, "approval")
        .edge("approval", "remind")
        .edge("remind", END)
        .compile()
        .unwrap();

    runtime.signal("o-changed", "approve", true).await.unwrap();
    let strict = Worker::builder(&runtime).graph(&changed).build();
    strict.run_until_idle().await.unwrap();
    let refused = runtime.run("o-changed").await.unwrap().record;
    assert_eq!(refused.state, RunState::Failed);
    assert!(refused.error.unwrap().contains("changed since"));
    drop(strict);

    runtime.signal("o-allowed", "approve", true).await.unwrap();
    let allowing = Worker::builder(&runtime)
        .graph(&changed)
        .allow_graph_change(true)
        .build();
    allowing.run_until_idle().await.unwrap();
    let done: Refund = runtime.get_state("o-allowed").await.unwrap().unwrap();
    assert_eq!((done.approved, done.reminded), (Some(true), true));
    assert_eq!(state_of(&runtime, "o-allowed").await, RunState::Completed);
}

/// A run whose checkpointed state the deployed state type no longer reads (a field it now
/// requires) is reported with why, as its row has it: not only "json conversion failed".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_says_why_a_checkpoint_does_not_read() {
    #[derive(Clone, Default, Serialize, Deserialize)]
    struct Before {
        n: u32,
    }
    #[derive(Clone, Default, Serialize, Deserialize)]
    struct After {
        n: u32,
        priority: String,
    }
    /// `followup`: waits for the signal `go`, over a state of type `S`.
    fn followup<S: loomflow::graph::State>(set: fn(&mut S, u32)) -> CompiledGraph<S> {
        Graph::new("followup")
            .node_fn("wait", move |s: &mut S, ctx| {
                Box::pin(async move {
                    set(s, ctx.wait_for_signal("go").or_suspend().await?);
                    Ok(())
                })
            })
            .edge(START, "wait")
            .edge("wait", END)
            .compile()
            .unwrap()
    }
    let runtime = Runtime::in_memory();
    let before = followup(|s: &mut Before, n| s.n = n);
    let after = followup(|s: &mut After, n| s.n = n);
    before
        .invoke(&runtime, "t", Before::default())
        .await
        .unwrap();
    runtime.signal("t", "go", 1).await.unwrap();
    let reports = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&reports);
    let worker = Worker::builder(&runtime)
        .graph(&after)
        .on_finished(move |report| seen.lock().unwrap().push(report.error.clone()))
        .build();
    worker.run_until_idle().await.unwrap();
    let reports = reports.lock().unwrap().clone();
    let [Some(error)] = &reports[..] else {
        panic!("{reports:?}")
    };
    assert!(error.contains("missing field `priority`"), "{error}");
    // Failed, it waits for nothing: its interrupted checkpoint's wait is not listed.
    let info = runtime.run("t").await.unwrap();
    assert_eq!(info.record.state, RunState::Failed);
    assert!(info.interrupts.is_empty(), "{:?}", info.interrupts);
    assert!(runtime.pending_interrupts("t").await.unwrap().is_empty());
}

/// A stored state whose field changed type is refused naming the field, by a recover and by
/// `get_state`: serde's own message ("invalid type: integer `1`, expected a string") names
/// none.
#[tokio::test]
async fn a_stored_state_that_no_longer_fits_names_its_field() {
    #[derive(Clone, Default, Serialize, Deserialize)]
    struct Before {
        order: Order<u32>,
    }
    #[derive(Clone, Debug, Default, Serialize, Deserialize)]
    struct After {
        order: Order<String>,
    }
    #[derive(Clone, Debug, Default, Serialize, Deserialize)]
    struct Order<T> {
        amount: T,
    }
    fn asking<S: loomflow::graph::State>() -> CompiledGraph<S> {
        Graph::new("ask")
            .node_fn("ask", |_: &mut S, ctx| {
                Box::pin(async move {
                    let _: bool = ctx.interrupt("ok?")?;
                    Ok(())
                })
            })
            .edge(START, "ask")
            .edge("ask", END)
            .compile()
            .unwrap()
    }
    let runtime = Runtime::in_memory();
    let before = Before {
        order: Order { amount: 1 },
    };
    asking().invoke(&runtime, "t", before).await.unwrap();
    let error = asking::<After>()
        .resume(&runtime, "t", true)
        .await
        .unwrap_err();
    let error = loomflow::ErrorChain(&error).to_string();
    assert!(
        error.contains("(graph ask), at order.amount: invalid type"),
        "{error}"
    );
    let error = runtime
        .get_state::<After>("t")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("state of thread t, at order.amount"),
        "{error}"
    );
}

/// `select` of two waits: which signal came, in the state.
fn shipped_or_cancelled(suspend: bool) -> CompiledGraph<Vec<String>> {
    shipped_or_cancelled_within(suspend, None)
}

/// As [`shipped_or_cancelled`], the cancel taken only `within` the time given, if any.
fn shipped_or_cancelled_within(
    suspend: bool,
    within: Option<Duration>,
) -> CompiledGraph<Vec<String>> {
    Graph::new("order")
        .node_fn("wait", move |seen: &mut Vec<String>, ctx| {
            Box::pin(async move {
                let (mut shipped, mut cancel) = (
                    ctx.wait_for_signal::<String>("shipped"),
                    ctx.wait_for_signal::<String>("cancel"),
                );
                if let Some(within) = within {
                    cancel = cancel.timeout(within);
                }
                if suspend {
                    (shipped, cancel) = (shipped.or_suspend(), cancel.or_suspend());
                }
                let got = tokio::select! {
                    s = shipped => format!("shipped {}", s?),
                    c = cancel => format!("cancelled {}", c?),
                };
                seen.push(got);
                Ok(())
            })
        })
        .edge(START, "wait")
        .edge("wait", END)
        .compile()
        .unwrap()
}

/// Two waits raced in a `select!` suspend the run on both: either signal carries it on.
/// Before, the run listed only the wait that suspended first (which one, at random), and
/// the other signal woke nothing.
async fn a_select_of_two_waits_is_woken_by_either(runtime: Runtime) {
    let graph = shipped_or_cancelled(false);
    let worker = Worker::builder(&runtime).graph(&graph).build();
    for (n, name) in ["shipped", "cancel", "cancel", "shipped"]
        .into_iter()
        .enumerate()
    {
        let thread = format!("o-{n}");
        runtime
            .submit("order", &thread, Vec::<String>::new())
            .await
            .unwrap();
        worker.run_until_idle().await.unwrap();
        let mut waits = runtime.run(&thread).await.unwrap().record.waiting_on;
        waits.sort();
        assert_eq!(waits, ["cancel", "shipped"], "{thread}");
        runtime.signal(&thread, name, "now").await.unwrap();
        worker.run_until_idle().await.unwrap();
        let seen: Vec<String> = runtime.get_state(&thread).await.unwrap().unwrap();
        let said = if name == "shipped" {
            "shipped now"
        } else {
            "cancelled now"
        };
        assert_eq!(seen, [said], "{thread}");
    }
    // Suspended directly (`or_suspend`), a recover after either signal carries it on.
    let graph = shipped_or_cancelled(true);
    let asked = graph.invoke(&runtime, "direct", Vec::new()).await.unwrap();
    assert_eq!(asked.interrupts().len(), 2, "{asked:?}");
    runtime.signal("direct", "cancel", "now").await.unwrap();
    let done = graph.recover(&runtime, "direct").await.unwrap();
    assert_eq!(done.completed().unwrap(), ["cancelled now"]);
}

#[tokio::test]
async fn in_memory_a_select_of_two_waits_is_woken_by_either() {
    a_select_of_two_waits_is_woken_by_either(Runtime::in_memory()).await;
}

#[tokio::test]
async fn on_sqlite_a_select_of_two_waits_is_woken_by_either() {
    let db = TempDb::new("select-two");
    a_select_of_two_waits_is_woken_by_either(db.runtime()).await;
}

/// Both signals of a `select!` sent before the run reaches it: the run takes one, and the
/// other stays pending for whoever waits next. Before, both were consumed (each wait took
/// its payload side by side) and the losing branch's was lost, every time.
async fn a_select_takes_one_of_two_queued_signals_and_leaves_the_other(runtime: Runtime) {
    let graph = shipped_or_cancelled(false);
    let worker = Worker::builder(&runtime).graph(&graph).build();
    for n in 0..8 {
        let thread = format!("q-{n}");
        runtime
            .submit("order", &thread, Vec::<String>::new())
            .await
            .unwrap();
        runtime.signal(&thread, "shipped", "early").await.unwrap();
        runtime.signal(&thread, "cancel", "early").await.unwrap();
        worker.run_until_idle().await.unwrap();
        let seen: Vec<String> = runtime.get_state(&thread).await.unwrap().unwrap();
        let other = match seen.as_slice() {
            [s] if s == "shipped early" => "cancel",
            [s] if s == "cancelled early" => "shipped",
            other => panic!("{other:?}"),
        };
        let left = runtime.drop_signal(&thread, other, "test").await.unwrap();
        assert_eq!(left, Some(json!("early")), "{thread}: {other} was lost");
    }
}

#[tokio::test]
async fn in_memory_a_select_takes_one_of_two_queued_signals_and_leaves_the_other() {
    a_select_takes_one_of_two_queued_signals_and_leaves_the_other(Runtime::in_memory()).await;
}

#[tokio::test]
async fn on_sqlite_a_select_takes_one_of_two_queued_signals_and_leaves_the_other() {
    let db = TempDb::new("select-queued");
    a_select_takes_one_of_two_queued_signals_and_leaves_the_other(db.runtime()).await;
}

/// Plain waits (no worker, no `or_suspend`) raced with both signals pending take one: the
/// other stays pending (before, it was consumed and lost, every time on SQLite).
#[tokio::test]
async fn on_sqlite_a_select_of_plain_waits_leaves_the_other_signal() {
    let db = TempDb::new("select-plain");
    let runtime = db.runtime();
    let graph = shipped_or_cancelled(false);
    for n in 0..10 {
        let thread = format!("p-{n}");
        runtime.signal(&thread, "shipped", "early").await.unwrap();
        runtime.signal(&thread, "cancel", "early").await.unwrap();
        let seen = graph.invoke(&runtime, &thread, Vec::new()).await.unwrap();
        let other = match seen.completed().unwrap().as_slice() {
            [s] if s == "shipped early" => "cancel",
            _ => "shipped",
        };
        let left = runtime.drop_signal(&thread, other, "test").await.unwrap();
        assert_eq!(left, Some(json!("early")), "{thread}: {other} was lost");
    }
}

/// A timed wait raced beside an untimed one is listed with its deadline, whether the run
/// suspends at once (`or_suspend`, a worker that does not park) or after its grace: before,
/// the timed wait, still writing its deadline, was left off, the run woke for neither its
/// signal nor its deadline.
#[tokio::test]
async fn on_sqlite_a_timed_wait_in_a_select_is_listed_with_its_deadline() {
    let db = TempDb::new("select-timed");
    let runtime = db.runtime();
    let hour = Some(Duration::from_secs(3_600));
    let direct = shipped_or_cancelled_within(true, hour);
    for n in 0..10 {
        let asked = direct
            .invoke(&runtime, format!("d-{n}"), Vec::new())
            .await
            .unwrap();
        assert_eq!(asked.interrupts().len(), 2, "{asked:?}");
        assert!(asked.interrupts().iter().any(|i| i.wake_at_ms.is_some()));
    }
    let graph = shipped_or_cancelled_within(false, hour);
    let worker = (Worker::builder(&runtime).graph(&graph))
        .park_grace(Duration::ZERO)
        .build();
    for n in 0..5 {
        let thread = format!("w-{n}");
        runtime
            .submit("order", &thread, Vec::<String>::new())
            .await
            .unwrap();
        worker.run_until_idle().await.unwrap();
        let record = runtime.run(&thread).await.unwrap().record;
        let mut waits = record.waiting_on.clone();
        waits.sort();
        assert_eq!(waits, ["cancel", "shipped"], "{record:?}");
        assert!(record.wake_at_ms.is_some(), "{record:?}");
        runtime.signal(&thread, "cancel", "now").await.unwrap();
        worker.run_until_idle().await.unwrap();
        let seen: Vec<String> = runtime.get_state(&thread).await.unwrap().unwrap();
        assert_eq!(seen, ["cancelled now"]);
    }
}

/// A node run again after its `select!` took a payload replays that branch, and the other
/// wait takes nothing meanwhile: a signal sent for it since stays pending (before, it was
/// consumed beside the replay and lost, in about half the recoveries).
#[tokio::test]
async fn on_sqlite_a_replayed_select_leaves_the_other_signal() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let db = TempDb::new("select-replay");
    let runtime = db.runtime();
    for n in 0..12 {
        let failed_once = Arc::new(AtomicBool::new(false));
        let graph = Graph::new("order")
            .node_fn("wait", move |seen: &mut Vec<String>, ctx| {
                let failed_once = Arc::clone(&failed_once);
                Box::pin(async move {
                    let got = tokio::select! {
                        s = ctx.wait_for_signal::<String>("shipped").or_suspend() => {
                            format!("shipped {}", s?)
                        }
                        c = ctx.wait_for_signal::<String>("cancel").or_suspend() => {
                            format!("cancelled {}", c?)
                        }
                    };
                    if !failed_once.swap(true, Ordering::SeqCst) {
                        return Err("the process died".into());
                    }
                    seen.push(got);
                    Ok(())
                })
            })
            .edge(START, "wait")
            .edge("wait", END)
            .compile()
            .unwrap();
        let thread = format!("r-{n}");
        runtime.signal(&thread, "cancel", "c").await.unwrap();
        let failed = graph.invoke(&runtime, &thread, Vec::new()).await.unwrap();
        assert!(
            matches!(failed, RunOutcome::Failed { .. }),
            "{n}: {failed:?}"
        );
        runtime.signal(&thread, "shipped", "s").await.unwrap();
        let done = graph.recover(&runtime, &thread).await.unwrap();
        assert_eq!(done.completed().unwrap(), ["cancelled c"]);
        let left = runtime
            .drop_signal(&thread, "shipped", "test")
            .await
            .unwrap();
        assert_eq!(left, Some(json!("s")), "{thread}: shipped was lost");
    }
}

/// A wait kept alive but no longer polled (pinned outside a `select!` that ended on its other
/// branch, tokio's cancel-token idiom) does not hold back the node's later waits: before, a
/// later wait deferred to it forever, its payload queued, past its timeout and a cancel.
#[tokio::test]
async fn a_pinned_wait_no_longer_polled_holds_no_later_wait_back() {
    use std::future::IntoFuture;
    let graph = Graph::new("pinned")
        .node_fn("work", |seen: &mut Vec<String>, ctx| {
            Box::pin(async move {
                let cancel = ctx.wait_for_signal::<String>("cancel").into_future();
                tokio::pin!(cancel);
                tokio::select! {
                    biased;
                    c = &mut cancel => {
                        seen.push(format!("cancelled {}", c?));
                        return Ok(());
                    }
                    () = std::future::ready(()) => {}
                }
                let review = ctx.wait_for_signal::<String>("review");
                let timed = review.timeout(Duration::from_millis(300));
                match timed.await {
                    Ok(review) => seen.push(format!("review {review}")),
                    Err(RunError::Signal(SignalError::Timeout { .. })) => {
                        seen.push("timed out".into());
                    }
                    Err(other) => return Err(other.into()),
                }
                Ok(())
            })
        })
        .edge(START, "work")
        .edge("work", END)
        .compile()
        .unwrap();
    let db = TempDb::new("pinned-wait");
    for runtime in [Runtime::in_memory(), db.runtime()] {
        runtime.signal("queued", "review", "ok").await.unwrap();
        for (thread, said) in [("queued", "review ok"), ("none", "timed out")] {
            let ran = graph.invoke(&runtime, thread, Vec::new());
            let ran = tokio::time::timeout(Duration::from_secs(10), ran).await;
            let seen = ran.expect("the run hung").unwrap().completed().unwrap();
            assert_eq!(seen, [said], "{thread}");
        }
    }
}
