//! Graph building, compilation and superstep execution on the in-memory runtime.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::StreamExt;
use loomflow::prelude::*;
use loomflow::runtime::RunStatus;
use loomflow::{EventKind, GraphProblem, RunError};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Doc {
    text: String,
    log: Vec<String>,
    count: u32,
    best: u32,
}

fn push(tag: &'static str) -> impl Fn(&mut Doc) + Send + Sync + 'static {
    move |d: &mut Doc| d.log.push(tag.to_owned())
}

/// Count the characters.
#[node]
async fn measure(state: &mut Doc, ctx: &Context) -> loomflow::Result<()> {
    state.count = u32::try_from(state.text.chars().count()).map_err(Error::custom)?;
    state.log.push(format!("measure@{}", ctx.superstep()));
    Ok(())
}

#[node(name = "shout out")]
async fn shout(state: &mut Doc) {
    state.text = state.text.to_uppercase();
}

#[tokio::test]
async fn linear_chain_runs_in_order_with_macro_and_closure_nodes() {
    let graph = Graph::new("linear")
        .node(measure)
        .node(shout)
        .node_fn("suffix", |d: &mut Doc, _ctx| {
            Box::pin(async move {
                d.text.push('!');
                Ok(())
            })
        })
        .edge(START, "measure")
        .edge("measure", "shout out")
        .edge("shout out", "suffix")
        .edge("suffix", END)
        .compile()
        .unwrap();
    let out = graph
        .invoke(
            &Runtime::in_memory(),
            "t",
            Doc {
                text: "héllo".into(),
                ..Doc::default()
            },
        )
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(out.text, "HÉLLO!");
    assert_eq!(out.count, 5);
    assert_eq!(out.log, ["measure@1"]);
}

#[test]
fn node_macro_keeps_name_description_and_body() {
    assert_eq!(Node::<Doc>::name(&measure), "measure");
    assert_eq!(
        Node::<Doc>::description(&measure),
        Some("Count the characters.")
    );
    assert_eq!(Node::<Doc>::name(&shout), "shout out");
    assert_eq!(Node::<Doc>::description(&shout), None);
}

#[tokio::test]
async fn node_body_is_callable_directly() {
    let mut doc = Doc {
        text: "abc".into(),
        ..Doc::default()
    };
    shout::call(&mut doc).await;
    assert_eq!(doc.text, "ABC");
}

#[tokio::test]
async fn branch_routes_on_the_merged_state() {
    let graph = Graph::new("branchy")
        .node_sync("check", |d: &mut Doc| d.count = 7)
        .node_sync("big", push("big"))
        .node_sync("small", push("small"))
        .edge(START, "check")
        .branch("check", ["big", "small"], |d: &Doc| {
            if d.count > 5 { "big" } else { "small" }
        })
        .edge("big", END)
        .edge("small", END)
        .compile()
        .unwrap();
    let out = graph
        .invoke(&Runtime::in_memory(), "t", Doc::default())
        .await
        .unwrap();
    assert_eq!(out.completed().unwrap().log, ["big"]);
}

#[tokio::test]
async fn fan_out_runs_concurrently_on_the_step_start_state_and_merges_in_declaration_order() {
    // Both branches wait on a barrier: the step only finishes if they truly run concurrently.
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let (b1, b2) = (barrier.clone(), barrier.clone());
    let graph = Graph::new("fan")
        .node_sync("root", |d: &mut Doc| d.count = 1)
        .node_fn("slow", move |d: &mut Doc, _| {
            let b = b1.clone();
            Box::pin(async move {
                b.wait().await;
                tokio::task::yield_now().await;
                assert_eq!(
                    d.count, 1,
                    "each branch sees the state as of the step start"
                );
                d.log.push("slow".into());
                d.count += 10;
                Ok(())
            })
        })
        .node_fn("fast", move |d: &mut Doc, _| {
            let b = b2.clone();
            Box::pin(async move {
                b.wait().await;
                assert_eq!(d.count, 1);
                d.log.push("fast".into());
                d.text = "fast".into();
                Ok(())
            })
        })
        .node_sync("after", push("after"))
        .edge(START, "root")
        .edge("root", "slow")
        .edge("root", "fast")
        .edge("slow", "after")
        .edge("fast", "after")
        .edge("after", END)
        .reducer("log", Reducer::append())
        .compile()
        .unwrap();
    let out = graph
        .invoke(&Runtime::in_memory(), "t", Doc::default())
        .await
        .unwrap();
    let doc = out.completed().unwrap();
    // declaration order (slow before fast), not completion order
    assert_eq!(
        doc.log,
        ["slow", "fast", "after"],
        "after ran once although two edges fired"
    );
    assert_eq!(doc.count, 11);
    assert_eq!(doc.text, "fast");
}

#[tokio::test]
async fn join_waits_for_all_its_sources() {
    let graph = Graph::new("join")
        .node_sync("a", push("a"))
        .node_sync("b1", push("b1"))
        .node_sync("b2", push("b2"))
        .node_sync("c", push("c"))
        .edge(START, "a")
        .edge(START, "b1")
        .edge("b1", "b2")
        .join(["a", "b2"], "c")
        .edge("c", END)
        .reducer("log", Reducer::append())
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let mut stream = graph.stream(&runtime, "t", Doc::default());
    let mut steps = Vec::new();
    while let Some(event) = stream.next().await {
        if let EventKind::Step { nodes } = event.kind {
            steps.push(nodes);
        }
    }
    assert_eq!(steps, vec![vec!["a", "b1"], vec!["b2"], vec!["c"]]);
    let doc = stream.outcome().await.unwrap().completed().unwrap();
    assert_eq!(doc.log, ["a", "b1", "b2", "c"]);
}

/// A state that is not a JSON object is one field, `WHOLE_STATE`: parallel writers to it
/// combine by the reducer declared under that name, and fail the step without one.
#[tokio::test]
async fn a_state_that_is_not_an_object_takes_a_reducer_for_the_whole() {
    let notes = |reducer: Option<Reducer>| {
        let graph = Graph::<Vec<String>>::new("notes")
            .node_sync("a", |n: &mut Vec<String>| n.push("from a".into()))
            .node_sync("b", |n: &mut Vec<String>| n.push("from b".into()))
            .edge(START, "a")
            .edge(START, "b")
            .edge("a", END)
            .edge("b", END);
        match reducer {
            Some(reducer) => graph.reducer(loomflow::graph::WHOLE_STATE, reducer),
            None => graph,
        }
        .compile()
        .unwrap()
    };
    let runtime = Runtime::in_memory();
    let merged = notes(Some(Reducer::append()))
        .invoke(&runtime, "t1", vec!["first".to_owned()])
        .await
        .unwrap();
    assert_eq!(merged.completed().unwrap(), ["first", "from a", "from b"]);
    let conflict = notes(None)
        .invoke(&runtime, "t2", Vec::new())
        .await
        .unwrap();
    let RunOutcome::Failed { error, .. } = conflict else {
        panic!("{conflict:?}")
    };
    assert!(
        matches!(&error, RunError::MergeConflict { field, .. } if field == loomflow::graph::WHOLE_STATE),
        "{error:?}"
    );
}

#[tokio::test]
async fn custom_reducer_folds_in_declaration_order() {
    let graph = Graph::new("max")
        .node_sync("x", |d: &mut Doc| d.best = 3)
        .node_sync("y", |d: &mut Doc| d.best = 9)
        .node_sync("z", |d: &mut Doc| d.best = 4)
        .edge(START, "x")
        .edge(START, "y")
        .edge(START, "z")
        .edge("x", END)
        .edge("y", END)
        .edge("z", END)
        .reducer("best", Reducer::with(|a: u32, b: u32| a.max(b)))
        .compile()
        .unwrap();
    let out = graph
        .invoke(&Runtime::in_memory(), "t", Doc::default())
        .await
        .unwrap();
    assert_eq!(out.completed().unwrap().best, 9);
}

#[tokio::test]
async fn conflicting_writes_without_reducer_fail_the_step_and_commit_nothing() {
    let graph = Graph::new("conflict")
        .node_sync("first", |d: &mut Doc| d.count = 1)
        .node_sync("left", |d: &mut Doc| {
            d.text = "left".into();
            d.best = 1;
        })
        .node_sync("right", |d: &mut Doc| d.text = "right".into())
        .edge(START, "first")
        .edge("first", "left")
        .edge("first", "right")
        .edge("left", END)
        .edge("right", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let out = graph.invoke(&runtime, "t", Doc::default()).await.unwrap();
    let RunOutcome::Failed { state, error } = out else {
        panic!("expected failure")
    };
    match &error {
        RunError::MergeConflict {
            field,
            first,
            second,
            step,
        } => {
            assert_eq!(
                (field.as_str(), first.as_str(), second.as_str(), *step),
                ("text", "left", "right", 2)
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    // last good state: after step 1, nothing of step 2 (not even left's `best`)
    assert_eq!(
        state,
        Doc {
            count: 1,
            ..Doc::default()
        }
    );
    let saved: Doc = runtime.get_state("t").await.unwrap().unwrap();
    assert_eq!(saved, state);
}

#[tokio::test]
async fn a_failing_node_names_itself_and_the_step_and_keeps_the_last_good_state() {
    let graph = Graph::new("fails")
        .node_sync("ok", |d: &mut Doc| d.count = 1)
        .node_sync("bad", |d: &mut Doc| -> loomflow::Result<()> {
            d.count = 99;
            Err(Error::msg("disk on fire"))
        })
        .edge(START, "ok")
        .edge("ok", "bad")
        .edge("bad", END)
        .compile()
        .unwrap();
    let out = graph
        .invoke(&Runtime::in_memory(), "t", Doc::default())
        .await
        .unwrap();
    let RunOutcome::Failed { state, error } = out else {
        panic!("expected failure")
    };
    assert_eq!(state.count, 1);
    assert!(matches!(&error, RunError::NodeFailed { node, step: 2, .. } if node == "bad"));
    let chain = format!("{error}: {}", std::error::Error::source(&error).unwrap());
    assert_eq!(chain, "node bad failed at step 2: disk on fire");
}

#[tokio::test]
async fn a_panicking_node_becomes_an_error_and_the_process_carries_on() {
    let graph = Graph::new("panics")
        .node_sync("boom", |_: &mut Doc| -> () { panic!("kaboom") })
        .node_sync("calm", |d: &mut Doc| d.count = 5)
        .edge(START, "boom")
        .edge(START, "calm")
        .edge("boom", END)
        .edge("calm", END)
        .compile()
        .unwrap();
    let out = graph
        .invoke(
            &Runtime::in_memory(),
            "t",
            Doc {
                count: 2,
                ..Doc::default()
            },
        )
        .await
        .unwrap();
    let RunOutcome::Failed { state, error } = out else {
        panic!("expected failure")
    };
    assert_eq!(state.count, 2);
    assert!(
        matches!(&error, RunError::NodePanicked { node, step: 1, message } if node == "boom" && message == "kaboom"),
        "{error:?}"
    );
}

#[tokio::test]
async fn loops_stop_at_the_recursion_limit_with_a_typed_error() {
    let graph = Graph::new("forever")
        .node_sync("tick", |d: &mut Doc| d.count += 1)
        .node_sync("tock", |d: &mut Doc| d.count += 1)
        .edge(START, "tick")
        .edge("tick", "tock")
        .branch("tock", ["tick", END], |d: &Doc| {
            if d.count < 1000 { "tick" } else { END }
        })
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let out = graph.invoke(&runtime, "t", Doc::default()).await.unwrap();
    let RunOutcome::Failed { state, error } = out else {
        panic!("expected failure")
    };
    assert_eq!(state.count, 25);
    match &error {
        RunError::RecursionLimit { limit, last_nodes } => {
            assert_eq!(*limit, 25);
            assert_eq!(last_nodes, &["tick"], "step 25 ran tick");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(error.to_string().contains("recursion limit of 25"));

    let out = graph
        .run(&runtime, "t2", Doc::default())
        .recursion_limit(5)
        .await
        .unwrap();
    assert_eq!(out.state().count, 5);
    let loops_until_ten = Graph::new("ten")
        .node_sync("tick", |d: &mut Doc| d.count += 1)
        .edge(START, "tick")
        .branch("tick", ["tick", END], |d: &Doc| {
            if d.count < 10 { "tick" } else { END }
        })
        .compile()
        .unwrap();
    assert_eq!(
        loops_until_ten
            .invoke(&runtime, "t3", Doc::default())
            .await
            .unwrap()
            .completed()
            .unwrap()
            .count,
        10
    );
}

#[tokio::test]
async fn undeclared_route_is_an_error_naming_the_branch() {
    let graph = Graph::new("g")
        .node_sync("a", push("a"))
        .node_sync("b", push("b"))
        .edge(START, "a")
        .branch("a", ["b"], |_: &Doc| "nowhere")
        .edge("b", END)
        .compile()
        .unwrap();
    let out = graph
        .invoke(&Runtime::in_memory(), "t", Doc::default())
        .await
        .unwrap();
    let RunOutcome::Failed { state, error } = out else {
        panic!()
    };
    assert!(
        state.log.is_empty(),
        "the step whose routing failed is not committed"
    );
    assert_eq!(
        error.to_string(),
        "branch from a chose nowhere, which is not one of its declared targets"
    );
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Inner {
    words: Vec<String>,
}

#[tokio::test]
async fn subgraph_runs_with_its_state_mapped_in_and_out_and_its_own_namespace() {
    let child = Graph::new("child")
        .node_sync("split", |s: &mut Inner| s.words.push("split".into()))
        .node_fn("emit", |s: &mut Inner, ctx| {
            Box::pin(async move {
                ctx.emit("inside", json!({ "ns": ctx.namespace() }));
                s.words.push("emit".into());
                Ok(())
            })
        })
        .edge(START, "split")
        .edge("split", "emit")
        .edge("emit", END)
        .compile()
        .unwrap();
    let parent = Graph::new("parent")
        .subgraph(
            "words",
            child,
            |d: &Doc| Inner {
                words: vec![d.text.clone()],
            },
            |d: &mut Doc, inner: Inner| d.log = inner.words,
        )
        .edge(START, "words")
        .edge("words", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let mut stream = parent.stream(
        &runtime,
        "t",
        Doc {
            text: "hi".into(),
            ..Doc::default()
        },
    );
    let mut custom = Vec::new();
    while let Some(event) = stream.next().await {
        if let EventKind::Custom { name, data } = event.kind {
            custom.push((event.node.unwrap(), name, data));
        }
    }
    assert_eq!(
        custom,
        vec![(
            "words/emit".to_owned(),
            "inside".to_owned(),
            json!({ "ns": "words:1" })
        )]
    );
    let doc = stream.outcome().await.unwrap().completed().unwrap();
    assert_eq!(doc.log, ["hi", "split", "emit"]);
    let namespaces: Vec<String> = runtime
        .list_checkpoints("t")
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.namespace)
        .collect();
    assert!(namespaces.contains(&"words:1".to_owned()));
    assert!(namespaces.contains(&String::new()));
}

#[tokio::test]
async fn stream_yields_node_step_custom_and_done_events_in_order() {
    let graph = Graph::new("s")
        .node_fn("a", |d: &mut Doc, ctx| {
            Box::pin(async move {
                ctx.emit("hello", d.count);
                Ok(())
            })
        })
        .edge(START, "a")
        .edge("a", END)
        .compile()
        .unwrap();
    let events: Vec<_> = graph
        .stream(&Runtime::in_memory(), "t", Doc::default())
        .collect()
        .await;
    let kinds: Vec<(u64, Option<&str>, &EventKind)> = events
        .iter()
        .map(|e| (e.step, e.node.as_deref(), &e.kind))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (1, Some("a"), &EventKind::NodeStart),
            (
                1,
                Some("a"),
                &EventKind::Custom {
                    name: "hello".into(),
                    data: json!(0)
                }
            ),
            (1, Some("a"), &EventKind::NodeEnd),
            (
                1,
                None,
                &EventKind::Step {
                    nodes: vec!["a".into()]
                }
            ),
            (1, None, &EventKind::Done),
        ]
    );
}

#[tokio::test]
async fn stream_reports_errors_with_step_and_message() {
    let graph = Graph::new("s")
        .node_sync("bad", |_: &mut Doc| Err::<(), _>(Error::msg("nope")))
        .edge(START, "bad")
        .edge("bad", END)
        .compile()
        .unwrap();
    let events: Vec<_> = graph
        .stream(&Runtime::in_memory(), "t", Doc::default())
        .collect()
        .await;
    let last = events.last().unwrap();
    assert_eq!(last.step, 1);
    assert_eq!(
        last.kind,
        EventKind::Error {
            message: "node bad failed at step 1: nope".into()
        }
    );
}

#[tokio::test]
async fn started_runs_go_on_in_the_background_and_many_run_at_once() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let graph = Graph::new("bg")
        .node_sync("count", move |d: &mut Doc| {
            c.fetch_add(1, Ordering::SeqCst);
            d.count += 1;
        })
        .edge(START, "count")
        .edge("count", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let handles: Vec<_> = (0..50)
        .map(|i| graph.start(&runtime, format!("t{i}"), Doc::default()))
        .collect();
    for handle in handles {
        assert_eq!(handle.await.unwrap().completed().unwrap().count, 1);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 50);
}

#[tokio::test]
async fn durability_modes_decide_how_many_checkpoints_are_written() {
    let graph = Graph::new("d")
        .node_sync("a", push("a"))
        .node_sync("b", push("b"))
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    graph
        .invoke(&runtime, "sync", Doc::default())
        .await
        .unwrap();
    graph
        .run(&runtime, "exit", Doc::default())
        .durability(Durability::Exit)
        .await
        .unwrap();
    let sync = runtime.list_checkpoints("sync").await.unwrap();
    assert_eq!(
        sync.iter().map(|c| c.step).collect::<Vec<_>>(),
        [0, 1, 2],
        "the input, then one per step"
    );
    assert_eq!(sync[0].next(), ["a"]);
    assert_eq!(sync[1].next(), ["b"]);
    assert!(sync[2].next().is_empty());
    let exit = runtime.list_checkpoints("exit").await.unwrap();
    assert_eq!(exit.len(), 1);
    assert_eq!(exit[0].state()["log"], json!(["a", "b"]));
}

#[test]
fn compile_reports_every_problem_naming_each_node() {
    let err = Graph::<Doc>::new("broken")
        .node_sync("a", push("a"))
        .node_sync("a", push("a2"))
        .node_sync("island", push("i"))
        .node_sync("sink", push("s"))
        .node_sync("loop", push("l"))
        .edge(START, "a")
        .edge("a", "ghost")
        .edge("a", "sink")
        .edge("a", END)
        .edge("a", "loop")
        .edge("loop", "loop")
        .branch("a", ["sink", "phantom"], |_: &Doc| "sink")
        .compile()
        .unwrap_err();
    let problems = err.problems();
    let expect = [
        GraphProblem::DuplicateNode { name: "a".into() },
        GraphProblem::UnknownNode {
            name: "ghost".into(),
            context: "edge a -> ghost".into(),
        },
        GraphProblem::UnknownBranchTarget {
            from: "a".into(),
            target: "phantom".into(),
        },
        GraphProblem::Unreachable {
            name: "island".into(),
        },
        GraphProblem::NoPathToEnd {
            name: "sink".into(),
        },
        GraphProblem::NoPathToEnd {
            name: "loop".into(),
        },
    ];
    for p in &expect {
        assert!(problems.contains(p), "missing {p:?} in {problems:?}");
    }
    assert_eq!(problems.len(), expect.len(), "{problems:?}");
    let text = err.to_string();
    assert!(text.starts_with("graph broken is invalid: "), "{text}");
}

#[test]
fn compile_reports_a_graph_without_entry_and_reserved_names() {
    let err = Graph::<Doc>::new("g")
        .node_sync("a", push("a"))
        .node_sync("", push("e"))
        .edge("a", END)
        .compile()
        .unwrap_err();
    assert!(err.problems().contains(&GraphProblem::NoEntry));
    assert!(err.problems().contains(&GraphProblem::ReservedName {
        name: String::new()
    }));
}

/// A run whose entry routes straight to END runs no step; its only checkpoint (step 0) must
/// still say the run completed, in every durability mode.
#[tokio::test]
async fn a_run_routed_straight_to_end_ends_with_a_completed_checkpoint() {
    let graph = Graph::new("skip")
        .node_sync("a", |n: &mut u32| *n += 1)
        .branch(START, ["a", END], |n: &u32| if *n > 10 { END } else { "a" })
        .edge("a", END)
        .compile()
        .unwrap();
    for durability in [Durability::Sync, Durability::Async, Durability::Exit] {
        let runtime = Runtime::builder().durability(durability).build();
        let out = graph.invoke(&runtime, "t", 11).await.unwrap();
        assert_eq!(out.completed().unwrap(), 11);
        let checkpoints = runtime.list_checkpoints("t").await.unwrap();
        let [only] = &checkpoints[..] else {
            panic!("{durability:?}: one checkpoint expected, got {checkpoints:?}")
        };
        assert_eq!(only.status, RunStatus::Completed, "{durability:?}");
        assert_eq!((only.step, only.state()), (0, &json!(11)), "{durability:?}");
        // Recovering the thread finds it completed and runs nothing.
        let again = graph.recover(&runtime, "t").await.unwrap();
        assert_eq!(again.completed().unwrap(), 11);
        assert_eq!(runtime.list_checkpoints("t").await.unwrap().len(), 1);
    }
}

#[test]
fn compile_reports_a_second_reducer_and_a_reducer_for_no_field() {
    let err = Graph::<Doc>::new("g")
        .node_sync("a", push("a"))
        .edge(START, "a")
        .edge("a", END)
        .reducer("log", Reducer::append())
        .reducer("log", Reducer::append())
        .reducer("logs", Reducer::append())
        .compile()
        .unwrap_err();
    let problems = err.problems();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert_eq!(
        problems[0],
        GraphProblem::DuplicateReducer {
            field: "log".into()
        }
    );
    let GraphProblem::UnknownReducerField { field, fields } = &problems[1] else {
        panic!("{problems:?}")
    };
    assert_eq!(field, "logs");
    assert!(fields.contains(&"log".to_owned()), "{fields:?}");
    let text = err.to_string();
    assert!(
        text.contains("field log has more than one reducer"),
        "{text}"
    );
    assert!(
        text.contains("reducer for field logs names no field"),
        "{text}"
    );
}

#[test]
fn reducer_fields_are_the_serialized_names_and_unchecked_for_maps() {
    #[derive(Clone, Default, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Renamed {
        log_lines: Vec<String>,
    }
    let node = |s: &mut Renamed| s.log_lines.push("x".into());
    let graph = |field: &str| {
        Graph::<Renamed>::new("g")
            .node_sync("a", node)
            .edge(START, "a")
            .edge("a", END)
            .reducer(field, Reducer::append())
            .compile()
    };
    assert!(graph("logLines").is_ok());
    assert!(
        graph("log_lines").is_err(),
        "the Rust name is not the field's"
    );

    // A map's keys are only known at run time: any field is accepted.
    let map = Graph::<std::collections::BTreeMap<String, u32>>::new("m")
        .node_sync("a", |m: &mut std::collections::BTreeMap<String, u32>| {
            m.insert("k".into(), 1);
        })
        .edge(START, "a")
        .edge("a", END)
        .reducer("anything", Reducer::append())
        .compile();
    assert!(map.is_ok());
}

#[tokio::test]
async fn a_bounded_stream_holds_the_run_back_until_read_and_lets_it_go_when_its_outcome_is_asked() {
    let mut graph = Graph::new("long").recursion_limit(100);
    let names: Vec<String> = (0..40).map(|i| format!("n{i}")).collect();
    for name in &names {
        graph = graph.node_sync(name.clone(), |n: &mut u32| *n += 1);
    }
    graph = graph.edge(START, names[0].clone());
    for pair in names.windows(2) {
        graph = graph.edge(pair[0].clone(), pair[1].clone());
    }
    let graph = graph.edge(names[39].clone(), END).compile().unwrap();
    let runtime = Runtime::in_memory();
    let mut stream = graph.run(&runtime, "t", 0).stream_bounded(4);
    stream.next().await.unwrap();
    // The reader stops: the run waits with at most a few steps done.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let state: u32 = runtime.get_state("t").await.unwrap().unwrap();
    assert!(state < 10, "the run went {state} steps ahead of its reader");
    // Asking for the outcome stops the reading: the run finishes.
    let outcome = tokio::time::timeout(std::time::Duration::from_secs(10), stream.outcome())
        .await
        .expect("the run finishes once nobody reads")
        .unwrap();
    assert_eq!(outcome.completed().unwrap(), 40);
}

/// A node that emits 50 events, waiting for room in its stream before each, and the count
/// of those it emitted.
fn chatty() -> (CompiledGraph<u32>, Arc<AtomicUsize>) {
    let emitted = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&emitted);
    let graph = Graph::new("chatty")
        .node_fn("chatty", move |_: &mut u32, ctx| {
            let emitted = Arc::clone(&counted);
            Box::pin(async move {
                for index in 0..50 {
                    ctx.event_room().await?;
                    ctx.emit("tick", index);
                    emitted.fetch_add(1, Ordering::SeqCst);
                }
                Ok(())
            })
        })
        .edge(START, "chatty")
        .edge("chatty", END)
        .compile()
        .unwrap();
    (graph, emitted)
}

/// A node that emits many events keeps to its bounded stream's reader by waiting for
/// `event_room` before each; nothing is lost once the reader goes on.
#[tokio::test]
async fn a_node_waits_for_room_in_a_bounded_stream_before_it_emits() {
    let (graph, emitted) = chatty();
    let runtime = Runtime::in_memory();
    let mut stream = graph.run(&runtime, "t", 0).stream_bounded(3);
    stream.next().await.unwrap();
    // The reader stops: the node waits with a few events emitted.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let ahead = emitted.load(Ordering::SeqCst);
    assert!(
        ahead < 10,
        "the node emitted {ahead} events ahead of its reader"
    );
    let mut ticks = 0;
    while let Some(event) = stream.next().await {
        ticks += usize::from(matches!(event.kind, EventKind::Custom { .. }));
    }
    assert_eq!(ticks, 50);
}

/// A node waiting for room in its bounded stream learns of a cancel from the wait: it stops
/// emitting, and the run ends cancelled, with no reader ever freeing room.
#[tokio::test]
async fn a_cancel_ends_a_nodes_wait_for_room_with_an_error() {
    let (graph, emitted) = chatty();
    let runtime = Runtime::in_memory();
    let mut stream = graph.run(&runtime, "t", 0).stream_bounded(2);
    stream.next().await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let held = emitted.load(Ordering::SeqCst);
    runtime.cancel("t").await.unwrap();
    let outcome = tokio::time::timeout(std::time::Duration::from_secs(10), stream.outcome())
        .await
        .expect("the cancelled run ends");
    assert!(
        matches!(outcome, Err(RunError::Cancelled { .. })),
        "{outcome:?}"
    );
    assert_eq!(
        emitted.load(Ordering::SeqCst),
        held,
        "the node emitted after the cancel"
    );
}

/// A run's stream ends with how the run stands even when no step ran in it: a route out of
/// `START` that failed ends it with `error`, a recover of a finished run with `done`, one of
/// a suspended run with its interrupts. Before its fix each stream ended with no event.
#[tokio::test]
async fn a_stream_tells_how_a_run_stands_when_no_step_ran() {
    async fn kinds(stream: loomflow::RunStream<u32>) -> Vec<EventKind> {
        stream.map(|event| event.kind).collect().await
    }
    let runtime = Runtime::in_memory();
    let routed = Graph::new("routed")
        .node_sync("a", |n: &mut u32| *n += 1)
        .branch(START, ["a", END], |n: &u32| if *n == 7 { "b" } else { "a" })
        .edge("a", END)
        .compile()
        .unwrap();
    let failed = kinds(routed.run(&runtime, "failed", 7).stream()).await;
    assert!(
        matches!(&failed[..], [EventKind::Error { message }] if message.contains("b")),
        "{failed:?}"
    );

    routed.invoke(&runtime, "done", 1).await.unwrap();
    let done = kinds(routed.recover(&runtime, "done").stream()).await;
    assert_eq!(done, [EventKind::Done]);

    let asking = Graph::new("asking")
        .node_fn("ask", |n: &mut u32, ctx| {
            Box::pin(async move {
                *n = ctx.interrupt::<u32>("how many?")?;
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
        .unwrap();
    asking.invoke(&runtime, "asked", 0).await.unwrap();
    let asked = kinds(asking.recover(&runtime, "asked").stream()).await;
    assert!(
        matches!(&asked[..], [EventKind::Interrupt { payload, .. }] if payload == "how many?"),
        "{asked:?}"
    );
}

/// A cancel asked while the run waits for its bounded stream's reader stops it there: no
/// further step runs, even once the reader goes on. Before its fix the wait ignored the
/// cancel, and the next step ran as soon as the reader freed room (never, if it did not).
#[tokio::test]
async fn a_cancel_reaches_a_run_waiting_for_its_streams_reader() {
    let mut graph = Graph::new("held").recursion_limit(100);
    let names: Vec<String> = (0..20).map(|i| format!("n{i}")).collect();
    for name in &names {
        graph = graph.node_sync(name.clone(), |n: &mut u32| *n += 1);
    }
    graph = graph.edge(START, names[0].clone());
    for pair in names.windows(2) {
        graph = graph.edge(pair[0].clone(), pair[1].clone());
    }
    let graph = graph.edge(names[19].clone(), END).compile().unwrap();
    let runtime = Runtime::in_memory();
    let mut stream = graph.run(&runtime, "t", 0).stream_bounded(2);
    stream.next().await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let held: u32 = runtime.get_state("t").await.unwrap().unwrap();
    assert!(held < 19, "the run went {held} steps ahead of its reader");
    runtime.cancel("t").await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let outcome = tokio::time::timeout(std::time::Duration::from_secs(10), stream.outcome())
        .await
        .expect("the cancelled run ends");
    assert!(
        matches!(outcome, Err(RunError::Cancelled { .. })),
        "{outcome:?}"
    );
    let after: u32 = runtime.get_state("t").await.unwrap().unwrap();
    assert_eq!(after, held, "a step ran after the cancel");
}

/// The outcome's future given up part-way (a timeout around it) aborts the run, as dropping
/// the stream does: the run does not go on unwatched.
#[tokio::test]
async fn an_outcome_given_up_part_way_aborts_the_run() {
    let finished = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&finished);
    let graph = Graph::new("slow")
        .node_fn("slow", move |_: &mut u32, _| {
            let finished = Arc::clone(&seen);
            Box::pin(async move {
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                finished.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
        })
        .edge(START, "slow")
        .edge("slow", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let stream = graph.stream(&runtime, "t", 0);
    let gave_up = tokio::time::timeout(std::time::Duration::from_millis(20), stream.outcome());
    assert!(gave_up.await.is_err());
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    assert_eq!(finished.load(Ordering::SeqCst), 0, "the run went on");
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Small {
    total: u8,
}

/// A reducer that writes what its field's type cannot hold (a sum past a `u8`) fails the
/// step with an error naming the field, and the thread keeps its last checkpoint.
#[tokio::test]
async fn a_merged_value_its_field_cannot_hold_is_named() {
    let graph = Graph::new("sum")
        .node_sync("x", |s: &mut Small| s.total = 200)
        .node_sync("y", |s: &mut Small| s.total = 100)
        .edge(START, "x")
        .edge(START, "y")
        .edge("x", END)
        .edge("y", END)
        .reducer("total", Reducer::with(|a: u64, b: u64| a + b))
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let out = graph.invoke(&runtime, "t", Small::default()).await.unwrap();
    let RunOutcome::Failed { error, .. } = out else {
        panic!("{out:?}");
    };
    let RunError::Json { what, .. } = &error else {
        panic!("{error:?}");
    };
    assert!(what.starts_with("field total of "), "{what}");
    assert_eq!(
        runtime.list_checkpoints("t").await.unwrap().len(),
        1,
        "its input only"
    );
}

/// A state whose `Clone` panics once `poison` is set: a panic the executor cannot catch,
/// since no node, router or reducer is running.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Poisoned {
    poison: bool,
}

impl Clone for Poisoned {
    fn clone(&self) -> Self {
        assert!(!self.poison, "the state cannot be copied");
        Self {
            poison: self.poison,
        }
    }
}

/// A started run whose task panicked says so, with the panic's message; it is not taken
/// for a cancel, which nobody asked for.
#[tokio::test]
async fn a_run_task_that_panics_is_not_reported_as_cancelled() {
    let graph = Graph::new("poisoned")
        .node_sync("poison", |s: &mut Poisoned| s.poison = true)
        .edge(START, "poison")
        .edge("poison", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let error = graph
        .start(&runtime, "t", Poisoned::default())
        .await
        .unwrap_err();
    match error {
        RunError::TaskPanicked { thread, message } => {
            assert_eq!(thread, "t");
            assert!(message.contains("cannot be copied"), "{message}");
        }
        other => panic!("expected TaskPanicked, got {other:?}"),
    }
}

/// An appending field rewritten by one of its parallel writers fails the step, naming the
/// node that rewrote it.
#[tokio::test]
async fn an_append_rewritten_by_a_parallel_writer_names_the_node() {
    let graph = Graph::new("appending")
        .node_sync("a", |d: &mut Doc| d.log.push("a".into()))
        .node_sync("b", |d: &mut Doc| d.log = vec!["only b".into()])
        .edge(START, "a")
        .edge(START, "b")
        .edge("a", END)
        .edge("b", END)
        .reducer("log", Reducer::append())
        .compile()
        .unwrap();
    let input = Doc {
        log: vec!["before".into()],
        ..Doc::default()
    };
    let out = graph
        .invoke(&Runtime::in_memory(), "t", input)
        .await
        .unwrap();
    let RunOutcome::Failed { error, .. } = out else {
        panic!("{out:?}");
    };
    assert_eq!(
        error.to_string(),
        "reducer for field log failed in step 1: node b changed existing items instead of appending"
    );
}

/// A `#[node]` may fail with any error type, not only those that convert into `NodeError`:
/// an `std::io::Error` fails the run with that error, which downcasts to it. Before, such a
/// node did not compile (the advice was a `From` impl the orphan rule forbids).
#[node]
async fn read_config(state: &mut Doc) -> std::io::Result<()> {
    state.log.push("read".to_owned());
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        "no config.toml",
    ))
}

#[tokio::test]
async fn a_node_fails_with_an_error_type_of_another_crate() {
    let graph = Graph::new("config")
        .node(read_config)
        .edge(START, "read_config")
        .edge("read_config", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let outcome = graph.invoke(&runtime, "t", Doc::default()).await.unwrap();
    let RunOutcome::Failed { error, .. } = outcome else {
        panic!("failed: {outcome:?}");
    };
    assert!(error.to_string().contains("read_config"), "{error}");
    let source = std::error::Error::source(&error).expect("the node's error");
    assert_eq!(source.to_string(), "no config.toml");
    let io = source.downcast_ref::<std::io::Error>();
    assert_eq!(
        io.map(std::io::Error::kind),
        Some(std::io::ErrorKind::NotFound)
    );
}

/// A `node_sync` closure may fail with any error type, as a `#[node]` may: an
/// `std::io::Result` (a file read with `?`) compiles, and the run fails with that error as
/// the node's, its source the `io::Error` itself. Before, only errors that convert into
/// `NodeError` compiled, and the message said any error type would.
#[tokio::test]
async fn a_sync_node_fails_with_any_error_type() {
    #[derive(Clone, Debug, Default, Serialize, Deserialize)]
    struct Config {
        text: String,
    }
    let graph = Graph::new("loading")
        .node_sync("load", |config: &mut Config| -> std::io::Result<()> {
            config.text = std::fs::read_to_string("/nonexistent/loomflow/config.toml")?;
            Ok(())
        })
        .edge(START, "load")
        .edge("load", END)
        .compile()
        .unwrap();
    let outcome = graph
        .invoke(&Runtime::in_memory(), "t", Config::default())
        .await
        .unwrap();
    let RunOutcome::Failed { error, .. } = outcome else {
        panic!("{outcome:?}");
    };
    let RunError::NodeFailed { node, source, .. } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(node, "load");
    let io = source
        .downcast_ref::<std::io::Error>()
        .expect("the io::Error itself");
    assert_eq!(io.kind(), std::io::ErrorKind::NotFound);

    // The error types that worked before still do.
    let graph = Graph::new("refusing")
        .node_sync("a", |_: &mut u32| Err::<(), _>("no"))
        .node_sync("b", |_: &mut u32| Err::<(), _>(String::from("no")))
        .node_sync("c", |_: &mut u32| -> loomflow::Result<()> { Ok(()) })
        .edge(START, "c")
        .edge("c", "a")
        .edge("a", "b")
        .edge("b", END)
        .compile()
        .unwrap();
    let outcome = graph.invoke(&Runtime::in_memory(), "t", 0).await.unwrap();
    let RunOutcome::Failed { error, .. } = outcome else {
        panic!("{outcome:?}");
    };
    assert!(error.to_string().contains("node a failed"), "{error}");
}
