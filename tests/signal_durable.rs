//! Signals on a SQLite file are delivered exactly once across restarts: nothing that was
//! received, dropped by a pending bound (least recently used, TTL on the stored send time) or
//! discarded on a session's last exit comes back when the runtime is opened again; and
//! signals no run will take do not stay in the file past the TTL. (A signal for a session
//! whose run has not ended stays in the store whatever the bounds drop from memory: see
//! `signal_bounds_durable.rs`.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/callsites.rs"]
mod callsites;
#[path = "support/faulty_store.rs"]
mod faulty_store;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use loomflow::runtime::{
    AuditKind, AuditQuery, Delivery, MailboxConfig, SignalPush, SqliteStore, Store, StoredSignal,
};
use loomflow::{END, Graph, Runtime, START, Worker};
use serde_json::{Value, json};
use tracing_subscriber::layer::SubscriberExt;

/// A fresh database path; removes the file and its WAL companions when dropped.
struct TempDb(PathBuf);

impl TempDb {
    fn new(name: &str) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        Self(std::env::temp_dir().join(format!(
            "loomflow-signal-{name}-{}-{nanos}.db",
            std::process::id()
        )))
    }

    fn path(&self) -> &Path {
        &self.0
    }

    /// A runtime on this file, as a process that starts (or restarts) would open it.
    fn open(&self, signals: MailboxConfig) -> Runtime {
        Runtime::builder()
            .store(SqliteStore::open(self.path()).unwrap())
            .signals(signals)
            .build()
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.0.display()));
        }
    }
}

/// No pending bounds: whatever is still stored is delivered.
fn unbounded() -> MailboxConfig {
    MailboxConfig::default()
        .max_pending_signal_sessions(None)
        .pending_signal_ttl(None)
}

/// (session, payload) of every signal the store still holds, oldest first.
async fn stored(runtime: &Runtime) -> Vec<(String, Value)> {
    let signals = runtime.store().pending_signals().await.unwrap();
    signals
        .into_iter()
        .map(|s| (s.session, s.payload))
        .collect()
}

/// What a restarted runtime delivers for (session, "n"), without waiting for more.
async fn delivered(runtime: &Runtime, session: &str) -> Vec<Value> {
    let mut got = Vec::new();
    // The timeout ends the wait once nothing is left: stored signals are loaded before the
    // wait starts, so whatever is there comes out at once. It counts the store's work
    // (loading, and consuming the row with an fsync) too: long enough for a loaded
    // machine's disk (20 ms was not, in CI).
    while let Ok(payload) = runtime
        .wait_for_signal::<Value>(session, "n", Some(Duration::from_millis(250)))
        .await
    {
        got.push(payload);
    }
    got
}

fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_millis()).unwrap()
}

/// A signal as a store keeps it, sent `age` ago. `StoredSignal` is non-exhaustive and has no
/// constructor: build it from JSON.
fn sent_ago(session: &str, payload: Value, age: Duration) -> StoredSignal {
    let age_ms = u64::try_from(age.as_millis()).unwrap();
    serde_json::from_value(json!({
        "seq": 0,
        "session": session,
        "name": "n",
        "payload": payload,
        "idempotency_key": null,
        "sent_at_ms": now_ms() - age_ms,
    }))
    .unwrap()
}

#[tokio::test]
async fn a_signal_received_through_wait_for_signal_is_not_delivered_after_a_restart() {
    let db = TempDb::new("received");
    let runtime = db.open(MailboxConfig::default());
    runtime.signal("s", "n", json!("once")).await.unwrap();
    runtime
        .signal("s", "n", json!("still queued"))
        .await
        .unwrap();
    let got: String = runtime.wait_for_signal("s", "n", None).await.unwrap();
    assert_eq!(got, "once");
    drop(runtime);

    let restarted = db.open(unbounded());
    assert_eq!(delivered(&restarted, "s").await, [json!("still queued")]);
    drop(restarted);
    assert!(stored(&db.open(unbounded())).await.is_empty());
}

/// A wait cut short (a `timeout` around it) after the mailbox handed it a stored payload,
/// while the payload's row is being consumed, loses and reorders nothing: every payload
/// sent is received by a later wait, once, in the order sent. The cuts land at varied
/// points of the hand-over.
#[tokio::test]
async fn a_wait_cancelled_during_the_hand_over_loses_no_payload() {
    let db = TempDb::new("cancelled-wait");
    let runtime = db.open(unbounded());
    let _open = runtime.session("s");
    let sent = 500u32;
    let mut received = Vec::new();
    for i in 0..sent {
        runtime.signal("s", "n", i).await.unwrap();
        let cut = Duration::from_micros(u64::from(i % 50) * 40);
        let wait = runtime.wait_for_signal::<u32>("s", "n", None);
        if let Ok(got) = tokio::time::timeout(cut, wait).await {
            received.push(got.unwrap());
        }
    }
    let drain = || runtime.wait_for_signal::<u32>("s", "n", Some(Duration::from_millis(300)));
    while let Ok(got) = drain().await {
        received.push(got);
    }
    let still_stored = stored(&runtime).await.len();
    assert!(
        received.windows(2).all(|w| w[0] < w[1]),
        "received in the order sent, each once: {received:?}"
    );
    assert_eq!(
        received.len() + still_stored,
        sent as usize,
        "received {} distinct payloads, {still_stored} still stored",
        received.len()
    );
    assert_eq!(still_stored, 0, "every payload was received");
}

/// A wait given up while it made the store removals queued before it (here the removal of a
/// signal `poll_signal` received, held back) leaves them queued, not lost: the signal is not
/// received again by a process that opens the file afterwards.
#[tokio::test]
async fn a_wait_given_up_while_removals_are_made_leaves_none_unmade() {
    let db = TempDb::new("given-up-removal");
    let (store, faults) = faulty_store::FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).signals(unbounded()).build();
    runtime.signal("s", "n", 1).await.unwrap();
    let removal = faults.hold_next_plain_take();
    assert_eq!(runtime.poll_signal::<u32>("s", "n").unwrap(), Some(1));
    // This wait makes the queued removal first, and is given up while the store is at it.
    let other = runtime.wait_for_signal::<u32>("s", "other", None);
    assert!(
        tokio::time::timeout(Duration::from_millis(50), other)
            .await
            .is_err()
    );
    drop(removal);
    // Any later signal operation makes what is still queued.
    let quiet = runtime.wait_for_signal::<u32>("s", "other", Some(Duration::from_millis(20)));
    assert!(quiet.await.is_err());
    let restarted = db.open(unbounded());
    assert_eq!(restarted.poll_signal::<u32>("s", "n").unwrap(), None);
    assert!(stored(&restarted).await.is_empty());
}

/// A wait that times out says after the timeout it was given, not after what was left of it
/// once the store had been looked at.
#[tokio::test]
async fn a_timed_out_wait_reports_the_timeout_it_was_given() {
    let db = TempDb::new("timeout-reported");
    let runtime = db.open(unbounded());
    let given = Duration::from_millis(40);
    let waited = runtime.wait_for_signal::<u32>("s", "n", Some(given)).await;
    match waited {
        Err(loomflow::RuntimeError::Signal(loomflow::SignalError::Timeout { timeout, .. })) => {
            assert_eq!(timeout, given);
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
}

/// A timed wait whose store is slow to answer (its stored signals still loading) ends at
/// its timeout, measured from the call: before its fix the wait's timer started only once
/// the store had answered, so it ran as long as the store took, and the timeout on top.
#[tokio::test]
async fn a_timed_wait_ends_at_its_timeout_while_the_store_is_slow() {
    let db = TempDb::new("timeout-slow-store");
    let (store, faults) = faulty_store::FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).signals(unbounded()).build();
    let go = faults.hold_next_pending_read();
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(10)).await;
        drop(go);
    });
    let given = Duration::from_millis(100);
    let started = std::time::Instant::now();
    let waited = runtime.wait_for_signal::<u32>("s", "n", Some(given)).await;
    let took = started.elapsed();
    release.abort();
    assert!(
        matches!(
            &waited,
            Err(loomflow::RuntimeError::Signal(loomflow::SignalError::Timeout { timeout, .. }))
                if *timeout == given
        ),
        "{waited:?}"
    );
    assert!(took < Duration::from_secs(5), "the wait took {took:?}");
    // The store answers again: the next wait loads what it keeps and receives it.
    runtime.signal("s", "n", 7u32).await.unwrap();
    let received: u32 = runtime
        .wait_for_signal("s", "n", Some(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(received, 7);
}

/// A process that only polls sees the signals another process stores, and those its store
/// kept from before it started: the first poll starts bringing them in. Before its fix it
/// never did, and every poll returned nothing.
#[tokio::test]
async fn a_process_that_only_polls_receives_what_others_send() {
    let db = TempDb::new("poll-only");
    let before = db.open(unbounded());
    before.signal("s", "kept", 1u32).await.unwrap();
    let poller = db.open(unbounded());
    let sender = db.open(unbounded());
    sender.signal("s", "sent", 2u32).await.unwrap();
    let mut got = (None, None);
    for _ in 0..200 {
        got.0 = got.0.or(poller.poll_signal::<u32>("s", "kept").unwrap());
        got.1 = got.1.or(poller.poll_signal::<u32>("s", "sent").unwrap());
        if got.0.is_some() && got.1.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(got, (Some(1), Some(2)));
}

/// A payload whose waiter outside any run was cut short while its row was being consumed
/// goes to the next receiver, a node's wait included: each payload is received once, by
/// the waiter or by the node that waits for it next.
#[tokio::test]
async fn a_payload_left_by_a_cancelled_wait_is_received_by_a_node() {
    let db = TempDb::new("cancelled-then-node");
    let runtime = db.open(unbounded());
    let graph = Graph::new("receiver")
        .node_fn("wait", |n: &mut u32, ctx| {
            Box::pin(async move {
                *n = ctx.wait_for_signal("n").await?;
                Ok(())
            })
        })
        .edge(START, "wait")
        .edge("wait", END)
        .compile()
        .unwrap();
    for i in 0..200u32 {
        let session = format!("s-{i}");
        runtime.signal(&session, "n", i).await.unwrap();
        let cut = Duration::from_micros(u64::from(i % 40) * 50);
        let wait = runtime.wait_for_signal::<u32>(&session, "n", None);
        let by_node = match tokio::time::timeout(cut, wait).await {
            Ok(got) => {
                assert_eq!(got.unwrap(), i);
                continue;
            }
            Err(_) => {
                let run = graph.invoke(&runtime, &session, 0);
                let run = tokio::time::timeout(Duration::from_secs(10), run).await;
                run.unwrap_or_else(|_| panic!("{session}: the payload never reached the node"))
                    .unwrap()
            }
        };
        assert_eq!(by_node.completed().unwrap(), i, "{session}");
    }
    assert!(stored(&runtime).await.is_empty());
}

#[tokio::test]
async fn a_payload_keeps_its_own_fields_through_the_store() {
    // Nothing is wrapped around a durable payload: a field that once was the in-band
    // envelope's key is the user's own.
    let db = TempDb::new("payload");
    let payload = json!({ "__loomflow_signal_seq": 1, "payload": "mine" });
    let runtime = db.open(MailboxConfig::default());
    runtime.signal("s", "n", &payload).await.unwrap();
    assert_eq!(stored(&runtime).await, [("s".to_owned(), payload.clone())]);
    drop(runtime);
    let restarted = db.open(MailboxConfig::default());
    assert_eq!(delivered(&restarted, "s").await, [payload]);
}

#[tokio::test]
async fn a_signal_past_the_ttl_on_its_stored_send_time_does_not_come_back() {
    let db = TempDb::new("ttl");
    let ttl = Duration::from_secs(3_600);
    {
        let store = SqliteStore::open(db.path()).unwrap();
        let two_hours = Duration::from_secs(7_200);
        let fifty_minutes = Duration::from_secs(3_000);
        for signal in [
            sent_ago("expired", json!("two hours old"), two_hours),
            sent_ago("kept", json!("fifty minutes old"), fifty_minutes),
        ] {
            let pushed = store.push_signal(signal).await.unwrap();
            assert!(matches!(pushed, SignalPush::Stored(_)));
        }
    }

    // Restarted with a one-hour TTL: the age counts from the stored send time, so the
    // two-hour-old signal is dropped on loading, and removed from the store.
    let restarted = db.open(MailboxConfig::default().pending_signal_ttl(Some(ttl)));
    assert_eq!(delivered(&restarted, "expired").await, Vec::<Value>::new());
    assert_eq!(
        stored(&restarted).await,
        [("kept".to_owned(), json!("fifty minutes old"))],
        "only the expired signal left the store"
    );

    // Nobody received it: the log says it was sent, and nothing more.
    let log = restarted.audit("expired").await.unwrap();
    let kinds: Vec<AuditKind> = log.iter().map(|entry| entry.kind).collect();
    assert_eq!(kinds, [AuditKind::SignalSent]);
    drop(restarted);

    // Restarted again without a TTL: the dropped signal does not come back.
    let again = db.open(unbounded());
    assert_eq!(delivered(&again, "expired").await, Vec::<Value>::new());
    assert_eq!(
        delivered(&again, "kept").await,
        [json!("fifty minutes old")]
    );
}

/// The events logged while it is the thread's subscriber: message and fields, a line each.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Log {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut line = Line::default();
        event.record(&mut line);
        self.0.lock().unwrap().push(line.0);
    }
}

#[derive(Default)]
struct Line(String);

impl tracing::field::Visit for Line {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.0.push_str(&format!("{value:?}")),
            name => self.0.push_str(&format!(" {name}={value:?}")),
        }
    }
}

impl Log {
    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// Signals another process stored for a session that never runs are dropped by a worker
/// once they are past the pending TTL: it prunes the store (and says so) before it brings
/// stored signals into its mailbox, which would drop them too but only in a worker that
/// happens to load them. Newer ones stay, and nothing says the dropped one was received.
#[tokio::test]
async fn a_worker_drops_stored_signals_past_the_ttl_that_no_run_will_take() {
    let log = Log::default();
    callsites::keep_callsites_enabled();
    let _logging =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(log.clone()));
    let db = TempDb::new("prune");
    {
        let sender = SqliteStore::open(db.path()).unwrap();
        for signal in [
            sent_ago("ghost", json!("two hours old"), Duration::from_secs(7_200)),
            sent_ago("late", json!("ten minutes old"), Duration::from_secs(600)),
        ] {
            let pushed = sender.push_signal(signal).await.unwrap();
            assert!(matches!(pushed, SignalPush::Stored(_)));
        }
    }

    // A worker on the file, with the default one-hour TTL.
    let runtime = db.open(MailboxConfig::default());
    let graph = Graph::new("count")
        .node_sync("add", |n: &mut u64| *n += 1)
        .edge(START, "add")
        .edge("add", END)
        .compile()
        .unwrap();
    let worker = Worker::builder(&runtime).graph(&graph).build();
    assert_eq!(worker.run_until_idle().await.unwrap(), 0);

    let lines = log.lines();
    assert!(
        lines.contains(&"dropped signals past the pending TTL pruned=1".to_owned()),
        "the worker pruned the store: {lines:?}"
    );
    assert_eq!(
        stored(&runtime).await,
        [("late".to_owned(), json!("ten minutes old"))]
    );
    let received = runtime
        .audit_query(&AuditQuery::all().kind(AuditKind::SignalReceived))
        .await
        .unwrap();
    assert!(received.is_empty(), "nobody received them: {received:?}");
    assert_eq!(
        delivered(&runtime, "late").await,
        [json!("ten minutes old")]
    );
}

/// A session held open in this process keeps its queued signals however old: they are
/// live here, where the pending TTL does not apply, and a wait still receives them (the
/// store's copy is what it takes).
#[tokio::test]
async fn signals_queued_in_a_session_open_here_are_not_pruned() {
    let db = TempDb::new("spare");
    let runtime = db.open(unbounded());
    let _open = runtime.session("open-here");
    let delivery = runtime.signal("open-here", "n", json!("queued")).await;
    assert_eq!(delivery.unwrap(), Delivery::Queued);
    tokio::time::sleep(Duration::from_millis(20)).await;

    let pruned = runtime.prune_signals(Duration::from_millis(5)).await;
    assert_eq!(pruned.unwrap(), 0);
    let wait = runtime.wait_for_signal::<Value>("open-here", "n", Some(Duration::from_secs(2)));
    assert_eq!(wait.await.unwrap(), json!("queued"));
}

#[tokio::test]
async fn signals_dropped_by_the_lru_bound_do_not_come_back() {
    let db = TempDb::new("lru");
    let runtime = db.open(MailboxConfig::default().max_pending_signal_sessions(Some(2)));
    for session in ["a", "b", "c"] {
        let delivery = runtime.signal(session, "n", json!(session)).await.unwrap();
        assert_eq!(delivery, Delivery::Pending);
    }
    // "a", least recently used, was dropped to make room for "c": gone from the store too.
    let sessions: Vec<String> = stored(&runtime).await.into_iter().map(|s| s.0).collect();
    assert_eq!(sessions, ["b", "c"]);
    drop(runtime);

    // Restarted with a bound of one: loading "c" pushes "b" out.
    let restarted = db.open(MailboxConfig::default().max_pending_signal_sessions(Some(1)));
    assert_eq!(delivered(&restarted, "c").await, [json!("c")]);
    drop(restarted);

    let again = db.open(unbounded());
    for session in ["a", "b", "c"] {
        assert_eq!(
            delivered(&again, session).await,
            Vec::<Value>::new(),
            "{session}"
        );
    }
    assert!(stored(&again).await.is_empty());
}

#[tokio::test]
async fn signals_discarded_on_a_sessions_last_exit_do_not_come_back() {
    let db = TempDb::new("discard");
    let runtime = db.open(MailboxConfig::default());
    let open = runtime.session("s");
    let delivery = runtime.signal("s", "n", json!("never read")).await.unwrap();
    assert_eq!(delivery, Delivery::Queued);
    assert_eq!(stored(&runtime).await.len(), 1);
    // The last guard drops: the mailbox discards the signal, and the store forgets it in the
    // background; the next signal operation waits until it has.
    drop(open);
    runtime.signal("t", "n", json!("later")).await.unwrap();
    assert_eq!(stored(&runtime).await, [("t".to_owned(), json!("later"))]);
    drop(runtime);

    let restarted = db.open(unbounded());
    assert_eq!(delivered(&restarted, "s").await, Vec::<Value>::new());
    assert_eq!(delivered(&restarted, "t").await, [json!("later")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discard_reaches_the_store_without_another_signal_operation() {
    let db = TempDb::new("discard-bg");
    let runtime = db.open(MailboxConfig::default());
    let open = runtime.session("s");
    runtime.signal("s", "n", json!("never read")).await.unwrap();
    drop(open);
    // Nothing else happens on this runtime: the background removal still lands.
    tokio::time::timeout(Duration::from_secs(10), async {
        while !stored(&runtime).await.is_empty() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the discarded signal left the store");
    drop(runtime);
    assert!(stored(&db.open(unbounded())).await.is_empty());
}

#[tokio::test]
async fn a_signal_taken_with_poll_signal_is_not_delivered_after_a_restart() {
    let db = TempDb::new("polled");
    let runtime = db.open(MailboxConfig::default());
    let _open = runtime.session("s");
    runtime.signal("s", "n", json!(1)).await.unwrap();
    assert_eq!(runtime.poll_signal::<i32>("s", "n").unwrap(), Some(1));
    // Removed in the background (`poll_signal` cannot await); the next async signal
    // operation waits for it.
    runtime.signal("t", "n", json!(2)).await.unwrap();
    assert_eq!(stored(&runtime).await, [("t".to_owned(), json!(2))]);
}

/// A runtime-level wait cancelled while it waits for the store (a timeout of zero, with a
/// removal of another session's signal under way) loses and reorders nothing: the next
/// waits receive every payload, in the order sent.
#[tokio::test]
async fn a_wait_cancelled_while_the_store_catches_up_keeps_its_payload_in_place() {
    let db = TempDb::new("cancelled-wait");
    let runtime = Runtime::with_store(SqliteStore::open(db.path()).unwrap());
    for n in 1..=3u32 {
        runtime.signal("s", "n", n).await.unwrap();
    }
    let (mut cancelled, mut received) = (0, Vec::new());
    for _ in 0..3 {
        // A signal received where no store call can be awaited: its removal is under way.
        runtime.signal("o", "x", 0u32).await.unwrap();
        let polled: Option<u32> = runtime.poll_signal("o", "x").unwrap();
        assert_eq!(polled, Some(0));
        let wait = runtime.wait_for_signal::<u32>("s", "n", None);
        match tokio::time::timeout(Duration::ZERO, wait).await {
            Ok(got) => received.push(got.unwrap()),
            Err(_) => cancelled += 1,
        }
    }
    assert!(cancelled > 0, "no wait was cancelled mid-way");
    while received.len() < 3 {
        let wait = runtime.wait_for_signal::<u32>("s", "n", Some(Duration::from_secs(2)));
        received.push(wait.await.unwrap());
    }
    assert_eq!(received, [1, 2, 3]);
}

/// A receiver in the process that sent a signal can take its row from the store before the
/// send queues the process's own copy of it: that copy is not queued, and a poll (which
/// cannot ask the store) does not hand the payload out a second time. Before its fix the
/// copy stayed queued, and the poll returned the payload again.
#[tokio::test]
async fn a_signal_taken_from_the_store_during_its_send_is_not_polled_again() {
    let db = TempDb::new("taken-during-send");
    let (store, faults) = faulty_store::FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).signals(unbounded()).build();
    // What the store keeps is loaded before the send, as on a runtime that received before.
    let none = runtime.wait_for_signal::<u32>("s", "other", Some(Duration::from_millis(10)));
    assert!(none.await.is_err());
    let (row_stored, go) = faults.hold_next_push_after_store();
    let send = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.signal("s", "n", 5u32).await }
    });
    row_stored.await.unwrap();
    let received: u32 = runtime
        .wait_for_signal("s", "n", Some(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(received, 5);
    drop(go);
    send.await.unwrap().unwrap();
    assert_eq!(runtime.poll_signal::<u32>("s", "n").unwrap(), None);
    assert!(stored(&runtime).await.is_empty());
}

/// A receiver that read a row from the store while another receiver here was consuming it
/// leaves the payload that receiver gave back (dropped mid-way) where it is: that copy says
/// how the consuming ended, and the next receiver gets the payload from it. Before its fix
/// the reader removed the copy as stale, the row was consumed, and nobody got the payload.
#[tokio::test]
async fn a_payload_given_back_mid_consuming_is_not_lost_to_a_store_reader() {
    let db = TempDb::new("given-back-store-reader");
    let (store, faults) = faulty_store::FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).signals(unbounded()).build();
    let _open = runtime.session("s");
    runtime.signal("s", "n", 5u32).await.unwrap();
    // The first receiver takes the payload and starts consuming its row, held back.
    let go_take = faults.hold_next_try_take();
    let first = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.wait_for_signal::<u32>("s", "n", None).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // A second receiver finds nothing queued and reads the row, still there.
    let (row_read, go_read) = faults.hold_next_oldest_read();
    let second = tokio::spawn({
        let runtime = runtime.clone();
        async move {
            runtime
                .wait_for_signal::<u32>("s", "n", Some(Duration::from_secs(5)))
                .await
        }
    });
    row_read.await.unwrap();
    // The first is dropped: the payload goes back, its consuming still under way, which
    // then consumes the row.
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    drop(go_take);
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(go_read);
    assert_eq!(second.await.unwrap().unwrap(), 5);
    assert!(stored(&runtime).await.is_empty());
}

/// A `poll_signal` that took a payload from the mailbox has its row removed in the
/// background: a receiver that read that row from the store meanwhile looks past it rather
/// than take it too. Before its fix the receiver consumed the row, still there, and the
/// payload was received twice.
#[tokio::test]
async fn a_row_a_poll_took_is_not_taken_again_by_a_store_reader() {
    let db = TempDb::new("polled-store-reader");
    let (store, faults) = faulty_store::FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).signals(unbounded()).build();
    let none = runtime.wait_for_signal::<u32>("s", "other", Some(Duration::from_millis(10)));
    assert!(none.await.is_err());
    // The send stores its row; its copy is queued only later.
    let (row_stored, go_send) = faults.hold_next_push_after_store();
    let send = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.signal("s", "n", 5u32).await }
    });
    row_stored.await.unwrap();
    // A receiver finds nothing queued and reads the row from the store.
    let (row_read, go_read) = faults.hold_next_oldest_read();
    let reader = tokio::spawn({
        let runtime = runtime.clone();
        async move {
            runtime
                .wait_for_signal::<u32>("s", "n", Some(Duration::from_millis(500)))
                .await
        }
    });
    row_read.await.unwrap();
    // The send queues its copy; a poll takes it, its row's removal held back.
    let go_remove = faults.hold_next_plain_take();
    drop(go_send);
    send.await.unwrap().unwrap();
    assert_eq!(runtime.poll_signal::<u32>("s", "n").unwrap(), Some(5));
    drop(go_read);
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(go_remove);
    let again = reader.await.unwrap();
    assert!(again.is_err(), "the payload was received twice: {again:?}");
    assert!(stored(&runtime).await.is_empty());
}

/// A node that asks how many, then waits (2 s at most) for the signal `paid`, and fails on
/// an answer of 0; its total is the answer and the payment.
fn answered_then_signalled() -> loomflow::CompiledGraph<u32> {
    Graph::new("answered-then-signalled")
        .node_fn("ask", |total: &mut u32, ctx| {
            Box::pin(async move {
                let answer: u32 = ctx.interrupt("how many?")?;
                let paid: u32 = ctx
                    .wait_for_signal("paid")
                    .timeout(Duration::from_secs(2))
                    .await?;
                if answer == 0 {
                    return Err("zero is no answer".into());
                }
                *total = answer + paid;
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
        .unwrap()
}

/// A signal a node took after its answer is handed to it again when the step, failed with
/// that answer, is resumed with another: it was taken from the store, and waiting for it
/// again would wait for one that does not come a second time. Before its fix the receipt
/// was filed under the first answer's fingerprint, and the wait timed out.
#[tokio::test]
async fn a_signal_taken_after_an_answer_is_kept_when_the_question_is_answered_again() {
    let db = TempDb::new("receipt-across-answers");
    for runtime in [Runtime::in_memory(), Runtime::sqlite(db.path()).unwrap()] {
        let graph = answered_then_signalled();
        let asked = graph.invoke(&runtime, "t", 0).await.unwrap();
        assert_eq!(asked.interrupts().len(), 1, "{asked:?}");
        runtime.signal("t", "paid", 40).await.unwrap();
        let failed = graph.resume(&runtime, "t", 0).await.unwrap();
        assert!(
            matches!(failed, loomflow::RunOutcome::Failed { .. }),
            "{failed:?}"
        );
        let done = graph.resume(&runtime, "t", 2).await.unwrap();
        assert_eq!(done.completed().unwrap(), 42);
    }
}

/// A receipt an earlier version filed under the node's answers (`signal:paid@<fingerprint of
/// the answers>`), for a run that stopped before the upgrade, is still found: the node is
/// handed the signal it took, rather than waiting for it again.
#[tokio::test]
async fn a_receipt_filed_under_the_answers_by_an_earlier_version_is_found() {
    // The answers' fingerprint as the journal computes it: FNV-1a over their JSON lines.
    fn fingerprint(lines: &[&str]) -> String {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in lines
            .iter()
            .flat_map(|l| l.bytes().chain(std::iter::once(b'\n')))
        {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        format!("{hash:016x}")
    }
    let graph = answered_then_signalled();
    let runtime = Runtime::in_memory();
    graph.invoke(&runtime, "t", 0).await.unwrap();
    let name = format!("signal:paid@{}", fingerprint(&["2"]));
    let key = loomflow::runtime::JournalKey::new("t", 1, "", 1, "ask", name, 0);
    runtime.store().put_journal(key, json!(40)).await.unwrap();
    let done = graph.resume(&runtime, "t", 2).await.unwrap();
    assert_eq!(done.completed().unwrap(), 42);
}

/// A node's timed wait, run without a worker, takes a signal another process stored before
/// the deadline though this process has not looked at the store since (it looks every
/// `poll_interval`): the wait looks once more when its time is up. Before its fix it timed
/// out, and the timeout was journaled, with the signal in the store.
#[tokio::test]
async fn a_timed_wait_takes_a_signal_another_process_stored_in_time() {
    let db = TempDb::new("timed-wait-last-look");
    let waiting = Runtime::builder()
        .store(SqliteStore::open(db.path()).unwrap())
        .signals(unbounded())
        .poll_interval(Duration::from_secs(60))
        .build();
    let sender = db.open(unbounded());
    let graph = Graph::new("timed-wait")
        .node_fn("wait", |got: &mut Option<u32>, ctx| {
            Box::pin(async move {
                let waited = ctx
                    .wait_for_signal::<u32>("n")
                    .timeout(Duration::from_millis(800));
                *got = waited.await.ok();
                Ok(())
            })
        })
        .edge(START, "wait")
        .edge("wait", END)
        .compile()
        .unwrap();
    let run = tokio::spawn({
        let waiting = waiting.clone();
        async move { graph.invoke(&waiting, "s", None).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    sender.signal("s", "n", 5u32).await.unwrap();
    let got = run.await.unwrap().unwrap().completed().unwrap();
    assert_eq!(got, Some(5));
    assert!(stored(&sender).await.is_empty());
}

/// A send whose signal this process's look at the store brought in first (the watch of a
/// parked wait, here, while the send was still on its way back from the store) says how
/// that look delivered it: to the waiter parked here, `Woke`. Before, it said `Queued`.
#[tokio::test]
async fn a_send_a_look_at_the_store_delivered_first_says_how() {
    use loomflow::runtime::Delivery;
    let db = TempDb::new("refresh-delivered-first");
    let (store, faults) = faulty_store::FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder()
        .store(store)
        .signals(unbounded())
        .poll_interval(Duration::from_millis(10))
        .build();
    let waiter = tokio::spawn({
        let runtime = runtime.clone();
        async move {
            runtime
                .wait_for_signal::<u32>("s", "n", Some(Duration::from_secs(10)))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (row_stored, go) = faults.hold_next_push_after_store();
    let send = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.signal("s", "n", 5u32).await }
    });
    row_stored.await.unwrap();
    // The wait's watch looks at the store every 10 ms, and hands the row to the waiter.
    assert_eq!(waiter.await.unwrap().unwrap(), 5);
    drop(go);
    assert_eq!(send.await.unwrap().unwrap(), Delivery::Woke);
}

/// A runtime whose signal watcher was spawned on a Tokio runtime that returned before the
/// task ever ran (a `block_on` around a `poll_signal`) starts one again on the next: before
/// its fix the watcher's flag stayed set, and the runtime never again saw what other
/// processes stored.
#[test]
fn a_watcher_dropped_before_it_ran_is_started_again() {
    let db = TempDb::new("watcher-unpolled");
    let polling = db.open(MailboxConfig::default());
    let first = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    first.block_on(async {
        assert_eq!(polling.poll_signal::<u32>("s", "go").unwrap(), None);
    });
    drop(first);
    let second = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    second.block_on(async {
        let sender = db.open(MailboxConfig::default());
        sender.signal("s", "go", 7).await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(got) = polling.poll_signal::<u32>("s", "go").unwrap() {
                assert_eq!(got, 7);
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the other process's signal never came in"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}
