//! `graph_fanout`: one node fans out to 50 branches, which join into one node.
//!
//! Budget (DESIGN.md §5): ≤ 2 µs per branch. Criterion reports the time per run; divide by
//! 50 for the per-branch figure (printed at the end too).

#![allow(clippy::expect_used)] // benchmarks abort loudly on setup errors

use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use loomflow::prelude::*;

#[derive(Clone, Default, Serialize, Deserialize)]
struct Tally {
    hits: Vec<u32>,
    done: bool,
}

const BRANCHES: usize = 50;

fn fan() -> CompiledGraph<Tally> {
    let mut graph = Graph::new("fanout")
        .node_sync("root", |_: &mut Tally| {})
        .node_sync("join", |t: &mut Tally| t.done = true)
        .edge(START, "root")
        .edge("join", END)
        .reducer("hits", Reducer::append());
    let mut names = Vec::new();
    for i in 0..BRANCHES {
        let name = format!("b{i}");
        let value = u32::try_from(i).expect("small");
        graph = graph
            .node_sync(name.clone(), move |t: &mut Tally| t.hits.push(value))
            .edge("root", name.clone());
        names.push(name);
    }
    graph.join(names, "join").compile().expect("valid graph")
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("tokio");
    let graph = fan();
    let runtime = Runtime::in_memory();
    let run = || async {
        let out = graph
            .run(&runtime, "bench", Tally::default())
            .durability(Durability::Exit)
            .await
            .expect("run");
        assert_eq!(out.state().hits.len(), BRANCHES);
    };

    c.bench_function("graph_fanout/50_branches_and_join", |b| {
        b.to_async(&rt).iter(run)
    });

    let runs = 2_000;
    let started = Instant::now();
    rt.block_on(async {
        for _ in 0..runs {
            run().await;
        }
    });
    let per_branch = started.elapsed().as_secs_f64() * 1e6 / (runs * BRANCHES) as f64;
    println!("graph_fanout: {per_branch:.3} µs per branch (budget 2), no checkpoints");
}

criterion_group!(benches, bench);
criterion_main!(benches);
