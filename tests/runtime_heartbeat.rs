//! One heartbeat per runtime keeps every claim it holds alive: steps far longer than the
//! lease keep their runs, and another process cannot take them meanwhile.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::time::Duration;

#[path = "support/faulty_store.rs"]
mod faulty_store;

use faulty_store::FaultyStore;
use loomflow::RunError;
use loomflow::prelude::*;
use loomflow::runtime::SqliteStore;

const LEASE: Duration = Duration::from_millis(150);

fn slow_graph() -> CompiledGraph<u32> {
    Graph::new("slow")
        .node_fn("work", |n: &mut u32, _ctx| {
            Box::pin(async move {
                // Four leases long, with no write in between: only the heartbeat renews.
                tokio::time::sleep(4 * LEASE).await;
                *n += 1;
                Ok(())
            })
        })
        .edge(START, "work")
        .edge("work", END)
        .compile()
        .unwrap()
}

/// Every half lease for three leases, `other` tries to take each of `threads`' runs, and is
/// refused: their leases were renewed.
async fn refused_for_three_leases(graph: &CompiledGraph<u32>, other: &Runtime, threads: &[&str]) {
    for _ in 0..6 {
        tokio::time::sleep(LEASE / 2).await;
        for thread in threads {
            let taken = graph.recover(other, *thread).await;
            assert!(
                matches!(taken, Err(RunError::Busy { .. })),
                "{thread} was taken over: {taken:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_longer_than_the_lease_keep_their_runs_while_another_process_is_refused() {
    let db = loomflow_tests::TempDb::new("heartbeat");
    let runtime = Runtime::builder()
        .store(SqliteStore::open(db.path()).unwrap())
        .lease(LEASE)
        .build();
    let other = Runtime::builder()
        .store(SqliteStore::open(db.path()).unwrap())
        .lease(LEASE)
        .build();
    let graph = slow_graph();
    // Two runs at once: one heartbeat renews both.
    let first = graph.start(&runtime, "a", 1);
    let second = graph.start(&runtime, "b", 10);
    refused_for_three_leases(&graph, &other, &["a", "b"]).await;
    assert_eq!(first.await.unwrap().completed().unwrap(), 2);
    assert_eq!(second.await.unwrap().completed().unwrap(), 11);
    // Once they finished, the runs are free to be read and carried on elsewhere.
    assert_eq!(
        graph
            .recover(&other, "a")
            .await
            .unwrap()
            .completed()
            .unwrap(),
        2
    );
}

/// A renewal that never answers (its connection died without a word) holds back no other,
/// nor does a read of the runs' rows for a cancel that never answers: the other runs'
/// leases are renewed at every beat, and another process cannot take them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_renewal_holds_back_no_other_run() {
    let db = loomflow_tests::TempDb::new("heartbeat-hung");
    let (store, faults) = FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).lease(LEASE).build();
    let other = Runtime::builder()
        .store(SqliteStore::open(db.path()).unwrap())
        .lease(LEASE)
        .build();
    faults.hang_renewals_of("a");
    faults.hang_run_reads();
    let graph = slow_graph();
    let hung = graph.start(&runtime, "a", 1);
    let kept = graph.start(&runtime, "b", 10);
    refused_for_three_leases(&graph, &other, &["b"]).await;
    assert_eq!(kept.await.unwrap().completed().unwrap(), 11);
    hung.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_with_a_shorter_lease_than_its_runtime_is_renewed_at_its_own_pace() {
    let db = loomflow_tests::TempDb::new("heartbeat-pace");
    // The runtime's own claims last ten leases: its heartbeat beats slowly.
    let runtime = Runtime::builder()
        .store(SqliteStore::open(db.path()).unwrap())
        .lease(10 * LEASE)
        .build();
    let other = Runtime::builder()
        .store(SqliteStore::open(db.path()).unwrap())
        .lease(LEASE)
        .build();
    let graph = slow_graph();
    // A direct run starts the runtime's heartbeat at its slow pace ...
    let direct = graph.start(&runtime, "direct", 0);
    tokio::time::sleep(LEASE / 4).await;
    // ... then a worker on the same runtime claims a run with a lease of its own, ten times
    // shorter: its claim must be renewed before that lease runs out.
    runtime.submit("slow", "queued", 5).await.unwrap();
    let worker = loomflow::worker::Worker::builder(&runtime)
        .graph(&graph)
        .lease(LEASE)
        .build();
    let working = tokio::spawn(async move { worker.run_until_idle().await });
    tokio::time::sleep(LEASE / 2).await;
    refused_for_three_leases(&graph, &other, &["queued"]).await;
    assert_eq!(working.await.unwrap().unwrap(), 1);
    assert_eq!(direct.await.unwrap().completed().unwrap(), 1);
    let done: u32 = runtime.get_state("queued").await.unwrap().unwrap();
    assert_eq!(done, 6);
}

/// A write that finds the lease lost stops the node waiting in memory beside it, as the
/// heartbeat finding the loss does: the run ends, naming the loss, rather than wait for the
/// heartbeat (a third of a minute here) or for a signal that the new owner's run is for.
/// Before its fix the wait stayed parked, and the run with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_on_a_write_stops_a_wait_beside_it() {
    let db = loomflow_tests::TempDb::new("lost-on-write");
    let runtime = Runtime::builder()
        .store(SqliteStore::open(db.path()).unwrap())
        .lease(Duration::from_secs(60))
        .build();
    let (take, taken) = tokio::sync::oneshot::channel::<()>();
    let take = std::sync::Mutex::new(Some(take));
    let taken = std::sync::Mutex::new(Some(taken));
    let graph = Graph::new("pair")
        .node_fn("writes", move |n: &mut u32, ctx| {
            let taken = taken.lock().unwrap().take();
            Box::pin(async move {
                if let Some(taken) = taken {
                    let _ = taken.await;
                }
                *n += ctx
                    .step("effect", || async { Ok::<_, RunError>(1) })
                    .await?;
                Ok(())
            })
        })
        .node_fn("waits", |n: &mut u32, ctx| {
            Box::pin(async move {
                *n += ctx.wait_for_signal::<u32>("approve").await?;
                Ok(())
            })
        })
        .edge(START, "writes")
        .edge(START, "waits")
        .edge("writes", END)
        .edge("waits", END)
        .compile()
        .unwrap();
    let run = graph.run(&runtime, "t", 0).start();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Another process takes the run over, as if this one had stalled past its lease.
    let later = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 120_000;
    let claimed = runtime.store().claim("t", "another", later + 30_000, later);
    assert_eq!(claimed.await.unwrap(), loomflow::runtime::Claim::Claimed);
    take.lock().unwrap().take().unwrap().send(()).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the run ends once a write finds the lease lost");
    assert!(
        matches!(
            &ended,
            Err(RunError::Store(
                loomflow::runtime::StoreError::LeaseLost { .. }
            ))
        ),
        "{ended:?}"
    );
}
