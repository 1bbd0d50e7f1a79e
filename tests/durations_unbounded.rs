//! `Duration::MAX` where a duration is asked for means "no limit", never a panic: a
//! runtime's poll interval, a caller's patience with a busy thread, a node's sleep and its
//! wait's timeout, how long idempotency keys are remembered.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/held_run.rs"]
mod held_run;

use std::time::Duration;

use held_run::HeldRun;
use loomflow::RuntimeError;
use loomflow::prelude::*;
use loomflow::runtime::{Delivery, MailboxConfig, RunState, SignalOptions, SqliteStore};

/// With a poll interval of `Duration::MAX` the runtime still renews its leases: a run that
/// executes past its lease keeps its thread, and another runtime is refused it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_interval_without_limit_still_renews_leases() {
    let db = loomflow_tests::TempDb::new("unbounded-poll");
    let open = || {
        Runtime::builder()
            .store(SqliteStore::open(db.path()).unwrap())
            .lease(Duration::from_millis(300))
            .poll_interval(Duration::MAX)
            .build()
    };
    let (runtime, other) = (open(), open());
    let held = HeldRun::start(&runtime, "long", 1).await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    match other.delete_thread("long").await {
        Err(RuntimeError::Busy { thread, .. }) => assert_eq!(thread, "long"),
        taken => panic!("the lease was not renewed: {taken:?}"),
    }
    assert_eq!(held.finish().await, 2);
}

/// A caller that waits for a busy thread without limit waits until it is let go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_without_limit_for_a_busy_thread_waits_for_it() {
    let runtime = Runtime::in_memory();
    let held = HeldRun::start(&runtime, "busy", 1).await;
    let graph = Graph::new("held")
        .node_sync("work", |n: &mut u32| *n += 10)
        .edge(START, "work")
        .edge("work", END)
        .compile()
        .unwrap();
    let waiting = {
        let runtime = runtime.clone();
        tokio::spawn(async move {
            graph
                .recover(&runtime, "busy")
                .wait_if_busy(Duration::MAX)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(held.finish().await, 2);
    let outcome = waiting.await.unwrap().unwrap();
    assert_eq!(
        outcome.completed().unwrap(),
        2,
        "the run as its holder left it"
    );
}

/// A node that sleeps without limit suspends its run under a worker; one whose wait has no
/// limit gets the signal when it comes.
#[tokio::test]
async fn a_node_sleeps_and_waits_without_limit() {
    let runtime = Runtime::in_memory();
    let sleeper = Graph::new("sleeper")
        .node_fn("sleep", |_: &mut u32, ctx| {
            Box::pin(async move {
                ctx.sleep(Duration::MAX).await?;
                Ok(())
            })
        })
        .edge(START, "sleep")
        .edge("sleep", END)
        .compile()
        .unwrap();
    runtime.submit("sleeper", "s", 0u32).await.unwrap();
    let worker = Worker::builder(&runtime)
        .graph(&sleeper)
        .park_grace(Duration::ZERO)
        .build();
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    let record = runtime.run("s").await.unwrap().record;
    assert_eq!(record.state, RunState::Sleeping, "{record:?}");
    let thirty_years_ms = 30 * 365 * 24 * 3_600 * 1_000;
    assert!(record.wake_at_ms.unwrap() >= thirty_years_ms, "{record:?}");

    let waiter = Graph::new("waiter")
        .node_fn("wait", |n: &mut u32, ctx| {
            Box::pin(async move {
                *n = ctx
                    .wait_for_signal::<u32>("go")
                    .timeout(Duration::MAX)
                    .await?;
                Ok(())
            })
        })
        .edge(START, "wait")
        .edge("wait", END)
        .compile()
        .unwrap();
    let run = {
        let runtime = runtime.clone();
        tokio::spawn(async move { waiter.invoke(&runtime, "w", 0).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    runtime.signal("w", "go", 7u32).await.unwrap();
    assert_eq!(run.await.unwrap().unwrap().completed().unwrap(), 7);
}

/// Idempotency keys remembered without limit still make a repeated send one.
#[tokio::test]
async fn idempotency_keys_kept_without_limit_still_deduplicate() {
    let runtime = Runtime::builder()
        .signals(MailboxConfig::default().idempotency_key_ttl(Some(Duration::MAX)))
        .build();
    let _open = runtime.session("t");
    for expected in [Delivery::Queued, Delivery::Duplicate] {
        let options = SignalOptions::default().idempotency_key("once");
        let delivery = runtime.signal_with("t", "paid", 1, options).await;
        assert_eq!(delivery.unwrap(), expected);
    }
}
