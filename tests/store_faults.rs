//! What a run's claim does when the store fails under it, or when the run moves on while
//! someone looks at it: a resume request taken by an execution that could not write its
//! step is applied by the next execution, once the lease runs out (`Sync` and `Async`); a
//! cancel decides from the run as it is once claimed; a node waiting in memory stops when
//! another execution took its run over.
//!
//! Faults are injected by a store that passes every call to a real SQLite store (see
//! `support/faulty_store.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/faulty_store.rs"]
mod faulty_store;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use loomflow::prelude::*;
use loomflow::runtime::{Durability, RunState, RunStatus, SqliteStore, StoreError};
use loomflow::{RunError, RunHandle};

use faulty_store::FaultyStore;
use tokio::sync::Notify;

const LEASE: Duration = Duration::from_millis(300);

/// `review` asks how many; the answer is added to the state.
fn review_graph() -> CompiledGraph<u32> {
    Graph::new("review")
        .node_fn("review", |n: &mut u32, ctx| {
            Box::pin(async move {
                let answer: u32 = ctx.interrupt(json!("how many?"))?;
                *n += answer;
                Ok(())
            })
        })
        .edge(START, "review")
        .edge("review", END)
        .compile()
        .unwrap()
}

async fn state_of(runtime: &Runtime, thread: &str) -> RunState {
    runtime.run(thread).await.unwrap().record.state
}

/// Waits up to `within` for `thread`'s run to be in `state`; says whether it got there.
async fn reaches(runtime: &Runtime, thread: &str, state: RunState, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        // The run may not be on its row yet.
        let now = runtime.run(thread).await.ok().map(|info| info.record.state);
        if now == Some(state) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// A resume request sent for a fork's question while the fork finishes (its checkpoint
/// written, the requests queued for the thread's earlier run being dropped) is checked
/// against the fork's checkpoint and taken: it is kept for the fork's run, not dropped with
/// those (the sender was told it was taken, and the run waited for ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_for_a_forks_own_question_is_kept() {
    let db = loomflow_tests::TempDb::new("faults-fork-request");
    let (store, faults) = FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).build();
    let graph = review_graph();
    let asked = graph.run(&runtime, "source", 1).await.unwrap();
    assert_eq!(asked.interrupts().len(), 1);
    let at = runtime
        .store()
        .latest_checkpoint("source", "")
        .await
        .unwrap()
        .unwrap();
    let (written, go_on) = faults.hold_after_checkpoint_of("branch");
    let forking = {
        let runtime = runtime.clone();
        tokio::spawn(async move { runtime.fork("source", at.id, "branch").await })
    };
    let ten = Duration::from_secs(10);
    let said = tokio::time::timeout(ten, written).await;
    if said.is_err() {
        panic!("the fork's checkpoint was not written: {:?}", forking.await);
    }
    let sent = tokio::time::timeout(ten, runtime.request_resume("branch", 5)).await;
    assert!(matches!(sent, Ok(Ok(_))), "{sent:?}");
    go_on.send(()).unwrap();
    forking.await.unwrap().unwrap();

    let done = graph.recover(&runtime, "branch").await.unwrap();
    assert_eq!(
        done.completed().unwrap(),
        6,
        "the request sent for the fork's question"
    );
}

/// A worker takes a resume request and cannot write the resumed step (the store fails):
/// its execution lets the run go runnable (the next one applies the request from the
/// journal) rather than holding it for as long as the worker runs, and once the store works
/// again the run is carried on with the request's value, once. The executions stopped by
/// the store are no lapses (none died): the run is not failed for them.
async fn a_request_whose_step_could_not_be_written_is_applied_later(durability: Durability) {
    let db = loomflow_tests::TempDb::new("faults-request");
    let (store, faults) = FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder()
        .store(store)
        .lease(LEASE)
        .durability(durability)
        .build();
    let graph = review_graph();
    let worker = Worker::builder(&runtime)
        .graph(&graph)
        .poll_interval(Duration::from_millis(20))
        .build();
    let handle = worker.start();
    runtime.submit("review", "r-1", 1u32).await.unwrap();
    assert!(
        reaches(
            &runtime,
            "r-1",
            RunState::Interrupted,
            Duration::from_secs(5)
        )
        .await
    );

    faults.fail_checkpoints.store(true, Ordering::SeqCst);
    runtime.request_resume("r-1", 41u32).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while faults.checkpoint_faults() == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        faults.checkpoint_faults() > 0,
        "the worker never tried the step"
    );
    // Several leases: time enough for a claim that is still renewed to show it.
    tokio::time::sleep(3 * LEASE).await;
    faults.fail_checkpoints.store(false, Ordering::SeqCst);

    assert!(
        reaches(
            &runtime,
            "r-1",
            RunState::Completed,
            Duration::from_secs(10)
        )
        .await,
        "the run was not carried on: {:?}",
        runtime.run("r-1").await.unwrap().record
    );
    let done: u32 = runtime.get_state("r-1").await.unwrap().unwrap();
    assert_eq!(done, 42, "the request's value is applied once");
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_request_survives_a_step_the_store_failed_to_write() {
    a_request_whose_step_could_not_be_written_is_applied_later(Durability::Sync).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_request_survives_a_background_write_that_failed() {
    a_request_whose_step_could_not_be_written_is_applied_later(Durability::Async).await;
}

/// A cancel that read the run's row (interrupted) before a resume completed the run finds
/// it completed once it holds the claim: it leaves it completed and says so, rather than
/// writing the completed checkpoint again as cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_that_races_the_runs_completion_leaves_it_completed() {
    let db = loomflow_tests::TempDb::new("faults-cancel");
    let (store, faults) = FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::with_store(store);
    let graph = review_graph();
    let outcome = graph.invoke(&runtime, "c-1", 1).await.unwrap();
    assert_eq!(outcome.interrupts().len(), 1);

    let (read, go) = faults.hold_next_run_read();
    let cancel = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.cancel("c-1").await }
    });
    read.await.unwrap();
    // The cancel read the run as interrupted; the run completes before it claims it.
    let done = graph.resume(&runtime, "c-1", 41).await.unwrap();
    assert_eq!(done.completed().unwrap(), 42);
    go.send(()).unwrap();

    let record = cancel.await.unwrap().unwrap();
    assert_eq!(record.state, RunState::Completed, "{record:?}");
    assert_eq!(state_of(&runtime, "c-1").await, RunState::Completed);
    let latest = runtime.store().latest_checkpoint("c-1", "").await.unwrap();
    assert_eq!(latest.unwrap().status, RunStatus::Completed);
}

/// A node waiting in memory for a signal that will not come, when another execution takes
/// the run over (this one's lease was lost): the wait ends, and the execution stops with
/// the lost lease instead of waiting for as long as the process lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_ends_when_the_lease_is_lost() {
    let runtime = Runtime::builder().lease(LEASE).build();
    let graph = Graph::new("waits")
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
    let run = graph.start(&runtime, "w-1", 1);
    assert!(reaches(&runtime, "w-1", RunState::Running, Duration::from_secs(5)).await);
    tokio::time::sleep(LEASE / 2).await;

    // Another process, whose clock runs ahead, finds the lease expired and takes the run.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let ahead = now + 10 * LEASE.as_millis() as u64;
    let claim = runtime
        .store()
        .claim("w-1", "intruder", ahead + 60_000, ahead);
    assert!(matches!(
        claim.await.unwrap(),
        loomflow::runtime::Claim::Claimed
    ));

    let stopped = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("the wait did not end when the lease was lost");
    match stopped {
        Err(RunError::Store(StoreError::LeaseLost { thread, .. })) => assert_eq!(thread, "w-1"),
        other => panic!("expected the lost lease, got {other:?}"),
    }
}

/// A node gives up a wait (a timeout around it, a `select!`) while the store is consuming
/// the signal it received: the payload is not lost with the wait. The node's next wait
/// receives it, and it is consumed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_dropped_while_its_signal_is_consumed_leaves_the_signal() {
    let db = loomflow_tests::TempDb::new("dropped-take");
    let (store, faults) = FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).build();
    let graph = Graph::new("gives-up")
        .node_fn("wait", |got: &mut Vec<u32>, ctx| {
            Box::pin(async move {
                let first = ctx.wait_for_signal::<u32>("go");
                let gave_up = tokio::time::timeout(Duration::from_millis(200), first).await;
                assert!(gave_up.is_err(), "the first wait was to be given up");
                let second = ctx.wait_for_signal::<u32>("go");
                got.push(second.timeout(Duration::from_secs(3)).await?);
                Ok(())
            })
        })
        .edge(START, "wait")
        .edge("wait", END)
        .compile()
        .unwrap();
    runtime.signal("t", "go", 7u32).await.unwrap();
    let held = faults.hold_next_signal_take();
    let out = graph.invoke(&runtime, "t", Vec::new()).await;
    drop(held);
    assert_eq!(out.unwrap().completed().unwrap(), [7]);
    assert!(runtime.store().pending_signals().await.unwrap().is_empty());
}

/// A graph whose node gives up a wait for `go` after 200 ms, says so on the first notify,
/// and ends once the second fires.
fn giving_up(gave_up: &Arc<Notify>, go_on: &Arc<Notify>) -> CompiledGraph<()> {
    let (gave_up, go_on) = (Arc::clone(gave_up), Arc::clone(go_on));
    Graph::new("gives-up")
        .node_fn("wait", move |_: &mut (), ctx| {
            let (gave_up, go_on) = (Arc::clone(&gave_up), Arc::clone(&go_on));
            Box::pin(async move {
                let first = ctx.wait_for_signal::<u32>("go");
                let given_up = tokio::time::timeout(Duration::from_millis(200), first).await;
                assert!(given_up.is_err(), "the wait was to be given up");
                gave_up.notify_one();
                go_on.notified().await;
                Ok(())
            })
        })
        .edge(START, "wait")
        .edge("wait", END)
        .compile()
        .unwrap()
}

/// A run on thread `t` whose node gave up its wait for `go` (7 was sent) while the store's
/// take of it was held back, and now waits for `go_on`.
struct GivenUp {
    _db: loomflow_tests::TempDb,
    runtime: Runtime,
    faults: Arc<faulty_store::Faults>,
    /// Lets the held take go: with `committing`, it then reaches the store.
    held: tokio::sync::oneshot::Sender<()>,
    go_on: Arc<Notify>,
    run: RunHandle<()>,
}

async fn given_up(db: &str, committing: bool) -> GivenUp {
    let db = loomflow_tests::TempDb::new(db);
    let (store, faults) = FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).build();
    let (gave_up, go_on) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    runtime.signal("t", "go", 7u32).await.unwrap();
    let held = match committing {
        true => faults.hold_next_signal_take_committing(),
        false => faults.hold_next_signal_take(),
    };
    let run = giving_up(&gave_up, &go_on).start(&runtime, "t", ());
    gave_up.notified().await;
    GivenUp {
        _db: db,
        runtime,
        faults,
        held,
        go_on,
        run,
    }
}

/// Returns once the store keeps no signal; `what` says what should have consumed them.
async fn until_none_is_pending(runtime: &Runtime, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !runtime.store().pending_signals().await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "{what} never committed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until the store keeps no pending signal but `session`'s.
async fn until_none_is_pending_but(runtime: &Runtime, session: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pending = runtime.store().pending_signals().await.unwrap();
        if pending.iter().all(|signal| signal.session == session) {
            return;
        }
        assert!(Instant::now() < deadline, "{what} never committed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The store's write for a node's wait that gave up commits all the same: the payload is
/// the dropped wait's (journaled under it), and a poll outside the run does not get it too;
/// nor when the store fails as the poll asks it whether the row is still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_does_not_get_a_signal_that_a_dropped_wait_consumed() {
    for cannot_ask in [false, true] {
        let given_up = given_up(&format!("dropped-take-poll-{cannot_ask}"), true).await;
        let (runtime, faults) = (&given_up.runtime, &given_up.faults);
        drop(given_up.held);
        until_none_is_pending(runtime, "the dropped wait's take").await;
        if cannot_ask {
            faults.fail_next_try_take();
        }
        for _ in 0..10 {
            assert_eq!(runtime.poll_signal::<u32>("t", "go").unwrap(), None);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(faults.try_take_faults(), usize::from(cannot_ask));
        given_up.go_on.notify_one();
        given_up.run.await.unwrap().completed().unwrap();
    }
}

/// The store's write for a node's wait that gave up never reached the store: a poll outside
/// the run gets the payload, once the store has said the row is still there, and consumes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_gets_a_signal_whose_dropped_take_never_reached_the_store() {
    let given_up = given_up("dropped-take-poll-kept", false).await;
    let runtime = &given_up.runtime;
    let deadline = Instant::now() + Duration::from_secs(5);
    let polled = loop {
        if let Some(polled) = runtime.poll_signal::<u32>("t", "go").unwrap() {
            break polled;
        }
        assert!(Instant::now() < deadline, "the payload never came back");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(polled, 7);
    assert_eq!(runtime.poll_signal::<u32>("t", "go").unwrap(), None);
    given_up.go_on.notify_one();
    given_up.run.await.unwrap().completed().unwrap();
    assert!(runtime.store().pending_signals().await.unwrap().is_empty());
}

/// Runs a graph of one node, `wait`, on thread `t` to the interrupt the node ends with,
/// then resumes it; returns the state it completed with.
async fn interrupted_then_resumed<F>(runtime: &Runtime, wait: F) -> Vec<u32>
where
    F: for<'a> Fn(&'a mut Vec<u32>, &'a Context) -> BoxFuture<'a, NodeResult>
        + Send
        + Sync
        + 'static,
{
    let graph = Graph::new("waits")
        .node_fn("wait", wait)
        .edge(START, "wait")
        .edge("wait", END)
        .compile()
        .unwrap();
    let out = graph.invoke(runtime, "t", Vec::new()).await.unwrap();
    assert_eq!(out.interrupts().len(), 1, "{out:?}");
    let done = graph.resume(runtime, "t", true).await.unwrap();
    done.completed().unwrap()
}

/// A node that retries a wait whose taking of the signal failed in passing takes it under
/// the same receipt number: the node, run again (here resumed after a later question), is
/// handed the payload it acted on. Before, the retry journaled it under the next number,
/// and the node run again waited at the first for a signal that would not come again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_retried_after_its_take_failed_keeps_its_receipt_number() {
    let db = loomflow_tests::TempDb::new("faults-wait-retried");
    let (store, faults) = FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).build();
    runtime.signal("t", "go", 7u32).await.unwrap();
    faults.fail_next_claimed_take();
    let got = interrupted_then_resumed(&runtime, |got: &mut Vec<u32>, ctx| {
        Box::pin(async move {
            let value = loop {
                match ctx.wait_for_signal::<u32>("go").await {
                    Ok(value) => break value,
                    Err(RunError::Store(_)) => continue,
                    Err(other) => return Err(other.into()),
                }
            };
            got.push(value);
            let _: bool = ctx.interrupt("again?")?;
            Ok(())
        })
    });
    let got = tokio::time::timeout(Duration::from_secs(10), got).await;
    assert_eq!(got.expect("the resumed node is handed its payload"), [7]);
}

/// A runtime on `db` whose signal `go` (7) of thread `t` a waiter outside any run consumed
/// from the store, and was cancelled before it returned the payload: the payload is back at
/// the head of its queue, its row gone.
async fn consumed_by_a_cancelled_waiter(
    db: &loomflow_tests::TempDb,
) -> (Runtime, Arc<faulty_store::Faults>) {
    let (store, faults) = FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).build();
    runtime.signal("t", "go", 7u32).await.unwrap();
    // The outside waiter gives up while its consuming of the row is held back.
    let take = faults.hold_next_try_take();
    let outside = runtime.wait_for_signal::<u32>("t", "go", None);
    assert!(
        tokio::time::timeout(Duration::from_millis(100), outside)
            .await
            .is_err()
    );
    drop(take);
    until_none_is_pending(&runtime, "the outside waiter's take").await;
    (runtime, faults)
}

/// A waiter outside any run consumed a signal's row and was cancelled before it returned
/// the payload; a node's wait that receives it is itself dropped while it journals it. The
/// journal entry, all that keeps the payload once its row is gone, is still written: the
/// node, run again for the step, gets the payload from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_dropped_while_it_journals_a_consumed_signal_does_not_lose_it() {
    dropped_wait_keeps_the_payload("dropped-journal", None).await;
}

/// As above, but the node returns (suspending the run) while the dropped wait's journal
/// write is still held back: the step's checkpoint, which lets the run go, waits for the
/// write. Before, the checkpoint could let the run go first, and the write then failed with
/// the lease lost: the payload was gone, or the run failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_ends_only_once_its_dropped_waits_journal_writes_have() {
    let late = Some(Duration::from_millis(300));
    dropped_wait_keeps_the_payload("dropped-journal-late", late).await;
}

/// The node of thread `t` gives its wait up while the wait journals the payload a
/// cancelled outside waiter consumed, then suspends; the held journal write goes on at once
/// (`None`) or that long after the node gave up, by when it has returned. Checks that the
/// node, resumed, has the payload.
async fn dropped_wait_keeps_the_payload(db: &str, let_go_after: Option<Duration>) {
    let db = loomflow_tests::TempDb::new(db);
    let (runtime, faults) = consumed_by_a_cancelled_waiter(&db).await;
    let journal = Arc::new(std::sync::Mutex::new(Some(
        faults.hold_next_journal_write(),
    )));
    let got = interrupted_then_resumed(&runtime, move |got: &mut Vec<u32>, ctx| {
        let journal = Arc::clone(&journal);
        Box::pin(async move {
            let first = ctx.wait_for_signal::<u32>("go");
            match tokio::time::timeout(Duration::from_millis(200), first).await {
                Ok(received) => got.push(received?),
                // Given up while the journal write is held; then the write may go on.
                Err(_) => {
                    let held = journal.lock().unwrap().take();
                    if let Some(after) = let_go_after {
                        tokio::spawn(async move {
                            tokio::time::sleep(after).await;
                            drop(held);
                        });
                    }
                }
            }
            let _: bool = ctx.interrupt("again?")?;
            Ok(())
        })
    });
    assert_eq!(got.await, [7]);
}

/// As above, but the node's journal write of the payload commits and then fails, as a write
/// whose connection broke at its commit: the journal says the payload is the node's, so the
/// wait returns it, and nobody else receives it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_write_that_committed_before_it_failed_delivers_the_signal_once() {
    let db = loomflow_tests::TempDb::new("journal-committed");
    let (runtime, faults) = consumed_by_a_cancelled_waiter(&db).await;
    faults.fail_next_journal_write_after_commit();
    let got = interrupted_then_resumed(&runtime, |got: &mut Vec<u32>, ctx| {
        Box::pin(async move {
            got.push(ctx.wait_for_signal::<u32>("go").await?);
            let _: bool = ctx.interrupt("again?")?;
            Ok(())
        })
    });
    assert_eq!(got.await, [7]);
    // Received by the node, and by nobody else.
    assert_eq!(runtime.poll_signal::<u32>("t", "go").unwrap(), None);
}

/// A runtime on `db` behind a faulty store, and a graph whose one node charges in a
/// journaled step: 40 plus the charges made before, counted in `charges`.
fn charging(
    db: &loomflow_tests::TempDb,
    charges: &'static AtomicU32,
) -> (Runtime, Arc<faulty_store::Faults>, CompiledGraph<u32>) {
    let (store, faults) = FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).build();
    let graph = Graph::new("charging")
        .node_fn("charge", move |n: &mut u32, ctx| {
            Box::pin(async move {
                let charge = || async {
                    Ok::<_, loomflow::Error>(charges.fetch_add(1, Ordering::SeqCst) + 40)
                };
                *n = ctx.step("charge", charge).await?;
                Ok(())
            })
        })
        .edge(START, "charge")
        .edge("charge", END)
        .compile()
        .unwrap();
    (runtime, faults, graph)
}

/// A node's journaled step whose write fails as on a dropped connection (before it reached
/// the database) does not fail the run: the store failed, not the node. The run is let go,
/// as after a crash, and carried on from where the step started; nothing was journaled, so
/// the side effect is done again (as the docs of `Context::step` say).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_whose_journal_write_fails_lets_the_run_go_rather_than_failing_it() {
    static CHARGES: AtomicU32 = AtomicU32::new(0);
    let db = loomflow_tests::TempDb::new("faults-journal-step");
    let (runtime, faults, graph) = charging(&db, &CHARGES);
    faults.fail_next_journal_write_before_commit();
    let first = graph.invoke(&runtime, "c-1", 0).await;
    assert!(
        matches!(first, Err(RunError::Store(StoreError::Write { .. }))),
        "{first:?}"
    );
    let record = runtime.run("c-1").await.unwrap().record;
    assert_ne!(record.state, RunState::Failed, "{record:?}");
    assert_eq!(record.lease_owner, None, "let go: {record:?}");
    let worker = Worker::builder(&runtime).graph(&graph).build();
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    let record = runtime.run("c-1").await.unwrap().record;
    assert_eq!(record.state, RunState::Completed, "{record:?}");
    assert_eq!(
        CHARGES.load(Ordering::SeqCst),
        2,
        "nothing journaled: charged again"
    );
    assert_eq!(runtime.get_state::<u32>("c-1").await.unwrap(), Some(41));
}

/// A `#[node]` returning `loomflow::Result`: its error keeps what it is.
#[node]
async fn charge_once(charged: &mut u32, ctx: &Context) -> loomflow::Result<()> {
    *charged = ctx
        .step("charge", || async { Ok::<_, String>(40u32) })
        .await?;
    Ok(())
}

/// Runs `node` (a `#[node]` that charges 40 in a journaled step) once with its step's
/// journal write failing in passing: the run is let go, not failed, and carried on it
/// completes.
async fn a_node_lets_the_run_go_on_a_store_failure<N: loomflow::Node<u32> + 'static>(
    node: N,
    db_name: &str,
) {
    let db = loomflow_tests::TempDb::new(db_name);
    let (store, faults) = FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).build();
    let name = node.name().to_owned();
    let graph = Graph::new("charging")
        .node(node)
        .edge(START, name.as_str())
        .edge(name.as_str(), END)
        .compile()
        .unwrap();
    faults.fail_next_journal_write_before_commit();
    let first = graph.invoke(&runtime, "c-1", 0).await;
    assert!(
        matches!(first, Err(RunError::Store(StoreError::Write { .. }))),
        "{name}: let go, not failed: {first:?}"
    );
    let record = runtime.run("c-1").await.unwrap().record;
    assert_ne!(record.state, RunState::Failed, "{name}: {record:?}");
    let done = graph.recover(&runtime, "c-1").await.unwrap();
    assert_eq!(done.completed().unwrap(), 40, "{name}");
}

/// A `#[node]` whose step's journal write fails in passing lets the run go, as a closure
/// node's does: the error it returns with `?` is the store's, not the node's failure. The
/// first version of the macro's typed conversion boxed every error and failed the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_fns_store_failure_lets_the_run_go() {
    a_node_lets_the_run_go_on_a_store_failure(charge_once, "faults-node-fn-step").await;
}

/// An error type of the application's own, which wraps loomflow's as `anyhow` would.
#[derive(Debug)]
struct AppError(RunError);

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the charge could not be made: {}", self.0)
    }
}

impl std::error::Error for AppError {}

/// A `#[node]` returning an error type of its own.
#[node]
async fn charge_in_own_words(charged: &mut u32, ctx: &Context) -> Result<(), AppError> {
    *charged = ctx
        .step("charge", || async { Ok::<_, String>(40u32) })
        .await
        .map_err(AppError)?;
    Ok(())
}

/// A node that wraps a store failure in an error of its own (or `anyhow`'s) lets the run
/// go all the same: the context noted the failure, which the wrapper hides from the
/// executor. Before, the run was failed, and no worker carried it on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_failure_in_a_nodes_own_error_type_lets_the_run_go() {
    a_node_lets_the_run_go_on_a_store_failure(charge_in_own_words, "faults-node-own-error").await;
}

/// A step whose journal write failed after it committed (the connection broke at the
/// commit) returns its value: the step looks the write up and finds it, and the run goes
/// on. Before, the run was let go and carried on later (and a node that retried the step
/// took the next number and charged again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_whose_write_failed_after_its_commit_returns_its_value() {
    static CHARGES: AtomicU32 = AtomicU32::new(0);
    let db = loomflow_tests::TempDb::new("faults-journal-retry");
    let (runtime, faults, graph) = charging(&db, &CHARGES);
    faults.fail_next_journal_write_after_commit();
    let done = graph.invoke(&runtime, "c-1", 0).await.unwrap();
    assert_eq!(done.completed().unwrap(), 40);
    assert_eq!(CHARGES.load(Ordering::SeqCst), 1, "charged once");
}

/// A step whose work journals a step of its own (as a tool call asking for approval does)
/// and whose inner write fails in passing lets the run go too, rather than failing it as
/// the outer step's failure: carried on, the run completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_failure_inside_a_steps_work_lets_the_run_go() {
    use std::sync::atomic::AtomicU32;
    static INNER: AtomicU32 = AtomicU32::new(0);
    let db = loomflow_tests::TempDb::new("faults-nested-step");
    let (store, faults) = FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).build();
    let graph = Graph::new("nested")
        .node_fn("outer", |n: &mut u32, ctx| {
            Box::pin(async move {
                let inner = || async {
                    Ok::<_, loomflow::Error>(INNER.fetch_add(1, Ordering::SeqCst) + 40)
                };
                *n = ctx
                    .step("outer", || async { ctx.step("inner", inner).await })
                    .await?;
                Ok(())
            })
        })
        .edge(START, "outer")
        .edge("outer", END)
        .compile()
        .unwrap();
    faults.fail_next_journal_write_before_commit();
    let first = graph.invoke(&runtime, "n-1", 0).await;
    assert!(
        matches!(first, Err(RunError::Store(StoreError::Write { .. }))),
        "let go, not failed: {first:?}"
    );
    let record = runtime.run("n-1").await.unwrap().record;
    assert_ne!(record.state, RunState::Failed, "{record:?}");
    let done = graph
        .recover(&runtime, "n-1")
        .await
        .unwrap()
        .completed()
        .unwrap();
    // Nothing of the first try was journaled: the inner work is done again.
    assert_eq!(done, 41);
    assert_eq!(INNER.load(Ordering::SeqCst), 2);
}

/// A waiter outside any run that was cancelled while its consuming of a signal's row failed
/// leaves the row for the next waiter, which consumes it afresh once the store is back,
/// rather than getting the old failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_after_a_cancelled_one_whose_take_failed_takes_the_signal_afresh() {
    let db = loomflow_tests::TempDb::new("failed-take-next-waiter");
    let (store, faults) = FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).build();
    runtime.signal("t", "go", 7u32).await.unwrap();
    let take = faults.hold_next_try_take();
    faults.fail_next_try_take();
    let outside = runtime.wait_for_signal::<u32>("t", "go", None);
    assert!(
        tokio::time::timeout(Duration::from_millis(100), outside)
            .await
            .is_err()
    );
    drop(take);
    let deadline = Instant::now() + Duration::from_secs(5);
    while faults.try_take_faults() == 0 {
        assert!(Instant::now() < deadline, "the held take never failed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let next = runtime.wait_for_signal::<u32>("t", "go", None);
    let got = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .unwrap();
    assert_eq!(got.unwrap(), 7);
    assert!(runtime.store().pending_signals().await.unwrap().is_empty());
}

/// A cancel, or a fork onto the thread, that the store fails leaves a sleeping run asleep:
/// let go as it was, not runnable at once (a worker would run its node again a day early).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_cancel_or_fork_leaves_a_sleeping_run_asleep() {
    let (store, faults) = FaultyStore::new(loomflow::runtime::MemoryStore::new());
    let runtime = Runtime::builder().store(store).build();
    let graph = Graph::new("nap")
        .node_fn("nap", |_: &mut u32, ctx| {
            Box::pin(async move {
                ctx.sleep(Duration::from_secs(86_400)).or_suspend().await?;
                Ok(())
            })
        })
        .edge(START, "nap")
        .edge("nap", END)
        .compile()
        .unwrap();
    let outcome = graph.run(&runtime, "nap", 0).await.unwrap();
    assert!(matches!(outcome, RunOutcome::Interrupted { .. }));
    let first = runtime.list_checkpoints("nap").await.unwrap()[0].id;
    faults.fail_checkpoints.store(true, Ordering::SeqCst);
    assert!(runtime.cancel("nap").await.is_err());
    assert!(runtime.fork("nap", first, "nap").await.is_err());
    faults.fail_checkpoints.store(false, Ordering::SeqCst);
    let row = runtime.run("nap").await.unwrap().record;
    assert_eq!(row.state, RunState::Sleeping, "{row:?}");
    assert!(row.lease_owner.is_none(), "let go: {row:?}");
    let graphs = ["nap".to_owned()];
    let now = u64::try_from(std::time::UNIX_EPOCH.elapsed().unwrap().as_millis()).unwrap();
    let claimed = runtime
        .store()
        .claim_next_run(&graphs, "w", now + 1_000, now, now)
        .await;
    assert!(claimed.unwrap().is_none(), "not runnable before its time");
}

/// A fork onto a thread whose write fails leaves the answers queued for the run it did not
/// replace: they are dropped only once the fork is written.
#[tokio::test]
async fn a_failed_fork_keeps_the_resume_requests_of_the_run_it_did_not_replace() {
    let db = loomflow_tests::TempDb::new("fork-fails-requests");
    let (store, faults) = FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).build();
    let graph = review_graph();
    graph.invoke(&runtime, "t", 1).await.unwrap();
    let first = runtime.list_checkpoints("t").await.unwrap()[0].id;
    runtime.request_resume("t", 41).await.unwrap();
    faults.fail_checkpoints.store(true, Ordering::SeqCst);
    assert!(runtime.fork("t", first, "t").await.is_err());
    faults.fail_checkpoints.store(false, Ordering::SeqCst);
    let done = graph.recover(&runtime, "t").await.unwrap();
    assert_eq!(
        done.completed().unwrap(),
        42,
        "the queued answer was applied"
    );
}

/// A process that only waits (no worker) brings in a signal another process stored even when
/// its first look at the store fails: the next poll looks again.
#[tokio::test]
async fn a_failed_look_for_signals_from_another_process_is_tried_again() {
    let dir = std::env::temp_dir().join(format!("loomflow-watch-retry-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("signals.db");
    let sender = Runtime::sqlite(&path).unwrap();
    let (store, faults) = FaultyStore::new(SqliteStore::open(&path).unwrap());
    let waiter = Runtime::builder()
        .store(store)
        .poll_interval(Duration::from_millis(20))
        .build();

    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            let _session = waiter.session("s");
            waiter
                .wait_for_signal::<serde_json::Value>(
                    "s",
                    "approval",
                    Some(Duration::from_secs(10)),
                )
                .await
        }
    });
    // The watcher has looked once and is polling.
    tokio::time::sleep(Duration::from_millis(100)).await;
    faults.fail_next_signals_after();
    sender.signal("s", "approval", 7).await.unwrap();

    let got = tokio::time::timeout(Duration::from_secs(5), waiting).await;
    assert_eq!(faults.signals_after_faults(), 1, "the fault was met");
    let got = got.expect("the waiter woke").unwrap().unwrap();
    assert_eq!(got, json!(7));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A runtime kept across Tokio runtimes (a static, a test helper): once the Tokio runtime
/// its signal watcher ran on is gone, the next wait starts another, and a signal another
/// process stores still wakes it.
#[test]
fn a_watcher_gone_with_its_tokio_runtime_is_started_again() {
    let dir = std::env::temp_dir().join(format!("loomflow-watch-again-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("signals.db");
    let waiter = Runtime::builder()
        .store(SqliteStore::open(&path).unwrap())
        .poll_interval(Duration::from_millis(20))
        .build();
    let wait = |timeout: u64| {
        let waiter = waiter.clone();
        async move {
            waiter
                .wait_for_signal::<u32>("s", "approval", Some(Duration::from_millis(timeout)))
                .await
        }
    };
    let first = tokio::runtime::Runtime::new().unwrap();
    assert!(first.block_on(wait(50)).is_err(), "nothing was sent yet");
    drop(first);

    let second = tokio::runtime::Runtime::new().unwrap();
    let got = second.block_on(async {
        let waiting = tokio::spawn(wait(5_000));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let sender = Runtime::sqlite(&path).unwrap();
        sender.signal("s", "approval", 7).await.unwrap();
        waiting.await.unwrap()
    });
    assert_eq!(got.unwrap(), 7);
    drop(second);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A send that stored its signal succeeds even when loading what other processes stored
/// before it fails: an error would have its caller send it again, and the signal arrive
/// twice. It arrives once, after the one stored before it.
#[tokio::test]
async fn a_stored_signal_is_sent_even_when_loading_older_ones_fails() {
    let dir = std::env::temp_dir().join(format!("loomflow-send-stored-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("signals.db");
    let (store, faults) = FaultyStore::new(SqliteStore::open(&path).unwrap());
    let sender = Runtime::builder()
        .store(store)
        .poll_interval(Duration::from_millis(20))
        .build();
    let other = Runtime::sqlite(&path).unwrap();
    sender.signal("elsewhere", "n", 0).await.unwrap();
    other.signal("s", "n", 1).await.unwrap();
    faults.fail_next_signals_after();
    sender
        .signal("s", "n", 2)
        .await
        .expect("the signal is stored");
    assert_eq!(faults.signals_after_faults(), 1, "the fault was met");

    let _session = sender.session("s");
    let timeout = Some(Duration::from_secs(5));
    let first: u32 = sender.wait_for_signal("s", "n", timeout).await.unwrap();
    let second: u32 = sender.wait_for_signal("s", "n", timeout).await.unwrap();
    assert_eq!((first, second), (1, 2));
    let short = Some(Duration::from_millis(200));
    assert!(
        sender
            .wait_for_signal::<u32>("s", "n", short)
            .await
            .is_err(),
        "once"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A signal taken by `poll_signal`, whose removal from the store fails (a broken
/// connection), is removed by a later try: it is not left in the store, for a worker to
/// claim its run for again and again, nor for a restart to deliver a second time. Before
/// its fix the failure was logged and the removal dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polled_signal_whose_removal_failed_is_removed_later() {
    let db = loomflow_tests::TempDb::new("polled-removal-failed");
    let (store, faults) = FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).build();
    runtime.signal("t", "go", 7).await.unwrap();
    faults.fail_next_plain_takes(3);
    assert_eq!(runtime.poll_signal::<u32>("t", "go").unwrap(), Some(7));
    // Signal operations meanwhile do not spend its tries: it is tried again when due (at
    // 100, then 200, then 400 ms), not by every flush.
    for _ in 0..20 {
        assert_eq!(runtime.poll_signal::<u32>("t", "go").unwrap(), None);
        runtime.signal("u", "go", 1).await.unwrap();
    }
    assert!(faults.plain_takes() <= 2, "{} tries", faults.plain_takes());
    until_none_is_pending_but(&runtime, "u", "the polled signal's removal").await;
    assert_eq!(faults.plain_takes(), 4);
    drop(runtime);
    let restarted = Runtime::sqlite(db.path()).unwrap();
    assert_eq!(restarted.poll_signal::<u32>("t", "go").unwrap(), None);
}

/// Two removals that failed a little apart are each tried again when due, with no signal
/// operation after them: the later one, not due at the first one's retry, gets a retry of
/// its own (it waited for the next operation, and a restart loaded it again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removals_that_failed_apart_are_each_retried() {
    let db = loomflow_tests::TempDb::new("polled-removals-failed-apart");
    let (store, faults) = FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    // No look at the store meanwhile, which would make the removals in passing.
    let runtime = (Runtime::builder().store(store))
        .poll_interval(Duration::from_secs(30))
        .build();
    runtime.signal("t", "go", 7).await.unwrap();
    runtime.signal("t", "go", 8).await.unwrap();
    faults.fail_next_plain_takes(2);
    assert_eq!(runtime.poll_signal::<u32>("t", "go").unwrap(), Some(7));
    // Well inside the first one's retry, at 100 ms: the second is not due then.
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(runtime.poll_signal::<u32>("t", "go").unwrap(), Some(8));
    until_none_is_pending_but(&runtime, "u", "the second polled signal's removal").await;
    assert_eq!(faults.plain_takes(), 4);
}

/// A poll that failed on a store read, and that the node makes again (it caught the
/// error), takes the same journal numbers, as the node run again does: what the retry
/// found (nothing) is what the node finds when it runs again for the same step, whatever
/// came since. Before its fix the retry marked "nothing" under the next number, and the
/// node run again took the signal sent meanwhile, which the first execution never saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_retried_after_a_store_failure_keeps_its_numbers() {
    let db = loomflow_tests::TempDb::new("faults-poll-retry");
    let (store, faults) = FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).build();
    let graph: CompiledGraph<Vec<String>> = Graph::new("polling")
        .node_fn("poll", |log: &mut Vec<String>, ctx| {
            Box::pin(async move {
                let polled = match ctx.poll_signal::<u32>("go").await {
                    Ok(polled) => polled,
                    Err(_) => ctx.poll_signal::<u32>("go").await?,
                };
                log.push(format!("{polled:?}"));
                let _: bool = ctx.interrupt("carry on?")?;
                Ok(())
            })
        })
        .edge(START, "poll")
        .edge("poll", END)
        .compile()
        .unwrap();
    faults.fail_next_oldest_read();
    let asked = graph.invoke(&runtime, "t", Vec::new()).await.unwrap();
    assert_eq!(asked.interrupts().len(), 1, "{asked:?}");
    runtime.signal("t", "go", 7).await.unwrap();
    let done = graph.resume(&runtime, "t", true).await.unwrap();
    assert_eq!(done.completed().unwrap(), ["None"]);
    assert_eq!(
        runtime.poll_signal::<u32>("t", "go").unwrap(),
        Some(7),
        "the signal the run never saw is still queued"
    );
}

/// A step that asks inside its work, whose journal write fails in passing, gives its
/// question back with its number: the node's retry asks it again under the same number,
/// takes the same answer, and records it. Before, the retry asked the next question, which
/// nobody had answered, and the run suspended again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_that_asked_and_failed_to_write_asks_the_same_question_again() {
    let db = loomflow_tests::TempDb::new("faults-asked-step");
    let (store, faults) = FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).build();
    let graph = Graph::new("asking")
        .node_fn("code", |code: &mut String, ctx| {
            Box::pin(async move {
                *code = loop {
                    let tried = ctx.step("code", || async {
                        let code: String = ctx.interrupt("code?")?;
                        Ok::<_, RunError>(code)
                    });
                    match tried.await {
                        Ok(code) => break code,
                        Err(error @ RunError::Suspended { .. }) => return Err(error.into()),
                        Err(_) => {}
                    }
                };
                Ok(())
            })
        })
        .edge(START, "code")
        .edge("code", END)
        .compile()
        .unwrap();
    let first = graph.invoke(&runtime, "t", String::new()).await.unwrap();
    assert_eq!(first.interrupts().len(), 1);
    faults.fail_next_journal_write_before_commit();
    let done = graph.resume(&runtime, "t", "x").await.unwrap();
    assert_eq!(done.completed().unwrap(), "x");
}
