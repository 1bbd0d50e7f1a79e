//! A PostgreSQL restart in the middle of a worker's day: 100 runs each wait for a signal and
//! then sleep (both suspend the run); half the signals are sent, the server is restarted
//! (`.ci/postgres restart`: every connection drops), the other half are sent. Every run
//! completes, none is marked failed, each payment happens once and no signal is lost.
//!
//! Needs the server `.ci/postgres` started (it restarts that one); skipped otherwise.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/postgres.rs"]
mod postgres;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use loomflow::prelude::*;
use loomflow::runtime::{PostgresStore, RunFilter, RunState};

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Order {
    approved: bool,
    paid: bool,
}

const RUNS: usize = 100;

/// A payment whose result is not yet journaled when the store fails runs again (at least
/// once, as documented): the test holds new payments back and lets those under way finish
/// before it restarts the server, so that "once" is what it checks.
static HOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static PAYING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn graph(payments: Arc<Mutex<HashMap<String, usize>>>) -> CompiledGraph<Order> {
    Graph::new("order")
        .node_fn("approve", |order: &mut Order, ctx| {
            Box::pin(async move {
                order.approved = ctx.wait_for_signal("go").await?;
                Ok(())
            })
        })
        .node_fn("settle", move |order: &mut Order, ctx| {
            let payments = Arc::clone(&payments);
            Box::pin(async move {
                ctx.sleep(Duration::from_millis(200)).await?;
                let thread = ctx.thread().to_owned();
                use std::sync::atomic::Ordering::SeqCst;
                loop {
                    PAYING.fetch_add(1, SeqCst);
                    if !HOLD.load(SeqCst) {
                        break;
                    }
                    PAYING.fetch_sub(1, SeqCst);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                let paid = ctx
                    .step("pay", || async {
                        *payments.lock().unwrap().entry(thread).or_default() += 1;
                        Ok::<_, Error>(())
                    })
                    .await;
                PAYING.fetch_sub(1, SeqCst);
                paid?;
                order.paid = true;
                Ok(())
            })
        })
        .edge(START, "approve")
        .edge("approve", "settle")
        .edge("settle", END)
        .compile()
        .unwrap()
}

fn restart_server() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/postgres");
    let status = std::process::Command::new("bash")
        .arg(script)
        .arg("restart")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "the restart failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_complete_once_across_a_postgresql_restart() {
    let pg_dir = std::env::var("LOOMFLOW_PG_DIR").unwrap_or_else(|_| "/tmp/loomflow-pg".into());
    if !Path::new(&pg_dir).join("data/postmaster.pid").exists() {
        println!("skipped: PostgreSQL restart (needs the server .ci/postgres started)");
        return;
    }
    let Some(db) = postgres::TempPgDb::create("restart").await else {
        return;
    };
    let runtime = Runtime::builder()
        .store(PostgresStore::connect(&db.url).await.unwrap())
        .lease(Duration::from_secs(2))
        .build();
    let payments = Arc::new(Mutex::new(HashMap::new()));
    let worker = Worker::builder(&runtime)
        .graph(&graph(Arc::clone(&payments)))
        .concurrency(8)
        .poll_interval(Duration::from_millis(20))
        .park_grace(Duration::from_millis(10))
        .build();
    let handle = worker.start();
    let sender = Runtime::postgres(&db.url).await.unwrap();
    for i in 0..RUNS {
        sender
            .submit("order", &format!("o{i}"), Order::default())
            .await
            .unwrap();
    }
    let wait_until = |state: RunState, count: usize| {
        let runtime = sender.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(90);
            loop {
                let runs = runtime.runs(&RunFilter::new().state(state)).await;
                if runs.as_ref().is_ok_and(|r| r.len() >= count) {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "never {count} runs {state}: {runs:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    wait_until(RunState::Waiting, RUNS).await;
    for i in 0..RUNS / 2 {
        sender.signal(&format!("o{i}"), "go", true).await.unwrap();
    }
    // Runs are settling (sleeping, paying) when every connection drops.
    tokio::time::sleep(Duration::from_millis(150)).await;
    HOLD.store(true, std::sync::atomic::Ordering::SeqCst);
    while PAYING.load(std::sync::atomic::Ordering::SeqCst) > 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let before = sender
        .runs(&RunFilter::new().state(RunState::Completed))
        .await
        .unwrap()
        .len();
    restart_server();
    HOLD.store(false, std::sync::atomic::Ordering::SeqCst);
    println!("restarted with {before} of {RUNS} runs completed");
    // Sends during and after the restart: a failed send is retried, with a key so that a
    // send that did land is not doubled.
    for i in RUNS / 2..RUNS {
        let thread = format!("o{i}");
        let options =
            loomflow::runtime::SignalOptions::default().idempotency_key(format!("go-{i}"));
        let mut tries = 0;
        while let Err(error) = sender
            .signal_with(&thread, "go", true, options.clone())
            .await
        {
            tries += 1;
            assert!(tries < 100, "{thread}: {error}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    wait_until(RunState::Completed, RUNS).await;
    handle.shutdown().await.unwrap();

    let failed = sender
        .runs(&RunFilter::new().state(RunState::Failed))
        .await
        .unwrap();
    assert!(failed.is_empty(), "{failed:?}");
    let payments = payments.lock().unwrap();
    assert_eq!(payments.len(), RUNS);
    for (thread, count) in payments.iter() {
        assert_eq!(*count, 1, "{thread} was paid {count} times");
    }
}
