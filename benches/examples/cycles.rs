//! The in-memory workloads of the peer comparison, run a given number of times and nothing
//! else, for `benches/instructions.sh` to count their instructions under callgrind:
//!
//! ```text
//! cycles interrupt_resume N   # N threads, each run to its interrupt and resumed (a → ask → c)
//! cycles interrupt N          # N threads, each run to its interrupt only
//! cycles linear_ckpt N        # N runs of 100 nodes, a checkpoint a step
//! cycles single N             # N runs of one node, each on a thread of its own
//! ```
//!
//! The process exits without dropping the runtime: what the store keeps is let go by the
//! exit, so that the difference between two counts is the runs' own work.

#![allow(clippy::expect_used)] // a measuring tool: a run that goes wrong aborts loudly

use loomflow::prelude::*;

#[path = "../workloads/asking.rs"]
mod asking;

use asking::{Ask, asking};

#[derive(Clone, Default, Serialize, Deserialize)]
struct Count {
    n: u64,
}

const NODES: u64 = 100;

async fn interrupt_resume(runs: u64) {
    let graph = asking();
    let runtime = Runtime::in_memory();
    for i in 0..runs {
        let thread = format!("t-{i}");
        let out = graph.invoke(&runtime, &thread, Ask::default()).await;
        assert_eq!(out.expect("invoke").interrupts().len(), 1);
        let done = graph.resume(&runtime, &thread, format!("v{i}")).await;
        assert!(done.expect("resume").completed().expect("completed").done);
    }
    std::mem::forget(runtime);
}

/// Only the first half of `interrupt_resume`: each thread run to its interrupt.
async fn interrupt_only(runs: u64) {
    let graph = asking();
    let runtime = Runtime::in_memory();
    for i in 0..runs {
        let thread = format!("t-{i}");
        let out = graph.invoke(&runtime, &thread, Ask::default()).await;
        assert_eq!(out.expect("invoke").interrupts().len(), 1);
    }
    std::mem::forget(runtime);
}

async fn linear_ckpt(runs: u64) {
    let mut graph = Graph::new("linear").recursion_limit(NODES + 10);
    for i in 0..NODES {
        graph = graph.node_sync(format!("n{i}"), |s: &mut Count| s.n += 1);
    }
    graph = graph.edge(START, "n0").edge(format!("n{}", NODES - 1), END);
    for i in 1..NODES {
        graph = graph.edge(format!("n{}", i - 1), format!("n{i}"));
    }
    let graph = graph.compile().expect("valid graph");
    let runtime = Runtime::in_memory();
    for i in 0..runs {
        let out = graph
            .invoke(&runtime, format!("t-{i}"), Count::default())
            .await;
        assert_eq!(
            out.expect("invoke").completed().expect("completed").n,
            NODES
        );
    }
    std::mem::forget(runtime);
}

/// What a run costs beside its steps: claiming, starting, checkpointing its input and its one
/// step, letting go.
async fn single(runs: u64) {
    let graph = Graph::new("single")
        .node_sync("a", |s: &mut Count| s.n += 1)
        .edge(START, "a")
        .edge("a", END)
        .compile()
        .expect("valid graph");
    let runtime = Runtime::in_memory();
    for i in 0..runs {
        let out = graph
            .invoke(&runtime, format!("t-{i}"), Count::default())
            .await;
        assert_eq!(out.expect("invoke").completed().expect("completed").n, 1);
    }
    std::mem::forget(runtime);
}

const USAGE: &str = "usage: cycles interrupt_resume|interrupt|linear_ckpt|single RUNS";

fn main() -> Result<(), &'static str> {
    let mut args = std::env::args().skip(1);
    let (workload, runs) = (args.next(), args.next());
    let runs: u64 = runs.and_then(|n| n.parse().ok()).ok_or(USAGE)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("tokio");
    match workload.as_deref() {
        Some("interrupt_resume") => rt.block_on(interrupt_resume(runs)),
        Some("interrupt") => rt.block_on(interrupt_only(runs)),
        Some("linear_ckpt") => rt.block_on(linear_ckpt(runs)),
        Some("single") => rt.block_on(single(runs)),
        _ => return Err(USAGE),
    }
    Ok(())
}
