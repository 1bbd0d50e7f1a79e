//! `graph_linear`: a chain of 100 trivial nodes on the in-memory runtime.
//!
//! Budget (DESIGN.md §5): ≤ 0.5 µs per node without checkpoints. Criterion reports the time
//! per run of 100 nodes; divide by 100 for the per-node figure (printed at the end too).

#![allow(clippy::expect_used)] // benchmarks abort loudly on setup errors

use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use loomflow::prelude::*;

#[derive(Clone, Default, Serialize, Deserialize)]
struct Counter {
    n: u64,
}

const NODES: usize = 100;

fn chain() -> CompiledGraph<Counter> {
    let mut graph = Graph::new("linear").recursion_limit(NODES as u64 + 1);
    for i in 0..NODES {
        graph = graph.node_sync(format!("n{i}"), |c: &mut Counter| c.n += 1);
    }
    graph = graph.edge(START, "n0");
    for i in 1..NODES {
        graph = graph.edge(format!("n{}", i - 1), format!("n{i}"));
    }
    graph
        .edge(format!("n{}", NODES - 1), END)
        .compile()
        .expect("valid graph")
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("tokio");
    let graph = chain();
    let runtime = Runtime::in_memory();

    let mut group = c.benchmark_group("graph_linear");
    group.bench_function("100_nodes_no_checkpoints", |b| {
        b.to_async(&rt).iter(|| async {
            let out = graph
                .run(&runtime, "bench", Counter::default())
                .durability(Durability::Exit)
                .await
                .expect("run");
            assert_eq!(out.state().n, NODES as u64);
        });
    });
    group.bench_function("100_nodes_memory_checkpoint_per_step", |b| {
        b.to_async(&rt).iter(|| async {
            // A fresh runtime each time so the stored checkpoints do not pile up.
            let runtime = Runtime::in_memory();
            let out = graph
                .invoke(&runtime, "bench", Counter::default())
                .await
                .expect("run");
            assert_eq!(out.state().n, NODES as u64);
        });
    });
    group.finish();

    // A plain per-node figure to compare with the budget.
    let runs = 2_000;
    let started = Instant::now();
    rt.block_on(async {
        for _ in 0..runs {
            let _ = graph
                .run(&runtime, "bench", Counter::default())
                .durability(Durability::Exit)
                .await;
        }
    });
    let per_node = started.elapsed().as_secs_f64() * 1e6 / (runs * NODES) as f64;
    println!("graph_linear: {per_node:.3} µs per node (budget 0.5), no checkpoints");
}

criterion_group!(benches, bench);
criterion_main!(benches);
