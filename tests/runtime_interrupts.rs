//! Interrupts, resume, journaled steps, recovery and forks (in-memory runtime; the SQLite
//! runtime runs the same paths in `runtime_crash.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/asker.rs"]
mod asker;

#[path = "support/callsites.rs"]
mod callsites;
#[path = "support/held_run.rs"]
mod held_run;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use loomflow::prelude::*;
use loomflow::runtime::RunStatus;
use loomflow::{Interrupt, RunError};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Order {
    id: String,
    answers: Vec<String>,
    paid: Option<String>,
    side: u32,
}

fn counter() -> Arc<AtomicUsize> {
    Arc::new(AtomicUsize::new(0))
}

/// Asks two questions in a row, and pays through a journaled step before the first.
fn two_questions(payments: Arc<AtomicUsize>, entries: Arc<AtomicUsize>) -> CompiledGraph<Order> {
    Graph::new("two")
        .node_fn("ask", move |o: &mut Order, ctx| {
            let payments = payments.clone();
            let entries = entries.clone();
            Box::pin(async move {
                entries.fetch_add(1, Ordering::SeqCst);
                let charge: String = ctx
                    .step("charge", || async {
                        let n = payments.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, Error>(format!("ch_{n}"))
                    })
                    .await?;
                o.paid = Some(charge);
                let first: String = ctx.interrupt(json!({ "q": "colour?" }))?;
                o.answers.push(first);
                let second: String = ctx.interrupt(json!({ "q": "size?" }))?;
                o.answers.push(second);
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
        .unwrap()
}

#[tokio::test]
async fn interrupt_suspends_and_each_resume_answers_the_next_call() {
    let (payments, entries) = (counter(), counter());
    let graph = two_questions(payments.clone(), entries.clone());
    let rt = Runtime::in_memory();

    let out = graph.invoke(&rt, "t", Order::default()).await.unwrap();
    let RunOutcome::Interrupted { state, interrupts } = out else {
        panic!("{out:?}")
    };
    assert_eq!(
        state,
        Order::default(),
        "the suspended step is not committed"
    );
    let [only]: &[Interrupt] = &interrupts[..] else {
        panic!("{interrupts:?}")
    };
    assert_eq!(
        (only.id.as_str(), only.node.as_str(), only.index),
        ("ask#0", "ask", 0)
    );
    assert_eq!(only.payload, json!({ "q": "colour?" }));
    let cp = rt.list_checkpoints("t").await.unwrap().pop().unwrap();
    assert_eq!(cp.status, RunStatus::Interrupted);
    assert_eq!(cp.next(), ["ask"]);
    assert_eq!(rt.pending_interrupts("t").await.unwrap(), interrupts);

    let out = graph.resume(&rt, "t", "red").await.unwrap();
    assert_eq!(
        out.interrupts()[0].id,
        "ask#1",
        "the second call suspends next"
    );
    assert_eq!(out.interrupts()[0].payload, json!({ "q": "size?" }));

    let done = graph
        .resume(&rt, "t", "large")
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(done.answers, ["red", "large"]);
    assert_eq!(
        entries.load(Ordering::SeqCst),
        3,
        "the node re-ran from its start twice"
    );
    assert_eq!(
        payments.load(Ordering::SeqCst),
        1,
        "the journaled charge ran once"
    );
    assert_eq!(done.paid.as_deref(), Some("ch_0"));
}

#[tokio::test]
async fn siblings_that_finished_are_not_rerun_and_several_interrupts_resume_together_or_apart() {
    let (side_runs, a_runs) = (counter(), counter());
    let (s, a) = (side_runs.clone(), a_runs.clone());
    let graph = Graph::new("fan")
        .node_sync("side", move |o: &mut Order| {
            s.fetch_add(1, Ordering::SeqCst);
            o.side += 1;
        })
        .node_fn("a", move |o: &mut Order, ctx| {
            let a = a.clone();
            Box::pin(async move {
                a.fetch_add(1, Ordering::SeqCst);
                let v: String = ctx.interrupt("a?")?;
                o.answers.push(format!("a={v}"));
                Ok(())
            })
        })
        .node_fn("b", |o: &mut Order, ctx| {
            Box::pin(async move {
                let v: u32 = ctx.interrupt("b?")?;
                o.id = format!("b={v}");
                Ok(())
            })
        })
        .node_sync("after", |o: &mut Order| o.answers.push("after".into()))
        .edge(START, "side")
        .edge(START, "a")
        .edge(START, "b")
        .join(["side", "a", "b"], "after")
        .edge("after", END)
        .compile()
        .unwrap();
    let rt = Runtime::in_memory();

    // Together, by id.
    let out = graph
        .invoke(&rt, "together", Order::default())
        .await
        .unwrap();
    let ids: Vec<_> = out.interrupts().iter().map(|i| i.id.clone()).collect();
    assert_eq!(ids, ["a#0", "b#0"]);
    let cp = rt
        .list_checkpoints("together")
        .await
        .unwrap()
        .pop()
        .unwrap();
    // The executor's snapshot (the body) keeps side's finished copy.
    let pending = cp.body["pending_writes"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "side's finished copy is kept");
    assert_eq!(pending[0]["node"], "side");
    let done = graph
        .resume_with(&rt, "together", [("a#0", json!("x")), ("b#0", json!(7))])
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(done.answers, ["a=x", "after"]);
    assert_eq!(done.id, "b=7");
    assert_eq!(done.side, 1);
    assert_eq!(
        side_runs.load(Ordering::SeqCst),
        1,
        "side is not re-run on resume"
    );

    // One at a time: the other interrupt suspends again; a's answer is kept.
    let out = graph.invoke(&rt, "apart", Order::default()).await.unwrap();
    assert!(matches!(
        graph.resume(&rt, "apart", "x").await,
        Err(RunError::AmbiguousResume { pending, .. }) if pending == ["a#0", "b#0"]
    ));
    assert_eq!(out.interrupts().len(), 2);
    let out = graph
        .resume_with(&rt, "apart", [("a#0", "x")])
        .await
        .unwrap();
    assert_eq!(
        out.interrupts()
            .iter()
            .map(|i| i.id.as_str())
            .collect::<Vec<_>>(),
        ["b#0"]
    );
    let done = graph
        .resume(&rt, "apart", 9)
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(done.answers, ["a=x", "after"]);
    assert_eq!(done.id, "b=9");
    assert_eq!(side_runs.load(Ordering::SeqCst), 2, "once per thread");
}

#[tokio::test]
async fn a_swallowed_interrupt_still_suspends_the_node() {
    let after = counter();
    let a = after.clone();
    let graph = Graph::new("swallow")
        .node_fn("sly", |o: &mut Order, ctx| {
            Box::pin(async move {
                if let Ok(v) = ctx.interrupt::<String>("?") {
                    o.id = v;
                }
                Ok(()) // drops the suspension on the floor
            })
        })
        .node_sync("next", move |_: &mut Order| {
            a.fetch_add(1, Ordering::SeqCst);
        })
        .edge(START, "sly")
        .edge("sly", "next")
        .edge("next", END)
        .compile()
        .unwrap();
    let rt = Runtime::in_memory();
    let out = graph.invoke(&rt, "t", Order::default()).await.unwrap();
    assert_eq!(out.interrupts().len(), 1, "still suspended: {out:?}");
    assert_eq!(after.load(Ordering::SeqCst), 0, "the run did not go on");
    let done = graph
        .resume(&rt, "t", "v")
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(done.id, "v");
}

#[tokio::test]
async fn bad_resumes_are_clear_errors_and_leave_the_checkpoint_intact() {
    let graph = two_questions(counter(), counter());
    let rt = Runtime::in_memory();

    let err = graph.resume(&rt, "nobody", "x").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "thread nobody has no checkpoint to resume from"
    );

    let done_graph = Graph::new("plain")
        .node_sync("n", |o: &mut Order| o.side = 1)
        .edge(START, "n")
        .edge("n", END)
        .compile()
        .unwrap();
    done_graph
        .invoke(&rt, "finished", Order::default())
        .await
        .unwrap();
    let err = done_graph.resume(&rt, "finished", "x").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "thread finished is not interrupted (its newest run is completed)"
    );

    graph.invoke(&rt, "t", Order::default()).await.unwrap();
    let before = rt.list_checkpoints("t").await.unwrap();
    let err = graph
        .resume_with(&rt, "t", [("ask#5", "x")])
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "interrupt ask#5 is not pending on thread t; pending: ask#0"
    );

    // The node asks for a String; 42 is not one.
    let error = graph.resume(&rt, "t", 42).await.unwrap_err();
    assert!(
        matches!(&error, RunError::ResumeValue { node, index: 0, .. } if node == "ask"),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "resume value for interrupt 0 of node ask is not a String"
    );
    assert_eq!(
        rt.list_checkpoints("t").await.unwrap(),
        before,
        "nothing written"
    );

    // The intact checkpoint still resumes.
    let out = graph.resume(&rt, "t", "green").await.unwrap();
    assert_eq!(out.interrupts()[0].id, "ask#1");
}

#[tokio::test]
async fn a_failed_journaled_step_is_not_recorded_and_recover_retries_the_step() {
    let attempts = counter();
    let a = attempts.clone();
    let graph = Graph::new("flaky")
        .node_fn("call", move |o: &mut Order, ctx| {
            let a = a.clone();
            Box::pin(async move {
                let id: String = ctx
                    .step("remote", || async {
                        let n = a.fetch_add(1, Ordering::SeqCst);
                        if n == 0 {
                            Err(Error::msg("503"))
                        } else {
                            Ok(format!("ok{n}"))
                        }
                    })
                    .await?;
                o.id = id;
                Ok(())
            })
        })
        .edge(START, "call")
        .edge("call", END)
        .compile()
        .unwrap();
    let rt = Runtime::in_memory();
    let out = graph.invoke(&rt, "t", Order::default()).await.unwrap();
    assert!(matches!(out, RunOutcome::Failed { .. }));
    let done = graph.recover(&rt, "t").await.unwrap().completed().unwrap();
    assert_eq!(done.id, "ok1");
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    // Recovering a completed run returns its state without running anything.
    let again = graph.recover(&rt, "t").await.unwrap().completed().unwrap();
    assert_eq!(again.id, "ok1");
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_later_run_on_the_same_thread_does_not_replay_the_journal() {
    let payments = counter();
    let graph = two_questions(payments.clone(), counter());
    let rt = Runtime::in_memory();
    graph.invoke(&rt, "t", Order::default()).await.unwrap();
    graph.invoke(&rt, "t", Order::default()).await.unwrap();
    assert_eq!(payments.load(Ordering::SeqCst), 2, "run 2 pays for itself");
    let runs: Vec<u64> = rt
        .list_checkpoints("t")
        .await
        .unwrap()
        .iter()
        .map(|c| c.run)
        .collect();
    assert_eq!(runs, [1, 1, 2, 2]);
}

#[tokio::test]
async fn fork_starts_a_new_thread_from_any_checkpoint_and_leaves_the_original_alone() {
    let graph = Graph::new("count")
        .node_sync("inc", |o: &mut Order| o.side += 1)
        .edge(START, "inc")
        .branch(
            "inc",
            ["inc", END],
            |o: &Order| if o.side < 5 { "inc" } else { END },
        )
        .compile()
        .unwrap();
    let rt = Runtime::in_memory();
    graph.invoke(&rt, "main", Order::default()).await.unwrap();
    let original = rt.list_checkpoints("main").await.unwrap();
    let at_two = original
        .iter()
        .find(|c| c.state()["side"] == json!(2))
        .unwrap();

    rt.fork("main", at_two.id, "branch").await.unwrap();
    let forked = graph
        .recover(&rt, "branch")
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(forked.side, 5);
    let steps: Vec<u64> = rt
        .list_checkpoints("branch")
        .await
        .unwrap()
        .iter()
        .map(|c| c.step)
        .collect();
    assert_eq!(steps, [2, 3, 4, 5], "the fork carries on from step 2");
    assert_eq!(rt.list_checkpoints("main").await.unwrap(), original);
    assert!(rt.fork("main", 999_999, "x").await.is_err());
}

#[tokio::test]
async fn async_durability_writes_every_checkpoint_in_order() {
    let graph = Graph::new("count")
        .node_sync("inc", |o: &mut Order| o.side += 1)
        .edge(START, "inc")
        .branch(
            "inc",
            ["inc", END],
            |o: &Order| if o.side < 10 { "inc" } else { END },
        )
        .compile()
        .unwrap();
    let rt = Runtime::in_memory();
    graph
        .run(&rt, "t", Order::default())
        .durability(Durability::Async)
        .await
        .unwrap();
    let steps: Vec<u64> = rt
        .list_checkpoints("t")
        .await
        .unwrap()
        .iter()
        .map(|c| c.step)
        .collect();
    assert_eq!(steps, (0..=10).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_fork_into_a_thread_with_runs_does_not_replay_their_journal() {
    let charges = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&charges);
    let graph = Graph::new("pay")
        .node_fn("pay", move |o: &mut Order, ctx| {
            let counter = Arc::clone(&counter);
            Box::pin(async move {
                let charge: u32 = ctx
                    .step("charge", || async move {
                        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                        u32::try_from(n).map_err(|e| e.to_string())
                    })
                    .await?;
                o.side = charge;
                Ok(())
            })
        })
        .edge(START, "pay")
        .edge("pay", END)
        .compile()
        .unwrap();
    let rt = Runtime::in_memory();
    graph.invoke(&rt, "b", Order::default()).await.unwrap(); // charge 1, on b's run 1
    graph.invoke(&rt, "a", Order::default()).await.unwrap(); // charge 2
    let start_of_a = rt.list_checkpoints("a").await.unwrap()[0].id;

    rt.fork("a", start_of_a, "b").await.unwrap();
    let forked = graph.recover(&rt, "b").await.unwrap().completed().unwrap();
    assert_eq!(
        (forked.side, charges.load(Ordering::SeqCst)),
        (3, 3),
        "the fork is a new run of b: it charges, it does not replay b's first run"
    );
}

/// Collects the messages of warnings logged through `tracing`.
#[derive(Clone, Default)]
struct Warnings(Arc<std::sync::Mutex<Vec<String>>>);

impl tracing::Subscriber for Warnings {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Text(String);
        impl tracing::field::Visit for Text {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={value:?} ", field.name()));
            }
        }
        if *event.metadata().level() == tracing::Level::WARN {
            let mut text = Text(String::new());
            event.record(&mut text);
            self.0.lock().unwrap().push(text.0);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[tokio::test(flavor = "current_thread")]
async fn a_node_that_suspends_then_fails_stays_suspended_and_the_error_is_logged() {
    let warnings = Warnings::default();
    callsites::keep_callsites_enabled();
    let _log = tracing::subscriber::set_default(warnings.clone());
    let graph = Graph::new("g")
        .node_fn("ask", |_: &mut Order, ctx| {
            Box::pin(async move {
                // The suspension is caught and dropped, then the node fails otherwise.
                let _ = ctx.interrupt::<String>("which colour?");
                Err("the colour service is down".into())
            })
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
        .unwrap();
    let rt = Runtime::in_memory();
    let out = graph.invoke(&rt, "t", Order::default()).await.unwrap();
    assert_eq!(out.interrupts().len(), 1, "{out:?}");
    let warnings = warnings.0.lock().unwrap().clone();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("the colour service is down")),
        "the dropped error is logged: {warnings:?}"
    );
}

/// A value whose `Serialize` fails.
struct Unserializable;

impl Serialize for Unserializable {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("this value refuses to serialize"))
    }
}

#[tokio::test]
async fn a_resume_value_that_does_not_serialize_is_an_error_naming_the_interrupt() {
    let (payments, entries) = (counter(), counter());
    let graph = two_questions(payments, entries.clone());
    let rt = Runtime::in_memory();
    graph.invoke(&rt, "t", Order::default()).await.unwrap();
    let before = rt.list_checkpoints("t").await.unwrap();

    // Before, the value silently became `null` and reached the node.
    for result in [
        graph.resume(&rt, "t", Unserializable).await,
        graph
            .resume_with(&rt, "t", [("ask#0", Unserializable)])
            .await,
    ] {
        let err = result.unwrap_err();
        let RunError::UnserializableResume { thread, id, .. } = &err else {
            panic!("expected UnserializableResume, got {err:?}")
        };
        assert_eq!((thread.as_str(), id.as_str()), ("t", "ask#0"));
        assert!(err.to_string().contains("ask#0"), "{err}");
        assert!(
            format!("{:?}", std::error::Error::source(&err)).contains("refuses to serialize"),
            "the serde error is the source: {err:?}"
        );
    }
    assert_eq!(
        entries.load(Ordering::SeqCst),
        1,
        "the node did not run again"
    );
    assert_eq!(
        rt.list_checkpoints("t").await.unwrap(),
        before,
        "the checkpoint stays as it was"
    );
    // A good value still resumes.
    let out = graph.resume(&rt, "t", "red").await.unwrap();
    assert_eq!(out.interrupts()[0].id, "ask#1");
}

fn approval_flow(extra_step: bool) -> CompiledGraph<Order> {
    let graph = Graph::new("flow")
        .node_fn("ask", |o: &mut Order, ctx| {
            Box::pin(async move {
                let answer: String = ctx.interrupt("ok?")?;
                o.answers.push(answer);
                Ok(())
            })
        })
        .node_sync("pay", |o: &mut Order| o.paid = Some("yes".into()))
        .edge(START, "ask");
    let graph = if extra_step {
        graph
            .node_sync("audit", |o: &mut Order| o.side += 1)
            .edge("ask", "audit")
            .edge("audit", "pay")
    } else {
        graph.edge("ask", "pay")
    };
    graph.edge("pay", END).compile().unwrap()
}

/// A thread carried on with another graph than the one whose run it is (a thread mixed up)
/// is refused as that, naming both: not as a change of the graph, whose way past
/// (`allow_graph_change`) would run its nodes over the other graph's run.
#[tokio::test]
async fn carrying_on_another_graphs_run_is_refused_naming_both() {
    let db = loomflow_tests::TempDb::new("other-graph");
    for rt in [Runtime::in_memory(), Runtime::sqlite(db.path()).unwrap()] {
        approval_flow(false)
            .invoke(&rt, "t", Order::default())
            .await
            .unwrap();
        let other = Graph::new("billing")
            .node_sync("bill", |o: &mut Order| o.side += 1)
            .edge(START, "bill")
            .edge("bill", END)
            .compile()
            .unwrap();
        let err = other.resume(&rt, "t", "yes").await.unwrap_err();
        let RunError::OtherGraph {
            graph, recorded, ..
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!((graph.as_str(), recorded.as_str()), ("billing", "flow"));
        let err = other.recover(&rt, "t").await.unwrap_err();
        assert!(
            err.to_string()
                .contains("was run by graph flow, not billing"),
            "{err}"
        );
        // Renamed, its edges declared in another order: the same graph to the run, which
        // carries on.
        let renamed = Graph::new("flow_v2")
            .node_fn("ask", |o: &mut Order, ctx| {
                Box::pin(async move {
                    let answer: String = ctx.interrupt("ok?")?;
                    o.answers.push(answer);
                    Ok(())
                })
            })
            .node_sync("pay", |o: &mut Order| o.paid = Some("yes".into()))
            .edge("pay", END)
            .edge("ask", "pay")
            .edge(START, "ask")
            .compile()
            .unwrap();
        let done = renamed.resume(&rt, "t", "yes").await.unwrap();
        assert_eq!(done.completed().unwrap().paid.as_deref(), Some("yes"));
    }
}

#[tokio::test]
async fn resuming_with_a_graph_whose_structure_changed_is_refused_naming_the_change() {
    let before = approval_flow(false);
    let after = approval_flow(true);
    assert_ne!(before.fingerprint(), after.fingerprint());
    let rt = Runtime::in_memory();
    before.invoke(&rt, "t", Order::default()).await.unwrap();
    let checkpoints = rt.list_checkpoints("t").await.unwrap();

    let err = after.resume(&rt, "t", "yes").await.unwrap_err();
    let RunError::GraphChanged { changes, graph, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(graph, "flow");
    assert_eq!(
        changes,
        &[
            "removed: edge ask -> pay",
            "added: node audit",
            "added: edge ask -> audit",
            "added: edge audit -> pay"
        ]
    );
    assert!(err.to_string().contains("allow_graph_change"), "{err}");
    assert_eq!(
        rt.list_checkpoints("t").await.unwrap(),
        checkpoints,
        "nothing written"
    );
    assert!(matches!(
        after.recover(&rt, "t").await,
        Err(RunError::GraphChanged { .. })
    ));

    // The same structure resumes as always; a caller who knows the change is safe opts in.
    let done = after
        .resume(&rt, "t", "yes")
        .allow_graph_change()
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!((done.side, done.paid.as_deref()), (1, Some("yes")));
    let rt = Runtime::in_memory();
    before.invoke(&rt, "u", Order::default()).await.unwrap();
    assert!(before.resume(&rt, "u", "yes").await.unwrap().is_completed());
}

/// A run parked in a node the new graph no longer has (renamed) is refused naming that node,
/// without the advice to carry it on with `allow_graph_change`, which then failed all the
/// same ("names node ask, which graph flow does not have").
#[tokio::test]
async fn resuming_at_a_node_the_graph_no_longer_has_names_the_node() {
    let before = approval_flow(false);
    let rt = Runtime::in_memory();
    before.invoke(&rt, "t", Order::default()).await.unwrap();
    let renamed = Graph::new("flow")
        .node_fn("question", |o: &mut Order, ctx| {
            Box::pin(async move {
                o.answers.push(ctx.interrupt("ok?")?);
                Ok(())
            })
        })
        .node_sync("pay", |o: &mut Order| o.paid = Some("yes".into()))
        .edge(START, "question")
        .edge("question", "pay")
        .edge("pay", END)
        .compile()
        .unwrap();
    let err = renamed.resume(&rt, "t", "yes").await.unwrap_err();
    let RunError::CheckpointMismatch { node, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(node, "ask");
    assert!(
        err.to_string()
            .contains("a version of the graph that has it"),
        "{err}"
    );
    // The version that has it carries the run on.
    let done = before.resume(&rt, "t", "yes").await.unwrap();
    assert_eq!(done.completed().unwrap().paid.as_deref(), Some("yes"));
}

/// The flow `ask → pay` named `name`, `ask` routing by `route` to `targets`; its edges and
/// branch routes declared in one order or another.
fn ask_and_pay(
    name: &str,
    targets: [&'static str; 2],
    route: fn(&Order) -> &'static str,
    reordered: bool,
) -> CompiledGraph<Order> {
    let graph = Graph::new(name)
        .node_fn("ask", |o: &mut Order, ctx| {
            Box::pin(async move {
                let answer: String = ctx.interrupt("ok?")?;
                o.answers.push(answer);
                Ok(())
            })
        })
        .node_sync("pay", |o: &mut Order| o.paid = Some("yes".into()));
    let graph = match reordered {
        false => graph
            .edge(START, "ask")
            .branch("ask", targets, route)
            .edge("pay", END),
        true => graph
            .edge("pay", END)
            .branch("ask", [targets[1], targets[0]], route)
            .edge(START, "ask"),
    };
    graph.compile().unwrap()
}

/// The flow `ask → pay`, or straight to the end without an answer.
fn edge_order_flow(reordered: bool) -> CompiledGraph<Order> {
    let route = |o: &Order| if o.answers.is_empty() { END } else { "pay" };
    ask_and_pay("flow", ["pay", END], route, reordered)
}

/// The same graph with its edges and branch routes declared in another order resumes: a
/// refactor that moves lines changes nothing a run depends on.
#[tokio::test]
async fn a_graph_whose_edges_were_declared_in_another_order_resumes() {
    let (before, after) = (edge_order_flow(false), edge_order_flow(true));
    assert_ne!(before.fingerprint(), after.fingerprint());
    let rt = Runtime::in_memory();
    before.invoke(&rt, "t", Order::default()).await.unwrap();
    let done = after
        .resume(&rt, "t", "yes")
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(done.paid.as_deref(), Some("yes"));
}

/// `edge_order_flow` as the subgraph `flow` of the graph `outer`.
fn flow_inside(reordered: bool) -> CompiledGraph<Order> {
    Graph::new("outer")
        .subgraph(
            "flow",
            edge_order_flow(reordered),
            Order::clone,
            |o, child| *o = child,
        )
        .edge(START, "flow")
        .edge("flow", END)
        .compile()
        .unwrap()
}

/// A run suspended inside a subgraph resumes with the subgraph's edges declared in another
/// order, as a graph's own may be: the parent's structure names the subgraph by facts that
/// leave the order out. Before its fix the parent refused it as changed (`removed: subgraph
/// flow …`).
#[tokio::test]
async fn a_subgraph_whose_edges_were_declared_in_another_order_resumes() {
    let (before, after) = (flow_inside(false), flow_inside(true));
    assert_eq!(before.fingerprint(), after.fingerprint());
    let db = loomflow_tests::TempDb::new("subgraph-reordered");
    for rt in [Runtime::in_memory(), Runtime::sqlite(db.path()).unwrap()] {
        let asked = before.invoke(&rt, "t", Order::default()).await.unwrap();
        assert_eq!(asked.interrupts().len(), 1, "{asked:?}");
        let done = after.resume(&rt, "t", "yes").await.unwrap();
        assert_eq!(done.completed().unwrap().paid.as_deref(), Some("yes"));
    }
}

/// A run whose checkpoint recorded its graph as descriptions did before subgraphs were
/// described without their edge order (the subgraph by the fingerprint of its own graph,
/// facts in declaration order) resumes with the same graph; a real change is still refused,
/// naming it against that older form.
#[tokio::test]
async fn a_run_recorded_before_subgraphs_left_out_their_edge_order_resumes() {
    let graph = flow_inside(false);
    let db = loomflow_tests::TempDb::new("subgraph-described-before");
    let rt = Runtime::sqlite(db.path()).unwrap();
    for thread in ["same", "changed"] {
        graph.invoke(&rt, thread, Order::default()).await.unwrap();
    }
    drop(rt);
    // The parent's facts as a store of the earlier version kept them: its `subgraph` line
    // names the child's own fingerprint, and the structure had another fingerprint.
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    let bodies: Vec<(i64, String)> = conn
        .prepare("SELECT id, body FROM checkpoints WHERE namespace = ''")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let child = edge_order_flow(false);
    // A graph without subgraphs keeps the fingerprint earlier versions stored.
    assert_eq!(child.fingerprint(), "93a085a2f8e03972");
    for (id, body) in bodies {
        let mut body: serde_json::Value = serde_json::from_str(&body).unwrap();
        body["graph"] = json!("0123456789abcdef");
        if let Some(lines) = body["graph_description"].as_array_mut() {
            for line in lines
                .iter_mut()
                .filter(|l| l.as_str().unwrap().starts_with("subgraph"))
            {
                *line = json!(format!("subgraph flow {}", child.fingerprint()));
            }
        }
        conn.execute(
            "UPDATE checkpoints SET body = ?1 WHERE id = ?2",
            rusqlite::params![body.to_string(), id],
        )
        .unwrap();
    }
    drop(conn);
    let rt = Runtime::sqlite(db.path()).unwrap();
    let done = graph.resume(&rt, "same", "yes").await.unwrap();
    assert_eq!(done.completed().unwrap().paid.as_deref(), Some("yes"));
    let changed = Graph::new("outer")
        .subgraph("flow", edge_order_flow(false), Order::clone, |o, child| {
            *o = child
        })
        .node_sync("after", |_: &mut Order| {})
        .edge(START, "flow")
        .edge("flow", "after")
        .edge("after", END)
        .compile()
        .unwrap();
    let refused = changed.resume(&rt, "changed", "yes").await.unwrap_err();
    let RunError::GraphChanged { changes, .. } = refused else {
        panic!("{refused:?}");
    };
    assert_eq!(
        changes,
        [
            "removed: edge flow -> END",
            "added: node after",
            "added: edge flow -> after",
            "added: edge after -> END"
        ]
    );
}

/// A graph whose edge, or branch route, was declared twice resumes with that line declared
/// once, and back: the topology keeps each once, and nothing a run depends on changed.
/// Before its fix the count of the lines was compared, and the resume was refused.
#[tokio::test]
async fn a_graph_with_an_edge_declared_twice_resumes_with_it_declared_once() {
    let route = |_: &Order| "pay";
    let twice = ask_and_pay("repeated", ["pay", "pay"], route, false);
    let once = Graph::new("repeated")
        .node_fn("ask", |o: &mut Order, ctx| {
            Box::pin(async move {
                let answer: String = ctx.interrupt("ok?")?;
                o.answers.push(answer);
                Ok(())
            })
        })
        .node_sync("pay", |o: &mut Order| o.paid = Some("yes".into()))
        .edge(START, "ask")
        .edge(START, "ask")
        .branch("ask", ["pay"], route)
        .edge("pay", END)
        .compile()
        .unwrap();
    assert_ne!(twice.fingerprint(), once.fingerprint());
    let rt = Runtime::in_memory();
    for (first, then) in [(&twice, &once), (&once, &twice)] {
        let thread = first.fingerprint();
        first.invoke(&rt, thread, Order::default()).await.unwrap();
        let done = then.resume(&rt, thread, "yes").await.unwrap();
        assert_eq!(done.completed().unwrap().paid.as_deref(), Some("yes"));
    }
}

/// `ask` twice, then `pay`.
fn asking_twice(reordered: bool) -> CompiledGraph<Order> {
    let route = |o: &Order| if o.answers.len() < 2 { "ask" } else { "pay" };
    ask_and_pay("twice", ["ask", "pay"], route, reordered)
}

/// A run resumed by one ordering of the edges, then by the other again (a deploy, and its
/// rollback), carries on: neither changed what the run depends on. The first checkpoint
/// written under the new ordering describes it, as a run's first does.
#[tokio::test]
async fn edges_reordered_and_back_again_resume() {
    let db = loomflow_tests::TempDb::new("reordered-and-back");
    for rt in [Runtime::in_memory(), Runtime::sqlite(db.path()).unwrap()] {
        asking_twice(false)
            .invoke(&rt, "t", Order::default())
            .await
            .unwrap();
        let asked = asking_twice(true).resume(&rt, "t", "one").await.unwrap();
        assert_eq!(asked.interrupts().len(), 1, "{asked:?}");
        let checkpoints = rt.list_checkpoints("t").await.unwrap();
        let reordered = checkpoints.last().unwrap().body.get("graph").cloned();
        assert!(
            checkpoints
                .iter()
                .any(|cp| cp.body.get("graph") == reordered.as_ref()
                    && cp.body.get("graph_description").is_some()),
            "the new ordering is described"
        );
        let done = asking_twice(false).resume(&rt, "t", "two").await.unwrap();
        let done = done.completed().unwrap();
        assert_eq!((done.answers.len(), done.paid.as_deref()), (2, Some("yes")));
    }
}

/// A state with a field it does not checkpoint.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Scratch {
    kept: u32,
    #[serde(skip)]
    scratch: u32,
}

#[tokio::test]
async fn a_resume_in_memory_reads_the_state_a_durable_store_would_give_back() {
    // The in-memory store keeps snapshots as values, not JSON; a resume must still see
    // the state as it was checkpointed: a field the state does not serialize starts afresh,
    // as it would after a resume from SQLite or PostgreSQL.
    let graph = Graph::new("scratch")
        .node_sync("a", |s: &mut Scratch| {
            s.kept = 1;
            s.scratch = 7;
        })
        .node_fn("ask", |s: &mut Scratch, ctx| {
            Box::pin(async move {
                let answer: u32 = ctx.interrupt("how many?")?;
                s.kept += answer;
                s.scratch += answer;
                Ok(())
            })
        })
        .edge(START, "a")
        .edge("a", "ask")
        .edge("ask", END)
        .compile()
        .unwrap();
    let rt = Runtime::in_memory();
    let out = graph.invoke(&rt, "t", Scratch::default()).await.unwrap();
    assert!(matches!(out, RunOutcome::Interrupted { .. }), "{out:?}");
    let done = graph
        .resume(&rt, "t", 2)
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!((done.kept, done.scratch), (3, 2));
}

/// `a` then `ask`, which interrupts; `changed` adds an `audit` node after `ask`.
fn asker(changed: bool) -> CompiledGraph<Order> {
    let graph = Graph::new("asker")
        .node_sync("a", |o: &mut Order| o.side += 1)
        .node_fn("ask", |o: &mut Order, ctx| {
            Box::pin(async move {
                let answer: String = ctx.interrupt(json!("q?"))?;
                o.answers.push(answer);
                Ok(())
            })
        })
        .edge(START, "a")
        .edge("a", "ask");
    let graph = match changed {
        true => graph
            .node_sync("audit", |o: &mut Order| o.side += 100)
            .edge("ask", "audit")
            .edge("audit", END),
        false => graph.edge("ask", END),
    };
    graph.compile().unwrap()
}

/// Checks that a resume with a changed graph was refused, naming the node it added.
fn refused_naming_the_added_node<T: std::fmt::Debug>(resumed: Result<T, RunError>) {
    let refused = resumed.unwrap_err();
    assert!(
        refused.to_string().contains("added: node audit"),
        "{refused}"
    );
}

/// The newest top-level checkpoint of `thread`.
async fn newest_top_level(rt: &Runtime, thread: &str) -> u64 {
    let checkpoints = rt.list_checkpoints(thread).await.unwrap();
    checkpoints
        .iter()
        .filter(|c| c.namespace.is_empty())
        .map(|c| c.id)
        .max()
        .unwrap()
}

/// A fork from a checkpoint past a run's first is a run of the same graph: its row names
/// the graph (what a worker claims it by), and a resume with a changed graph is refused
/// naming what changed, as on the original thread. On every store alike.
#[tokio::test]
async fn a_fork_runs_the_source_runs_graph_and_its_row_names_it() {
    let db = loomflow_tests::TempDb::new("fork-names-graph");
    for rt in [Runtime::in_memory(), Runtime::sqlite(db.path()).unwrap()] {
        asker(false)
            .invoke(&rt, "t", Order::default())
            .await
            .unwrap();
        let suspended = newest_top_level(&rt, "t").await;
        rt.fork("t", suspended, "t2").await.unwrap();

        let forked = rt.run("t2").await.unwrap().record;
        assert_eq!(forked.graph.as_deref(), Some("asker"), "{forked:?}");
        refused_naming_the_added_node(asker(true).resume(&rt, "t2", "x").await);
    }
}

/// A fork from a checkpoint written after the run carried on with a changed graph (here
/// by `allow_graph_change`) still names the graph on its row: a worker finds it by that name.
#[tokio::test]
async fn a_fork_after_a_graph_change_names_the_graph() {
    let db = loomflow_tests::TempDb::new("fork-after-change");
    for rt in [Runtime::in_memory(), Runtime::sqlite(db.path()).unwrap()] {
        asker(false)
            .invoke(&rt, "t", Order::default())
            .await
            .unwrap();
        let done = asker(true).resume(&rt, "t", "x").allow_graph_change().await;
        assert!(done.unwrap().is_completed());
        let after_the_change = newest_top_level(&rt, "t").await;
        rt.fork("t", after_the_change, "t2").await.unwrap();
        let forked = rt.run("t2").await.unwrap().record;
        assert_eq!(forked.graph.as_deref(), Some("asker"), "{forked:?}");
    }
}

/// Asks twice, with a step between; `reordered` declares the same edges in another order
/// (another fingerprint, the same structure).
fn asks_twice(reordered: bool) -> CompiledGraph<Order> {
    let ask = |o: &mut Order, ctx: &Context| -> Result<(), loomflow::graph::NodeError> {
        o.answers.push(ctx.interrupt(json!("q?"))?);
        Ok(())
    };
    let graph = Graph::new("twice")
        .node_sync("between", |o: &mut Order| o.side += 1)
        .node_fn("first", move |o: &mut Order, ctx| {
            Box::pin(async move { ask(o, ctx) })
        })
        .node_fn("second", move |o: &mut Order, ctx| {
            Box::pin(async move { ask(o, ctx) })
        });
    let edges = [
        (START, "first"),
        ("first", "between"),
        ("between", "second"),
        ("second", END),
    ];
    let mut graph = graph;
    for i in 0..edges.len() {
        let (from, to) = edges[if reordered { edges.len() - 1 - i } else { i }];
        graph = graph.edge(from, to);
    }
    graph.compile().unwrap()
}

/// A fork from a checkpoint written after a run carried on with its graph's edges declared
/// in another order takes the description of that structure: a resume of the fork with the
/// first order is accepted, as on the original thread. Before, the fork had no description
/// for the structure it stood at, and such a resume was refused.
#[tokio::test]
async fn a_fork_after_a_reordered_graph_accepts_either_order() {
    let db = loomflow_tests::TempDb::new("fork-reordered");
    for rt in [Runtime::in_memory(), Runtime::sqlite(db.path()).unwrap()] {
        let first = asks_twice(false)
            .invoke(&rt, "t", Order::default())
            .await
            .unwrap();
        assert_eq!(first.interrupts().len(), 1);
        let second = asks_twice(true).resume(&rt, "t", "one").await.unwrap();
        assert_eq!(second.interrupts().len(), 1, "{second:?}");
        let newest = newest_top_level(&rt, "t").await;
        rt.fork("t", newest, "t2").await.unwrap();
        let done = asks_twice(false).resume(&rt, "t2", "two").await.unwrap();
        assert_eq!(done.completed().unwrap().answers, ["one", "two"]);
    }
}

/// A cancel writes the run's last position again, as cancelled; a fork from it (the newest
/// checkpoint the thread lists) carries on from that position: here, the question the run
/// was suspended on, which the fork's resume answers. Before, the fork's run was cancelled
/// too, and nothing carried it on.
#[tokio::test]
async fn a_fork_from_where_a_run_was_cancelled_carries_on_from_there() {
    let db = loomflow_tests::TempDb::new("fork-cancelled");
    for rt in [Runtime::in_memory(), Runtime::sqlite(db.path()).unwrap()] {
        let graph = asker(false);
        graph.invoke(&rt, "t", Order::default()).await.unwrap();
        rt.cancel("t").await.unwrap();
        let cancelled = newest_top_level(&rt, "t").await;
        let checkpoints = rt.list_checkpoints("t").await.unwrap();
        let newest = checkpoints.iter().find(|c| c.id == cancelled).unwrap();
        assert_eq!(newest.status, RunStatus::Cancelled);
        rt.fork("t", cancelled, "t2").await.unwrap();
        let row = rt.run("t2").await.unwrap().record;
        assert_eq!(
            row.state,
            loomflow::runtime::RunState::Interrupted,
            "{row:?}"
        );
        let done = graph.resume(&rt, "t2", "yes").await.unwrap();
        assert_eq!(done.completed().unwrap().answers, ["yes"]);
    }
}

/// A fork never discards another run's work: onto a thread whose run is queued or
/// suspended it is refused, naming the thread and where its run stands, and that run stays
/// as it was. Going back on one thread (a fork onto its own thread) still abandons its
/// suspended run.
#[tokio::test]
async fn a_fork_onto_a_thread_with_an_unfinished_run_is_refused() {
    let db = loomflow_tests::TempDb::new("fork-unfinished");
    for rt in [Runtime::in_memory(), Runtime::sqlite(db.path()).unwrap()] {
        let graph = asker(false);
        graph.invoke(&rt, "t", Order::default()).await.unwrap();
        let suspended = newest_top_level(&rt, "t").await;
        rt.submit("asker", "queued", Order::default())
            .await
            .unwrap();
        graph.invoke(&rt, "asking", Order::default()).await.unwrap();

        for (target, state) in [
            ("queued", loomflow::runtime::RunState::Queued),
            ("asking", loomflow::runtime::RunState::Interrupted),
        ] {
            match rt.fork("t", suspended, target).await {
                Err(loomflow::RuntimeError::RunActive { thread, state: was }) => {
                    assert_eq!((&*thread, was), (target, state));
                }
                other => panic!("fork onto {target}: {other:?}"),
            }
            assert_eq!(rt.run(target).await.unwrap().record.state, state);
        }

        let first = rt.list_checkpoints("t").await.unwrap()[0].id;
        rt.fork("t", first, "t").await.unwrap();
        let again = graph.recover(&rt, "t").await.unwrap();
        assert_eq!(again.interrupts().len(), 1, "{again:?}");

        // A run stopped half-way (a crash) is another thread's work a fork does not
        // discard; going back on its own thread, as going back twice, abandons it.
        held_run::HeldRun::start(&rt, "crashed", 1)
            .await
            .abandon()
            .await;
        match rt.fork("t", first, "crashed").await {
            Err(loomflow::RuntimeError::RunActive { state, .. }) => {
                assert_eq!(state, loomflow::runtime::RunState::Running);
            }
            other => panic!("fork onto a run stopped half-way: {other:?}"),
        }
        let start = rt.list_checkpoints("crashed").await.unwrap()[0].id;
        rt.fork("crashed", start, "crashed").await.unwrap();
        rt.fork("crashed", start, "crashed").await.unwrap();
        assert_eq!(rt.run("crashed").await.unwrap().record.run, 3);
    }
}

/// A graph that counts to 30 in as many steps, then asks; `changed` adds a node after the
/// question.
fn looper(changed: bool) -> CompiledGraph<Order> {
    let graph = Graph::new("looper")
        .node_sync("inc", |o: &mut Order| o.side += 1)
        .node_fn("ask", |o: &mut Order, ctx| {
            Box::pin(async move {
                let answer: String = ctx.interrupt(json!("q?"))?;
                o.answers.push(answer);
                Ok(())
            })
        })
        .edge(START, "inc")
        .branch("inc", ["inc", "ask"], |o: &Order| {
            if o.side < 30 { "inc" } else { "ask" }
        })
        .recursion_limit(100);
    let graph = match changed {
        true => graph
            .node_sync("audit", |_: &mut Order| {})
            .edge("ask", "audit")
            .edge("audit", END),
        false => graph.edge("ask", END),
    };
    graph.compile().unwrap()
}

/// The memory store's retention keeps a run's first checkpoint, which describes its graph:
/// a resume with a changed graph, many steps later, is refused naming what changed.
#[tokio::test]
async fn retention_keeps_what_a_changed_graph_is_refused_with() {
    let rt = Runtime::with_store(loomflow::runtime::MemoryStore::with_retention(Some(4)));
    looper(false)
        .invoke(&rt, "t", Order::default())
        .await
        .unwrap();
    assert!(rt.list_checkpoints("t").await.unwrap().len() < 12, "pruned");

    refused_naming_the_added_node(looper(true).resume(&rt, "t", "x").await);
}

/// Retention keeps the first checkpoint of every run it keeps a checkpoint of, not only
/// the newest run's: a fork from an older run's suspension, after newer runs on the
/// thread, still names the graph on its row (what a worker claims it by) and refuses a
/// changed graph naming what changed.
#[tokio::test]
async fn retention_keeps_the_description_of_an_older_suspended_run() {
    let rt = Runtime::with_store(loomflow::runtime::MemoryStore::with_retention(Some(4)));
    looper(false)
        .invoke(&rt, "t", Order::default())
        .await
        .unwrap();
    let suspended = newest_top_level(&rt, "t").await;
    // A newer run on the thread: the first run is no longer the newest.
    looper(false)
        .invoke(&rt, "t", Order::default())
        .await
        .unwrap();
    assert!(rt.list_checkpoints("t").await.unwrap().len() < 14, "pruned");

    rt.fork("t", suspended, "t2").await.unwrap();
    let forked = rt.run("t2").await.unwrap().record;
    assert_eq!(forked.graph.as_deref(), Some("looper"), "{forked:?}");
    refused_naming_the_added_node(looper(true).resume(&rt, "t2", "x").await);
    let done = looper(false).resume(&rt, "t2", "x").await.unwrap();
    assert_eq!(done.completed().unwrap().answers, ["x"]);
}

/// A fork from the last steps of an older run, whose first checkpoint is past the
/// retention bound, names that run's graph on its row too.
#[tokio::test]
async fn a_fork_from_an_older_runs_last_steps_names_its_graph() {
    let counting = Graph::new("counting")
        .node_sync("inc", |o: &mut Order| o.side += 1)
        .edge(START, "inc")
        .branch(
            "inc",
            ["inc", END],
            |o: &Order| {
                if o.side < 10 { "inc" } else { END }
            },
        )
        .compile()
        .unwrap();
    let rt = Runtime::with_store(loomflow::runtime::MemoryStore::with_retention(Some(4)));
    counting.invoke(&rt, "t", Order::default()).await.unwrap();
    // A run of one step: the older run's last steps stay within the bound.
    let short = Order {
        side: 9,
        ..Order::default()
    };
    counting.invoke(&rt, "t", short).await.unwrap();
    let kept = rt.list_checkpoints("t").await.unwrap();
    let older = kept
        .iter()
        .filter(|c| c.run == 1 && c.step > 1)
        .map(|c| c.id);
    let older = older.max();
    assert!(
        older.is_some(),
        "the older run's last steps are kept: {kept:?}"
    );
    let older = older.unwrap();

    rt.fork("t", older, "t2").await.unwrap();
    let forked = rt.run("t2").await.unwrap().record;
    assert_eq!(forked.graph.as_deref(), Some("counting"), "{forked:?}");
}

/// Going back on one thread drops the resume requests queued for the run it abandons:
/// a request meant for its second question does not answer the fork's first.
#[tokio::test]
async fn a_fork_back_drops_the_requests_queued_for_the_abandoned_run() {
    let two_questions = Graph::new("two-questions")
        .node_fn("q1", |v: &mut Vec<String>, ctx| {
            Box::pin(async move {
                let a: String = ctx.interrupt(json!("q1?"))?;
                v.push(format!("q1={a}"));
                Ok(())
            })
        })
        .node_fn("q2", |v: &mut Vec<String>, ctx| {
            Box::pin(async move {
                let a: String = ctx.interrupt(json!("q2?"))?;
                v.push(format!("q2={a}"));
                Ok(())
            })
        })
        .edge(START, "q1")
        .edge("q1", "q2")
        .edge("q2", END)
        .compile()
        .unwrap();
    let db = loomflow_tests::TempDb::new("fork-drops-requests");
    for rt in [Runtime::in_memory(), Runtime::sqlite(db.path()).unwrap()] {
        two_questions.invoke(&rt, "t", Vec::new()).await.unwrap();
        let at_q1 = newest_top_level(&rt, "t").await;
        two_questions.resume(&rt, "t", "first").await.unwrap();
        rt.request_resume("t", "meant for q2").await.unwrap();

        rt.fork("t", at_q1, "t").await.unwrap();
        let again = two_questions.recover(&rt, "t").await.unwrap();
        assert_eq!(again.interrupts().len(), 1, "{again:?}");
        assert_eq!(again.interrupts()[0].node, "q1", "{again:?}");
        assert!(again.state().is_empty(), "{again:?}");
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Heard {
    answer: Option<String>,
    signals: Vec<String>,
}

/// `ask` interrupts for a value, `wait` waits for the signals `zeta` and `alpha`, in one step.
fn asks_and_waits() -> CompiledGraph<Heard> {
    Graph::new("asks and waits")
        .node_fn("ask", |heard: &mut Heard, ctx| {
            Box::pin(async move {
                heard.answer = Some(ctx.interrupt("ok?")?);
                Ok(())
            })
        })
        .node_fn("wait", |heard: &mut Heard, ctx| {
            Box::pin(async move {
                let zeta: String = ctx.wait_for_signal("zeta").or_suspend().await?;
                let alpha: String = ctx.wait_for_signal("alpha").or_suspend().await?;
                heard.signals = vec![zeta, alpha];
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge(START, "wait")
        .edge("ask", END)
        .edge("wait", END)
        .compile()
        .unwrap()
}

/// What a suspension's run row says it waits for, in order: the signals its waits name, and
/// a resume request when it is interrupted for a value; the same from every store.
async fn suspended_rows_list_what_they_wait_for(label: &str, runtime: Runtime) {
    let waiting_on = |runtime: &Runtime, thread: &'static str| {
        let runtime = runtime.clone();
        async move { runtime.run(thread).await.unwrap().record.waiting_on }
    };
    asker::asker::<u32>()
        .invoke(&runtime, "asking", None)
        .await
        .unwrap();
    assert_eq!(
        waiting_on(&runtime, "asking").await,
        ["loomflow:resume"],
        "{label}"
    );

    let both = asks_and_waits();
    both.invoke(&runtime, "both", Heard::default())
        .await
        .unwrap();
    assert_eq!(
        waiting_on(&runtime, "both").await,
        ["loomflow:resume", "zeta"],
        "{label}"
    );
    runtime.signal("both", "zeta", "z").await.unwrap();
    runtime.signal("both", "alpha", "a").await.unwrap();
    let outcome = both.recover(&runtime, "both").await.unwrap();
    assert!(matches!(outcome, RunOutcome::Interrupted { .. }), "{label}");
    assert_eq!(
        waiting_on(&runtime, "both").await,
        ["loomflow:resume"],
        "{label}"
    );
    let done = both.resume(&runtime, "both", "yes").await.unwrap();
    let heard = done.completed().unwrap();
    assert_eq!(heard.answer.as_deref(), Some("yes"), "{label}");
    assert_eq!(heard.signals, ["z", "a"], "{label}");
    assert!(waiting_on(&runtime, "both").await.is_empty(), "{label}");
}

#[tokio::test]
async fn suspended_rows_list_what_they_wait_for_in_memory_and_sqlite() {
    suspended_rows_list_what_they_wait_for("memory", Runtime::in_memory()).await;
    let db = loomflow_tests::TempDb::new("interrupts-waiting-on");
    suspended_rows_list_what_they_wait_for("sqlite", Runtime::sqlite(db.path()).unwrap()).await;
}

/// A step retried in a loop until it succeeds records its one success under the number the
/// node's next run looks up first: on resume the charge is not made again, and its result
/// is the one recorded.
#[tokio::test]
async fn a_step_retried_until_it_succeeds_is_not_made_again_on_resume() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let graph = Graph::new("retry")
        .node_fn("pay", move |paid: &mut Vec<String>, ctx| {
            let calls = Arc::clone(&counted);
            Box::pin(async move {
                let id: String = loop {
                    let calls = Arc::clone(&calls);
                    let tried = ctx
                        .step("charge", || async move {
                            match calls.fetch_add(1, Ordering::SeqCst) {
                                0 => Err("declined, try again".to_owned()),
                                n => Ok(format!("ch_{n}")),
                            }
                        })
                        .await;
                    if let Ok(id) = tried {
                        break id;
                    }
                };
                let ship: bool = ctx.interrupt("ship?")?;
                if ship {
                    paid.push(id);
                }
                Ok(())
            })
        })
        .edge(START, "pay")
        .edge("pay", END)
        .compile()
        .unwrap();
    let rt = Runtime::in_memory();
    graph.invoke(&rt, "t", Vec::new()).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let done = graph
        .resume(&rt, "t", true)
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(done, ["ch_1"]);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the charge was not made again"
    );
}

/// A state with an unordered set, in a step where `a` asks and `b` finishes beside it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Tagged {
    tags: std::collections::HashSet<String>,
    summary: String,
}

/// A sibling that finished beside an interrupt is merged on resume by the fields it
/// changed: its copy, read back, lists an unordered set in another order than the step's
/// state does, which is no change of it (before, a merge conflict on `tags` naming `b`,
/// on some resumes and not others).
#[tokio::test]
async fn a_siblings_copy_read_back_changes_only_what_it_changed() {
    let db = loomflow_tests::TempDb::new("sibling-set");
    for runtime in [Runtime::in_memory(), Runtime::sqlite(db.path()).unwrap()] {
        let graph = Graph::new("tagging")
            .node_fn("a", |s: &mut Tagged, ctx| {
                Box::pin(async move {
                    let ok: bool = ctx.interrupt(json!("approve?"))?;
                    if ok {
                        s.tags.insert("approved".into());
                    }
                    Ok(())
                })
            })
            .node_sync("b", |s: &mut Tagged| s.summary = "summed up".into())
            .edge(START, "a")
            .edge(START, "b")
            .edge("a", END)
            .edge("b", END)
            .compile()
            .unwrap();
        for n in 0..8 {
            let thread = format!("t{n}");
            let tags = (0..16).map(|i| format!("tag{i}")).collect();
            let input = Tagged {
                tags,
                summary: String::new(),
            };
            let out = graph.invoke(&runtime, &thread, input).await.unwrap();
            assert_eq!(out.interrupts().len(), 1, "{out:?}");
            let done = graph.resume(&runtime, &thread, true).await.unwrap();
            let done = done.completed().unwrap();
            assert!(
                done.tags.contains("approved") && done.tags.len() == 17,
                "{done:?}"
            );
            assert_eq!(done.summary, "summed up");
        }
    }
}

/// The state before a deploy that renames a field (`amount`, read back as `total` by its
/// serde alias), and after it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Priced {
    amount: u32,
    log: Vec<String>,
    answer: bool,
    tags: std::collections::HashSet<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Totalled {
    #[serde(alias = "amount")]
    total: u32,
    log: Vec<String>,
    answer: bool,
    tags: std::collections::HashSet<String>,
}

/// Node `a` writes the field, node `b` beside it asks a question and writes its answer,
/// with state `S`.
fn priced_step<S: loomflow::graph::State>(
    write: fn(&mut S),
    answer: fn(&mut S, bool),
) -> CompiledGraph<S> {
    Graph::new("priced")
        .node_sync("a", write)
        .node_fn("b", move |s: &mut S, ctx| {
            Box::pin(async move {
                answer(s, ctx.interrupt("ok?")?);
                Ok(())
            })
        })
        .edge(START, "a")
        .edge(START, "b")
        .edge("a", END)
        .edge("b", END)
        .compile()
        .unwrap()
}

/// A sibling kept across a suspension keeps its write of a field the new state type renamed
/// (an alias): the fields it changed were named under the old name, which the state no
/// longer has, and the write was dropped without a word (the run completed with 42).
#[tokio::test]
async fn a_siblings_write_of_a_renamed_field_is_kept_on_resume() {
    let db = loomflow_tests::TempDb::new("sibling-alias");
    for runtime in [Runtime::in_memory(), Runtime::sqlite(db.path()).unwrap()] {
        let before = priced_step(
            |s: &mut Priced| {
                s.amount = 99;
                s.log.push("a".into());
            },
            |s, answer| s.answer = answer,
        );
        let input = Priced {
            amount: 42,
            tags: (0..30).map(|i| format!("tag{i}")).collect(),
            ..Priced::default()
        };
        let asked = before.invoke(&runtime, "t", input).await.unwrap();
        assert_eq!(asked.interrupts().len(), 1, "{asked:?}");
        // The node that asked also marks the set, which the other leaves as it was: read
        // back with another hasher, it lists its items in another order.
        let after = priced_step(
            |s: &mut Totalled| s.total = 99,
            |s, a| {
                s.answer = a;
                s.tags.insert("answered".into());
            },
        );
        let done = after.resume(&runtime, "t", true).await.unwrap();
        let done = done.completed().unwrap();
        assert_eq!((done.total, done.log), (99, vec!["a".to_owned()]));
        assert!(done.answer && done.tags.contains("answered") && done.tags.len() == 31);
    }
}

/// A step retried after an interrupt was answered (a failed call, then a successful one)
/// keeps its number for the node's next run: run again for the same superstep, the node
/// finds the success recorded and does not act twice.
#[tokio::test]
async fn a_step_retried_after_an_answer_is_not_done_again() {
    static CHARGES: AtomicUsize = AtomicUsize::new(0);
    static ATTEMPTS: AtomicUsize = AtomicUsize::new(0);
    let graph = Graph::new("retrying")
        .node_fn("pay", |paid: &mut Vec<u32>, ctx| {
            Box::pin(async move {
                let _go: bool = ctx.interrupt("pay?")?;
                let charged = loop {
                    let attempt = ctx.step("charge", || async {
                        if ATTEMPTS.fetch_add(1, Ordering::SeqCst) == 0 {
                            return Err("the card was declined".to_owned());
                        }
                        Ok(CHARGES.fetch_add(1, Ordering::SeqCst) as u32 + 1)
                    });
                    if let Ok(charged) = attempt.await {
                        break charged;
                    }
                };
                paid.push(charged);
                let _receipt: bool = ctx.interrupt("receipt?")?;
                Ok(())
            })
        })
        .edge(START, "pay")
        .edge("pay", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    graph.invoke(&runtime, "t", Vec::new()).await.unwrap();
    let asked = graph.resume(&runtime, "t", true).await.unwrap();
    assert_eq!(
        asked.interrupts()[0].payload,
        json!("receipt?"),
        "{asked:?}"
    );
    let done = graph.resume(&runtime, "t", true).await.unwrap();
    assert_eq!(done.completed().unwrap(), [1]);
    assert_eq!(CHARGES.load(Ordering::SeqCst), 1, "charged once");
}

/// A step whose work asks a question (approve, then charge) counts it as asked when it is
/// replayed: the node's next question takes its own answer, not the step's. Before, the
/// replayed step left the count behind, and the second question was handed the first's
/// answer (here a `bool` for a `String`: every resume refused).
#[tokio::test]
async fn a_question_asked_inside_a_step_is_counted_when_the_step_is_replayed() {
    static CHARGES: AtomicUsize = AtomicUsize::new(0);
    let db = loomflow_tests::TempDb::new("asked-inside-a-step");
    for (label, runtime) in [
        ("memory", Runtime::in_memory()),
        ("sqlite", Runtime::sqlite(db.path()).unwrap()),
    ] {
        let graph = Graph::new("approve-inside")
            .node_fn("pay", |said: &mut Vec<String>, ctx| {
                Box::pin(async move {
                    let charged: String = ctx
                        .step("charge", || async {
                            let approved: bool = ctx.interrupt("approve?")?;
                            if !approved {
                                return Ok::<_, RunError>("declined".to_owned());
                            }
                            CHARGES.fetch_add(1, Ordering::SeqCst);
                            Ok("charged".to_owned())
                        })
                        .await?;
                    said.push(charged);
                    let note: String = ctx.interrupt("note?")?;
                    said.push(note);
                    Ok(())
                })
            })
            .edge(START, "pay")
            .edge("pay", END)
            .compile()
            .unwrap();
        let before = CHARGES.load(Ordering::SeqCst);
        let first = graph.invoke(&runtime, "t", Vec::new()).await.unwrap();
        assert_eq!(first.interrupts()[0].payload, json!("approve?"), "{label}");
        let second = graph.resume(&runtime, "t", true).await.unwrap();
        assert_eq!(second.interrupts()[0].payload, json!("note?"), "{label}");
        let done = graph.resume(&runtime, "t", "hello").await.unwrap();
        assert_eq!(done.completed().unwrap(), ["charged", "hello"], "{label}");
        assert_eq!(
            CHARGES.load(Ordering::SeqCst),
            before + 1,
            "{label}: charged once"
        );
    }
}

/// A step that asks until it gets a good answer (its work fails on a bad one, and the node
/// tries again) asks a new question each try; once one records it, a replay counts every
/// try's question, and the node's next question takes its own answer.
#[tokio::test]
async fn a_step_that_asks_until_answered_well_counts_every_tries_question() {
    let db = loomflow_tests::TempDb::new("asks-until-good");
    for (label, runtime) in [
        ("memory", Runtime::in_memory()),
        ("sqlite", Runtime::sqlite(db.path()).unwrap()),
    ] {
        let graph = Graph::new("asks-until-good")
            .node_fn("check", |said: &mut Vec<String>, ctx| {
                Box::pin(async move {
                    type Tried = Result<String, loomflow::graph::BoxError>;
                    let code = loop {
                        let tried = ctx.step("code", || async {
                            let code: String = ctx.interrupt("code?")?;
                            let tried: Tried = match code.as_str() {
                                "good" => Ok(code),
                                _ => Err(format!("bad code {code}").into()),
                            };
                            tried
                        });
                        match tried.await {
                            Ok(code) => break code,
                            Err(error @ RunError::Suspended { .. }) => return Err(error.into()),
                            Err(_) => {}
                        }
                    };
                    said.push(code);
                    let note: String = ctx.interrupt("note?")?;
                    said.push(note);
                    Ok(())
                })
            })
            .edge(START, "check")
            .edge("check", END)
            .compile()
            .unwrap();
        let first = graph.invoke(&runtime, "t", Vec::new()).await.unwrap();
        assert_eq!(first.interrupts()[0].payload, json!("code?"), "{label}");
        // A bad answer: the retry asks again.
        let again = graph.resume(&runtime, "t", "bad").await.unwrap();
        let asked = again.interrupts();
        assert_eq!(
            (asked[0].payload.clone(), asked[0].index),
            (json!("code?"), 1),
            "{label}"
        );
        let note = graph.resume(&runtime, "t", "good").await.unwrap();
        assert_eq!(note.interrupts()[0].payload, json!("note?"), "{label}");
        let done = graph.resume(&runtime, "t", "hello").await.unwrap();
        assert_eq!(done.completed().unwrap(), ["good", "hello"], "{label}");
    }
}

/// A step around a step that asks counts the inner step's question as its own: replayed
/// whole, it counts it, and the node's next question takes its own answer.
#[tokio::test]
async fn a_step_around_a_step_that_asks_counts_its_question() {
    let graph = Graph::new("nested-asks")
        .node_fn("outer", |said: &mut Vec<String>, ctx| {
            Box::pin(async move {
                let both: String = ctx
                    .step("outer", || async {
                        let inner: bool = ctx
                            .step("inner", || async {
                                let ok: bool = ctx.interrupt("ok?")?;
                                Ok::<_, RunError>(ok)
                            })
                            .await?;
                        Ok::<_, RunError>(format!("outer({inner})"))
                    })
                    .await?;
                said.push(both);
                let note: String = ctx.interrupt("note?")?;
                said.push(note);
                Ok(())
            })
        })
        .edge(START, "outer")
        .edge("outer", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    graph.invoke(&runtime, "t", Vec::new()).await.unwrap();
    let asked = graph.resume(&runtime, "t", true).await.unwrap();
    assert_eq!(asked.interrupts()[0].payload, json!("note?"));
    let done = graph.resume(&runtime, "t", "hello").await.unwrap();
    assert_eq!(done.completed().unwrap(), ["outer(true)", "hello"]);
}

/// Steps run side by side in one node count their own questions only: a step that asked
/// nothing, running beside one that asked, does not count the other's.
#[tokio::test]
async fn steps_side_by_side_do_not_count_each_others_questions() {
    let graph = Graph::new("side-by-side")
        .node_fn("both", |said: &mut Vec<String>, ctx| {
            Box::pin(async move {
                let asking = ctx.step("a", || async {
                    tokio::task::yield_now().await;
                    let ok: bool = ctx.interrupt("ok?")?;
                    Ok::<_, RunError>(ok.to_string())
                });
                let quiet = ctx.step("b", || async {
                    tokio::task::yield_now().await;
                    tokio::task::yield_now().await;
                    Ok::<_, RunError>("b".to_owned())
                });
                let (a, b) = futures_util::future::join(asking, quiet).await;
                said.push(a?);
                said.push(b?);
                Ok(())
            })
        })
        .edge(START, "both")
        .edge("both", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let first = graph.invoke(&runtime, "t", Vec::new()).await.unwrap();
    assert_eq!(first.interrupts()[0].payload, json!("ok?"));
    let done = graph.resume(&runtime, "t", true).await.unwrap();
    assert_eq!(done.completed().unwrap(), ["true", "b"]);
}

/// A resume request answers the question it was sent for: one sent while the resumed step
/// still ran (the row said interrupted, at the first question) is not applied to the next
/// question the run asks, which nobody saw. Before its fix it answered that one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_request_answers_only_the_question_it_was_sent_for() {
    use tokio::sync::Notify;
    let go = Arc::new(Notify::new());
    let entered = Arc::new(Notify::new());
    let (held, seen) = (Arc::clone(&go), Arc::clone(&entered));
    let asking = Graph::new("asks-twice")
        .node_fn("ask", move |answers: &mut Vec<String>, ctx| {
            let (held, seen) = (Arc::clone(&held), Arc::clone(&seen));
            Box::pin(async move {
                let answer: String = ctx.interrupt("which?")?;
                if answers.is_empty() {
                    // The first answer's step holds here while the test sends again.
                    seen.notify_one();
                    held.notified().await;
                }
                answers.push(answer);
                Ok(())
            })
        })
        .edge(START, "ask")
        .branch("ask", ["ask", END], |answers: &Vec<String>| {
            if answers.len() < 2 { "ask" } else { END }
        })
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    asking.invoke(&runtime, "t", Vec::new()).await.unwrap();
    runtime.request_resume("t", "first").await.unwrap();
    let carried = asking.recover(&runtime, "t").start();
    entered.notified().await;
    // The run still stands at the first question: this is sent for it, and too late.
    runtime.request_resume("t", "stale").await.unwrap();
    go.notify_one();
    let second = carried.await.unwrap();
    assert_eq!(second.interrupts().len(), 1, "it asks again: {second:?}");
    let again = asking.recover(&runtime, "t").await.unwrap();
    assert_eq!(
        again.interrupts().len(),
        1,
        "the stale request answered the next question: {again:?}"
    );
    let done = asking
        .resume(&runtime, "t", "second")
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(done, ["first", "second"]);
}

/// A resume refused for a value its node cannot use answers nothing: a resume request
/// queued for the same question stays, and carries the run on. One that the run took
/// spends the requests queued for its question. Before its fix a refused resume dropped
/// them first.
#[tokio::test]
async fn a_refused_resume_leaves_the_requests_queued_for_its_question() {
    let db = loomflow_tests::TempDb::new("refused-resume-requests");
    for runtime in [Runtime::in_memory(), Runtime::sqlite(db.path()).unwrap()] {
        let graph = Graph::new("how-many")
            .node_fn("ask", |n: &mut u32, ctx| {
                Box::pin(async move {
                    *n += ctx.interrupt::<u32>("how many?")?;
                    Ok(())
                })
            })
            .edge(START, "ask")
            .edge("ask", END)
            .compile()
            .unwrap();
        graph.invoke(&runtime, "t", 1).await.unwrap();
        runtime.request_resume("t", 4).await.unwrap();
        let refused = graph.resume(&runtime, "t", "not a number").await;
        assert!(
            matches!(refused, Err(RunError::ResumeValue { .. })),
            "{refused:?}"
        );
        let carried = graph.recover(&runtime, "t").await.unwrap();
        assert_eq!(
            carried.completed().unwrap(),
            5,
            "the queued request applied"
        );

        // Taken, a resume spends the requests queued for the question it answered.
        graph.invoke(&runtime, "u", 1).await.unwrap();
        runtime.request_resume("u", 4).await.unwrap();
        let done = graph.resume(&runtime, "u", 2).await.unwrap();
        assert_eq!(done.completed().unwrap(), 3);
        graph.invoke(&runtime, "u", 1).await.unwrap();
        let asked = graph.recover(&runtime, "u").await.unwrap();
        assert_eq!(asked.interrupts().len(), 1, "a spent request: {asked:?}");
    }
}

/// A resume request that waited past the pending TTL (a worker down over a weekend, a
/// process restarted) is still the run's: the mailbox lets go of it, the store keeps it
/// for the run, and the run carried on takes it from there. Before, the run asked again,
/// and the request stayed in the store unapplied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_request_past_the_pending_ttl_is_taken_from_the_store() {
    let db = loomflow_tests::TempDb::new("resume-request-ttl");
    let runtime = Runtime::builder()
        .store(loomflow::runtime::SqliteStore::open(db.path()).unwrap())
        .signals(
            loomflow::runtime::MailboxConfig::default()
                .pending_signal_ttl(Some(std::time::Duration::from_millis(50))),
        )
        .build();
    let asking: CompiledGraph<Vec<String>> = Graph::new("asking")
        .node_fn("ask", |answers: &mut Vec<String>, ctx| {
            Box::pin(async move {
                answers.push(ctx.interrupt(json!({ "question": "ship?" }))?);
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
        .unwrap();
    let asked = asking.invoke(&runtime, "t", Vec::new()).await.unwrap();
    assert_eq!(asked.interrupts().len(), 1);
    runtime.request_resume("t", "yes").await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    let done = asking.recover(&runtime, "t").await.unwrap();
    assert_eq!(done.completed().unwrap(), ["yes"]);
}
