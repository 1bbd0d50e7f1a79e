//! Signals seen from graphs: nodes parked on `ctx.wait_for_signal`, woken by `runtime.signal`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/asker.rs"]
mod asker;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::StreamExt;
use loomflow::prelude::*;
use loomflow::runtime::{Delivery, MailboxConfig, SignalError, SignalOptions};
use loomflow::{EventKind, RunError, RuntimeError};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Refund {
    approved: Option<bool>,
    note: String,
    asked: u32,
}

#[derive(Deserialize)]
struct Review {
    approved: bool,
    note: Option<String>,
}

/// Wait for the manager's review.
#[node]
async fn ask_manager(state: &mut Refund, ctx: &Context) -> loomflow::Result<()> {
    state.asked += 1;
    let review: Review = ctx.wait_for_signal("manager_review").await?;
    state.approved = Some(review.approved);
    state.note = review.note.unwrap_or_default();
    Ok(())
}

fn refund_graph() -> CompiledGraph<Refund> {
    Graph::new("refund")
        .node(ask_manager)
        .edge(START, "ask_manager")
        .edge("ask_manager", END)
        .compile()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_node_is_woken_by_a_signal_from_another_task() {
    let graph = refund_graph();
    let runtime = Runtime::in_memory();
    let mut stream = graph.stream(&runtime, "refund-42", Refund::default());
    // Wait until the node is parked, then answer from another task, as a web handler would.
    loop {
        let event = stream.next().await.unwrap();
        if let EventKind::Wait { signal, .. } = &event.kind {
            assert_eq!(signal, "manager_review");
            assert_eq!(event.node.as_deref(), Some("ask_manager"));
            break;
        }
    }
    let handler = {
        let runtime = runtime.clone();
        tokio::spawn(async move {
            runtime
                .signal(
                    "refund-42",
                    "manager_review",
                    json!({ "approved": true, "note": "ok" }),
                )
                .await
        })
    };
    assert_eq!(handler.await.unwrap().unwrap(), Delivery::Woke);
    let refund = stream.outcome().await.unwrap().completed().unwrap();
    assert_eq!(
        refund,
        Refund {
            approved: Some(true),
            note: "ok".into(),
            asked: 1
        }
    );
}

#[tokio::test]
async fn a_signal_sent_before_the_run_starts_is_picked_up() {
    let graph = refund_graph();
    let runtime = Runtime::in_memory();
    let delivery = runtime
        .signal("early", "manager_review", json!({ "approved": false }))
        .await
        .unwrap();
    assert_eq!(delivery, Delivery::Pending, "the session is not open yet");
    let refund = graph
        .invoke(&runtime, "early", Refund::default())
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(refund.approved, Some(false));
}

#[tokio::test(start_paused = true)]
async fn a_wait_with_a_timeout_fails_the_node_with_a_timeout_error() {
    let graph = Graph::new("slow")
        .node_fn("wait", |s: &mut Refund, ctx| {
            Box::pin(async move {
                let r: Review = ctx
                    .wait_for_signal("manager_review")
                    .timeout(Duration::from_secs(60))
                    .await?;
                s.approved = Some(r.approved);
                Ok(())
            })
        })
        .edge(START, "wait")
        .edge("wait", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let out = graph
        .invoke(&runtime, "t", Refund::default())
        .await
        .unwrap();
    let RunOutcome::Failed { error, .. } = out else {
        panic!("{out:?}")
    };
    let RunError::NodeFailed { source, .. } = &error else {
        panic!("{error:?}")
    };
    assert!(
        matches!(source.downcast_ref::<RunError>(), Some(RunError::Signal(SignalError::Timeout { name, .. })) if name == "manager_review"),
        "{source:?}"
    );
}

#[tokio::test]
async fn a_payload_of_the_wrong_shape_is_an_error_and_stays_queued() {
    let graph = refund_graph();
    let runtime = Runtime::in_memory();
    let _open = runtime.session("t");
    runtime
        .signal("t", "manager_review", json!({ "approved": "maybe" }))
        .await
        .unwrap();
    let out = graph
        .invoke(&runtime, "t", Refund::default())
        .await
        .unwrap();
    let RunOutcome::Failed { error, .. } = out else {
        panic!("{out:?}")
    };
    let chain = format!("{error}: {}", std::error::Error::source(&error).unwrap());
    assert!(
        chain.contains("signal manager_review on session t is not a Review"),
        "{chain}"
    );
    // Where in the payload: the field that does not fit.
    assert!(
        chain.contains("at approved: invalid type: string \"maybe\""),
        "{chain}"
    );
    let kept: serde_json::Value = runtime.poll_signal("t", "manager_review").unwrap().unwrap();
    assert_eq!(
        kept,
        json!({ "approved": "maybe" }),
        "the payload was not lost"
    );
}

#[tokio::test]
async fn a_node_that_runs_again_gets_the_same_signal_without_waiting() {
    let waits = Arc::new(AtomicUsize::new(0));
    let w = waits.clone();
    let graph = Graph::new("wait then ask")
        .node_fn("both", move |s: &mut Refund, ctx| {
            let w = w.clone();
            Box::pin(async move {
                w.fetch_add(1, Ordering::SeqCst);
                let review: Review = ctx.wait_for_signal("manager_review").await?;
                let confirm: bool = ctx.interrupt("confirm the refund?")?;
                s.approved = Some(review.approved && confirm);
                Ok(())
            })
        })
        .edge(START, "both")
        .edge("both", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    runtime
        .signal("t", "manager_review", json!({ "approved": true }))
        .await
        .unwrap();
    let out = graph
        .invoke(&runtime, "t", Refund::default())
        .await
        .unwrap();
    assert_eq!(out.interrupts().len(), 1);
    // No second signal is sent: the journal answers the re-run's wait.
    let done = graph
        .resume(&runtime, "t", true)
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(done.approved, Some(true));
    assert_eq!(waits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn user_code_cannot_use_reserved_or_empty_names() {
    let runtime = Runtime::in_memory();
    let err = runtime
        .signal("t", "loomflow:approval:1", json!({}))
        .await
        .unwrap_err();
    assert!(
        matches!(err, RuntimeError::Signal(SignalError::ReservedName { .. })),
        "{err:?}"
    );
    let err = runtime
        .wait_for_signal::<bool>("t", "", None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, RuntimeError::Signal(SignalError::EmptyName { .. })),
        "{err:?}"
    );
    // A blank name (`/signals/%20` over HTTP) too: no wait would name it.
    for blank in [" ", "\t\n"] {
        let err = runtime.signal("t", blank, json!(1)).await.unwrap_err();
        assert!(
            matches!(err, RuntimeError::Signal(SignalError::EmptyName { .. })),
            "{err:?}"
        );
    }
    let graph = Graph::new("g")
        .node_fn("n", |_: &mut Refund, ctx| {
            Box::pin(async move {
                let _: bool = ctx.wait_for_signal("loomflow:x").await?;
                Ok(())
            })
        })
        .edge(START, "n")
        .edge("n", END)
        .compile()
        .unwrap();
    let out = graph
        .invoke(&runtime, "t", Refund::default())
        .await
        .unwrap();
    assert!(format!("{:?}", out.completed().unwrap_err()).contains("ReservedName"));
}

#[tokio::test]
async fn an_idempotency_key_delivers_a_repeated_send_once() {
    let runtime = Runtime::in_memory();
    let _open = runtime.session("t");
    let key = || SignalOptions::default().idempotency_key("webhook-77");
    assert_eq!(
        runtime.signal_with("t", "paid", 1, key()).await.unwrap(),
        Delivery::Queued
    );
    assert_eq!(
        runtime.signal_with("t", "paid", 1, key()).await.unwrap(),
        Delivery::Duplicate
    );
    assert_eq!(runtime.poll_signal::<u32>("t", "paid").unwrap(), Some(1));
    assert_eq!(runtime.poll_signal::<u32>("t", "paid").unwrap(), None);
    assert!(matches!(
        runtime
            .signal("t", "big", "x".repeat(2 * 1024 * 1024))
            .await
            .unwrap_err(),
        RuntimeError::Signal(SignalError::PayloadTooLarge { .. })
    ));
}

/// With the pending mailbox off, a retried send whose key was delivered while the session
/// was open is a duplicate once it closed, not dropped: before its fix the retry said
/// `Dropped`, which the HTTP API answers with 503, "send it again".
#[tokio::test]
async fn a_retried_send_is_a_duplicate_with_the_pending_mailbox_off() {
    let signals = MailboxConfig::default().max_pending_signal_sessions(Some(0));
    let runtime = Runtime::builder().signals(signals).build();
    let key = || SignalOptions::default().idempotency_key("webhook-78");
    {
        let _open = runtime.session("t");
        let sent = runtime.signal_with("t", "paid", 1, key()).await.unwrap();
        assert_eq!(sent, Delivery::Queued);
        assert_eq!(runtime.poll_signal::<u32>("t", "paid").unwrap(), Some(1));
    }
    let again = runtime.signal_with("t", "paid", 1, key()).await.unwrap();
    assert_eq!(again, Delivery::Duplicate);
    assert_eq!(
        runtime.signal("t", "paid", 2).await.unwrap(),
        Delivery::Dropped,
        "a new send is dropped, as the session is closed"
    );
}

/// A resume request's value counts against the payload limit, not the request loomflow
/// wraps around it (the interrupt it answers, the question's checkpoint): a value at the
/// limit is taken and resumes the run, one byte over is refused naming its size.
#[tokio::test]
async fn a_resume_request_at_the_payload_limit_is_taken() {
    let db = loomflow_tests::TempDb::new("resume-request-limit");
    let limit = || MailboxConfig::default().max_payload_bytes(20);
    let durable = Runtime::builder()
        .store(loomflow::runtime::SqliteStore::open(db.path()).unwrap())
        .signals(limit())
        .build();
    let in_memory = Runtime::builder().signals(limit()).build();
    let asker = asker::asker::<String>();
    for runtime in [in_memory, durable] {
        asker.invoke(&runtime, "t", None).await.unwrap();
        let over = runtime.request_resume("t", "x".repeat(19)).await;
        assert!(
            matches!(
                over,
                Err(RuntimeError::Signal(SignalError::PayloadTooLarge {
                    size: 21,
                    limit: 20,
                    ..
                }))
            ),
            "{over:?}"
        );
        let at_limit = "x".repeat(18); // 20 bytes as JSON
        runtime.request_resume("t", &at_limit).await.unwrap();
        let done = asker.recover(&runtime, "t").await.unwrap();
        assert_eq!(done.completed().unwrap(), Some(at_limit));
    }
}

#[tokio::test]
async fn or_suspend_stops_the_run_until_the_signal_is_sent_and_recover_carries_on() {
    let graph = Graph::new("long wait")
        .node_fn("ask", |s: &mut Refund, ctx| {
            Box::pin(async move {
                s.asked += 1;
                let r: Review = ctx.wait_for_signal("manager_review").or_suspend().await?;
                s.approved = Some(r.approved);
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let out = graph
        .invoke(&runtime, "t", Refund::default())
        .await
        .unwrap();
    let [waiting] = out.interrupts() else {
        panic!("{out:?}")
    };
    assert_eq!(waiting.signal.as_deref(), Some("manager_review"));
    assert_eq!(waiting.id, "ask#signal:manager_review");

    let err = graph.resume(&runtime, "t", true).await.unwrap_err();
    assert!(matches!(err, RunError::WaitsForSignal { .. }), "{err:?}");
    // Recovering before the signal came suspends again.
    assert_eq!(
        graph
            .recover(&runtime, "t")
            .await
            .unwrap()
            .interrupts()
            .len(),
        1
    );

    runtime
        .signal("t", "manager_review", json!({ "approved": true }))
        .await
        .unwrap();
    let done = graph
        .recover(&runtime, "t")
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(done.approved, Some(true));
    assert_eq!(
        done.asked, 1,
        "the suspended step's changes were never committed"
    );
}

#[tokio::test]
async fn a_sender_can_learn_that_no_run_will_read_its_signal() {
    let graph = Graph::new("g")
        .node_sync("n", |_: &mut Refund| {})
        .edge(START, "n")
        .edge("n", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let live = SignalOptions::default().require_live_run();
    // No run yet: the signal waits for one.
    runtime
        .signal_with("t", "nudge", json!(1), live.clone())
        .await
        .unwrap();
    graph
        .invoke(&runtime, "t", Refund::default())
        .await
        .unwrap();
    let err = runtime
        .signal_with("t", "nudge", json!(2), live.clone())
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            RuntimeError::Signal(SignalError::RunEnded {
                status: "completed",
                ..
            })
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "signal nudge refused: the newest run of session t has ended (completed)"
    );
    // Without the option the send is accepted, as before.
    runtime.signal("t", "nudge", json!(3)).await.unwrap();

    // A run submitted again on the thread will read it, though the newest checkpoint is
    // still the completed run's: accepted.
    runtime
        .submit("g", "t", json!(Refund::default()))
        .await
        .unwrap();
    runtime
        .signal_with("t", "nudge", json!(4), live.clone())
        .await
        .unwrap();
    // That run cancelled before it ran: no run will read it.
    runtime.cancel("t").await.unwrap();
    let err = runtime
        .signal_with("t", "nudge", json!(5), live)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            RuntimeError::Signal(SignalError::RunEnded {
                status: "cancelled",
                ..
            })
        ),
        "{err:?}"
    );
}

/// Signals sent to a run while it works, before it waits, queue for its waits: they stay
/// out of the pending mailbox, whose TTL would drop them meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_sent_while_a_run_works_wait_for_it_past_the_pending_ttl() {
    use loomflow::runtime::MailboxConfig;
    use std::time::Duration;
    use tokio::sync::Notify;

    let ttl = Duration::from_millis(50);
    let runtime = Runtime::builder()
        .signals(MailboxConfig::default().pending_signal_ttl(Some(ttl)))
        .build();
    let (working, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let graph = {
        let (working, go) = (Arc::clone(&working), Arc::clone(&go));
        Graph::new("busy")
            .node_fn("work", move |s: &mut Refund, ctx| {
                let (working, go) = (Arc::clone(&working), Arc::clone(&go));
                Box::pin(async move {
                    working.notify_one();
                    go.notified().await;
                    // Past the pending TTL: a signal kept as pending would be gone by now.
                    tokio::time::sleep(ttl * 3).await;
                    let first: Review = ctx.wait_for_signal("review").await?;
                    let second: Review = ctx.wait_for_signal("review").await?;
                    s.approved = Some(first.approved && !second.approved);
                    Ok(())
                })
            })
            .edge(START, "work")
            .edge("work", END)
            .compile()
            .unwrap()
    };
    let run = {
        let runtime = runtime.clone();
        tokio::spawn(async move { graph.invoke(&runtime, "busy-1", Refund::default()).await })
    };
    working.notified().await;
    for approved in [true, false] {
        let review = json!({ "approved": approved });
        let delivery = runtime.signal("busy-1", "review", review).await.unwrap();
        assert_eq!(delivery, Delivery::Queued, "the run is executing");
    }
    go.notify_one();
    let outcome = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the run received both signals")
        .unwrap()
        .unwrap();
    assert_eq!(outcome.completed().unwrap().approved, Some(true));
}

/// A webhook's redelivery of a signal that was delivered, once its run has gone on to the
/// end, is a duplicate: the sender must not read a refusal. Another key is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_retried_after_its_run_ended_is_a_duplicate() {
    let db = std::env::temp_dir().join(format!("loomflow-redelivery-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&db);
    let durable = Runtime::sqlite(&db).unwrap();
    for runtime in [Runtime::in_memory(), durable] {
        let graph = refund_graph();
        let keyed = |key: &str| {
            SignalOptions::default()
                .require_live_run()
                .idempotency_key(key)
        };
        let review = || json!({ "approved": true });
        let sent = runtime.signal_with("t", "manager_review", review(), keyed("d1"));
        assert_eq!(sent.await.unwrap(), Delivery::Pending);
        let done = graph.invoke(&runtime, "t", Refund::default()).await;
        assert_eq!(done.unwrap().completed().unwrap().approved, Some(true));

        let again = runtime.signal_with("t", "manager_review", review(), keyed("d1"));
        assert_eq!(again.await.unwrap(), Delivery::Duplicate);
        let other = runtime.signal_with("t", "manager_review", review(), keyed("d2"));
        assert!(
            matches!(
                other.await,
                Err(RuntimeError::Signal(SignalError::RunEnded { .. }))
            ),
            "a new delivery to a run that has ended is refused"
        );
    }
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
}

/// A node that catches a payload of the wrong type, throws it away with a poll and waits
/// again gets the same payloads when it runs again (here, resumed after an interrupt): the
/// failed wait journaled nothing, and gives its number back as a failed `step` does. Before
/// its fix the wait kept its number, and the node, run again, waited for a third signal.
#[tokio::test]
async fn a_wait_that_got_a_payload_of_the_wrong_type_replays_the_same_when_run_again() {
    let graph = Graph::new("typed")
        .node_fn("n", |got: &mut Vec<u32>, ctx| {
            Box::pin(async move {
                let first: Result<u32, _> = ctx.wait_for_signal("x").await;
                let value = match first {
                    Ok(value) => value,
                    Err(_) => {
                        let _thrown: Option<serde_json::Value> = ctx.poll_signal("x").await?;
                        ctx.wait_for_signal::<u32>("x").await?
                    }
                };
                let _confirmed: bool = ctx.interrupt("keep it?")?;
                got.push(value);
                Ok(())
            })
        })
        .edge(START, "n")
        .edge("n", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    runtime.signal("t", "x", "not a number").await.unwrap();
    runtime.signal("t", "x", 5).await.unwrap();
    let asked = graph.invoke(&runtime, "t", Vec::new()).await.unwrap();
    assert_eq!(asked.interrupts().len(), 1);
    let resumed = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        graph.resume(&runtime, "t", true),
    )
    .await
    .expect("the node, run again, waited for a signal it had had");
    assert_eq!(resumed.unwrap().completed().unwrap(), [5]);
}
