//! The pending bounds (the TTL, the least-recently-used bound) against durable signals for
//! runs that wait: they drop signals from a process's memory, not from the store, while the
//! session has a run that has not ended; that run takes them when a worker carries it on.
//! SQLite, and PostgreSQL for the TTL (skipped without `LOOMFLOW_PG_URL`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/faulty_store.rs"]
mod faulty_store;
#[path = "support/postgres.rs"]
mod postgres;
#[path = "support/waiting.rs"]
mod waiting;

use std::time::Duration;

use loomflow::prelude::*;
use loomflow::runtime::{MailboxConfig, ManualClock, PostgresStore, RunState, SqliteStore, Store};
use waiting::worker;

/// Submits runs on `threads` and suspends them on their wait.
async fn suspend(runtime: &Runtime, threads: &[&str]) {
    for thread in threads {
        runtime
            .submit("waiting", thread, None::<u32>)
            .await
            .unwrap();
    }
    assert_eq!(
        worker(runtime).run_until_idle().await.unwrap(),
        threads.len()
    );
}

/// What each of `threads` ended with: its state and what its wait got.
async fn outcomes(runtime: &Runtime, threads: &[&str]) -> Vec<(RunState, Option<u32>)> {
    let mut outcomes = Vec::new();
    for thread in threads {
        let state = runtime.run(thread).await.unwrap().record.state;
        let got: Option<u32> = runtime.get_state(thread).await.unwrap().unwrap();
        outcomes.push((state, got));
    }
    outcomes
}

/// A signal sent while no worker runs (a deploy, an outage), older than the pending TTL
/// when the next worker starts: the worker's mailbox lets it go, the run still takes it.
async fn a_signal_older_than_the_ttl_reaches_its_waiting_run(open: impl AsyncFn() -> Runtime) {
    let ttl = Duration::from_millis(300);
    let runtime = open().await;
    suspend(&runtime, &["t"]).await;
    open().await.signal("t", "go", 5u32).await.unwrap();
    tokio::time::sleep(3 * ttl).await;
    let runtime = open().await;
    // `prune_signals` spares it: its run waits.
    assert_eq!(runtime.prune_signals(ttl).await.unwrap(), 0);
    worker(&runtime).run_until_idle().await.unwrap();
    let pending = runtime.store().pending_signals().await.unwrap();
    assert_eq!(
        outcomes(&runtime, &["t"]).await,
        [(RunState::Completed, Some(5))],
        "left in the store: {pending:?}"
    );
}

fn with_ttl(store: impl Store, ttl: Duration) -> Runtime {
    let signals = MailboxConfig::default().pending_signal_ttl(Some(ttl));
    Runtime::builder().store(store).signals(signals).build()
}

#[tokio::test]
async fn on_sqlite_a_signal_older_than_the_ttl_reaches_its_waiting_run() {
    let db = loomflow_tests::TempDb::new("ttl-waiting");
    let ttl = Duration::from_millis(300);
    let open = async || with_ttl(SqliteStore::open(db.path()).unwrap(), ttl);
    a_signal_older_than_the_ttl_reaches_its_waiting_run(open).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_signal_older_than_the_ttl_reaches_its_waiting_run() {
    let Some(db) = postgres::TempPgDb::create("ttl-waiting").await else {
        return;
    };
    let ttl = Duration::from_millis(300);
    let open = async || with_ttl(PostgresStore::connect(&db.url).await.unwrap(), ttl);
    a_signal_older_than_the_ttl_reaches_its_waiting_run(open).await;
}

/// A web process sends signals to more waiting runs than its pending bound: the least
/// recently used session's signal leaves its memory, not the store.
#[tokio::test]
async fn signals_beyond_a_senders_pending_bound_reach_their_waiting_runs() {
    let db = loomflow_tests::TempDb::new("lru-sender");
    let open = |bound: Option<usize>| {
        let signals = MailboxConfig::default().max_pending_signal_sessions(bound);
        let store = SqliteStore::open(db.path()).unwrap();
        Runtime::builder().store(store).signals(signals).build()
    };
    let threads = ["a", "b", "c"];
    suspend(&open(None), &threads).await;
    let sender = open(Some(2));
    for (n, thread) in (1u32..).zip(threads) {
        sender.signal(thread, "go", n).await.unwrap();
    }
    // A send that pushes a session out removes its signal before it returns.
    let runtime = open(None);
    worker(&runtime).run_until_idle().await.unwrap();
    let done = (RunState::Completed, Some(1));
    assert_eq!(
        outcomes(&runtime, &threads).await,
        [
            done,
            (RunState::Completed, Some(2)),
            (RunState::Completed, Some(3))
        ]
    );
}

/// A worker with a small pending bound takes in a burst of signals for more waiting runs
/// than the bound: every run is carried on.
#[tokio::test]
async fn a_burst_beyond_a_workers_pending_bound_reaches_every_waiting_run() {
    let db = loomflow_tests::TempDb::new("lru-worker");
    let open = |bound: Option<usize>| {
        let signals = MailboxConfig::default().max_pending_signal_sessions(bound);
        let store = SqliteStore::open(db.path()).unwrap();
        Runtime::builder().store(store).signals(signals).build()
    };
    let threads = ["a", "b", "c", "d"];
    suspend(&open(None), &threads).await;
    let runtime = open(Some(2));
    let worker = worker(&runtime);
    assert_eq!(worker.run_until_idle().await.unwrap(), 0);
    let sender = open(None);
    for (n, thread) in (1u32..).zip(threads) {
        sender.signal(thread, "go", n).await.unwrap();
    }
    worker.run_until_idle().await.unwrap();
    let expected: Vec<_> = (1..=4).map(|n| (RunState::Completed, Some(n))).collect();
    assert_eq!(outcomes(&runtime, &threads).await, expected);
}

/// A signal the TTL dropped from memory, kept in the store for its waiting run, is still
/// received before a later signal of the same name: FIFO per (session, name). Sent from
/// another process, and from the worker's own.
#[tokio::test]
async fn a_signal_kept_past_the_ttl_is_received_before_a_later_one() {
    for same_process in [false, true] {
        let db = loomflow_tests::TempDb::new("ttl-fifo");
        let ttl = Duration::from_millis(300);
        let open = || with_ttl(SqliteStore::open(db.path()).unwrap(), ttl);
        let runtime = open();
        suspend(&runtime, &["t"]).await;
        let sender = if same_process {
            runtime.clone()
        } else {
            open()
        };
        sender.signal("t", "go", 1u32).await.unwrap();
        tokio::time::sleep(3 * ttl).await;
        sender.signal("t", "go", 2u32).await.unwrap();
        worker(&runtime).run_until_idle().await.unwrap();
        assert_eq!(
            outcomes(&runtime, &["t"]).await,
            [(RunState::Completed, Some(1))],
            "same process: {same_process}"
        );
    }
}

/// A node's `poll_signal` takes a signal the TTL dropped from memory and the store kept
/// for the run as a wait does: before a later one of the same name.
#[tokio::test]
async fn a_poll_takes_a_signal_kept_past_the_ttl_first() {
    let db = loomflow_tests::TempDb::new("ttl-poll");
    let ttl = Duration::from_millis(300);
    let runtime = with_ttl(SqliteStore::open(db.path()).unwrap(), ttl);
    let worker = suspend_polling(&runtime, &["go", "go", "go"]).await;
    runtime.signal("t", "go", 1u32).await.unwrap();
    tokio::time::sleep(3 * ttl).await;
    runtime.signal("t", "go", 2u32).await.unwrap();
    runtime.signal("t", "start", true).await.unwrap();
    worker.run_until_idle().await.unwrap();
    assert_eq!(polled(&runtime).await, [Some(1), Some(2), None]);
}

/// Submits a run on thread `t` that waits for `start`, then polls each of `names` in turn,
/// keeping what each poll got; returns once a worker (also returned) suspended it.
async fn suspend_polling(runtime: &Runtime, names: &'static [&'static str]) -> Worker {
    let graph = Graph::new("polling")
        .node_fn("poll", move |got: &mut Vec<Option<u32>>, ctx| {
            Box::pin(async move {
                ctx.wait_for_signal::<bool>("start").await?;
                for name in names {
                    got.push(ctx.poll_signal::<u32>(name).await?);
                }
                Ok(())
            })
        })
        .edge(START, "poll")
        .edge("poll", END)
        .compile()
        .unwrap();
    let worker = Worker::builder(runtime)
        .graph(&graph)
        .park_grace(Duration::ZERO)
        .build();
    runtime
        .submit("polling", "t", Vec::<Option<u32>>::new())
        .await
        .unwrap();
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    worker
}

/// What the polls of the completed run on thread `t` got.
async fn polled(runtime: &Runtime) -> Vec<Option<u32>> {
    let record = runtime.run("t").await.unwrap().record;
    assert_eq!(record.state, RunState::Completed, "{record:?}");
    runtime.get_state("t").await.unwrap().unwrap()
}

/// Signals kept past the TTL are looked for in the store by name, and only until none
/// older than the queued ones is left there: a signal kept for one name is taken before a
/// later one of its name, even after a receive of another name; once it is taken, the
/// session's receives no longer read the store.
#[tokio::test]
async fn kept_signals_are_looked_for_by_name_until_none_is_left() {
    let db = loomflow_tests::TempDb::new("ttl-two-names");
    let ttl = Duration::from_millis(300);
    let (store, faults) = faulty_store::FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = with_ttl(store, ttl);
    let worker = suspend_polling(&runtime, &["other", "go", "go", "go", "go", "go"]).await;
    runtime.signal("t", "go", 1u32).await.unwrap();
    tokio::time::sleep(3 * ttl).await;
    runtime.signal("t", "other", 9u32).await.unwrap();
    for n in 2..=5 {
        runtime.signal("t", "go", n).await.unwrap();
    }
    runtime.signal("t", "start", true).await.unwrap();
    let reads = faults.kept_signal_reads();
    worker.run_until_idle().await.unwrap();
    let go = (1..=5).map(Some);
    let expected: Vec<_> = [Some(9)].into_iter().chain(go).collect();
    assert_eq!(polled(&runtime).await, expected);
    // `go` 1 is read from the store, then `go` 2 is found to be the oldest kept.
    assert_eq!(faults.kept_signal_reads() - reads, 2);
}

/// A signal stamped by a sender whose clock lags is dropped from memory by the TTL while an
/// older one (by seq) still waits at the head of its queue: once the head is taken, the
/// kept one is still looked for, and taken before a younger one queued behind it.
#[tokio::test]
async fn a_kept_signal_younger_than_the_head_is_still_taken_in_its_turn() {
    let db = loomflow_tests::TempDb::new("ttl-lagging-sender");
    let ttl = Duration::from_millis(300);
    let runtime = with_ttl(SqliteStore::open(db.path()).unwrap(), ttl);
    let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3_600);
    let lagging = Runtime::builder()
        .store(SqliteStore::open(db.path()).unwrap())
        .clock(ManualClock::new(hour_ago))
        .build();
    let worker = suspend_polling(&runtime, &["go", "go", "go"]).await;
    runtime.signal("t", "go", 1u32).await.unwrap();
    lagging.signal("t", "go", 2u32).await.unwrap();
    runtime.signal("t", "go", 3u32).await.unwrap();
    runtime.signal("t", "start", true).await.unwrap();
    worker.run_until_idle().await.unwrap();
    assert_eq!(polled(&runtime).await, [Some(1), Some(2), Some(3)]);
}

/// A runtime-level wait (`Runtime::wait_for_signal`, outside any node) receives a signal the
/// TTL dropped from memory and the store kept for the session's waiting run, and before a
/// later one of the same name. Without a later one, it receives the kept one at once.
#[tokio::test]
async fn a_runtime_level_wait_receives_a_signal_kept_past_the_ttl() {
    for later in [false, true] {
        let db = loomflow_tests::TempDb::new("ttl-runtime-wait");
        let ttl = Duration::from_millis(300);
        let open = || with_ttl(SqliteStore::open(db.path()).unwrap(), ttl);
        suspend(&open(), &["t"]).await;
        open().signal("t", "go", 1u32).await.unwrap();
        tokio::time::sleep(3 * ttl).await;
        let runtime = open();
        if later {
            runtime.signal("t", "go", 2u32).await.unwrap();
        }
        let first: u32 = runtime
            .wait_for_signal("t", "go", Some(Duration::from_secs(2)))
            .await
            .unwrap();
        assert_eq!(first, 1, "later: {later}");
        if later {
            let second: u32 = runtime
                .wait_for_signal("t", "go", Some(Duration::from_secs(2)))
                .await
                .unwrap();
            assert_eq!(second, 2);
        }
        // Taken from the store: not delivered again.
        let again = runtime
            .wait_for_signal::<u32>("t", "go", Some(Duration::from_millis(50)))
            .await;
        assert!(again.is_err(), "later: {later}: {again:?}");
    }
}

/// The same under a worker that parks a wait a moment before it suspends the run (the
/// default grace): the parked wait looks in the store too, and takes the kept signal first.
#[tokio::test]
async fn a_parked_wait_takes_a_signal_kept_past_the_ttl_first() {
    let db = loomflow_tests::TempDb::new("ttl-fifo-parked");
    let ttl = Duration::from_millis(300);
    let runtime = with_ttl(SqliteStore::open(db.path()).unwrap(), ttl);
    suspend(&runtime, &["t"]).await;
    runtime.signal("t", "go", 1u32).await.unwrap();
    tokio::time::sleep(3 * ttl).await;
    runtime.signal("t", "go", 2u32).await.unwrap();
    let parking = Worker::builder(&runtime)
        .graph(&waiting::waiting_graph())
        .build();
    parking.run_until_idle().await.unwrap();
    assert_eq!(
        outcomes(&runtime, &["t"]).await,
        [(RunState::Completed, Some(1))]
    );
}

/// A wait in a run carried on without a worker (an interrupt answered, then a plain wait)
/// takes a signal the TTL dropped from memory and the store kept for the run, rather than
/// waiting out its timeout with the signal in the store.
#[tokio::test]
async fn an_inline_wait_takes_a_signal_kept_past_the_ttl() {
    let db = loomflow_tests::TempDb::new("ttl-inline");
    let ttl = Duration::from_millis(300);
    let runtime = with_ttl(SqliteStore::open(db.path()).unwrap(), ttl);
    let graph = Graph::new("ask_then_wait")
        .node_fn("ask", |_: &mut Option<u32>, ctx| {
            Box::pin(async move {
                let _go_on: bool = ctx.interrupt("go on?")?;
                Ok(())
            })
        })
        .node_fn("wait", |got: &mut Option<u32>, ctx| {
            Box::pin(async move {
                let wait = ctx.wait_for_signal::<u32>("go");
                *got = Some(wait.timeout(Duration::from_secs(5)).await?);
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge("ask", "wait")
        .edge("wait", END)
        .compile()
        .unwrap();
    graph.invoke(&runtime, "t", None).await.unwrap();
    runtime.signal("t", "go", 5u32).await.unwrap();
    tokio::time::sleep(3 * ttl).await;
    let started = std::time::Instant::now();
    let done = graph.resume(&runtime, "t", true).await.unwrap();
    assert_eq!(done.completed().unwrap(), Some(5));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "it waited out its timeout"
    );
}

/// An array nested `levels` deep around a number.
fn nested(levels: usize) -> serde_json::Value {
    (0..levels).fold(serde_json::json!(1), |inner, _| serde_json::json!([inner]))
}

/// Any payload a durable store takes leaves its session's audit log readable: the
/// `signal_sent` entry holds the payload one level deeper, and before its fix a payload at
/// the store's depth bound made every audit read of the session fail as corrupt.
#[tokio::test]
async fn a_payload_the_store_takes_leaves_the_audit_readable() {
    let db = loomflow_tests::TempDb::new("deep-payload-audit");
    let runtime = Runtime::with_store(SqliteStore::open(db.path()).unwrap());
    let mut taken = 0;
    for levels in 505..=515 {
        let session = format!("s-{levels}");
        if runtime
            .signal(&session, "deep", nested(levels))
            .await
            .is_ok()
        {
            taken += 1;
            let log = runtime.audit(&session).await;
            assert!(log.is_ok(), "{levels} levels: {log:?}");
        }
    }
    assert!(taken > 0, "no payload near the bound was taken");
}

/// With no pending mailbox (`max_pending_signal_sessions(Some(0))`), a signal to a session
/// with no run is dropped on arrival on a durable store too, its idempotency key not
/// remembered: the retry once the run is there delivers. Before its fix the row was stored
/// and discarded with its key, and the retry was a `Duplicate` that delivered nothing. A
/// signal for a run that waits is stored for it, and said to be pending.
#[tokio::test]
async fn a_signal_dropped_on_arrival_is_not_a_duplicate_of_its_retry() {
    use loomflow::runtime::{AuditKind, Delivery, SignalOptions};
    let db = loomflow_tests::TempDb::new("dropped-on-arrival");
    let signals = MailboxConfig::default().max_pending_signal_sessions(Some(0));
    let store = SqliteStore::open(db.path()).unwrap();
    let runtime = Runtime::builder().store(store).signals(signals).build();
    let keyed = || SignalOptions::default().idempotency_key("k");
    let sent = runtime.signal_with("a", "go", 7, keyed()).await.unwrap();
    assert_eq!(sent, Delivery::Dropped);
    suspend(&runtime, &["a"]).await;
    let retried = runtime.signal_with("a", "go", 7, keyed()).await.unwrap();
    assert_eq!(retried, Delivery::Pending, "stored for the waiting run");
    let again = runtime.signal_with("a", "go", 7, keyed()).await.unwrap();
    assert_eq!(again, Delivery::Duplicate);
    worker(&runtime).run_until_idle().await.unwrap();
    assert_eq!(
        outcomes(&runtime, &["a"]).await,
        [(RunState::Completed, Some(7))]
    );
    let log = runtime.audit("a").await.unwrap();
    let sent: Vec<_> = log
        .iter()
        .filter(|e| e.kind == AuditKind::SignalSent)
        .collect();
    assert_eq!(
        sent.len(),
        2,
        "the dropped send and the stored one: {log:?}"
    );
    // The entry of the send dropped on arrival says so; the stored one does not.
    assert_eq!(sent[0].detail["dropped"], true, "{:?}", sent[0]);
    assert_eq!(sent[1].detail.get("dropped"), None, "{:?}", sent[1]);
}

/// In memory too, a signal dropped on arrival says so in its `signal_sent` entry.
#[tokio::test]
async fn a_signal_dropped_on_arrival_in_memory_says_so_in_the_audit_log() {
    use loomflow::runtime::{AuditKind, Delivery};
    let signals = MailboxConfig::default().max_pending_signal_sessions(Some(0));
    let runtime = Runtime::builder().signals(signals).build();
    assert_eq!(
        runtime.signal("m", "go", 7).await.unwrap(),
        Delivery::Dropped
    );
    let log = runtime.audit("m").await.unwrap();
    let sent: Vec<_> = log
        .iter()
        .filter(|e| e.kind == AuditKind::SignalSent)
        .collect();
    assert_eq!(sent.len(), 1, "{log:?}");
    assert_eq!(sent[0].detail["dropped"], true, "{:?}", sent[0]);
    assert_eq!(sent[0].detail["payload"], 7);
}

/// With no pending mailbox, a payload a waiter gives back (it is not the type it asked
/// for) is not dropped as a new signal to a session nobody holds would be: the waiter was
/// the session's only holder, and the payload goes back to its queue, for the next
/// receiver. Before its fix it was lost, and its row deleted.
#[tokio::test]
async fn a_payload_given_back_with_no_pending_mailbox_stays_for_the_next_receiver() {
    use loomflow::runtime::Delivery;
    let db = loomflow_tests::TempDb::new("given-back-no-pending");
    let signals = MailboxConfig::default().max_pending_signal_sessions(Some(0));
    let store = SqliteStore::open(db.path()).unwrap();
    let runtime = Runtime::builder().store(store).signals(signals).build();
    let waiting = tokio::spawn({
        let runtime = runtime.clone();
        async move {
            let wait = runtime.wait_for_signal::<u32>("s", "n", Some(Duration::from_secs(5)));
            wait.await
        }
    });
    // Dropped until the waiter holds its session (nothing stored, so a retry is fine);
    // then parked, or still looking at the store with the session held: either way the
    // signal is the waiter's.
    let sent = loop {
        let sent = runtime.signal("s", "n", "not a number").await.unwrap();
        if sent != Delivery::Dropped {
            break sent;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(
        matches!(sent, Delivery::Woke | Delivery::Queued),
        "{sent:?}"
    );
    let refused = waiting.await.unwrap();
    assert!(
        matches!(
            refused,
            Err(loomflow::RuntimeError::Signal(
                loomflow::SignalError::Payload { .. }
            ))
        ),
        "{refused:?}"
    );
    // A new send to the session is dropped on arrival, as to any session nobody holds: the
    // payload kept is the one given back, not a new one stored and then dropped.
    let late = runtime.signal("s", "n", "late").await.unwrap();
    assert_eq!(late, Delivery::Dropped);
    let text: String = runtime
        .wait_for_signal("s", "n", Some(Duration::from_secs(2)))
        .await
        .unwrap();
    assert_eq!(text, "not a number");
    let none = runtime.wait_for_signal::<String>("s", "n", Some(Duration::from_millis(50)));
    assert!(none.await.is_err(), "nothing more");
}
