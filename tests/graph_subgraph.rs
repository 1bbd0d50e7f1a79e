//! Subgraphs: events, durability and namespaces of a graph used as a node.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use futures_util::StreamExt;
use loomflow::EventKind;
use loomflow::prelude::*;

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
    Graph::new("outer")
        .subgraph("sub", inner(), |n: &u32| *n, |n: &mut u32, m: u32| *n = m)
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
