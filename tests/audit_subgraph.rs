//! The audit log of a run that suspends inside a subgraph reads as the same run's log at
//! top level: one `interrupt` entry for each suspension and one `resume` for each time it
//! was carried on, however deep the node that asked sits.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use loomflow::prelude::*;
use loomflow::runtime::{AuditEntry, AuditKind};
use loomflow_tests::TempDb;
use serde_json::json;

/// A node that asks twice, a step apart: by an interrupt, or by a wait for a signal.
#[derive(Clone, Copy, Debug)]
enum Asks {
    Interrupt,
    Signal,
}

fn asking(asks: Asks) -> CompiledGraph<Vec<String>> {
    Graph::new("asking")
        .node_fn("ask", move |state: &mut Vec<String>, ctx| {
            Box::pin(async move {
                let answer: String = match asks {
                    Asks::Interrupt => ctx.interrupt(json!({ "turn": state.len() }))?,
                    Asks::Signal => ctx.wait_for_signal("more").or_suspend().await?,
                };
                state.push(answer);
                Ok(())
            })
        })
        .edge(START, "ask")
        .branch("ask", ["ask", END], |state: &Vec<String>| {
            match state.len() {
                1 => "ask",
                _ => END,
            }
        })
        .compile()
        .unwrap()
}

/// `graph` at `depth` levels of subgraphs: 0 is the graph itself.
fn nested(graph: CompiledGraph<Vec<String>>, depth: usize) -> CompiledGraph<Vec<String>> {
    (0..depth).fold(graph, |inner, level| {
        Graph::new(format!("level{level}"))
            .subgraph("sub", inner, Vec::clone, |state, child| *state = child)
            .edge(START, "sub")
            .edge("sub", END)
            .compile()
            .unwrap()
    })
}

/// Runs `graph` to its end, answering each question with "first", then "second", and
/// returns the `interrupt` and `resume` entries of its log, as `kind subject`.
async fn answered_twice(
    runtime: &Runtime,
    graph: &CompiledGraph<Vec<String>>,
    asks: Asks,
    thread: &str,
) -> Vec<(AuditKind, String)> {
    let outcome = graph.invoke(runtime, thread, Vec::new()).await.unwrap();
    let first_id = outcome.interrupts()[0].id.clone();
    let mut last = outcome;
    for answer in ["first", "second"] {
        last = match asks {
            Asks::Interrupt => graph.resume(runtime, thread, answer).await.unwrap(),
            Asks::Signal => {
                runtime.signal(thread, "more", answer).await.unwrap();
                graph.recover(runtime, thread).await.unwrap()
            }
        };
    }
    assert_eq!(last.completed().unwrap(), ["first", "second"]);
    let log: Vec<AuditEntry> = runtime.audit(thread).await.unwrap();
    let entries: Vec<(AuditKind, String)> = log
        .into_iter()
        .filter(|e| matches!(e.kind, AuditKind::Interrupt | AuditKind::Resume))
        .map(|e| (e.kind, e.subject))
        .collect();
    assert!(
        entries.iter().all(|(_, subject)| *subject == first_id),
        "every entry names the question: {entries:?}"
    );
    entries
}

async fn a_subgraph_asking_twice_is_audited_as_at_top_level(runtime: Runtime) {
    use AuditKind::{Interrupt, Resume};
    for asks in [Asks::Interrupt, Asks::Signal] {
        for depth in 0..3 {
            let graph = nested(asking(asks), depth);
            let thread = format!("{asks:?}-{depth}");
            let entries = answered_twice(&runtime, &graph, asks, &thread).await;
            let kinds: Vec<AuditKind> = entries.iter().map(|(kind, _)| *kind).collect();
            assert_eq!(
                kinds,
                [Interrupt, Resume, Interrupt, Resume],
                "{asks:?} at depth {depth}: {entries:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_subgraph_asking_twice_is_audited_as_at_top_level_in_memory() {
    a_subgraph_asking_twice_is_audited_as_at_top_level(Runtime::in_memory()).await;
}

/// Under `Durability::Exit` a subgraph's `resume` entries wait for its next write too.
#[tokio::test]
async fn a_subgraph_asking_twice_is_audited_as_at_top_level_when_runs_write_at_exit() {
    let runtime = Runtime::builder().durability(Durability::Exit).build();
    a_subgraph_asking_twice_is_audited_as_at_top_level(runtime).await;
}

/// A recover that finds no signal for the subgraph's wait carries nothing on: no `resume`,
/// and the wait it suspends on again is the same suspension.
#[tokio::test]
async fn a_recover_that_finds_nothing_for_a_subgraph_records_no_resume() {
    let runtime = Runtime::in_memory();
    for depth in 1..3 {
        let graph = nested(asking(Asks::Signal), depth);
        let thread = format!("early-{depth}");
        graph.invoke(&runtime, &thread, Vec::new()).await.unwrap();
        let outcome = graph.recover(&runtime, &thread).await.unwrap();
        assert_eq!(outcome.interrupts().len(), 1, "{outcome:?}");
        let log = runtime.audit(&thread).await.unwrap();
        let count = |kind| log.iter().filter(|e| e.kind == kind).count();
        assert_eq!(count(AuditKind::Interrupt), 1, "depth {depth}: {log:?}");
        assert_eq!(count(AuditKind::Resume), 0, "depth {depth}: {log:?}");
    }
}

#[tokio::test]
async fn a_subgraph_asking_twice_is_audited_as_at_top_level_in_sqlite() {
    let db = TempDb::new("audit-subgraph");
    let store = loomflow::runtime::SqliteStore::open(db.path()).unwrap();
    a_subgraph_asking_twice_is_audited_as_at_top_level(Runtime::builder().store(store).build())
        .await;
}
