//! Durable execution on a SQLite file, through the public API (DESIGN.md §5):
//!
//! - `durable_linear`: a 100-node chain, a checkpoint per superstep, per node, at
//!   `synchronous=NORMAL` (budget ≤ 30 µs) and `FULL` (budget: one fsync per superstep at most;
//!   each superstep is exactly one store write, hence one commit).
//! - `durable_concurrent`: 100 runs at once at `FULL`: steps per second against one run's rate
//!   (budget ≥ 20×, from grouped commits).
//! - `interrupt_resume`: suspend then resume on SQLite (budget ≤ 1 ms per cycle).
//! - `suspended_runs`: 10,000 runs suspended, then all resumed (budget ≤ 200 µs per run each
//!   way, ≤ 1 KiB of disk per suspended run).
//!
//! Criterion measures the first three; the summary lines (`durable: ...`) print per-unit
//! figures to compare with the budgets. Files go to the system temp directory.

#![allow(clippy::expect_used, clippy::unwrap_used)] // benchmarks abort loudly on setup errors

use std::path::Path;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use loomflow::prelude::*;
use loomflow::runtime::{SqliteOptions, SqliteStore, Synchronous};
use loomflow_benches::{remove_db, temp_db};

#[derive(Clone, Default, Serialize, Deserialize)]
struct Counter {
    n: u64,
}

fn disk_bytes(path: &Path) -> u64 {
    ["", "-wal"]
        .iter()
        .map(|suffix| {
            let mut p = path.as_os_str().to_owned();
            p.push(suffix);
            std::fs::metadata(p).map_or(0, |m| m.len())
        })
        .sum()
}

fn runtime(path: &Path, sync: Synchronous) -> Runtime {
    let store = SqliteStore::open_with(path, SqliteOptions::default().synchronous(sync)).unwrap();
    Runtime::with_store(store)
}

fn chain(nodes: usize) -> CompiledGraph<Counter> {
    let mut graph = Graph::new("linear").recursion_limit(nodes as u64 + 1);
    for i in 0..nodes {
        graph = graph.node_sync(format!("n{i}"), |c: &mut Counter| c.n += 1);
    }
    graph = graph.edge(START, "n0");
    for i in 1..nodes {
        graph = graph.edge(format!("n{}", i - 1), format!("n{i}"));
    }
    graph
        .edge(format!("n{}", nodes - 1), END)
        .compile()
        .unwrap()
}

fn asks_once() -> CompiledGraph<Counter> {
    Graph::new("ask")
        .node_fn("ask", |c: &mut Counter, ctx| {
            Box::pin(async move {
                c.n = ctx.interrupt("how many?")?;
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
        .unwrap()
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let graph = chain(100);
    let mut summary = Vec::new();

    // durable_linear
    let mut group = c.benchmark_group("durable_linear");
    group.sample_size(10);
    for (label, sync) in [("normal", Synchronous::Normal), ("full", Synchronous::Full)] {
        let path = temp_db(&format!("linear-{label}"));
        let runtime = runtime(&path, sync);
        let mut thread = 0u64;
        group.bench_function(format!("100_nodes_{label}"), |b| {
            b.to_async(&rt).iter(|| {
                thread += 1;
                let (graph, runtime) = (&graph, &runtime);
                let name = format!("t{thread}");
                async move {
                    let out = graph
                        .invoke(runtime, name, Counter::default())
                        .await
                        .unwrap();
                    assert_eq!(out.state().n, 100);
                }
            });
        });
        let runs = 20;
        let started = Instant::now();
        rt.block_on(async {
            for i in 0..runs {
                graph
                    .invoke(&runtime, format!("s{i}"), Counter::default())
                    .await
                    .unwrap();
            }
        });
        let per_node = started.elapsed().as_secs_f64() * 1e6 / f64::from(runs * 100);
        summary.push(format!(
            "durable_linear {label}: {per_node:.1} µs per node (101 commits per run: the input and one per superstep)"
        ));
        drop(runtime);
        remove_db(&path);
    }
    group.finish();

    // durable_concurrent
    {
        let path = temp_db("concurrent");
        let runtime = runtime(&path, Synchronous::Full);
        let short = chain(20);
        let one = Instant::now();
        rt.block_on(async {
            for i in 0..5 {
                short
                    .invoke(&runtime, format!("one{i}"), Counter::default())
                    .await
                    .unwrap();
            }
        });
        let one_rate = f64::from(5 * 20) / one.elapsed().as_secs_f64();
        let many = Instant::now();
        rt.block_on(async {
            let handles: Vec<_> = (0..100)
                .map(|i| short.start(&runtime, format!("many{i}"), Counter::default()))
                .collect();
            for handle in handles {
                handle.await.unwrap();
            }
        });
        let many_rate = f64::from(100 * 20) / many.elapsed().as_secs_f64();
        summary.push(format!(
            "durable_concurrent full: one run {one_rate:.0} steps/s, 100 runs {many_rate:.0} steps/s = {:.1}x (budget 20x)",
            many_rate / one_rate
        ));
        drop(runtime);
        remove_db(&path);
    }

    // interrupt_resume
    let ask = asks_once();
    for (label, sync) in [("normal", Synchronous::Normal), ("full", Synchronous::Full)] {
        let path = temp_db(&format!("interrupt-{label}"));
        let runtime = runtime(&path, sync);
        let mut thread = 0u64;
        c.bench_function(&format!("interrupt_resume/sqlite_{label}"), |b| {
            b.to_async(&rt).iter(|| {
                thread += 1;
                let (ask, runtime) = (&ask, &runtime);
                let name = format!("t{thread}");
                async move {
                    let out = ask
                        .invoke(runtime, name.clone(), Counter::default())
                        .await
                        .unwrap();
                    assert_eq!(out.interrupts().len(), 1);
                    let done = ask.resume(runtime, name, 7).await.unwrap();
                    assert_eq!(done.state().n, 7);
                }
            });
        });
        drop(runtime);
        remove_db(&path);
    }

    // durable_linear at Async durability: checkpoints written behind the run
    {
        let path = temp_db("linear-async");
        let runtime = runtime(&path, Synchronous::Normal);
        let runs = 20;
        let started = Instant::now();
        rt.block_on(async {
            for i in 0..runs {
                graph
                    .run(&runtime, format!("a{i}"), Counter::default())
                    .durability(Durability::Async)
                    .await
                    .unwrap();
            }
        });
        let per_node = started.elapsed().as_secs_f64() * 1e6 / f64::from(runs * 100);
        summary.push(format!(
            "durable_linear normal, Durability::Async: {per_node:.1} µs per node"
        ));
        drop(runtime);
        remove_db(&path);
    }

    // suspended_runs
    {
        let path = temp_db("suspended");
        let runtime = runtime(&path, Synchronous::Normal);
        let runs = 10_000u32;
        let before = disk_bytes(&path);
        let suspend = Instant::now();
        rt.block_on(async {
            for chunk in 0..(runs / 100) {
                let handles: Vec<_> = (0..100)
                    .map(|i| {
                        ask.start(
                            &runtime,
                            format!("r{}", chunk * 100 + i),
                            Counter::default(),
                        )
                    })
                    .collect();
                for handle in handles {
                    assert_eq!(handle.await.unwrap().interrupts().len(), 1);
                }
            }
        });
        let suspend_us = suspend.elapsed().as_secs_f64() * 1e6 / f64::from(runs);
        let bytes = disk_bytes(&path).saturating_sub(before) as f64 / f64::from(runs);
        let resume = Instant::now();
        rt.block_on(async {
            for chunk in 0..(runs / 100) {
                let handles: Vec<_> = (0..100)
                    .map(|i| {
                        ask.resume(&runtime, format!("r{}", chunk * 100 + i), 1)
                            .start()
                    })
                    .collect();
                for handle in handles {
                    assert!(handle.await.unwrap().is_completed());
                }
            }
        });
        let resume_us = resume.elapsed().as_secs_f64() * 1e6 / f64::from(runs);
        summary.push(format!(
            "suspended_runs normal: suspend {suspend_us:.0} µs/run, resume {resume_us:.0} µs/run (budget 200), {bytes:.0} bytes on disk per suspended run incl. WAL (budget 1024)"
        ));
        drop(runtime);
        remove_db(&path);
    }

    for line in summary {
        println!("durable: {line}");
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
