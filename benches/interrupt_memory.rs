//! `interrupt_memory`: a run that suspends on an interrupt and is resumed, on the in-memory
//! runtime (`a → ask → c`, `ask` asks for a value with a small JSON payload): the workload of
//! the peer comparison's in-memory interrupt + resume row (DESIGN.md §5: below graph-flow).
//!
//! Criterion reports the time per cycle (invoke to the interrupt, then resume to the end);
//! the line printed at the end gives the process's CPU time per cycle, to set beside the
//! peer figures, with the two halves' wall time.

#![allow(clippy::expect_used)] // benchmarks abort loudly on setup errors

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use loomflow::prelude::*;

#[path = "workloads/asking.rs"]
mod asking;

use asking::{Ask, asking};

/// One cycle on `thread`: to the interrupt, then resumed to the end. Returns how long
/// each half took.
async fn cycle(
    graph: &CompiledGraph<Ask>,
    runtime: &Runtime,
    thread: &str,
) -> (Duration, Duration) {
    let started = Instant::now();
    let out = graph
        .invoke(runtime, thread, Ask::default())
        .await
        .expect("invoke");
    assert_eq!(out.interrupts().len(), 1, "suspended on its interrupt");
    let asked = started.elapsed();
    let started = Instant::now();
    let done = (graph.resume(runtime, thread, "yes").await)
        .expect("resume")
        .completed()
        .expect("completed");
    assert!(done.done && done.answer.as_deref() == Some("yes"));
    (asked, started.elapsed())
}

fn cpu_now() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID)
        .map_or(Duration::ZERO, Duration::from)
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("tokio");
    let graph = asking();

    let mut group = c.benchmark_group("interrupt_memory");
    group.bench_function("interrupt_resume_cycle", |b| {
        // A thread per cycle, as the peer workload runs them; a fresh runtime every
        // 10,000 so that the threads kept do not pile up.
        let mut runtime = Runtime::in_memory();
        let mut n = 0_u64;
        b.to_async(&rt).iter(|| {
            n += 1;
            if n.is_multiple_of(10_000) {
                runtime = Runtime::in_memory();
            }
            let (graph, runtime, thread) = (&graph, runtime.clone(), format!("t-{n}"));
            async move { cycle(graph, &runtime, &thread).await }
        });
    });
    group.finish();

    // The peer comparison's figure: CPU time per cycle, 2,000 threads after a warm-up.
    let runtime = Runtime::in_memory();
    let cycles = 2_000_u32;
    rt.block_on(async {
        for w in 0..3 {
            cycle(&graph, &runtime, &format!("warm-{w}")).await;
        }
    });
    let (mut asked, mut resumed) = (Duration::ZERO, Duration::ZERO);
    let cpu = cpu_now();
    rt.block_on(async {
        for i in 0..cycles {
            let (a, r) = cycle(&graph, &runtime, &format!("t-{i}")).await;
            asked += a;
            resumed += r;
        }
    });
    let per_cycle = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(cycles);
    println!(
        "interrupt_memory: {:.2} µs CPU per interrupt + resume cycle (to the interrupt {:.2} µs, resume {:.2} µs wall)",
        per_cycle(cpu_now().saturating_sub(cpu)),
        per_cycle(asked),
        per_cycle(resumed)
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
