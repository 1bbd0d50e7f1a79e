//! The graph engine at its edges, on the memory store and on SQLite alike: a parallel
//! step whose nodes remove what they held, a failed step under `Durability::Exit`, a fork of
//! a run suspended inside a subgraph, a router or reducer that panics, a join that never
//! fires. Each case failed before its fix.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/callsites.rs"]
mod callsites;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use loomflow::prelude::*;
use loomflow::runtime::{RunState, RunStatus};
use loomflow::{GraphProblem, RunError};
use loomflow_tests::TempDb;

/// The memory runtime and a SQLite runtime, labelled.
fn runtimes(name: &str) -> (Vec<(&'static str, Runtime)>, TempDb) {
    let db = TempDb::new(name);
    let sqlite = Runtime::sqlite(&db.0).unwrap();
    (
        vec![("memory", Runtime::in_memory()), ("sqlite", sqlite)],
        db,
    )
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Basket {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    items: Vec<String>,
    count: u32,
}

#[tokio::test]
async fn a_branch_that_empties_a_skip_if_empty_vec_merges() {
    let graph = Graph::new("basket")
        .node_sync("clear", |b: &mut Basket| b.items.clear())
        .node_sync("count", |b: &mut Basket| b.count += 1)
        .edge(START, "clear")
        .edge(START, "count")
        .edge("clear", END)
        .edge("count", END)
        .compile()
        .unwrap();
    let (rts, _db) = runtimes("skipvec");
    for (label, rt) in rts {
        let input = Basket {
            items: vec!["apple".into()],
            count: 0,
        };
        let outcome = graph.invoke(&rt, "t", input).await.unwrap();
        match outcome {
            RunOutcome::Completed(b) => {
                assert_eq!(
                    b,
                    Basket {
                        items: vec![],
                        count: 1
                    },
                    "{label}"
                );
            }
            other => panic!("{label}: expected completed, got {other:?}"),
        }
    }
}

/// A state that is a map: one branch removes a key, another adds one.
#[tokio::test]
async fn a_branch_that_removes_a_key_of_a_map_state_merges() {
    let graph = Graph::new("map")
        .node_sync("remove", |m: &mut BTreeMap<String, u32>| {
            m.remove("x");
        })
        .node_sync("add", |m: &mut BTreeMap<String, u32>| {
            m.insert("y".into(), 2);
        })
        .edge(START, "remove")
        .edge(START, "add")
        .edge("remove", END)
        .edge("add", END)
        .compile()
        .unwrap();
    let (rts, _db) = runtimes("mapkey");
    for (label, rt) in rts {
        let input = BTreeMap::from([("x".to_owned(), 1)]);
        let outcome = graph.invoke(&rt, "t", input).await.unwrap();
        match outcome {
            RunOutcome::Completed(m) => {
                assert_eq!(m, BTreeMap::from([("y".to_owned(), 2)]), "{label}");
            }
            other => panic!("{label}: expected completed, got {other:?}"),
        }
    }
}

/// Same, for a map state of JSON values: the removed key must not come back as `null`.
#[tokio::test]
async fn a_branch_that_removes_a_key_of_a_value_map_state_does_not_leave_null() {
    let graph = Graph::new("vmap")
        .node_sync(
            "remove",
            |m: &mut serde_json::Map<String, serde_json::Value>| {
                m.remove("x");
            },
        )
        .node_sync(
            "add",
            |m: &mut serde_json::Map<String, serde_json::Value>| {
                m.insert("y".into(), json!(2));
            },
        )
        .edge(START, "remove")
        .edge(START, "add")
        .edge("remove", END)
        .edge("add", END)
        .compile()
        .unwrap();
    let rt = Runtime::in_memory();
    let mut input = serde_json::Map::new();
    input.insert("x".into(), json!(1));
    let out = graph
        .invoke(&rt, "t", input)
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(serde_json::Value::Object(out), json!({"y": 2}));
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Log {
    log: Vec<String>,
}

fn join_graph(failures: Arc<AtomicUsize>) -> CompiledGraph<Log> {
    Graph::new("join")
        .node_sync("a", |s: &mut Log| s.log.push("a".into()))
        .node_sync("b1", |s: &mut Log| s.log.push("b1".into()))
        .node_sync("b2", move |s: &mut Log| -> Result<(), String> {
            if failures.fetch_add(1, Ordering::SeqCst) == 0 {
                return Err("b2 fails once".into());
            }
            s.log.push("b2".into());
            Ok(())
        })
        .node_sync("c", |s: &mut Log| s.log.push("c".into()))
        .reducer("log", Reducer::append())
        .edge(START, "a")
        .edge(START, "b1")
        .edge("b1", "b2")
        .join(["a", "b2"], "c")
        .edge("c", END)
        .compile()
        .unwrap()
}

#[tokio::test]
async fn recovering_a_failed_step_keeps_join_progress_in_every_durability_mode() {
    let mut wrong = Vec::new();
    for durability in [Durability::Sync, Durability::Async, Durability::Exit] {
        let (rts, _db) = runtimes("exitjoin");
        for (label, rt) in rts {
            let graph = join_graph(Arc::new(AtomicUsize::new(0)));
            let first = graph
                .run(&rt, "t", Log::default())
                .durability(durability)
                .await
                .unwrap();
            assert!(
                matches!(first, RunOutcome::Failed { .. }),
                "{label} {durability:?}: {first:?}"
            );
            let row = rt.run("t").await.unwrap().record.state;
            let second = graph
                .recover(&rt, "t")
                .durability(durability)
                .await
                .unwrap_or_else(|e| panic!("{label} {durability:?}: recover: {e}"));
            match second {
                RunOutcome::Completed(s) if s.log == ["a", "b1", "b2", "c"] => {}
                other => wrong.push(format!(
                    "{label} {durability:?} (row after failure: {row:?}): {other:?}"
                )),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "join target lost after recover:\n{}",
        wrong.join("\n")
    );
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct S {
    answer: Option<String>,
    side: u32,
    log: Vec<String>,
}

/// `a` interrupts and, on its first resume, fails once; `b` beside it counts its runs.
#[tokio::test]
async fn a_failed_resumed_step_keeps_its_finished_sibling_in_every_durability_mode() {
    let mut wrong = Vec::new();
    for durability in [Durability::Sync, Durability::Exit] {
        let (rts, _db) = runtimes("exitpending");
        for (label, rt) in rts {
            let b_runs = Arc::new(AtomicUsize::new(0));
            let a_fail = Arc::new(AtomicUsize::new(0));
            let (br, af) = (Arc::clone(&b_runs), Arc::clone(&a_fail));
            let graph = Graph::new("g")
                .node_fn("a", move |s: &mut S, ctx| {
                    let af = Arc::clone(&af);
                    Box::pin(async move {
                        let v: String = ctx.interrupt(json!("a?"))?;
                        if af.fetch_add(1, Ordering::SeqCst) == 0 {
                            return Err("a fails once after its resume".into());
                        }
                        s.answer = Some(v);
                        Ok(())
                    })
                })
                .node_sync("b", move |s: &mut S| {
                    br.fetch_add(1, Ordering::SeqCst);
                    s.side += 1;
                })
                .edge(START, "a")
                .edge(START, "b")
                .edge("a", END)
                .edge("b", END)
                .compile()
                .unwrap();
            let first = graph
                .run(&rt, "t", S::default())
                .durability(durability)
                .await
                .unwrap();
            assert_eq!(first.interrupts().len(), 1);
            let second = graph
                .resume(&rt, "t", "yes")
                .durability(durability)
                .await
                .unwrap();
            assert!(matches!(second, RunOutcome::Failed { .. }), "{second:?}");
            // Carry on: in Sync mode the run is interrupted as before (answer again); either
            // way `b`, which finished, must not run again.
            let third = graph
                .recover(&rt, "t")
                .durability(durability)
                .await
                .unwrap();
            let third = match third {
                RunOutcome::Interrupted { .. } => graph
                    .resume(&rt, "t", "yes")
                    .durability(durability)
                    .await
                    .unwrap(),
                other => other,
            };
            let line = format!(
                "{label} {durability:?}: b ran {} times; outcome {third:?}",
                b_runs.load(Ordering::SeqCst)
            );
            eprintln!("{line}");
            let ok = matches!(&third, RunOutcome::Completed(s) if s.side == 1 && s.answer.as_deref() == Some("yes"))
                && b_runs.load(Ordering::SeqCst) == 1;
            if !ok {
                wrong.push(line);
            }
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Child {
    got: Option<String>,
}

fn parent_graph(prep_runs: Arc<AtomicUsize>) -> CompiledGraph<S> {
    let child = Graph::new("child")
        .node_sync("prep", move |_: &mut Child| {
            prep_runs.fetch_add(1, Ordering::SeqCst);
        })
        .node_fn("ask", |c: &mut Child, ctx| {
            Box::pin(async move {
                let v: String = ctx.interrupt(json!("child?"))?;
                c.got = Some(v);
                Ok(())
            })
        })
        .edge(START, "prep")
        .edge("prep", "ask")
        .edge("ask", END)
        .compile()
        .unwrap();
    Graph::new("parent")
        .subgraph(
            "sub",
            child,
            |_: &S| Child::default(),
            |p: &mut S, c: Child| p.answer = c.got,
        )
        .edge(START, "sub")
        .edge("sub", END)
        .compile()
        .unwrap()
}

#[tokio::test]
async fn a_fork_of_a_run_interrupted_in_a_subgraph_can_be_resumed() {
    let mut wrong = Vec::new();
    let (rts, _db) = runtimes("forksub");
    for (label, rt) in rts {
        let prep = Arc::new(AtomicUsize::new(0));
        let graph = parent_graph(Arc::clone(&prep));
        let first = graph.invoke(&rt, "t", S::default()).await.unwrap();
        assert_eq!(first.interrupts().len(), 1, "{label}");
        // The original resumes fine.
        let cps = rt.store().list_checkpoints("t").await.unwrap();
        let top: Vec<_> = cps.iter().filter(|c| c.namespace.is_empty()).collect();
        let interrupted = top.iter().max_by_key(|c| c.id).unwrap();
        rt.fork("t", interrupted.id, "t2").await.unwrap();
        let resumed = graph.resume(&rt, "t2", "forked answer").await;
        let line = format!(
            "{label}: resume of fork -> {resumed:?}; prep ran {}",
            prep.load(Ordering::SeqCst)
        );
        eprintln!("{line}");
        match resumed {
            Ok(RunOutcome::Completed(s)) if s.answer.as_deref() == Some("forked answer") => {}
            _ => wrong.push(line),
        }
        let orig = graph.resume(&rt, "t", "orig").await.unwrap();
        assert_eq!(
            orig.completed().unwrap().answer.as_deref(),
            Some("orig"),
            "{label}"
        );
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

/// A fork of a run suspended two subgraphs deep is answered by its first resume: the fork
/// writes the subgraphs' checkpoints in the order the run wrote them (the innermost first),
/// as the resume reads them. Before, the outer one was written first, the inner one looked
/// newer than where the outer stood, and the answer was dropped for the same question.
#[tokio::test]
async fn a_fork_of_a_run_suspended_in_a_nested_subgraph_takes_its_first_answer() {
    let (rts, _db) = runtimes("forknested");
    for (label, rt) in rts {
        let prep = Arc::new(AtomicUsize::new(0));
        let inner = parent_graph(Arc::clone(&prep));
        let graph = Graph::new("outer")
            .subgraph(
                "middle",
                inner,
                |_: &S| S::default(),
                |o: &mut S, m: S| o.answer = m.answer,
            )
            .edge(START, "middle")
            .edge("middle", END)
            .compile()
            .unwrap();
        let first = graph.invoke(&rt, "t", S::default()).await.unwrap();
        assert_eq!(first.interrupts().len(), 1, "{label}");
        let cps = rt.store().list_checkpoints("t").await.unwrap();
        let top = cps.iter().filter(|c| c.namespace.is_empty());
        let interrupted = top.max_by_key(|c| c.id).unwrap();
        rt.fork("t", interrupted.id, "t2").await.unwrap();
        let resumed = graph.resume(&rt, "t2", "forked answer").await.unwrap();
        let done = resumed
            .completed()
            .unwrap_or_else(|e| panic!("{label}: {e:?}"));
        assert_eq!(done.answer.as_deref(), Some("forked answer"), "{label}");
    }
}

/// A resume that moved a subgraph on and then stopped (a crash), then a cancel: a fork from
/// the cancel's copy takes the subgraph from where it stood at the question the cancel
/// copied, not from where the stopped resume left it, and its own answer is the one used.
#[tokio::test]
async fn a_fork_of_a_cancelled_suspension_takes_the_subgraph_from_the_question() {
    let (rts, _db) = runtimes("forkcancelsub");
    for (label, rt) in rts {
        let hold = Arc::new(tokio::sync::Notify::new());
        let holding = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let child = {
            let (hold, holding) = (Arc::clone(&hold), Arc::clone(&holding));
            Graph::new("child")
                .node_fn("ask", |c: &mut Child, ctx| {
                    Box::pin(async move {
                        c.got = Some(ctx.interrupt(json!("child?"))?);
                        Ok(())
                    })
                })
                .node_fn("after", move |_: &mut Child, _ctx| {
                    let (hold, holding) = (Arc::clone(&hold), Arc::clone(&holding));
                    Box::pin(async move {
                        if holding.load(Ordering::SeqCst) {
                            hold.notified().await;
                        }
                        Ok(())
                    })
                })
                .edge(START, "ask")
                .edge("ask", "after")
                .edge("after", END)
                .compile()
                .unwrap()
        };
        let graph = Graph::new("parent")
            .subgraph(
                "sub",
                child,
                |_: &S| Child::default(),
                |p: &mut S, c: Child| p.answer = c.got,
            )
            .edge(START, "sub")
            .edge("sub", END)
            .compile()
            .unwrap();
        graph.invoke(&rt, "t", S::default()).await.unwrap();
        // The resume answers the child's question, writes the child's step, and stops.
        let before = rt.list_checkpoints("t").await.unwrap().len();
        let resuming = graph.resume(&rt, "t", "first").start();
        while rt.list_checkpoints("t").await.unwrap().len() == before {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        resuming.abort();
        let _ = resuming.await;
        rt.cancel("t").await.unwrap();
        let cps = rt.list_checkpoints("t").await.unwrap();
        let top = cps.iter().filter(|c| c.namespace.is_empty());
        let cancelled = top.max_by_key(|c| c.id).unwrap();
        assert_eq!(cancelled.status, RunStatus::Cancelled, "{label}");
        rt.fork("t", cancelled.id, "t2").await.unwrap();
        holding.store(false, Ordering::SeqCst);
        let done = graph.resume(&rt, "t2", "second").await.unwrap();
        let state = done
            .completed()
            .unwrap_or_else(|e| panic!("{label}: {e:?}"));
        assert_eq!(state.answer.as_deref(), Some("second"), "{label}");
    }
}

#[tokio::test]
async fn a_panicking_router_fails_the_run_with_a_typed_error() {
    let (rts, _db) = runtimes("routerpanic");
    for (label, rt) in rts {
        let graph = Graph::new("rp")
            .node_sync("a", |n: &mut u32| *n += 1)
            .node_sync("b", |n: &mut u32| *n += 10)
            .edge(START, "a")
            .branch("a", ["b", END], |n: &u32| {
                if *n == 1 {
                    panic!("router bug");
                }
                "b"
            })
            .edge("b", END)
            .compile()
            .unwrap();
        // In a background task, so that a panic does not take the test down.
        let outcome = graph.start(&rt, "t", 0).await;
        let row = rt.run("t").await.map(|i| (i.record.state, i.state));
        eprintln!("{label}: outcome {outcome:?}; row {row:?}");
        let again = graph.recover(&rt, "t").start().await;
        eprintln!("{label}: recover right after -> {again:?}");
        let worker_view = rt
            .runs(&loomflow::runtime::RunFilter::default())
            .await
            .map(|r| {
                r.iter()
                    .map(|r| (r.thread.clone(), r.state))
                    .collect::<Vec<_>>()
            });
        eprintln!("{label}: runs -> {worker_view:?}");
        match &outcome {
            Ok(RunOutcome::Failed { error, state }) => {
                assert!(
                    matches!(error, RunError::RouterPanicked { node, message } if node == "a" && message == "router bug"),
                    "{label}: {error:?}"
                );
                assert_eq!(*state, 0, "{label}: the state before the failed step");
            }
            other => panic!("{label}: a router panic is a failed run, got {other:?}"),
        }
        let (state, _) = row.unwrap();
        assert_eq!(
            state,
            RunState::Failed,
            "{label}: the run is not left running"
        );
    }
}

/// A branch out of `START` that fails fails the run as any other route does: a
/// `RunOutcome::Failed` with the input as the last good state, and a row that says failed.
#[tokio::test]
async fn a_failed_route_out_of_start_is_a_failed_run() {
    let (runtimes, _db) = runtimes("start-route");
    for (label, rt) in runtimes {
        let graph = Graph::new("start-route")
            .node_sync("a", |n: &mut u32| *n += 1)
            .branch(START, ["a", END], |n: &u32| if *n == 7 { "b" } else { "a" })
            .edge("a", END)
            .compile()
            .unwrap();
        match graph.invoke(&rt, "t", 7).await {
            Ok(RunOutcome::Failed { error, state }) => {
                assert!(
                    matches!(&error, RunError::UndeclaredRoute { .. }),
                    "{label}: {error:?}"
                );
                // Named as the graph was written: `START`, not the name it stands for.
                assert_eq!(
                    error.to_string(),
                    "branch from START chose b, which is not one of its declared targets",
                    "{label}"
                );
                assert_eq!(state, 7, "{label}: the input is the last good state");
            }
            other => panic!("{label}: a failed route is a failed run, got {other:?}"),
        }
        let row = rt.run("t").await.unwrap().record;
        assert_eq!(row.state, RunState::Failed, "{label}: {row:?}");
        // The thread takes its next run.
        let next = graph.invoke(&rt, "t", 1).await.unwrap();
        assert_eq!(next.completed().unwrap(), 2, "{label}");
    }
}

/// A run whose route out of `START` failed is the run `recover` finds: routed again from
/// its input once the router is fixed, never the thread's previous run handed back.
#[tokio::test]
async fn a_run_failed_at_its_start_is_recovered_from_its_input() {
    let (mut runtimes, _db) = runtimes("start-recover");
    let exit_db = TempDb::new("start-recover-exit");
    let exit = Runtime::builder()
        .store(loomflow::runtime::SqliteStore::open(&exit_db.0).unwrap())
        .durability(Durability::Exit)
        .build();
    runtimes.push(("sqlite, exit", exit));
    for (label, rt) in runtimes {
        let fixed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let router = Arc::clone(&fixed);
        let graph = Graph::new("start-recover")
            .node_sync("a", |n: &mut u32| *n += 1)
            .branch(START, ["a", END], move |n: &u32| {
                if *n == 7 && !router.load(Ordering::SeqCst) {
                    "b"
                } else {
                    "a"
                }
            })
            .edge("a", END)
            .compile()
            .unwrap();
        let first = graph.invoke(&rt, "t", 1).await.unwrap();
        assert_eq!(first.completed().unwrap(), 2, "{label}");
        let failed = graph.invoke(&rt, "t", 7).await.unwrap();
        assert!(
            matches!(failed, RunOutcome::Failed { .. }),
            "{label}: {failed:?}"
        );
        let row = rt.run("t").await.unwrap().record;
        assert_eq!(
            (row.state, row.run),
            (RunState::Failed, 2),
            "{label}: {row:?}"
        );

        // Not fixed yet: it fails again, as it did.
        let again = graph.recover(&rt, "t").await.unwrap();
        match again {
            RunOutcome::Failed { error, state } => {
                assert!(matches!(error, RunError::UndeclaredRoute { .. }), "{label}");
                assert_eq!(state, 7, "{label}");
            }
            other => panic!("{label}: the failed run, not the one before it: {other:?}"),
        }
        fixed.store(true, Ordering::SeqCst);
        let recovered = graph.recover(&rt, "t").await.unwrap();
        assert_eq!(recovered.completed().unwrap(), 8, "{label}");
        let row = rt.run("t").await.unwrap().record;
        assert_eq!(
            (row.state, row.run),
            (RunState::Completed, 2),
            "{label}: {row:?}"
        );
    }
}

#[tokio::test]
async fn a_panicking_reducer_fails_the_run_with_a_typed_error() {
    #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
    struct Best {
        best: u32,
    }
    let rt = Runtime::in_memory();
    let graph = Graph::new("rd")
        .node_sync("a", |s: &mut Best| s.best = 1)
        .node_sync("b", |s: &mut Best| s.best = 2)
        .reducer(
            "best",
            Reducer::with(|x: u32, y: u32| -> u32 {
                assert!(x != 1, "reducer bug");
                x.max(y)
            }),
        )
        .edge(START, "a")
        .edge(START, "b")
        .edge("a", END)
        .edge("b", END)
        .compile()
        .unwrap();
    let outcome = graph.start(&rt, "t", Best::default()).await;
    let row = rt.run("t").await.map(|i| (i.record.state, i.state));
    eprintln!("outcome {outcome:?}; row {row:?}");
    match &outcome {
        Ok(RunOutcome::Failed { error, .. }) => assert!(
            matches!(error, RunError::Reducer { field, message, .. } if field == "best" && message.contains("reducer bug")),
            "{error:?}"
        ),
        other => panic!("a reducer panic is a failed run, got {other:?}"),
    }
    assert_eq!(
        row.unwrap().0,
        RunState::Failed,
        "the run is not left running"
    );
}

#[test]
fn a_join_with_no_sources_is_refused_at_compile() {
    let refused = Graph::new("empty-join")
        .node_sync("a", |n: &mut u32| *n += 1)
        .node_sync("c", |n: &mut u32| *n += 100)
        .edge(START, "a")
        .edge("a", "c")
        .join(Vec::<String>::new(), "c")
        .edge("c", END)
        .compile()
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("join into c declares no sources"),
        "{refused}"
    );
}

/// A join waiting on a node that only its own target leads to can never fire: refused at
/// compile, naming the join and the source it waits on, and the nodes only it leads to.
#[test]
fn a_join_waiting_on_its_own_targets_descendant_is_refused_at_compile() {
    let refused = Graph::new("self-join")
        .node_sync("a", |n: &mut u32| *n += 1)
        .node_sync("b", |n: &mut u32| *n += 10)
        .node_sync("c", |n: &mut u32| *n += 100)
        .edge(START, "a")
        .join(["a", "b"], "c")
        .edge("c", "b")
        .edge("b", END)
        .compile()
        .unwrap_err();
    assert_eq!(
        refused.problems(),
        [
            GraphProblem::JoinNeverFires {
                target: "c".into(),
                waiting: vec!["b".into()]
            },
            GraphProblem::Unreachable { name: "b".into() },
            GraphProblem::Unreachable { name: "c".into() },
        ]
    );
    assert!(
        refused
            .to_string()
            .contains("join into c never fires: its sources b run only after it, or never"),
        "{refused}"
    );
    // Sources on a loop that reaches them all before the join are fine.
    Graph::new("loop-join")
        .node_sync("a", |n: &mut u32| *n += 1)
        .node_sync("b", |n: &mut u32| *n += 10)
        .node_sync("c", |n: &mut u32| *n += 100)
        .edge(START, "a")
        .edge("a", "b")
        .join(["a", "b"], "c")
        .branch("c", ["a", END], |n: &u32| if *n > 500 { END } else { "a" })
        .compile()
        .unwrap();
}

/// A conversation that suspends every turn (ask, reply, ask again) is not stopped by the
/// recursion limit at turn 13: each resume counts its own supersteps. A loop that never
/// suspends still is.
#[tokio::test]
async fn the_recursion_limit_counts_each_execution_so_a_long_conversation_goes_on() {
    let (rts, _db) = runtimes("chat");
    for (label, rt) in rts {
        let graph = Graph::new("chat")
            .node_fn("ask", |s: &mut S, ctx| {
                Box::pin(async move {
                    let line: String = ctx.interrupt(json!("say something"))?;
                    s.answer = Some(line);
                    Ok(())
                })
            })
            .node_sync("reply", |s: &mut S| s.side += 1)
            .edge(START, "ask")
            .edge("ask", "reply")
            .branch("reply", ["ask", END], |s: &S| {
                if s.answer.as_deref() == Some("bye") {
                    END
                } else {
                    "ask"
                }
            })
            .compile()
            .unwrap();
        let mut outcome = graph.invoke(&rt, "t", S::default()).await.unwrap();
        for turn in 1..=40 {
            assert!(
                matches!(outcome, RunOutcome::Interrupted { .. }),
                "{label}: turn {turn}: {outcome:?}"
            );
            outcome = graph
                .resume(&rt, "t", format!("hello {turn}"))
                .await
                .unwrap();
        }
        let done = graph.resume(&rt, "t", "bye").await.unwrap();
        assert_eq!(done.completed().unwrap().side, 41, "{label}");
    }
    let runaway = Graph::new("runaway")
        .node_sync("spin", |n: &mut u32| *n += 1)
        .edge(START, "spin")
        .branch("spin", ["spin", END], |_: &u32| "spin")
        .compile()
        .unwrap();
    let stopped = runaway.invoke(&Runtime::in_memory(), "r", 0).await.unwrap();
    assert!(
        matches!(
            stopped,
            RunOutcome::Failed {
                error: RunError::RecursionLimit { limit: 25, .. },
                ..
            }
        ),
        "{stopped:?}"
    );
}

/// The warnings a run logs, each as `message key=value …`.
#[derive(Clone, Default)]
struct Warnings(Arc<std::sync::Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Line(String);
        impl tracing::field::Visit for Line {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                match field.name() {
                    "message" => self.0.insert_str(0, &format!("{value:?}")),
                    name => self.0.push_str(&format!(" {name}={value:?}")),
                }
            }
        }
        if *event.metadata().level() == tracing::Level::WARN {
            let mut line = Line(String::new());
            event.record(&mut line);
            self.0.lock().unwrap().push(line.0);
        }
    }
}

impl Warnings {
    /// Runs `f` with these warnings recorded; returns them.
    async fn during<F: std::future::Future>(f: F) -> (F::Output, Vec<String>) {
        use tracing_subscriber::layer::SubscriberExt as _;
        let warnings = Self::default();
        let subscriber = tracing_subscriber::registry().with(warnings.clone());
        callsites::keep_callsites_enabled();
        let _guard = tracing::subscriber::set_default(subscriber);
        let out = f.await;
        let lines = warnings.0.lock().unwrap().clone();
        (out, lines)
    }
}

/// A join whose sources sit on branches that exclude each other never fires. The run
/// completes, and a warning names the join's target and the source that did not run.
#[tokio::test(flavor = "current_thread")]
async fn a_join_that_never_fires_is_reported() {
    let graph = Graph::new("either")
        .node_sync("pick", |n: &mut u32| *n += 1)
        .node_sync("left", |n: &mut u32| *n += 10)
        .node_sync("right", |n: &mut u32| *n += 100)
        .node_sync("both", |n: &mut u32| *n += 1000)
        .edge(START, "pick")
        .branch("pick", ["left", "right"], |_: &u32| "left")
        .join(["left", "right"], "both")
        .edge("both", END)
        .compile()
        .unwrap();
    let (done, warnings) = Warnings::during(graph.invoke(&Runtime::in_memory(), "either", 0)).await;
    assert_eq!(done.unwrap().completed().unwrap(), 11, "`both` did not run");
    let [warning] = &warnings[..] else {
        panic!("one warning: {warnings:?}");
    };
    assert!(warning.contains("join that never fired"), "{warning}");
    assert!(warning.contains("join_target=\"both\""), "{warning}");
    assert!(warning.contains("missing=right"), "{warning}");
}

/// A join whose sources all ran, in different steps, fires and says nothing.
#[tokio::test(flavor = "current_thread")]
async fn a_join_that_fired_is_not_reported() {
    let graph = Graph::new("both")
        .node_sync("left", |n: &mut u32| *n += 10)
        .node_sync("right", |n: &mut u32| *n += 100)
        .node_sync("both", |n: &mut u32| *n += 1000)
        .edge(START, "left")
        .edge("left", "right")
        .join(["left", "right"], "both")
        .edge("both", END)
        .compile()
        .unwrap();
    let (done, warnings) = Warnings::during(graph.invoke(&Runtime::in_memory(), "both", 0)).await;
    assert_eq!(done.unwrap().completed().unwrap(), 1110);
    assert!(warnings.is_empty(), "{warnings:?}");
}

/// `pay`: journals a charge of its input, then waits for the signal `go`.
fn charge_then_wait(calls: Arc<AtomicUsize>) -> CompiledGraph<u32> {
    Graph::new("pay")
        .node_fn("pay", move |n: &mut u32, ctx| {
            let calls = Arc::clone(&calls);
            Box::pin(async move {
                let input = *n;
                let charged: u32 = ctx
                    .step("charge", || async move {
                        calls.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, String>(input)
                    })
                    .await?;
                *n = charged * 10;
                ctx.wait_for_signal::<bool>("go").await?;
                Ok(())
            })
        })
        .edge(START, "pay")
        .edge("pay", END)
        .compile()
        .unwrap()
}

/// An `Exit` run abandoned after it journaled a step (its future dropped, its process
/// gone) is seen on its row while it runs; the thread's next run, from another input, does
/// its own step instead of being handed the abandoned run's result; and a recover of an
/// abandoned run carries it on without doing its step again.
#[tokio::test]
async fn an_abandoned_exit_run_hands_its_journal_to_no_other_run() {
    let (runtimes, _db) = runtimes("exit-abandoned");
    for (label, runtime) in runtimes {
        let calls = Arc::new(AtomicUsize::new(0));
        let graph = charge_then_wait(Arc::clone(&calls));
        // Starts run `run` from `input`, and drops it once its charge is journaled.
        let abandon = |input: u32, run: u64| {
            let started = graph
                .run(&runtime, "t", input)
                .durability(Durability::Exit)
                .start();
            let runtime = runtime.clone();
            async move {
                let charge =
                    loomflow::runtime::JournalKey::new("t", run, "", 1, "pay", "charge", 0);
                while runtime
                    .store()
                    .get_journal(&charge)
                    .await
                    .unwrap()
                    .is_none()
                {
                    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                }
                started.abort();
                let _ = started.await;
            }
        };
        abandon(1, 1).await;
        let row = runtime.run("t").await.unwrap().record;
        assert_eq!((row.run, row.state), (1, RunState::Running), "{label}");
        // Lets the run go on and finish, under `Exit`.
        let finish = |run: loomflow::RunBuilder<u32>| async {
            runtime.signal("t", "go", true).await.unwrap();
            let run = run.durability(Durability::Exit);
            let outcome = run.wait_if_busy(std::time::Duration::from_secs(5)).await;
            outcome.unwrap().completed().unwrap()
        };
        let state = finish(graph.run(&runtime, "t", 2)).await;
        assert_eq!((state, calls.load(Ordering::SeqCst)), (20, 2), "{label}");

        abandon(3, 3).await;
        let state = finish(graph.recover(&runtime, "t")).await;
        assert_eq!((state, calls.load(Ordering::SeqCst)), (30, 3), "{label}");
    }
}

/// A resumed step that fails with the value it was given leaves the question open in every
/// durability mode: `Exit` too keeps the interrupted checkpoint the newest, so the question
/// is answered again rather than the failed answer replayed by every recover.
#[tokio::test]
async fn a_resumed_step_that_fails_can_be_answered_again_in_every_mode() {
    for durability in [Durability::Sync, Durability::Async, Durability::Exit] {
        let graph = Graph::new("limit")
            .node_fn("amount", |n: &mut u32, ctx| {
                Box::pin(async move {
                    let amount: u32 = ctx.interrupt(json!("amount?"))?;
                    if amount > 100 {
                        return Err(format!("{amount} is over the limit").into());
                    }
                    *n = amount;
                    Ok(())
                })
            })
            .edge(START, "amount")
            .edge("amount", END)
            .compile()
            .unwrap();
        let rt = Runtime::in_memory();
        let first = graph.run(&rt, "t", 0).durability(durability).await.unwrap();
        assert_eq!(first.interrupts().len(), 1);
        let failed = graph
            .resume(&rt, "t", 500)
            .durability(durability)
            .await
            .unwrap();
        assert!(
            matches!(failed, RunOutcome::Failed { .. }),
            "{durability:?}: {failed:?}"
        );
        // The run waits for another answer: its row says so, and an answer sent as a
        // request is taken (before, the row said failed and a request was refused).
        let row = rt.run("t").await.unwrap().record;
        assert_eq!(row.state, RunState::Interrupted, "{durability:?}: {row:?}");
        assert_eq!(rt.pending_interrupts("t").await.unwrap().len(), 1);
        let again = graph.resume(&rt, "t", 50).durability(durability).await;
        let done = again.unwrap_or_else(|e| panic!("{durability:?}: {e}"));
        assert_eq!(done.completed().unwrap(), 50, "{durability:?}");
    }
}

/// The calls `charged` made, and a graph whose node asks for an amount, charges it in a
/// journaled step, then sends an email that fails while `email_fails` is set.
fn charge_then_email(
    charged: Arc<std::sync::Mutex<Vec<u32>>>,
    email_fails: Arc<std::sync::atomic::AtomicBool>,
) -> CompiledGraph<String> {
    Graph::new("charge")
        .node_fn("pay", move |receipt: &mut String, ctx| {
            let (charged, email_fails) = (Arc::clone(&charged), Arc::clone(&email_fails));
            Box::pin(async move {
                let amount: u32 = ctx.interrupt(json!("amount?"))?;
                let id: String = ctx
                    .step("charge", || async {
                        charged.lock().unwrap().push(amount);
                        Ok::<_, String>(format!("ch_{amount}"))
                    })
                    .await?;
                ctx.step("email", || async {
                    match email_fails.load(Ordering::SeqCst) {
                        true => Err("mail server down".to_owned()),
                        false => Ok(()),
                    }
                })
                .await?;
                *receipt = id;
                Ok(())
            })
        })
        .edge(START, "pay")
        .edge("pay", END)
        .compile()
        .unwrap()
}

/// A resumed step that fails leaves its question open; the journaled calls the node made
/// after its answer belong to that answer. The same answer given again replays them (the
/// charge is not made twice); another answer is another input, and its calls are made for
/// it rather than handed the first answer's results.
#[tokio::test]
async fn another_answer_after_a_failed_resumed_step_is_not_handed_the_first_answers_calls() {
    let (runtimes, _db) = runtimes("answer_journal");
    for (label, rt) in runtimes {
        for (thread, second, charges) in [("same", 500, vec![500]), ("other", 50, vec![500, 50])] {
            let charged = Arc::new(std::sync::Mutex::new(Vec::new()));
            let email_fails = Arc::new(std::sync::atomic::AtomicBool::new(true));
            let graph = charge_then_email(Arc::clone(&charged), Arc::clone(&email_fails));
            let asked = graph.run(&rt, thread, String::new()).await.unwrap();
            assert_eq!(asked.interrupts().len(), 1, "{label}");
            let failed = graph.resume(&rt, thread, 500).await.unwrap();
            assert!(
                matches!(failed, RunOutcome::Failed { .. }),
                "{label}: {failed:?}"
            );
            email_fails.store(false, Ordering::SeqCst);
            let done = graph.resume(&rt, thread, second).await.unwrap();
            let receipt = done.completed().unwrap();
            assert_eq!(receipt, format!("ch_{second}"), "{label} {thread}");
            assert_eq!(*charged.lock().unwrap(), charges, "{label} {thread}");
        }
    }
}

/// Under `Durability::Async` a fresh run's start reaches the store before its first step
/// journals anything: were the process to die between the two, the thread's next run would
/// take the same number and be handed the dead run's journaled results.
#[tokio::test]
async fn an_async_runs_start_is_stored_before_its_first_journal_entry() {
    let (runtimes, _db) = runtimes("async_start");
    for (label, rt) in runtimes {
        let seen = Arc::new(std::sync::Mutex::new(None));
        let graph = {
            let (rt, seen) = (rt.clone(), Arc::clone(&seen));
            Graph::new("pay")
                .node_fn("pay", move |paid: &mut u32, ctx| {
                    let (rt, seen) = (rt.clone(), Arc::clone(&seen));
                    Box::pin(async move {
                        *paid = ctx
                            .step("charge", || async {
                                let start = rt.store().latest_checkpoint("t", "").await.unwrap();
                                *seen.lock().unwrap() = Some(start.map(|cp| cp.run));
                                Ok::<_, String>(7)
                            })
                            .await?;
                        Ok(())
                    })
                })
                .edge(START, "pay")
                .edge("pay", END)
                .compile()
                .unwrap()
        };
        let run = graph.run(&rt, "t", 0).durability(Durability::Async).await;
        assert_eq!(run.unwrap().completed().unwrap(), 7, "{label}");
        assert_eq!(*seen.lock().unwrap(), Some(Some(1)), "{label}");
    }
}

/// A graph problem about `START` or `END` names them as the graph was written, not by the
/// names they stand for (`__end__`).
#[test]
fn graph_problems_name_start_and_end_as_written() {
    let err = Graph::new("backwards")
        .node_sync("a", |n: &mut u32| *n += 1)
        .edge(START, "a")
        .edge("a", END)
        .branch(END, ["a"], |_: &u32| "a")
        .compile()
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("edge END -> a uses START or END the wrong way round"),
        "{text}"
    );
    assert!(!text.contains("__end__"), "{text}");

    // The usual typos, and a router that picks END without declaring it.
    let err = Graph::new("typos")
        .node_sync("a", |n: &mut u32| *n += 1)
        .edge(START, "missing")
        .edge("wirte", END)
        .edge("a", END)
        .compile()
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("edge START -> missing names unknown node missing"),
        "{text}"
    );
    assert!(
        text.contains("edge wirte -> END names unknown node wirte"),
        "{text}"
    );
    assert!(
        !text.contains("__start__") && !text.contains("__end__"),
        "{text}"
    );
    // A name written as a string that reads START is told apart from the graph's START.
    let err = Graph::new("quoted")
        .node_sync("a", |n: &mut u32| *n += 1)
        .edge("START", "a")
        .edge("a", END)
        .compile()
        .unwrap_err();
    assert!(
        err.to_string()
            .contains(r#"edge "START" -> a names unknown node "START""#),
        "{err}"
    );
    let graph = Graph::new("routes")
        .node_sync("a", |n: &mut u32| *n += 1)
        .node_sync("b", |n: &mut u32| *n += 1)
        .edge(START, "a")
        .branch("a", ["b"], |_: &u32| END)
        .edge("b", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let outcome = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(graph.invoke(&runtime, "t", 0))
        .unwrap();
    let RunOutcome::Failed { error, .. } = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(
        error.to_string(),
        "branch from a chose END, which is not one of its declared targets"
    );
}

/// A graph whose recursion limit is 0 is refused when compiled: every run would have
/// stopped before its first step, saying only that the limit was reached.
#[test]
fn a_recursion_limit_of_zero_is_refused() {
    let err = Graph::new("stuck")
        .node_sync("a", |n: &mut u32| *n += 1)
        .edge(START, "a")
        .edge("a", END)
        .recursion_limit(0)
        .compile()
        .unwrap_err();
    assert!(
        err.problems().contains(&GraphProblem::ZeroRecursionLimit),
        "{err}"
    );
}

/// A step whose nodes leave a state that does not serialize (a map keyed by pairs) fails on
/// a durable store, naming the node and the field, and leaves the last checkpoint as it
/// was. Before, `invoke` returned a bare JSON error naming neither, and the row still said
/// the run was running.
#[tokio::test]
async fn a_state_left_unwritable_fails_the_step_naming_the_node_and_field() {
    #[derive(Clone, Debug, Default, Serialize, Deserialize)]
    struct Grid {
        cells: BTreeMap<(u8, u8), u8>,
        n: u32,
    }
    let db = TempDb::new("unwritable");
    let rt = Runtime::sqlite(&db.0).unwrap();
    let graph = Graph::new("grid")
        .node_sync("count", |g: &mut Grid| g.n += 1)
        .node_sync("mark", |g: &mut Grid| {
            g.cells.insert((1, 2), 3);
        })
        .edge(START, "count")
        .edge("count", "mark")
        .edge("mark", END)
        .compile()
        .unwrap();
    let outcome = graph.invoke(&rt, "t", Grid::default()).await.unwrap();
    let RunOutcome::Failed { error, state } = outcome else {
        panic!("a failed step: {outcome:?}");
    };
    assert!(matches!(error, RunError::Json { .. }), "{error:?}");
    let said = error.to_string();
    assert!(said.contains("after node mark, at cells"), "{said}");
    assert_eq!(
        (state.n, state.cells.len()),
        (1, 0),
        "where the step started"
    );
    let row = rt.run("t").await.unwrap().record;
    assert_eq!(row.state, RunState::Failed, "{row:?}");
    let newest = rt.list_checkpoints("t").await.unwrap();
    let newest = newest.last().unwrap();
    assert_eq!((newest.step, newest.status), (1, RunStatus::Running));
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Approval {
    prepared: bool,
    approved: Option<bool>,
}

/// `prepare → approve`: `approve` parks on the signal `approval`.
fn approving() -> CompiledGraph<Approval> {
    Graph::new("approving")
        .node_sync("prepare", |a: &mut Approval| a.prepared = true)
        .node_fn("approve", |a: &mut Approval, ctx| {
            Box::pin(async move {
                a.approved = Some(ctx.wait_for_signal("approval").or_suspend().await?);
                Ok(())
            })
        })
        .edge(START, "prepare")
        .edge("prepare", "approve")
        .edge("approve", END)
        .compile()
        .unwrap()
}

/// A fork of a suspension whose signal wait the original run then took and completed with
/// waits for a signal of its own: it takes the one sent to it, not the original's. Before,
/// the fork copied the original's receipt (journaled in the step it had suspended in) and
/// completed with the original's answer, leaving its own signal queued for the thread's next
/// run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_of_a_taken_signal_wait_takes_its_own_signal() {
    let (rts, _db) = runtimes("fork-signal");
    for (label, rt) in rts {
        let graph = approving();
        let first = graph.invoke(&rt, "t", Approval::default()).await.unwrap();
        assert_eq!(first.interrupts().len(), 1, "{label}");
        let suspension = (rt.list_checkpoints("t").await.unwrap().iter())
            .rfind(|cp| cp.status == RunStatus::Interrupted)
            .unwrap()
            .id;
        rt.signal("t", "approval", true).await.unwrap();
        let done = graph.recover(&rt, "t").await.unwrap();
        assert_eq!(done.completed().unwrap().approved, Some(true), "{label}");

        rt.fork("t", suspension, "t-fork").await.unwrap();
        rt.signal("t-fork", "approval", false).await.unwrap();
        let forked = graph.recover(&rt, "t-fork").await.unwrap();
        assert_eq!(forked.completed().unwrap().approved, Some(false), "{label}");
        let left = rt.drop_signal("t-fork", "approval", "test").await.unwrap();
        assert_eq!(left, None, "{label}: the fork's signal was taken");
    }
}
