//! Durable timers: `ctx.sleep` and `ctx.sleep_until`, in memory and suspended, against a
//! manual clock (no test waits for real).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/faulty_store.rs"]
mod faulty_store;
#[path = "support/postgres.rs"]
mod postgres;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use loomflow::RunError;
use loomflow::prelude::*;
use loomflow::runtime::ManualClock;

const HOUR: Duration = Duration::from_secs(3_600);

fn start() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn ms(time: SystemTime) -> u64 {
    u64::try_from(time.duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

fn reminder(suspend: bool) -> CompiledGraph<Vec<String>> {
    Graph::new("reminder")
        .node_fn("wait", move |log: &mut Vec<String>, ctx| {
            Box::pin(async move {
                let sleep = ctx.sleep(HOUR);
                if suspend {
                    sleep.or_suspend().await?;
                } else {
                    sleep.await?;
                }
                log.push("woke".into());
                Ok(())
            })
        })
        .edge(START, "wait")
        .edge("wait", END)
        .compile()
        .unwrap()
}

/// Waits an hour at most for the signal `go`, and logs what came, or that it timed out.
fn approval() -> CompiledGraph<Vec<String>> {
    Graph::new("approval")
        .node_fn("wait", |log: &mut Vec<String>, ctx| {
            Box::pin(async move {
                match ctx.wait_for_signal::<String>("go").timeout(HOUR).await {
                    Ok(got) => log.push(got),
                    Err(RunError::Signal(loomflow::SignalError::Timeout { .. })) => {
                        log.push("timed out".into());
                    }
                    Err(other) => return Err(other.into()),
                }
                Ok(())
            })
        })
        .edge(START, "wait")
        .edge("wait", END)
        .compile()
        .unwrap()
}

/// A node sleeping in memory says so on the run's stream, with when it wakes, as a node
/// waiting for a signal does; then it wakes when the clock gets there.
#[tokio::test]
async fn a_sleep_in_memory_is_on_the_stream_with_its_wake_time() {
    use futures_util::StreamExt;
    let clock = Arc::new(ManualClock::new(start()));
    let runtime = Runtime::builder().clock(Arc::clone(&clock)).build();
    let mut stream = reminder(false).stream(&runtime, "t", Vec::new());
    let wake_at_ms = loop {
        let event = stream.next().await.expect("a sleep event before the end");
        if let loomflow::EventKind::Sleep { wake_at_ms } = event.kind {
            assert_eq!(event.node.as_deref(), Some("wait"));
            break wake_at_ms;
        }
    };
    assert_eq!(wake_at_ms, ms(start() + HOUR));
    clock.advance(HOUR);
    assert_eq!(
        stream.outcome().await.unwrap().completed().unwrap(),
        ["woke"]
    );
}

/// Waits an hour at most for `go` (suspending the run), and makes the wait again once
/// after an error: a payload that does not decode is taken out first (`bad payload`), any
/// other error is logged (`failed: …`).
fn patient() -> CompiledGraph<Vec<String>> {
    Graph::new("patient")
        .node_fn("wait", |log: &mut Vec<String>, ctx| {
            Box::pin(async move {
                for _ in 0..2 {
                    let wait = ctx.wait_for_signal::<u32>("go").timeout(HOUR);
                    match wait.or_suspend().await {
                        Ok(got) => log.push(got.to_string()),
                        Err(RunError::Signal(loomflow::SignalError::Timeout { .. })) => {
                            log.push("timed out".into());
                        }
                        Err(suspended @ RunError::Suspended { .. }) => return Err(suspended.into()),
                        Err(RunError::Signal(loomflow::SignalError::Payload { .. })) => {
                            let _: Option<serde_json::Value> = ctx.poll_signal("go").await?;
                            log.push("bad payload".into());
                            continue;
                        }
                        Err(other) => {
                            log.push(format!("failed: {other}"));
                            continue;
                        }
                    }
                    break;
                }
                Ok(())
            })
        })
        .edge(START, "wait")
        .edge("wait", END)
        .compile()
        .unwrap()
}

/// A runtime on `store` whose clock is `clock`; `patient` suspended on it, its deadline
/// checked, and the clock moved half an hour on.
async fn suspended_patient(
    store: impl loomflow::runtime::Store,
    clock: &Arc<ManualClock>,
) -> Runtime {
    let runtime = Runtime::builder()
        .store(store)
        .clock(Arc::clone(clock))
        .build();
    let out = patient().invoke(&runtime, "t", Vec::new()).await.unwrap();
    assert_eq!(
        out.interrupts()[0].wake_at_ms,
        Some(ms(start() + HOUR)),
        "{out:?}"
    );
    clock.advance(HOUR / 2);
    runtime
}

/// A timed wait whose time-out could not be recorded (the store failed) and that the node
/// waits again keeps its deadline: the wait again times out at once, as it would in the node
/// run again from its start, rather than waiting a fresh hour.
#[tokio::test]
async fn a_timed_wait_waited_again_after_a_store_failure_keeps_its_deadline() {
    let clock = Arc::new(ManualClock::new(start()));
    let (store, faults) = faulty_store::FaultyStore::new(loomflow::runtime::MemoryStore::new());
    let runtime = suspended_patient(store, &clock).await;
    clock.advance(HOUR / 2);
    faults.fail_journal_write_before_commit_named("signal-timeout:");
    let log = patient().recover(&runtime, "t").await.unwrap();
    let log = log.completed().unwrap();
    assert!(
        log[0].starts_with("failed: ") && log[0].contains("armed fault"),
        "{log:?}"
    );
    assert_eq!(
        log[1..],
        ["timed out"],
        "the second wait timed out at the first's deadline"
    );
}

/// So does one made again after its payload did not decode (the node takes the payload out
/// as it is first), or after a read of the store failed in passing: the wait again suspends
/// until the first deadline, as the node run again from its start would, not a fresh hour
/// after.
#[tokio::test]
async fn a_timed_wait_waited_again_after_a_bad_payload_or_a_failed_read_keeps_its_deadline() {
    let db = loomflow_tests::TempDb::new("timed-wait-failed-read");
    let (clock, bad_clock) = (
        Arc::new(ManualClock::new(start())),
        Arc::new(ManualClock::new(start())),
    );
    let bad = suspended_patient(loomflow::runtime::MemoryStore::new(), &bad_clock).await;
    bad.signal("t", "go", "not a number").await.unwrap();
    let (store, faults) =
        faulty_store::FaultyStore::new(loomflow::runtime::SqliteStore::open(db.path()).unwrap());
    let failed = suspended_patient(store, &clock).await;
    faults.fail_next_oldest_read();
    let reads = faults.kept_signal_reads();
    for runtime in [&bad, &failed] {
        let out = patient().recover(runtime, "t").await.unwrap();
        assert_eq!(
            out.interrupts()[0].wake_at_ms,
            Some(ms(start() + HOUR)),
            "the wait made again keeps the first deadline: {out:?}"
        );
    }
    // Each path was taken: the bad payload is gone (the node took it out), and the store
    // was read again after the read that failed.
    assert_eq!(
        bad.poll_signal::<serde_json::Value>("t", "go").unwrap(),
        None
    );
    assert!(faults.kept_signal_reads() >= reads + 2);
}

#[tokio::test]
async fn a_suspended_sleep_keeps_its_time_and_recover_carries_it_on_once_due() {
    let clock = Arc::new(ManualClock::new(start()));
    let runtime = Runtime::builder().clock(Arc::clone(&clock)).build();
    let graph = reminder(true);

    let out = graph.invoke(&runtime, "t", Vec::new()).await.unwrap();
    let wake = ms(start() + HOUR);
    let waiting = &out.interrupts()[0];
    assert_eq!(waiting.wake_at_ms, Some(wake), "{out:?}");
    assert_eq!(waiting.payload, json!({ "sleeping_until_ms": wake }));

    // A timer is not answered with a value.
    let err = graph.resume(&runtime, "t", "now").await.unwrap_err();
    assert!(
        matches!(err, RunError::WaitsForTimer { wake_at_ms, .. } if wake_at_ms == wake),
        "{err:?}"
    );

    // Before the time: suspended again, with the same wake time (the sleep did not restart).
    clock.advance(Duration::from_secs(600));
    let out = graph.recover(&runtime, "t").await.unwrap();
    assert_eq!(out.interrupts()[0].wake_at_ms, Some(wake), "{out:?}");

    clock.advance(HOUR);
    let log = graph
        .recover(&runtime, "t")
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(log, ["woke"]);
}

/// A run suspended on a signal wait beside a timer waits (for the signal, or the time): it
/// takes no resume value, so a resume request for it is refused when sent, rather than kept
/// for a run that can never apply it (a worker would claim it again and again).
#[tokio::test]
async fn a_signal_wait_beside_a_timer_is_waiting_and_refuses_a_resume_request() {
    let clock = Arc::new(ManualClock::new(start()));
    let runtime = Runtime::builder().clock(Arc::clone(&clock)).build();
    let graph = Graph::new("both")
        .node_fn("nap", |log: &mut Vec<String>, ctx| {
            Box::pin(async move {
                ctx.sleep(HOUR).or_suspend().await?;
                log.push("woke".into());
                Ok(())
            })
        })
        .node_fn("listen", |log: &mut Vec<String>, ctx| {
            Box::pin(async move {
                let heard: String = ctx.wait_for_signal("go").or_suspend().await?;
                log.push(heard);
                Ok(())
            })
        })
        .edge(START, "nap")
        .edge(START, "listen")
        .edge("nap", END)
        .edge("listen", END)
        .reducer(loomflow::graph::WHOLE_STATE, Reducer::append())
        .compile()
        .unwrap();
    let out = graph.invoke(&runtime, "t", Vec::new()).await.unwrap();
    assert_eq!(out.interrupts().len(), 2, "{out:?}");
    let run = runtime.run("t").await.unwrap().record;
    assert_eq!(run.state, loomflow::runtime::RunState::Waiting, "{run:?}");
    assert_eq!(run.wake_at_ms, Some(ms(start() + HOUR)));
    let nap = &out.interrupts()[0].id;
    // Named, the wait says what it waits for; named by none, the run takes no value.
    let refused = runtime.request_resume_with("t", nap, "now").await;
    assert!(
        matches!(refused, Err(loomflow::RuntimeError::WaitsForTimer { .. })),
        "{refused:?}"
    );
    let refused = runtime.request_resume("t", "now").await;
    assert!(
        matches!(
            refused,
            Err(loomflow::RuntimeError::NotInterrupted {
                state: loomflow::runtime::RunState::Waiting,
                ..
            })
        ),
        "{refused:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_in_memory_sleep_waits_its_time() {
    let runtime = Runtime::builder().clock(ManualClock::new(start())).build();
    let began = tokio::time::Instant::now();
    let log = reminder(false)
        .invoke(&runtime, "t", Vec::new())
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(log, ["woke"]);
    assert!(began.elapsed() >= HOUR, "slept {:?}", began.elapsed());
}

#[tokio::test]
async fn a_sleep_until_a_time_already_past_returns_at_once() {
    let runtime = Runtime::builder().clock(ManualClock::new(start())).build();
    let graph = Graph::new("late")
        .node_fn("late", |n: &mut u32, ctx| {
            Box::pin(async move {
                ctx.sleep_until(start() - HOUR).or_suspend().await?;
                *n += 1;
                Ok(())
            })
        })
        .edge(START, "late")
        .edge("late", END)
        .compile()
        .unwrap();
    let n = graph
        .invoke(&runtime, "t", 0)
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(n, 1);
}

/// A wait for a signal with a timeout, in memory (no worker), keeps its deadline as a sleep
/// keeps its time: a run carried on after its execution stopped half way waits only what
/// is left of the timeout, by the runtime's clock.
#[tokio::test(start_paused = true)]
async fn a_recovered_in_memory_wait_waits_only_what_is_left_of_its_timeout() {
    let clock = Arc::new(ManualClock::new(start()));
    let runtime = Runtime::builder().clock(Arc::clone(&clock)).build();
    let graph = approval();
    let run = graph.start(&runtime, "t", Vec::new());
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The execution stops half way (its task is aborted), 50 minutes into its wait.
    run.abort();
    let _ = run.await;
    clock.advance(Duration::from_secs(50 * 60));
    let began = tokio::time::Instant::now();
    let log = graph
        .recover(&runtime, "t")
        .wait_if_busy(Duration::from_secs(5))
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(log, ["timed out"]);
    let waited = began.elapsed();
    assert!(
        waited < Duration::from_secs(30 * 60),
        "waited {waited:?} more"
    );
}

/// A node with two timed waits for the same signal, an interrupt between them: on resume
/// the first wait returns what it received, and the second waits its own timeout, not the
/// first one's (long past): each wait keeps its own journal entries.
#[tokio::test]
async fn each_timed_wait_of_a_node_run_again_keeps_its_own_deadline() {
    let runtime = Runtime::in_memory();
    let graph = Graph::new("two-waits")
        .node_fn("node", |got: &mut Vec<u32>, ctx| {
            Box::pin(async move {
                let short = ctx.wait_for_signal::<u32>("go");
                let first = short.timeout(Duration::from_millis(50)).await?;
                let answer: u32 = ctx.interrupt(json!("more?"))?;
                let long = ctx.wait_for_signal::<u32>("go");
                let second = long.timeout(Duration::from_secs(10)).await?;
                got.extend([first, answer, second]);
                Ok(())
            })
        })
        .edge(START, "node")
        .edge("node", END)
        .compile()
        .unwrap();
    let _open = runtime.session("t");
    runtime.signal("t", "go", 1u32).await.unwrap();
    let asked = graph.invoke(&runtime, "t", Vec::new()).await.unwrap();
    assert_eq!(asked.interrupts().len(), 1);
    // The first wait's deadline passes.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let sender = runtime.clone();
    let send = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        sender.signal("t", "go", 2u32).await.unwrap();
    });
    let resumed = graph.resume(&runtime, "t", 7u32).await;
    send.await.unwrap();
    let got = resumed.unwrap().completed().unwrap();
    assert_eq!(got, [1, 7, 2]);
}

/// Both stores, on `clock`.
fn runtimes(db: &loomflow_tests::TempDb, clock: &Arc<ManualClock>) -> [(&'static str, Runtime); 2] {
    let sqlite = loomflow::runtime::SqliteStore::open(db.path()).unwrap();
    [
        (
            "memory",
            Runtime::builder().clock(Arc::clone(clock)).build(),
        ),
        (
            "sqlite",
            Runtime::builder()
                .store(sqlite)
                .clock(Arc::clone(clock))
                .build(),
        ),
    ]
}

/// The newest top-level checkpoint of `thread`.
async fn newest_top_level(rt: &Runtime, thread: &str) -> u64 {
    let checkpoints = rt.list_checkpoints(thread).await.unwrap();
    let top = checkpoints.iter().filter(|c| c.namespace.is_empty());
    top.map(|c| c.id).max().unwrap()
}

/// A fork of a suspended sleep wakes when the original does, as its row says: recovered
/// once due, or carried on by a worker, it does not start its sleep over.
#[tokio::test]
async fn a_forked_sleep_keeps_its_wake_time() {
    let db = loomflow_tests::TempDb::new("fork-sleep");
    let clock = Arc::new(ManualClock::new(start()));
    for (label, rt) in runtimes(&db, &clock) {
        let graph = reminder(true);
        let out = graph.invoke(&rt, "t", Vec::new()).await.unwrap();
        let wake = out.interrupts()[0].wake_at_ms;
        assert_eq!(wake, Some(ms(start() + HOUR)), "{label}");
        let at = newest_top_level(&rt, "t").await;
        rt.fork("t", at, "by-hand").await.unwrap();
        rt.fork("t", at, "by-worker").await.unwrap();
        assert_eq!(
            rt.run("by-hand").await.unwrap().record.wake_at_ms,
            wake,
            "{label}"
        );

        clock.advance(HOUR + Duration::from_secs(1));
        let woke = graph.recover(&rt, "by-hand").await.unwrap();
        assert_eq!(woke.completed().unwrap(), ["woke"], "{label}");
        let worker = Worker::builder(&rt)
            .graph(&graph)
            .park_grace(Duration::ZERO)
            .build();
        worker.run_until_idle().await.unwrap();
        let record = rt.run("by-worker").await.unwrap().record;
        assert_eq!(
            record.state,
            loomflow::runtime::RunState::Completed,
            "{label}: {record:?}"
        );
        clock.set(start());
    }
}

/// A fork of a wait with a timeout keeps its deadline: carried on past it, it times out.
#[tokio::test]
async fn a_forked_timed_wait_keeps_its_deadline() {
    let db = loomflow_tests::TempDb::new("fork-timed-wait");
    let clock = Arc::new(ManualClock::new(start()));
    for (label, rt) in runtimes(&db, &clock) {
        let graph = Graph::new("timed")
            .node_fn("approval", |log: &mut Vec<String>, ctx| {
                Box::pin(async move {
                    let wait = ctx.wait_for_signal::<bool>("approve").timeout(HOUR);
                    match wait.or_suspend().await {
                        Ok(approved) => log.push(format!("approved: {approved}")),
                        Err(RunError::Signal(loomflow::SignalError::Timeout { .. })) => {
                            log.push("timed out".into());
                        }
                        Err(other) => return Err(other.into()),
                    }
                    Ok(())
                })
            })
            .edge(START, "approval")
            .edge("approval", END)
            .compile()
            .unwrap();
        graph.invoke(&rt, "t", Vec::new()).await.unwrap();
        let at = newest_top_level(&rt, "t").await;
        rt.fork("t", at, "f").await.unwrap();

        clock.advance(HOUR + Duration::from_secs(1));
        let ended = graph.recover(&rt, "f").await.unwrap();
        assert_eq!(ended.completed().unwrap(), ["timed out"], "{label}");
        clock.set(start());
    }
}

/// `ask` pays inside a journaled step (counting payments in `counted`), then asks whether to
/// ship, and logs the receipt with the answer.
fn pay_then_ask(counted: Arc<std::sync::atomic::AtomicUsize>) -> CompiledGraph<Vec<String>> {
    Graph::new("pay-then-ask")
        .node_fn("ask", move |log: &mut Vec<String>, ctx| {
            let counted = Arc::clone(&counted);
            Box::pin(async move {
                let receipt: String = ctx
                    .step("pay", || async move {
                        let n = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        Ok::<_, loomflow::Error>(format!("receipt {n}"))
                    })
                    .await?;
                let ok: bool = ctx.interrupt(json!("ship it?"))?;
                log.push(format!("{receipt}, ship: {ok}"));
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
        .unwrap()
}

/// A step journaled before the node suspended is not run again when a fork of the
/// suspension is resumed: the fork replays it, as the original's resume does.
#[tokio::test]
async fn a_forked_suspension_replays_its_journaled_steps() {
    let db = loomflow_tests::TempDb::new("fork-journal");
    let clock = Arc::new(ManualClock::new(start()));
    for (label, rt) in runtimes(&db, &clock) {
        let paid = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let graph = pay_then_ask(Arc::clone(&paid));
        graph.invoke(&rt, "t", Vec::new()).await.unwrap();
        let at = newest_top_level(&rt, "t").await;
        rt.fork("t", at, "f").await.unwrap();
        let forked = graph.resume(&rt, "f", false).await.unwrap();
        assert_eq!(
            forked.completed().unwrap(),
            ["receipt 0, ship: false"],
            "{label}"
        );
        let original = graph.resume(&rt, "t", true).await.unwrap();
        assert_eq!(
            original.completed().unwrap(),
            ["receipt 0, ship: true"],
            "{label}"
        );
        assert_eq!(paid.load(std::sync::atomic::Ordering::SeqCst), 1, "{label}");
    }
}

/// A fork of a suspension taken after its run completed replays the steps the suspended
/// step journaled, as one taken before does: the run's end keeps what a fork of one of its
/// interrupted checkpoints needs.
async fn a_fork_after_the_run_ended_replays_its_journaled_steps(label: &str, rt: &Runtime) {
    let paid = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let graph = pay_then_ask(Arc::clone(&paid));
    graph.invoke(rt, "t", Vec::new()).await.unwrap();
    let at = newest_top_level(rt, "t").await;
    let original = graph.resume(rt, "t", true).await.unwrap();
    assert_eq!(
        original.completed().unwrap(),
        ["receipt 0, ship: true"],
        "{label}"
    );
    rt.fork("t", at, "f").await.unwrap();
    let forked = graph.resume(rt, "f", false).await.unwrap();
    assert_eq!(
        forked.completed().unwrap(),
        ["receipt 0, ship: false"],
        "{label}"
    );
    assert_eq!(
        paid.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "{label}: paid once"
    );
}

#[tokio::test]
async fn a_fork_after_the_run_ended_replays_its_journaled_steps_in_memory_and_sqlite() {
    let db = loomflow_tests::TempDb::new("fork-after-end");
    let clock = Arc::new(ManualClock::new(start()));
    for (label, rt) in runtimes(&db, &clock) {
        a_fork_after_the_run_ended_replays_its_journaled_steps(label, &rt).await;
    }
}

#[tokio::test]
async fn a_fork_after_the_run_ended_replays_its_journaled_steps_in_postgres() {
    let Some(db) = postgres::TempPgDb::create("fork after the run ended").await else {
        return;
    };
    let rt = Runtime::postgres(&db.url).await.unwrap();
    a_fork_after_the_run_ended_replays_its_journaled_steps("postgres", &rt).await;
}

/// A question asked beside a wait for a signal and a timer: a resume value naming no
/// interrupt answers the question (the only one that takes a value), by request or
/// directly, and a request naming the wait or the timer is refused when sent, rather than
/// accepted and then spent without effect when the run applies it.
#[tokio::test]
async fn a_value_goes_to_the_only_interrupt_that_takes_one() {
    let clock = Arc::new(ManualClock::new(start()));
    let runtime = Runtime::builder().clock(Arc::clone(&clock)).build();
    let graph = Graph::new("mixed")
        .node_fn("ask", |log: &mut Vec<String>, ctx| {
            Box::pin(async move {
                let answer: String = ctx.interrupt("which?")?;
                log.push(answer);
                Ok(())
            })
        })
        .node_fn("nap", |log: &mut Vec<String>, ctx| {
            Box::pin(async move {
                ctx.sleep(HOUR).or_suspend().await?;
                log.push("woke".into());
                Ok(())
            })
        })
        .node_fn("listen", |log: &mut Vec<String>, ctx| {
            Box::pin(async move {
                let heard: String = ctx.wait_for_signal("go").or_suspend().await?;
                log.push(heard);
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge(START, "nap")
        .edge(START, "listen")
        .edge("ask", END)
        .edge("nap", END)
        .edge("listen", END)
        .reducer(loomflow::graph::WHOLE_STATE, Reducer::append())
        .compile()
        .unwrap();
    for thread in ["requested", "direct"] {
        let out = graph.invoke(&runtime, thread, Vec::new()).await.unwrap();
        assert_eq!(out.interrupts().len(), 3, "{out:?}");
        let id_of = |node: &str| {
            let found = out.interrupts().iter().find(|i| i.node == node).unwrap();
            found.id.clone()
        };
        let to_signal = runtime
            .request_resume_with(thread, &id_of("listen"), "x")
            .await;
        assert!(
            matches!(&to_signal, Err(loomflow::RuntimeError::WaitsForSignal { signal, .. }) if signal == "go"),
            "{to_signal:?}"
        );
        let to_timer = runtime
            .request_resume_with(thread, &id_of("nap"), "x")
            .await;
        assert!(
            matches!(to_timer, Err(loomflow::RuntimeError::WaitsForTimer { .. })),
            "{to_timer:?}"
        );
        let resumed = if thread == "requested" {
            runtime.request_resume(thread, "this one").await.unwrap();
            graph.recover(&runtime, thread).await.unwrap()
        } else {
            graph.resume(&runtime, thread, "this one").await.unwrap()
        };
        // The question is answered; the step waits on for the signal and the time.
        let waiting: Vec<&str> = resumed.interrupts().iter().map(|i| &*i.node).collect();
        assert_eq!(waiting, ["nap", "listen"], "{thread}: {resumed:?}");
        runtime.signal(thread, "go", "heard").await.unwrap();
        clock.advance(HOUR);
        let mut done = graph
            .recover(&runtime, thread)
            .await
            .unwrap()
            .completed()
            .unwrap();
        done.sort();
        assert_eq!(done, ["heard", "this one", "woke"], "{thread}");
    }
}

/// An in-memory sleep and an in-memory timed wait end once the runtime's `ManualClock` is
/// moved past their time, without waiting for real: before their fix both slept on a real
/// timer for the whole hour, whatever the clock said.
#[tokio::test]
async fn in_memory_timers_end_when_the_manual_clock_passes_them() {
    let clock = Arc::new(ManualClock::new(start()));
    let runtime = Runtime::builder().clock(Arc::clone(&clock)).build();
    let waits = approval();
    let slept = reminder(false).start(&runtime, "sleeping", Vec::new());
    let waited = waits.start(&runtime, "waiting", Vec::new());
    tokio::time::sleep(Duration::from_millis(200)).await;
    clock.advance(2 * HOUR);
    let within = Duration::from_secs(10);
    let slept = tokio::time::timeout(within, slept).await.unwrap().unwrap();
    assert_eq!(slept.completed().unwrap(), ["woke"]);
    let waited = tokio::time::timeout(within, waited).await.unwrap().unwrap();
    assert_eq!(waited.completed().unwrap(), ["timed out"]);
}
