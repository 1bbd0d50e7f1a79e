//! What only the PostgreSQL store has to get right: its schema's version and migration when
//! processes start together, change notifications between processes, errors that name the
//! thread, and a worker carrying runs on through it. The store conformance suite
//! (`store_conformance.rs`) checks the rest.
//!
//! Each test makes a database of its own on the server `LOOMFLOW_PG_URL` names
//! (`.ci/postgres` starts one); without it every test says it was skipped and passes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/due.rs"]
mod due;
#[path = "support/faulty_store.rs"]
mod faulty_store;
#[path = "support/postgres.rs"]
mod postgres;
#[path = "support/refunds.rs"]
mod refunds;
#[path = "support/unwritable.rs"]
mod unwritable;

use std::time::Duration;

use loomflow::prelude::*;
use loomflow::runtime::{
    Checkpoint, JournalKey, PostgresOptions, PostgresStore, RunFilter, RunState, RunStatus, Store,
    StoreError,
};
use loomflow::{RunError, SignalError};

use faulty_store::FaultyStore;
use postgres::TempPgDb;

/// How long a test waits for something another connection does before failing.
const PATIENCE: Duration = Duration::from_secs(20);

/// Waits until `check` says yes, looking every few milliseconds, for at most [`PATIENCE`]:
/// for what happens on another connection, which nothing here can be told about.
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_written_by_a_newer_loomflow_is_refused() {
    let Some(db) = TempPgDb::create("schema checks").await else {
        return;
    };
    drop(PostgresStore::connect(&db.url).await.unwrap());
    db.execute("UPDATE loomflow_meta SET schema_version = 99")
        .await;
    let url = db.url.replacen("postgres@", "postgres:not-shown@", 1);
    match PostgresStore::connect(&url).await {
        Err(StoreError::NewerSchema {
            path,
            found,
            supported,
        }) => {
            assert_eq!((found, supported), (99, 7));
            assert!(path.starts_with("postgres://postgres@"), "{path}");
            assert!(!path.contains("not-shown"), "{path}");
        }
        other => panic!("a newer schema must be refused, got {other:?}"),
    }
}

/// Connected without migrating, only a store at this version opens: a database without
/// loomflow's tables gets none, an older store keeps its version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_migrating_only_a_current_store_opens() {
    let Some(db) = TempPgDb::create("no migrate").await else {
        return;
    };
    let options = || PostgresOptions::default().migrate(false);
    match PostgresStore::connect_with(&db.url, options()).await {
        Err(error @ StoreError::NotAStore { .. }) => {
            let message = error.to_string();
            assert!(message.contains("none of loomflow's tables"), "{message}");
        }
        other => panic!("expected NotAStore, got {other:?}"),
    }
    let client = postgres::connect(&db.url).await;
    let tables = client
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'loomflow%'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(tables.get::<_, i64>(0), 0, "no table was created");

    drop(PostgresStore::connect(&db.url).await.unwrap());
    db.execute("UPDATE loomflow_meta SET schema_version = 5")
        .await;
    let current = match PostgresStore::connect_with(&db.url, options()).await {
        Err(StoreError::OlderSchema {
            found, supported, ..
        }) => {
            assert!(found == 5 && supported > found, "{found} {supported}");
            supported
        }
        other => panic!("expected OlderSchema, got {other:?}"),
    };
    let version = client
        .query_one("SELECT schema_version FROM loomflow_meta", &[])
        .await
        .unwrap();
    assert_eq!(version.get::<_, i64>(0), 5, "left as it was");

    db.execute(&format!(
        "UPDATE loomflow_meta SET schema_version = {current}"
    ))
    .await;
    let store = PostgresStore::connect_with(&db.url, options())
        .await
        .unwrap();
    let runs = store.list_runs(&RunFilter::default()).await.unwrap();
    assert!(runs.is_empty());
}

/// A URL naming a database the server does not have is no store there for a caller that
/// does not migrate, and one that does is told to create it (loomflow creates tables, not
/// databases); before, both read only the server's own words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_the_server_does_not_have_is_named() {
    let Ok(admin) = std::env::var("LOOMFLOW_PG_URL") else {
        println!("skipped: PostgreSQL missing database (set LOOMFLOW_PG_URL, or run .ci/run)");
        return;
    };
    let url = postgres::with_dbname(&admin, "loomflow_no_such_db");
    let options = PostgresOptions::default().migrate(false);
    match PostgresStore::connect_with(&url, options).await {
        Err(error @ StoreError::NotAStore { .. }) => {
            let message = error.to_string();
            assert!(
                message.contains("no database loomflow_no_such_db"),
                "{message}"
            );
        }
        other => panic!("expected NotAStore, got {other:?}"),
    }
    match PostgresStore::connect(&url).await {
        Err(error @ StoreError::Open { .. }) => {
            let message = error.to_string();
            assert!(
                message.contains("createdb loomflow_no_such_db"),
                "{message}"
            );
        }
        other => panic!("expected Open, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_starting_together_create_the_tables_once() {
    let Some(db) = TempPgDb::create("schema checks").await else {
        return;
    };
    create_together(&db.url, &db.url).await;
    // A server whose transactions default to serializable: the process that waited for the
    // lock still reads what the first one committed.
    let Some(strict) = TempPgDb::create("schema checks serializable").await else {
        return;
    };
    let serializable = match strict.url.contains('?') {
        true => format!(
            "{}&options=-c%20default_transaction_isolation%3Dserializable",
            strict.url
        ),
        false => format!(
            "{}?options=-c%20default_transaction_isolation%3Dserializable",
            strict.url
        ),
    };
    create_together(&serializable, &strict.url).await;
}

/// Six processes connect to `url` (the database of `admin`) at once: each connects, the
/// tables are made once.
async fn create_together(url: &str, admin: &str) {
    let connecting: Vec<_> = (0..6)
        .map(|_| {
            let url = url.to_owned();
            tokio::spawn(async move { PostgresStore::connect(&url).await })
        })
        .collect();
    let mut stores = Vec::new();
    for store in connecting {
        stores.push(store.await.unwrap().expect("every process connects"));
    }
    let versions = postgres::connect(admin)
        .await
        .query("SELECT schema_version FROM loomflow_meta", &[])
        .await
        .unwrap();
    let versions: Vec<i64> = versions.iter().map(|row| row.get(0)).collect();
    assert_eq!(versions, [7], "one version row, at the current version");
    // And each of them works on the tables the first one made.
    for (n, store) in stores.iter().enumerate() {
        let cp = Checkpoint::new(format!("t{n}"), 1, "", 0, RunStatus::Running, json!(n));
        store.put_checkpoint(cp).await.unwrap();
    }
}

/// A store that outlives the runtime it connected on (its listener went with that runtime)
/// says it no longer listens, so its readers poll rather than wait for notifications that
/// never come.
#[test]
fn a_store_outliving_its_runtime_says_it_no_longer_listens() {
    let first = tokio::runtime::Runtime::new().unwrap();
    let Some((db, store)) = first.block_on(async {
        let db = TempPgDb::create("a listener's runtime gone").await?;
        let store = PostgresStore::connect(&db.url).await.unwrap();
        eventually("the listener connects", async || {
            store.change_counter().is_some()
        })
        .await;
        Some((db, store))
    }) else {
        return;
    };
    drop(first);
    assert_eq!(
        store.change_counter(),
        None,
        "the listener went with its runtime"
    );
    drop((store, db));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_change_counter_moves_when_another_process_sends_a_signal() {
    let Some(db) = TempPgDb::create("notifications").await else {
        return;
    };
    let listening = PostgresStore::connect(&db.url).await.unwrap();
    let quiet = PostgresOptions::default().notifications(false);
    let sender = Runtime::with_store(PostgresStore::connect_with(&db.url, quiet).await.unwrap());
    assert_eq!(
        sender.store().change_counter(),
        None,
        "a store that does not listen cannot tell"
    );
    eventually("the listener connects", async || {
        listening.change_counter().is_some()
    })
    .await;

    let before = listening.change_counter().unwrap();
    sender.signal("s1", "go", true).await.unwrap();
    eventually("a signal sent elsewhere moves the counter", async || {
        listening.change_counter() != Some(before)
    })
    .await;

    // The listening connection is cut (a server restart, a proxy timeout): it comes back
    // by itself, and hears what is sent after.
    let admin = postgres::connect(&db.url).await;
    let cut = admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND query = 'LISTEN loomflow_changes'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(cut, 1, "one listening connection");
    eventually("the listener connects again", async || {
        admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND query = 'LISTEN loomflow_changes'",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
            == 1
            && listening.change_counter().is_some()
    })
    .await;
    let before = listening.change_counter().unwrap();
    sender
        .store()
        .submit_run("t-after", "graph", json!(null), 1)
        .await
        .unwrap();
    eventually("a run submitted elsewhere moves the counter", async || {
        listening.change_counter().is_some_and(|now| now != before)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_names_its_thread() {
    let Some(db) = TempPgDb::create("errors").await else {
        return;
    };
    let store = PostgresStore::connect(&db.url).await.unwrap();
    // PostgreSQL text cannot hold a NUL character (SQLite's can): the server refuses it,
    // as it would again (not a failure of the store).
    let thread = "order\u{0}7";
    let cp = Checkpoint::new(thread, 1, "", 0, RunStatus::Running, json!(1));
    match store.put_checkpoint(cp).await {
        Err(StoreError::Refused {
            thread: named,
            message,
        }) => {
            assert_eq!(named, thread);
            assert!(message.contains("cannot keep a NUL character"), "{message}");
        }
        other => panic!("expected a refused write naming the thread, got {other:?}"),
    }
    // A NUL inside a JSON value is fine: values are stored as JSON text, where it is escaped.
    let cp = Checkpoint::new("order-8", 1, "", 0, RunStatus::Running, json!("a\u{0}b"));
    store.put_checkpoint(cp).await.unwrap();
    let back = store
        .latest_checkpoint("order-8", "")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back.body, json!("a\u{0}b"));
    // A lookup of such a name is refused as well, not a failed read a worker would retry
    // without end (a tool call id from a model's reply is looked up as a journal key).
    let key = JournalKey::new("order-8", 1, "", 1, "tools", "tool:call\u{0}1", 0);
    match store.get_journal(&key).await {
        Err(StoreError::Refused { thread, .. }) => assert_eq!(thread, "order-8"),
        other => panic!("expected a refused lookup naming the thread, got {other:?}"),
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Refund {
    order: String,
    approved: Option<bool>,
}

/// `approval` waits for the signal `approve`.
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
                    Err(RunError::Signal(SignalError::Timeout { .. })) => {}
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

async fn state_of(runtime: &Runtime, thread: &str) -> Option<RunState> {
    runtime.run(thread).await.ok().map(|info| info.record.state)
}

/// Two runtimes on one database stand in for a worker process and a web process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_carries_runs_on_through_signals_sent_by_another_process() {
    let Some(db) = TempPgDb::create("worker").await else {
        return;
    };
    let worker_side = Runtime::postgres(&db.url).await.unwrap();
    let web_side = Runtime::postgres(&db.url).await.unwrap();
    let worker = Worker::builder(&worker_side)
        .graph(&refund_graph())
        .poll_interval(Duration::from_millis(10))
        .park_grace(Duration::ZERO)
        .build();
    let handle = worker.start();
    for order in ["o-1", "o-2", "o-3"] {
        web_side
            .submit("refund", order, Refund::default())
            .await
            .unwrap();
    }
    for order in ["o-1", "o-2", "o-3"] {
        eventually(&format!("{order} waits"), async || {
            state_of(&web_side, order).await == Some(RunState::Waiting)
        })
        .await;
    }
    web_side.signal("o-2", "approve", true).await.unwrap();
    web_side.signal("o-3", "approve", false).await.unwrap();
    for order in ["o-2", "o-3"] {
        eventually(&format!("{order} completes"), async || {
            state_of(&web_side, order).await == Some(RunState::Completed)
        })
        .await;
    }
    handle.shutdown().await.unwrap();
    let approved: Refund = web_side.get_state("o-2").await.unwrap().unwrap();
    let rejected: Refund = web_side.get_state("o-3").await.unwrap().unwrap();
    assert_eq!(
        (approved.approved, rejected.approved),
        (Some(true), Some(false))
    );
    assert_eq!(
        state_of(&web_side, "o-1").await,
        Some(RunState::Waiting),
        "a run whose signal never came still waits"
    );
    let run = web_side.run("o-2").await.unwrap();
    // At least once to start and once to resume.
    assert!(run.record.attempts >= 2, "{:?}", run.record);
    assert!(run.record.lease_owner.is_none());
}

/// A worker whose poll interval is long (it relies on `LISTEN/NOTIFY`) carries on a run it
/// suspended on a timer, and one whose wait has a deadline, when they are due: not at its
/// next poll, a minute later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_fires_timers_and_deadlines_when_due_with_a_long_poll_interval() {
    let Some(db) = TempPgDb::create("worker timers").await else {
        return;
    };
    let runtime = Runtime::postgres(&db.url).await.unwrap();
    due::timers_and_deadlines_fire_when_due(&runtime).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_dropped_mid_run_lets_its_run_go_at_once() {
    let Some(db) = TempPgDb::create("worker").await else {
        return;
    };
    // A lease far longer than the test: only a release can free the run in time.
    let runtime = Runtime::builder()
        .store(PostgresStore::connect(&db.url).await.unwrap())
        .lease(Duration::from_secs(3_600))
        .build();
    let graph = refund_graph();
    let run = graph.start(&runtime, "o-9", Refund::default());
    eventually("o-9 runs, held", async || {
        runtime.run("o-9").await.is_ok_and(|info| {
            info.record.state == RunState::Running && info.record.lease_owner.is_some()
        })
    })
    .await;
    run.abort();
    eventually("the dropped execution released o-9", async || {
        runtime
            .run("o-9")
            .await
            .is_ok_and(|info| info.record.lease_owner.is_none())
    })
    .await;
}

/// A store on `db` after a checkpoint of thread `t` was written and `downgrade` took the
/// schema back to an older version: reopening migrated it, and the checkpoint is still
/// there.
async fn migrated_from(db: &TempPgDb, downgrade: &str) -> PostgresStore {
    let store = PostgresStore::connect(&db.url).await.unwrap();
    let cp = Checkpoint::new("t", 1, "", 0, RunStatus::Running, json!({ "state": 1 }));
    store.put_checkpoint(cp).await.unwrap();
    drop(store);
    db.execute(downgrade).await;
    let store = PostgresStore::connect(&db.url).await.unwrap();
    let latest = store.latest_checkpoint("t", "").await.unwrap().unwrap();
    assert_eq!(latest.state(), &json!(1));
    store
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_database_gains_the_audit_log() {
    let Some(db) = TempPgDb::create("audit migration").await else {
        return;
    };
    let store = migrated_from(
        &db,
        "DROP TABLE loomflow_audit; UPDATE loomflow_meta SET schema_version = 1",
    )
    .await;
    let entry = loomflow::runtime::AuditEntry::new(
        "t",
        loomflow::runtime::AuditKind::Resume,
        "n#0",
        json!({}),
    );
    store.append_audit(vec![entry]).await.unwrap();
    let log = store
        .audit(&loomflow::runtime::AuditQuery::thread("t"))
        .await
        .unwrap();
    assert_eq!(log.len(), 1);
}

/// Version 3 indexes the suspended runs and the pending signals by session, so that a
/// worker's search for a run whose signal has arrived does not read every row the table
/// has held; a version 2 database gains them, and keeps its rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_2_database_gains_the_indexes_of_suspended_runs() {
    let Some(db) = TempPgDb::create("suspension indexes").await else {
        return;
    };
    migrated_from(
        &db,
        "DROP INDEX loomflow_runs_suspended; DROP INDEX loomflow_signals_pending_by_session;
         UPDATE loomflow_meta SET schema_version = 2",
    )
    .await;
    let client = postgres::connect(&db.url).await;
    let indexes: Vec<String> = client
        .query(
            "SELECT indexname::TEXT FROM pg_indexes
             WHERE indexname IN ('loomflow_runs_suspended', 'loomflow_signals_pending_by_session')
             ORDER BY indexname",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(
        indexes,
        [
            "loomflow_runs_suspended",
            "loomflow_signals_pending_by_session"
        ]
    );
    let version: i64 = client
        .query_one("SELECT schema_version FROM loomflow_meta", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, 7);
}

/// A cancel request that waits for another write holding the run's row answers with the
/// row that write left: a run that finished meanwhile is reported finished, and its cancel
/// is not recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_that_waits_for_a_finish_reports_the_finished_run() {
    let Some(db) = TempPgDb::create("cancel race").await else {
        return;
    };
    let store = PostgresStore::connect(&db.url).await.unwrap();
    store.submit_run("t", "g", json!(0), 1).await.unwrap();
    // Another transaction finishes the run and holds the row until it commits.
    let mut finisher = postgres::connect(&db.url).await;
    let finishing = finisher.transaction().await.unwrap();
    finishing
        .execute(
            "UPDATE loomflow_runs SET status = 'completed', runnable_at_ms = NULL
             WHERE thread = 't'",
            &[],
        )
        .await
        .unwrap();
    let cancel = tokio::spawn(async move { store.request_cancel("t", 2).await });
    let watcher = postgres::connect(&db.url).await;
    eventually("the cancel waits for the row", async || {
        let waiting: i64 = watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        waiting > 0
    })
    .await;
    finishing.commit().await.unwrap();
    let record = cancel
        .await
        .unwrap()
        .unwrap()
        .expect("the thread has a row");
    assert_eq!(
        (record.state, record.cancel_requested),
        (RunState::Completed, false)
    );
}

/// A run submitted from another process while the worker is looking (here, held in its
/// read of the next wake time, after it read the change counter) is carried on at once: the
/// notification that comes meanwhile ends the worker's next nap. It is not left for the
/// next poll, an hour away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_submitted_while_a_worker_looks_is_not_left_for_its_next_poll() {
    let Some(db) = TempPgDb::create("worker notified while looking").await else {
        return;
    };
    let (store, faults) = FaultyStore::new(PostgresStore::connect(&db.url).await.unwrap());
    let worker_side = Runtime::builder().store(store).build();
    let store = worker_side.store();
    eventually("the store listens for changes", async || {
        store.change_counter().is_some()
    })
    .await;
    let graph = Graph::new("quick")
        .node_sync("a", |n: &mut u32| *n += 1)
        .edge(START, "a")
        .edge("a", END)
        .compile()
        .unwrap();
    let (looking, go_on) = faults.hold_next_wake_read();
    let worker = Worker::builder(&worker_side)
        .graph(&graph)
        .poll_interval(Duration::from_secs(3_600))
        .build()
        .start();
    looking.await.unwrap();
    let before = store.change_counter();
    let submitter = Runtime::postgres(&db.url).await.unwrap();
    submitter.submit("quick", "q-1", json!(1)).await.unwrap();
    eventually("the worker's store heard of the submit", async || {
        store.change_counter() != before
    })
    .await;
    go_on.send(()).unwrap();
    eventually("the run is carried on", async || {
        let run = submitter.run("q-1").await.unwrap();
        run.record.state == RunState::Completed
    })
    .await;
    worker.shutdown().await.unwrap();
}

/// A process that waits for a signal and runs no worker (a web handler waiting for a
/// callback, say) hears of one sent by another process when it is sent: the store's
/// notification wakes it, not its next poll, an hour away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_without_a_worker_hears_a_signal_from_another_process_at_once() {
    let Some(db) = TempPgDb::create("wait notified").await else {
        return;
    };
    let waiter = Runtime::builder()
        .store(PostgresStore::connect(&db.url).await.unwrap())
        .poll_interval(Duration::from_secs(3_600))
        .build();
    eventually("the waiter's store listens", async || {
        waiter.store().change_counter().is_some()
    })
    .await;
    let sender = Runtime::postgres(&db.url).await.unwrap();
    for round in 0..3_u32 {
        let waiting = {
            let waiter = waiter.clone();
            tokio::spawn(async move {
                waiter
                    .wait_for_signal::<u32>("callback", "paid", Some(PATIENCE))
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        sender.signal("callback", "paid", round).await.unwrap();
        let received = tokio::time::timeout(PATIENCE, waiting).await;
        assert_eq!(
            received.unwrap().unwrap().unwrap(),
            round,
            "round {round}: the signal reached the waiter"
        );
    }
}

/// A write PostgreSQL refuses for what it holds (a step's name longer than its index can
/// take) fails the run: it is not let go runnable, for a worker to claim it and be refused
/// again, and again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_postgres_refuses_fails_the_run() {
    let Some(db) = TempPgDb::create("refused write").await else {
        return;
    };
    let runtime = Runtime::postgres(&db.url).await.unwrap();
    let graph: CompiledGraph<u32> = Graph::new("long")
        .node_fn("step", |n: &mut u32, ctx| {
            Box::pin(async move {
                // Letters that do not repeat (a repeated one would compress to fit).
                let mut seed: u32 = 7;
                let name: String = (0..9_000)
                    .map(|_| {
                        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                        char::from(b'a' + u8::try_from((seed >> 16) % 26).unwrap())
                    })
                    .collect();
                *n = ctx.step(&name, || async { Ok::<_, String>(1) }).await?;
                Ok(())
            })
        })
        .edge(START, "step")
        .edge("step", END)
        .compile()
        .unwrap();
    let outcome = graph.run(&runtime, "n-1", 0).await;
    assert!(
        matches!(outcome, Ok(RunOutcome::Failed { .. }) | Err(_)),
        "{outcome:?}"
    );
    let record = runtime.run("n-1").await.unwrap().record;
    assert_eq!(record.state, RunState::Failed, "{record:?}");
    assert_eq!(record.lease_owner, None);
    let error = record.error.unwrap_or_default();
    assert!(error.contains("refused"), "{error}");
}

/// Who decided an approval, with a NUL in the name, is kept (U+FFFD in its place), as SQLite
/// and memory keep it: before, PostgreSQL refused the audit row written with the tool's
/// result, and the run failed after the tool had run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_named_with_a_nul_does_not_fail_the_run() {
    let Some(db) = TempPgDb::create("nul approver").await else {
        return;
    };
    let runtime = Runtime::postgres(&db.url).await.unwrap();
    refunds::ask_for_refund(&runtime, "n-2", 1_299).await;
    runtime
        .decide_approval_by(
            "n-2",
            "call_1",
            loomflow::tool::ApprovalDecision::Allow,
            "ada\0lovelace",
        )
        .await
        .unwrap();
    let replies = vec![loomflow::model::ModelResponse::text("Done.")];
    let resumed = refunds::agent(&runtime, replies).resume("n-2").await;
    assert!(resumed.is_ok(), "{resumed:?}");
    let record = runtime.run("n-2").await.unwrap().record;
    assert_eq!(record.state, RunState::Completed, "{record:?}");
}

/// The pool's connections are probed as the listener's are: an idle connection whose link
/// died is found closed before it is handed out, instead of hanging the next statement.
/// Read from Linux's socket table: an idle socket runs its keepalive timer, due in
/// hundredths of a second (tokio-postgres's own default is two hours).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_connections_are_probed_while_idle() {
    let Some(db) = TempPgDb::create("keepalive").await else {
        return;
    };
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        eprintln!("skipped: no /proc/net/tcp here");
        return;
    };
    drop(table);
    // This process's sockets, by inode.
    let sockets = || -> std::collections::BTreeSet<String> {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .filter_map(|link| {
                let link = link.to_string_lossy().into_owned();
                Some(link.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
            })
            .collect()
    };
    let before = sockets();
    let options = PostgresOptions::default().notifications(false);
    let store = PostgresStore::connect_with(&db.url, options).await.unwrap();
    store.get_run("anyone").await.unwrap();
    // The store's (other tests run beside this one): opened since, idle, to the server.
    let ours: std::collections::BTreeSet<String> = sockets().difference(&before).cloned().collect();
    // postgres://user@host:port/name
    let at = db
        .url
        .rsplit('@')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap();
    let port: u16 = at
        .rsplit_once(':')
        .map_or(Ok(5432), |(_, p)| p.parse())
        .unwrap();
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap()
        + &std::fs::read_to_string("/proc/net/tcp6").unwrap_or_default();
    // Columns: sl local remote st tx:rx tr:when retrnsmt uid timeout inode.
    let timers: Vec<String> = table
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .filter(|c| c.len() > 9 && ours.contains(c[9]) && c[3] == "01")
        .filter(|c| c[5].starts_with("02:"))
        .filter(|c| c[2].rsplit(':').next() == Some(&format!("{port:04X}")[..]))
        .map(|c| c[5].to_owned())
        .collect();
    assert!(!timers.is_empty(), "no connection to the server found");
    let probed_soon = |timer: &String| {
        let (kind, due) = timer.split_once(':').unwrap();
        kind == "02" && u64::from_str_radix(due, 16).unwrap() <= 60 * 100
    };
    assert!(
        timers.iter().all(probed_soon),
        "every connection is probed within a minute: {timers:?}"
    );
}

/// A claim that chose one of several runnable runs wakes the other workers: the runs it did
/// not choose were locked while it ran, so a worker claiming at that moment passed over
/// them and went to sleep. (Here, a run whose lease ran out and a queued one.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_passed_over_other_runs_wakes_the_workers() {
    let Some(db) = TempPgDb::create("claim-wakes").await else {
        return;
    };
    let listening = PostgresStore::connect(&db.url).await.unwrap();
    let quiet = PostgresOptions::default().notifications(false);
    let store = PostgresStore::connect_with(&db.url, quiet).await.unwrap();
    let graphs = ["g".to_owned()];
    store.submit_run("died", "g", json!(0), 5).await.unwrap();
    let claimed = store
        .claim_next_run(&graphs, "dead", 100, 6, 6)
        .await
        .unwrap();
    assert!(claimed.is_some());
    let step = Checkpoint::new("died", 1, "", 1, RunStatus::Running, json!({"state": 1}));
    store
        .put_checkpoint_claimed(step, "dead", 100)
        .await
        .unwrap();
    store.submit_run("queued", "g", json!(0), 10).await.unwrap();
    // Once the notifications of the writes above have come.
    let mut before = listening.change_counter();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = listening.change_counter();
        if now == before {
            break;
        }
        before = now;
    }
    let claimed = store
        .claim_next_run(&graphs, "w", u64::MAX / 4, 200, 200)
        .await;
    assert_eq!(claimed.unwrap().unwrap().record.thread, "died");
    eventually("the claim notifies", async || {
        listening.change_counter() != before
    })
    .await;
}

/// An audit entry whose subject holds a NUL (a tool name a model made up) is kept, the NUL
/// as U+FFFD, as the memory store and SQLite keep it: before its fix PostgreSQL refused the
/// write, and the step that journaled the call failed its run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audit_subject_holding_a_nul_is_kept() {
    let Some(db) = TempPgDb::create("audit nul").await else {
        return;
    };
    let store = PostgresStore::connect(&db.url).await.unwrap();
    let entry = loomflow::runtime::AuditEntry::new(
        "t",
        loomflow::runtime::AuditKind::ToolCall,
        "lookup\0",
        serde_json::json!({ "outcome": "unknown tool" }),
    );
    store.append_audit(vec![entry]).await.unwrap();
    let query = loomflow::runtime::AuditQuery::thread("t");
    let kept = store.audit(&query).await.unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].subject, "lookup\u{FFFD}");
}

/// A run's stream dropped at its error event (a reader that stops at the last event) still
/// records the run as failed: the write is not cut short with the run's task, which would
/// leave the failed run to be run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_dropped_at_its_error_still_records_the_failure() {
    use futures_util::StreamExt;
    let Some(db) = TempPgDb::create("failure recorded").await else {
        return;
    };
    let runtime = Runtime::postgres(&db.url).await.unwrap();
    let graph = Graph::new("fails")
        .node_fn("boom", |_: &mut u32, _| {
            Box::pin(async { Err(loomflow::graph::NodeError::failed("boom")) })
        })
        .edge(START, "boom")
        .edge("boom", END)
        .compile()
        .unwrap();
    for i in 0..5 {
        let thread = format!("f-{i}");
        let mut stream = graph.stream(&runtime, &thread, 0);
        while let Some(event) = stream.next().await {
            if matches!(event.kind, loomflow::EventKind::Error { .. }) {
                break;
            }
        }
        drop(stream);
        eventually("the run recorded as failed", async || {
            runtime
                .run(&thread)
                .await
                .is_ok_and(|info| info.record.state == RunState::Failed)
        })
        .await;
    }
}

/// Version 5 indexes the runs a worker carries on first with a queued run claimed before
/// among them (an `Exit` execution's row stays queued), under the claim's own predicate; a
/// version 4 database gains it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_4_database_gains_the_index_of_recovering_runs_with_claimed_queued_ones() {
    let Some(db) = TempPgDb::create("recovering index").await else {
        return;
    };
    migrated_from(
        &db,
        "DROP INDEX loomflow_runs_recovering;
         CREATE INDEX loomflow_runs_recovering ON loomflow_runs (updated_at_ms)
             WHERE runnable_at_ms = 0 AND status IS DISTINCT FROM 'queued';
         UPDATE loomflow_meta SET schema_version = 4",
    )
    .await;
    let client = postgres::connect(&db.url).await;
    let index: String = client
        .query_one(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'loomflow_runs_recovering'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(index.contains("attempts > 0"), "{index}");
    let version: i64 = client
        .query_one("SELECT schema_version FROM loomflow_meta", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, 7);
}

/// A journal entry whose step is negative, or whose occurrence is past `u32`, is a corrupt
/// row naming its thread, not one filed under 0 that a fork would copy there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_row_out_of_range_is_corrupt() {
    let Some(db) = TempPgDb::create("corrupt journal").await else {
        return;
    };
    let store = PostgresStore::connect(&db.url).await.unwrap();
    for (thread, fault) in [
        ("ord_9", "step = -2"),
        ("ord_10", "occurrence = 5000000000"),
    ] {
        let key = JournalKey::new(thread, 1, "", 2, "pay", "charge", 0);
        store
            .put_journal(key, serde_json::json!("ch_1"))
            .await
            .unwrap();
        db.execute(&format!(
            "UPDATE loomflow_journal SET {fault} WHERE thread = '{thread}'"
        ))
        .await;
        let error = store.list_journal(thread, 1).await.unwrap_err();
        assert!(
            matches!(&error, StoreError::Corrupt { thread: named, .. } if named == thread),
            "{fault}: {error:?}"
        );
    }
}

/// Version 6 indexes the queued runs never claimed, under the claim's own predicate: a
/// worker's claim finds the oldest without reading every finished run (it did, by update
/// time, with the index of updates). A version 5 database gains it, and the claim's query
/// reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_5_database_gains_the_index_of_queued_runs() {
    let Some(db) = TempPgDb::create("queued index").await else {
        return;
    };
    migrated_from(
        &db,
        "DROP INDEX loomflow_runs_queued; UPDATE loomflow_meta SET schema_version = 5",
    )
    .await;
    let client = postgres::connect(&db.url).await;
    client
        .batch_execute(
            "INSERT INTO loomflow_runs (thread, status, graph, runnable_at_ms, attempts,
                 created_at_ms, updated_at_ms)
             SELECT 'done-' || i, 'completed', 'g', NULL, 1, i, i
                 FROM generate_series(1, 20000) i;
             INSERT INTO loomflow_runs (thread, status, graph, runnable_at_ms, attempts,
                 created_at_ms, updated_at_ms)
             SELECT 'queued-' || i, 'queued', 'g', 0, 0, i, 30000 + i
                 FROM generate_series(1, 100) i;
             ANALYZE loomflow_runs;",
        )
        .await
        .unwrap();
    let plan: Vec<String> = client
        .query(
            "EXPLAIN SELECT thread FROM loomflow_runs
                 WHERE runnable_at_ms = 0 AND status = 'queued' AND attempts = 0
                   AND (lease_owner IS NULL OR lease_until_ms <= 0) AND graph = ANY($1)
                 ORDER BY updated_at_ms LIMIT 1 FOR UPDATE SKIP LOCKED",
            &[&vec!["g".to_owned()]],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(
        plan.iter()
            .any(|line| line.contains("loomflow_runs_queued")),
        "{plan:#?}"
    );
    let version: i64 = client
        .query_one("SELECT schema_version FROM loomflow_meta", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, 7);
}

/// A database whose encoding cannot hold every text loomflow keeps is refused when the
/// store connects, naming the encoding: before, it was taken, and the first run whose
/// state held an emoji failed (`Refused`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_in_latin1_is_refused_at_connect() {
    let with = "ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0";
    let Some(db) = TempPgDb::create_with("latin1", with).await else {
        return;
    };
    let refused = PostgresStore::connect(&db.url).await.err();
    let text = refused
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(
        matches!(refused, Some(StoreError::Open { .. })) && text.contains("LATIN1"),
        "{text}"
    );
}
