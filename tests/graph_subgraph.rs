//! Subgraphs: events, durability and namespaces of a graph used as a node.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::StreamExt;
use loomflow::prelude::*;
use loomflow::runtime::RunState;
use loomflow::{EventKind, RunError};

fn inner() -> CompiledGraph<u32> {
    Graph::new("inner")
        .node_sync("a", |n: &mut u32| *n += 1)
        .node_sync("b", |n: &mut u32| *n += 10)
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", END)
        .compile()
        .unwrap()
}

fn outer() -> CompiledGraph<u32> {
    around(inner())
}

/// `sub` (the child, given its input as it is), then `after`, which doubles.
fn around(child: CompiledGraph<u32>) -> CompiledGraph<u32> {
    Graph::new("outer")
        .subgraph("sub", child, |n: &u32| *n, |n: &mut u32, m: u32| *n = m)
        .node_sync("after", |n: &mut u32| *n *= 2)
        .edge(START, "sub")
        .edge("sub", "after")
        .edge("after", END)
        .compile()
        .unwrap()
}

#[tokio::test]
async fn a_subgraph_sends_no_run_level_events_of_its_own() {
    let runtime = Runtime::in_memory();
    let events: Vec<_> = outer().stream(&runtime, "t", 1).collect().await;
    let done = events.iter().filter(|e| e.kind == EventKind::Done).count();
    assert_eq!(done, 1, "one done, the parent's: {events:#?}");
    let steps: Vec<u64> = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Step { .. }))
        .map(|e| e.step)
        .collect();
    assert_eq!(steps, [1, 2], "the parent's two supersteps only");
    // The inner nodes still report, under the subgraph's name.
    assert!(
        events
            .iter()
            .any(|e| e.kind == EventKind::NodeStart && e.node.as_deref() == Some("sub/a")),
        "{events:#?}"
    );
    assert_eq!(events.last().unwrap().kind, EventKind::Done);
}

#[tokio::test]
async fn a_subgraph_keeps_the_runs_durability_override() {
    let runtime = Runtime::in_memory();
    let done = outer()
        .run(&runtime, "exit", 1)
        .durability(Durability::Exit)
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(done, 24);
    let checkpoints = runtime.list_checkpoints("exit").await.unwrap();
    let inner = checkpoints
        .iter()
        .filter(|c| !c.namespace.is_empty())
        .count();
    assert_eq!(
        inner, 1,
        "with Durability::Exit the subgraph writes one checkpoint, when it stops: {checkpoints:#?}"
    );

    let runtime = Runtime::in_memory();
    outer().invoke(&runtime, "sync", 1).await.unwrap();
    let checkpoints = runtime.list_checkpoints("sync").await.unwrap();
    let inner = checkpoints
        .iter()
        .filter(|c| !c.namespace.is_empty())
        .count();
    assert!(
        inner > 1,
        "Sync checkpoints every inner step: {checkpoints:#?}"
    );
}

/// A subgraph whose node asks a person, once a side effect before the question has run.
fn asking(before_question: Arc<AtomicUsize>) -> CompiledGraph<u32> {
    Graph::new("asking")
        .node_fn("ask", move |n: &mut u32, ctx| {
            let before_question = Arc::clone(&before_question);
            Box::pin(async move {
                ctx.step("note", || async move {
                    before_question.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, String>(())
                })
                .await?;
                let answer: u32 = ctx.interrupt(json!({ "question": "how many?" }))?;
                *n += answer;
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
        .unwrap()
}

#[tokio::test]
async fn an_interrupt_inside_a_subgraph_suspends_the_whole_run_and_resumes_there() {
    let before_question = Arc::new(AtomicUsize::new(0));
    let graph = around(asking(Arc::clone(&before_question)));
    let runtime = Runtime::in_memory();
    let out = graph.invoke(&runtime, "t", 1).await.unwrap();
    let interrupts = out.interrupts();
    assert_eq!(interrupts.len(), 1, "{out:?}");
    assert_eq!(interrupts[0].id, "sub:1/ask#0", "named by its path");
    assert_eq!(interrupts[0].payload, json!({ "question": "how many?" }));
    assert_eq!(
        runtime.pending_interrupts("t").await.unwrap(),
        interrupts.to_vec()
    );

    let done = graph
        .resume(&runtime, "t", 4)
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(done, 10, "(1 + 4) * 2");
    assert_eq!(
        before_question.load(Ordering::SeqCst),
        1,
        "the inner node's journaled work ran once"
    );
}

#[tokio::test]
async fn a_signal_wait_inside_a_subgraph_suspends_and_another_runtime_carries_it_on() {
    let path = std::env::temp_dir().join(format!("loomflow-sub-signal-{}.db", std::process::id()));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let inner = Graph::new("inner")
        .node_fn("wait", |n: &mut u32, ctx| {
            Box::pin(async move {
                let add: u32 = ctx.wait_for_signal("more").or_suspend().await?;
                *n += add;
                Ok(())
            })
        })
        .edge(START, "wait")
        .edge("wait", END)
        .compile()
        .unwrap();
    let graph = Graph::new("outer")
        .subgraph("sub", inner, |n: &u32| *n, |n: &mut u32, m: u32| *n = m)
        .edge(START, "sub")
        .edge("sub", END)
        .compile()
        .unwrap();
    {
        let runtime = Runtime::sqlite(&path).unwrap();
        let out = graph.invoke(&runtime, "t", 1).await.unwrap();
        assert_eq!(
            out.interrupts()[0].signal.as_deref(),
            Some("more"),
            "{out:?}"
        );
    }
    // Another runtime on the same file: send, then recover.
    let runtime = Runtime::sqlite(&path).unwrap();
    runtime.signal("t", "more", 41).await.unwrap();
    let done = graph
        .recover(&runtime, "t")
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(done, 42);
    drop(runtime);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

/// A subgraph that asks twice: once in each of two nodes (`x` then `y`), or twice in one
/// node (`x` alone).
fn asking_twice(in_one_node: bool) -> CompiledGraph<u32> {
    let graph = Graph::new("asking-twice").node_fn("x", move |n: &mut u32, ctx| {
        Box::pin(async move {
            let first: u32 = ctx.interrupt(json!("first?"))?;
            *n += first;
            if in_one_node {
                let second: u32 = ctx.interrupt(json!("second?"))?;
                *n += second * 100;
            }
            Ok(())
        })
    });
    let graph = if in_one_node {
        graph.edge("x", END)
    } else {
        graph
            .node_fn("y", |n: &mut u32, ctx| {
                Box::pin(async move {
                    let second: u32 = ctx.interrupt(json!("second?"))?;
                    *n += second * 100;
                    Ok(())
                })
            })
            .edge("x", "y")
            .edge("y", END)
    };
    graph.edge(START, "x").compile().unwrap()
}

async fn resume_twice_inside_a_subgraph(runtime: &Runtime, in_one_node: bool) {
    let graph = Graph::new("outer")
        .subgraph(
            "sub",
            asking_twice(in_one_node),
            |n: &u32| *n,
            |n: &mut u32, m: u32| *n = m,
        )
        .edge(START, "sub")
        .edge("sub", END)
        .compile()
        .unwrap();
    let first = graph.invoke(runtime, "t", 0).await.unwrap();
    assert_eq!(first.interrupts()[0].id, "sub:1/x#0", "{first:?}");
    let second = graph.resume(runtime, "t", 1).await.unwrap();
    let asked = if in_one_node {
        "sub:1/x#1"
    } else {
        "sub:1/y#0"
    };
    assert_eq!(second.interrupts().len(), 1, "{second:?}");
    assert_eq!(second.interrupts()[0].id, asked);
    assert_eq!(
        runtime.pending_interrupts("t").await.unwrap()[0].id,
        asked,
        "only the second question is pending"
    );
    let done = graph.resume(runtime, "t", 2).await.unwrap();
    assert_eq!(done.completed().unwrap(), 201, "both answers arrived once");
}

#[tokio::test]
async fn a_subgraph_that_asks_twice_is_resumed_twice() {
    resume_twice_inside_a_subgraph(&Runtime::in_memory(), false).await;
    resume_twice_inside_a_subgraph(&Runtime::in_memory(), true).await;
    let path = std::env::temp_dir().join(format!("loomflow-sub-twice-{}.db", std::process::id()));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let runtime = Runtime::sqlite(&path).unwrap();
    resume_twice_inside_a_subgraph(&runtime, false).await;
    drop(runtime);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

/// A run's recursion limit is the outer graph's: a subgraph keeps the limit it was compiled
/// with, as an agent's is derived from its turns.
#[tokio::test]
async fn a_subgraph_keeps_its_own_recursion_limit() {
    let counting = Graph::new("counting")
        .node_sync("count", |n: &mut u32| *n += 1)
        .edge(START, "count")
        .branch("count", ["count", END], |n: &u32| match *n {
            0..4 => "count",
            _ => END,
        })
        .compile()
        .unwrap();
    let outer = around(counting);
    let runtime = Runtime::in_memory();
    // Two supersteps outside, four inside: the limit of 2 holds the outer graph only.
    let done = outer
        .run(&runtime, "limit", 0)
        .recursion_limit(2)
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(done, 8);
    let outcome = outer
        .run(&runtime, "tight", 0)
        .recursion_limit(1)
        .await
        .unwrap();
    assert!(
        matches!(
            outcome,
            RunOutcome::Failed {
                error: loomflow::RunError::RecursionLimit { limit: 1, .. },
                ..
            }
        ),
        "{outcome:?}"
    );
}

/// A subgraph's checkpoint holds the child's state, not the thread's: `fork` refuses it,
/// naming the thread, the checkpoint and the subgraph, and writes nothing.
#[tokio::test]
async fn a_fork_from_a_subgraph_checkpoint_is_refused_naming_it() {
    let runtime = Runtime::in_memory();
    let graph = outer();
    assert_eq!(
        graph
            .invoke(&runtime, "t", 1)
            .await
            .unwrap()
            .completed()
            .unwrap(),
        24
    );
    let checkpoints = runtime.list_checkpoints("t").await.unwrap();
    let child = checkpoints
        .iter()
        .find(|c| !c.namespace.is_empty())
        .unwrap();

    let refused = runtime.fork("t", child.id, "t2").await;
    match refused {
        Err(loomflow::RuntimeError::SubgraphCheckpoint {
            thread,
            checkpoint,
            namespace,
        }) => assert_eq!(
            (&*thread, checkpoint, &*namespace),
            ("t", child.id, "sub:1")
        ),
        other => panic!("a subgraph's checkpoint was forked: {other:?}"),
    }
    assert!(runtime.list_checkpoints("t2").await.unwrap().is_empty());
}

/// A subgraph in a loop checkpoints in a namespace of its own each turn; the memory
/// store's retention still bounds the thread, and a run suspended inside the subgraph
/// many turns in resumes there.
#[tokio::test]
async fn retention_bounds_a_subgraph_in_a_loop_and_its_suspension_resumes() {
    let runtime = Runtime::with_store(loomflow::runtime::MemoryStore::with_retention(Some(10)));
    let asks = Arc::new(AtomicUsize::new(0));
    let child = Graph::new("child")
        .node_sync("c", |n: &mut u32| *n += 1)
        .node_fn("ask", {
            let asks = Arc::clone(&asks);
            move |n: &mut u32, ctx| {
                let asks = Arc::clone(&asks);
                Box::pin(async move {
                    if *n == 300 {
                        asks.fetch_add(1, Ordering::SeqCst);
                        let answer: u32 = ctx.interrupt(json!("last?"))?;
                        *n += answer;
                    }
                    Ok(())
                })
            }
        })
        .edge(START, "c")
        .edge("c", "ask")
        .edge("ask", END)
        .compile()
        .unwrap();
    let graph = Graph::new("outer")
        .subgraph("sub", child, |n: &u32| *n, |n: &mut u32, m: u32| *n = m)
        .edge(START, "sub")
        .branch(
            "sub",
            ["sub", END],
            |n: &u32| {
                if *n < 300 { "sub" } else { END }
            },
        )
        .recursion_limit(1000)
        .compile()
        .unwrap();

    let out = graph.invoke(&runtime, "t", 0).await.unwrap();
    assert_eq!(out.interrupts().len(), 1, "{out:?}");
    let kept = runtime.list_checkpoints("t").await.unwrap().len();
    assert!(kept <= 20, "retention 10 keeps {kept} checkpoints");

    let done = graph.resume(&runtime, "t", 5).await.unwrap();
    assert_eq!(done.completed().unwrap(), 305);
    assert_eq!(
        asks.load(Ordering::SeqCst),
        2,
        "the child carried on at its question"
    );
}

/// A resume value the subgraph's node cannot use is refused as it is at top level: the
/// run stays interrupted, and a good value resumes it. Directly, and as a request a
/// worker applies (spent, not applied again by the next execution).
#[tokio::test]
async fn a_bad_resume_value_for_a_subgraphs_question_is_refused() {
    let db = loomflow_tests::TempDb::new("subgraph-bad-resume");
    for runtime in [Runtime::in_memory(), Runtime::sqlite(db.path()).unwrap()] {
        let graph = Graph::new("outer")
            .subgraph(
                "sub",
                asking(Arc::default()),
                |n: &u32| *n,
                |n: &mut u32, m: u32| {
                    *n = m;
                },
            )
            .edge(START, "sub")
            .edge("sub", END)
            .compile()
            .unwrap();
        graph.invoke(&runtime, "t", 1).await.unwrap();
        let refused = graph.resume(&runtime, "t", "not a number").await;
        // Named as the interrupt's id names it, under the subgraph's namespace.
        assert!(
            matches!(&refused, Err(RunError::ResumeValue { node, .. }) if node == "sub:1/ask"),
            "{refused:?}"
        );
        let record = runtime.run("t").await.unwrap().record;
        assert_eq!(record.state, RunState::Interrupted, "{record:?}");
        let done = graph.resume(&runtime, "t", 4).await.unwrap();
        assert_eq!(done.completed().unwrap(), 5);

        let worker = Worker::builder(&runtime).graph(&graph).build();
        runtime.submit("outer", "w", 1u32).await.unwrap();
        worker.run_until_idle().await.unwrap();
        runtime.request_resume("w", "not a number").await.unwrap();
        worker.run_until_idle().await.unwrap();
        let record = runtime.run("w").await.unwrap().record;
        assert_eq!(record.state, RunState::Interrupted, "{record:?}");
        let again = graph.recover(&runtime, "w").await.unwrap();
        assert_eq!(
            again.interrupts().len(),
            1,
            "the request was spent: {again:?}"
        );
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Asked {
    sub: u32,
    ask: u32,
}

/// A subgraph asks twice while a sibling node asks once. A resume answers the subgraph's
/// first question, and the sibling refuses its value: the child took its answer and asked
/// again, in its own checkpoint, while its parent stays where it was. Sending the answers
/// again does not fail the run: the child's spent answer is left out, its new question
/// suspends the run, and answering it completes the run with every answer applied once.
/// A subgraph that asks twice beside a node that asks once, in one step.
fn sub_beside_ask() -> CompiledGraph<Asked> {
    Graph::new("outer")
        .subgraph(
            "sub",
            asking_twice(true),
            |s: &Asked| s.sub,
            |s: &mut Asked, m: u32| s.sub = m,
        )
        .node_fn("ask", |s: &mut Asked, ctx| {
            Box::pin(async move {
                s.ask = ctx.interrupt(json!("ask?"))?;
                Ok(())
            })
        })
        .edge(START, "sub")
        .edge(START, "ask")
        .edge("sub", END)
        .edge("ask", END)
        .compile()
        .unwrap()
}

#[tokio::test]
async fn a_siblings_refused_value_leaves_the_subgraph_resumable() {
    let db = loomflow_tests::TempDb::new("subgraph-sibling-refused");
    for runtime in [Runtime::in_memory(), Runtime::sqlite(db.path()).unwrap()] {
        let graph = sub_beside_ask();
        let first = graph.invoke(&runtime, "t", Asked::default()).await.unwrap();
        let mut ids: Vec<_> = first.interrupts().iter().map(|i| i.id.clone()).collect();
        ids.sort();
        assert_eq!(ids, ["ask#0", "sub:1/x#0"], "{first:?}");

        let refused = graph
            .resume_with(
                &runtime,
                "t",
                [("sub:1/x#0", json!(1)), ("ask#0", json!("nan"))],
            )
            .await;
        assert!(
            matches!(refused, Err(RunError::ResumeValue { .. })),
            "{refused:?}"
        );

        let again = graph
            .resume_with(
                &runtime,
                "t",
                [("sub:1/x#0", json!(1)), ("ask#0", json!(5))],
            )
            .await
            .unwrap();
        let asked: Vec<_> = again.interrupts().iter().map(|i| i.id.as_str()).collect();
        assert_eq!(asked, ["sub:1/x#1"], "{again:?}");
        assert_eq!(
            runtime.pending_interrupts("t").await.unwrap()[0].payload,
            json!("second?")
        );

        let done = graph.resume(&runtime, "t", 2).await.unwrap();
        let done = done.completed().unwrap();
        assert_eq!(done, Asked { sub: 201, ask: 5 }, "each answer applied once");
    }
}

/// Resume requests that answer a subgraph's question and its sibling's are refused as a
/// whole when the sibling's node fails with its answer, though the subgraph took its own and
/// wrote its checkpoint: the run stays interrupted, the requests are spent, and another
/// answer carries it on. Before its fix the subgraph's checkpoint spent the requests as a
/// step of the run would have, and the run failed for good.
#[tokio::test]
async fn a_subgraphs_checkpoint_does_not_spend_the_runs_resume_requests() {
    let db = loomflow_tests::TempDb::new("subgraph-requests-kept");
    for runtime in [Runtime::in_memory(), Runtime::sqlite(db.path()).unwrap()] {
        let graph = Graph::new("outer")
            .subgraph(
                "sub",
                asking(Arc::default()),
                |s: &Asked| s.sub,
                |s: &mut Asked, m: u32| s.sub = m,
            )
            .node_fn("ask", |s: &mut Asked, ctx| {
                Box::pin(async move {
                    s.ask = ctx.interrupt(json!("ask?"))?;
                    if s.ask == 0 {
                        return Err("zero is no answer".into());
                    }
                    Ok(())
                })
            })
            .edge(START, "sub")
            .edge(START, "ask")
            .edge("sub", END)
            .edge("ask", END)
            .compile()
            .unwrap();
        graph.invoke(&runtime, "t", Asked::default()).await.unwrap();
        runtime
            .request_resume_with("t", "sub:1/ask#0", 4)
            .await
            .unwrap();
        runtime.request_resume_with("t", "ask#0", 0).await.unwrap();
        let refused = graph.recover(&runtime, "t").await.unwrap();
        assert!(matches!(refused, RunOutcome::Failed { .. }), "{refused:?}");
        let record = runtime.run("t").await.unwrap().record;
        assert_eq!(record.state, RunState::Interrupted, "{record:?}");

        runtime.request_resume_with("t", "ask#0", 3).await.unwrap();
        let done = graph.recover(&runtime, "t").await.unwrap();
        let done = done.completed().unwrap();
        assert_eq!(done, Asked { sub: 4, ask: 3 }, "{done:?}");
    }
}

/// A subgraph that took its answer and asked again in a step its parent did not write (a
/// sibling's value was refused here; a crash before the parent's write leaves the same)
/// is shown asking what it asks now once the run is recovered, and a recover after that
/// changes nothing.
#[tokio::test]
async fn a_recover_shows_what_a_subgraph_asks_since_its_parents_checkpoint() {
    let db = loomflow_tests::TempDb::new("subgraph-moved-on");
    for runtime in [Runtime::in_memory(), Runtime::sqlite(db.path()).unwrap()] {
        let graph = sub_beside_ask();
        graph.invoke(&runtime, "t", Asked::default()).await.unwrap();
        let answers = [("sub:1/x#0", json!(1)), ("ask#0", json!("nan"))];
        let refused = graph.resume_with(&runtime, "t", answers).await;
        assert!(refused.is_err(), "{refused:?}");

        let recovered = graph.recover(&runtime, "t").await.unwrap();
        let mut ids: Vec<_> = (recovered.interrupts().iter())
            .map(|i| i.id.clone())
            .collect();
        ids.sort();
        assert_eq!(ids, ["ask#0", "sub:1/x#1"], "{recovered:?}");
        let pending = runtime.pending_interrupts("t").await.unwrap();
        let mut pending: Vec<_> = pending.into_iter().map(|i| i.id).collect();
        pending.sort();
        assert_eq!(pending, ids, "the store shows the new question too");

        let checkpoints = runtime.list_checkpoints("t").await.unwrap().len();
        let again = graph.recover(&runtime, "t").await.unwrap();
        assert_eq!(again.interrupts().len(), 2, "{again:?}");
        let now = runtime.list_checkpoints("t").await.unwrap().len();
        assert_eq!(now, checkpoints, "nothing run or written again");

        let answers = [("sub:1/x#1", json!(2)), ("ask#0", json!(5))];
        let done = graph.resume_with(&runtime, "t", answers).await.unwrap();
        let done = done.completed().unwrap();
        assert_eq!(done, Asked { sub: 201, ask: 5 }, "each answer applied once");
    }
}

/// An interrupt raised two subgraphs down is streamed once, as the outcome names it, not
/// once for each level it suspends through.
#[tokio::test]
async fn an_interrupt_in_a_nested_subgraph_is_streamed_once() {
    let nested = around(around(asking(Arc::default())));
    let runtime = Runtime::in_memory();
    let events: Vec<_> = nested.stream(&runtime, "t", 1).collect().await;
    let interrupts: Vec<_> = (events.iter())
        .filter(|e| matches!(e.kind, EventKind::Interrupt { .. }))
        .collect();
    assert_eq!(interrupts.len(), 1, "{interrupts:#?}");
    let pending = runtime.pending_interrupts("t").await.unwrap();
    let EventKind::Interrupt { id, .. } = &interrupts[0].kind else {
        unreachable!()
    };
    assert_eq!(*id, pending[0].id);
    assert_eq!(
        interrupts[0].node.as_deref(),
        Some(pending[0].node.as_str())
    );
}

/// An `Exit` run abandoned after its subgraph finished leaves no top-level checkpoint: the
/// thread's next run must still run the subgraph on its own input, not be handed the
/// abandoned run's subgraph result.
#[tokio::test]
async fn an_exit_run_after_an_abandoned_one_runs_its_subgraph_afresh() {
    let db = loomflow_tests::TempDb::new("subgraph-exit-abandoned");
    for runtime in [Runtime::in_memory(), Runtime::sqlite(db.path()).unwrap()] {
        let entered = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&entered);
        let graph = Graph::new("outer")
            .subgraph("sub", inner(), |n: &u32| *n, |n: &mut u32, m: u32| *n = m)
            .node_fn("slow", move |_: &mut u32, _ctx| {
                let seen = Arc::clone(&seen);
                Box::pin(async move {
                    if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                        std::future::pending::<()>().await;
                    }
                    Ok(())
                })
            })
            .edge(START, "sub")
            .edge("sub", "slow")
            .edge("slow", END)
            .compile()
            .unwrap();
        let abandoned = graph
            .run(&runtime, "x", 1)
            .durability(Durability::Exit)
            .start();
        while entered.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        abandoned.abort();
        let _ = abandoned.await;

        let next = graph.run(&runtime, "x", 100).durability(Durability::Exit);
        // `inner` adds 1, then 10.
        assert_eq!(next.await.unwrap().completed().unwrap(), 111);
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Draft {
    n: u32,
    approved: bool,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Order {
    draft: u32,
    approved: bool,
    amount: u32,
}

/// A parent whose resumed step failed after its subgraph had taken an answer and asked
/// again under the same id (a review loop): the parent's checkpoint still shows the first
/// question, but an answer given again for it does not answer the second, which the child
/// asks anew. On the memory store and on SQLite.
#[tokio::test]
async fn an_answer_does_not_answer_the_question_a_looping_subgraph_asks_again() {
    let db = loomflow_tests::TempDb::new("subgraph-loop");
    for runtime in [Runtime::in_memory(), Runtime::sqlite(db.path()).unwrap()] {
        let review = Graph::new("review")
            .node_fn("x", |d: &mut Draft, ctx| {
                Box::pin(async move {
                    d.approved = ctx.interrupt(json!({ "draft": d.n }))?;
                    d.n += 1;
                    Ok(())
                })
            })
            .edge(START, "x")
            .branch(
                "x",
                ["x", END],
                |d: &Draft| if d.approved { END } else { "x" },
            )
            .compile()
            .unwrap();
        let order = Graph::new("order")
            .subgraph(
                "sub",
                review,
                |_: &Order| Draft::default(),
                |o: &mut Order, d: Draft| (o.draft, o.approved) = (d.n - 1, d.approved),
            )
            .node_fn("amount", |o: &mut Order, ctx| {
                Box::pin(async move {
                    let amount: u32 = ctx.interrupt(json!("amount?"))?;
                    if amount > 100 {
                        return Err(format!("{amount} is over the limit").into());
                    }
                    o.amount = amount;
                    Ok(())
                })
            })
            .edge(START, "sub")
            .edge(START, "amount")
            .edge("sub", END)
            .edge("amount", END)
            .compile()
            .unwrap();
        let first = order.invoke(&runtime, "t", Order::default()).await.unwrap();
        let ids: Vec<String> = first.interrupts().iter().map(|i| i.id.clone()).collect();
        let review_id = ids.iter().find(|id| id.starts_with("sub")).unwrap().clone();
        // Draft 0 is sent back; the amount is refused: the step fails, the child has asked
        // about draft 1 under the same id.
        let answers = [
            (review_id.clone(), json!(false)),
            ("amount#0".into(), json!(500)),
        ];
        let failed = order.resume_with(&runtime, "t", answers).await.unwrap();
        assert!(matches!(failed, RunOutcome::Failed { .. }), "{failed:?}");

        let answers = [
            (review_id.clone(), json!(true)),
            ("amount#0".into(), json!(50)),
        ];
        let again = order.resume_with(&runtime, "t", answers).await.unwrap();
        let asked: Vec<_> = again
            .interrupts()
            .iter()
            .map(|i| i.payload.clone())
            .collect();
        assert_eq!(
            asked,
            [json!({ "draft": 1 })],
            "draft 1 is asked about, not approved unseen"
        );
        let done = order
            .resume(&runtime, "t", true)
            .await
            .unwrap()
            .completed()
            .unwrap();
        assert_eq!((done.draft, done.approved, done.amount), (1, true, 50));
    }
}
