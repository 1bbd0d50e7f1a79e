//! FIFO per (session, name) when the sends come from several processes on one store: a
//! signal whose `signal(...)` returned before another was sent is received first, by a run
//! and by `Runtime::wait_for_signal`; and a send that loads older signals first says how its
//! own was delivered. SQLite, and PostgreSQL (skipped without
//! `LOOMFLOW_PG_URL`). Two runtimes on one store stand in for two processes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/postgres.rs"]
mod postgres;

use std::time::Duration;

use loomflow::prelude::*;
use loomflow::runtime::{Delivery, PostgresStore, RunState, SqliteStore};

/// `first` and then `second` each wait for one `go`, keeping what they got in order.
fn twice_graph() -> CompiledGraph<Vec<u32>> {
    let mut graph = Graph::new("twice");
    for node in ["first", "second"] {
        graph = graph.node_fn(node, |got: &mut Vec<u32>, ctx| {
            Box::pin(async move {
                got.push(ctx.wait_for_signal::<u32>("go").await?);
                Ok(())
            })
        });
    }
    graph
        .edge(START, "first")
        .edge("first", "second")
        .edge("second", END)
        .compile()
        .unwrap()
}

/// A run suspended on `go` gets 1 from `other`, then 2 from the worker's own process.
async fn a_run_receives_in_send_order(worker_side: Runtime, other: Runtime) {
    let graph = twice_graph();
    let worker = Worker::builder(&worker_side)
        .graph(&graph)
        .park_grace(Duration::ZERO)
        .build();
    worker_side
        .submit("twice", "f-1", Vec::<u32>::new())
        .await
        .unwrap();
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    other.signal("f-1", "go", 1).await.unwrap();
    worker_side.signal("f-1", "go", 2).await.unwrap();
    for _ in 0..5 {
        worker.run_until_idle().await.unwrap();
    }
    let row = worker_side.run("f-1").await.unwrap().record;
    assert_eq!(row.state, RunState::Completed, "{row:?}");
    let got: Vec<u32> = worker_side.get_state("f-1").await.unwrap().unwrap();
    assert_eq!(got, [1, 2]);
}

#[tokio::test]
async fn on_sqlite_a_run_receives_signals_from_two_processes_in_send_order() {
    let db = loomflow_tests::TempDb::new("fifo-run");
    let open = || Runtime::with_store(SqliteStore::open(db.path()).unwrap());
    a_run_receives_in_send_order(open(), open()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_run_receives_signals_from_two_processes_in_send_order() {
    let Some(db) = postgres::TempPgDb::create("fifo").await else {
        return;
    };
    let open = async || Runtime::with_store(PostgresStore::connect(&db.url).await.unwrap());
    a_run_receives_in_send_order(open().await, open().await).await;
}

/// Two runtimes on `db`, `here` and `other`; `here` has looked at the store (a wait on the
/// session `s` that found nothing), so what was stored before is loaded.
async fn two_processes(db: &loomflow_tests::TempDb) -> (Runtime, Runtime) {
    let open = || Runtime::with_store(SqliteStore::open(db.path()).unwrap());
    let (here, other) = (open(), open());
    let nothing = here.wait_for_signal::<u32>("s", "go", Some(Duration::from_millis(10)));
    assert!(nothing.await.is_err());
    (here, other)
}

#[tokio::test]
async fn on_sqlite_a_runtime_wait_receives_signals_from_two_processes_in_send_order() {
    let db = loomflow_tests::TempDb::new("fifo-wait");
    let (here, other) = two_processes(&db).await;
    let _open = here.session("s");
    other.signal("s", "go", 1).await.unwrap();
    here.signal("s", "go", 2).await.unwrap();
    let mut got = Vec::new();
    for _ in 0..2 {
        let wait = here.wait_for_signal::<u32>("s", "go", Some(Duration::from_secs(5)));
        got.push(wait.await.unwrap());
    }
    assert_eq!(got, [1, 2]);
}

/// A send that must first bring in a signal another process stored before it says how its
/// own was delivered: to the waiter parked for it, here.
#[tokio::test]
async fn on_sqlite_a_send_that_loads_older_signals_first_says_it_woke_the_waiter() {
    let db = loomflow_tests::TempDb::new("fifo-delivery");
    let (here, other) = two_processes(&db).await;
    let _open = here.session("s");
    let waiter = here.clone();
    let parked = tokio::spawn(async move {
        waiter
            .wait_for_signal::<u32>("s", "go", Some(Duration::from_secs(5)))
            .await
    });
    // Time for the waiter to park: `Woke` needs it parked before the send (a loaded machine
    // can take a while to start it).
    tokio::time::sleep(Duration::from_millis(250)).await;
    // Stored before `here`'s send, under another name, and not loaded by `here` yet.
    other.signal("s", "other", 1).await.unwrap();
    let delivery = here.signal("s", "go", 2).await.unwrap();
    assert_eq!(delivery, Delivery::Woke);
    assert_eq!(parked.await.unwrap().unwrap(), 2);
}
