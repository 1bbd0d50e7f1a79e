//! The worker on SQLite (DESIGN.md §5, issue 11):
//!
//! - `worker_wake`: a signal written by another runtime on the same file (its own
//!   connections, as another process's) to the completion of the run it wakes, with the
//!   default 100 ms poll and with a 5 ms one; the summary prints p50 and p99.
//! - `worker_10k`: 10,000 waiting runs woken by 10,000 signals, by a background worker
//!   (concurrency 16): the time per run (budget ≤ 300 µs).
//! - `worker_idle`: the CPU an idle worker uses while holding 10,000 waiting runs, over two
//!   seconds.
//!
//! These are latency distributions and totals rather than criterion's per-iteration
//! samples, so the bench prints summary lines (`worker: ...`); criterion times one wake so
//! that `cargo bench` tracks it between runs.

#![allow(clippy::expect_used, clippy::unwrap_used)] // benchmarks abort loudly on setup errors

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use loomflow::WorkerHandle;
use loomflow::prelude::*;
use loomflow::runtime::{RunFilter, RunState, SqliteOptions, SqliteStore, Synchronous};
use loomflow_benches::{remove_db, temp_db};
use tokio::sync::mpsc;

#[derive(Clone, Default, Serialize, Deserialize)]
struct Ticket {
    approved: bool,
}

fn graph() -> CompiledGraph<Ticket> {
    Graph::new("ticket")
        .node_fn("approve", |t: &mut Ticket, ctx| {
            Box::pin(async move {
                t.approved = ctx.wait_for_signal("go").await?;
                Ok(())
            })
        })
        .edge(START, "approve")
        .edge("approve", END)
        .compile()
        .unwrap()
}

fn runtime(path: &Path, poll: Duration) -> Runtime {
    let store = SqliteStore::open_with(
        path,
        SqliteOptions::default().synchronous(Synchronous::Normal),
    )
    .unwrap();
    Runtime::builder().store(store).poll_interval(poll).build()
}

/// A worker on `path` whose finished runs are reported on the returned channel.
fn worker(
    path: &Path,
    poll: Duration,
    concurrency: usize,
) -> (Runtime, Worker, mpsc::UnboundedReceiver<(String, RunState)>) {
    let runtime = runtime(path, poll);
    let (tx, rx) = mpsc::unbounded_channel();
    let worker = Worker::builder(&runtime)
        .graph(&graph())
        .park_grace(Duration::ZERO)
        .concurrency(concurrency)
        .on_finished(move |report| {
            let _ = tx.send((report.thread.clone(), report.state));
        })
        .build();
    (runtime, worker, rx)
}

async fn until(
    rx: &mut mpsc::UnboundedReceiver<(String, RunState)>,
    thread: &str,
    state: RunState,
) {
    while let Some((t, s)) = rx.recv().await {
        if t == thread && s == state {
            return;
        }
    }
}

/// Signal-to-completion latencies of `n` runs woken from another runtime on the file.
async fn wake_latencies(name: &str, poll: Duration, n: usize) -> Vec<Duration> {
    let path = temp_db(name);
    let (runtime, worker, mut done) = worker(&path, poll, 4);
    let handle = worker.start();
    let sender = self::runtime(&path, poll);
    let mut latencies = Vec::with_capacity(n);
    for i in 0..n {
        let thread = format!("t{i}");
        runtime
            .submit("ticket", &thread, Ticket::default())
            .await
            .unwrap();
        until(&mut done, &thread, RunState::Waiting).await;
        // Send at a spread of points of the poll cycle, as web requests would.
        let poll_us = u64::try_from(poll.as_micros()).unwrap_or(u64::MAX).max(1);
        tokio::time::sleep(Duration::from_micros((i as u64 * 7_919) % poll_us)).await;
        let sent = Instant::now();
        sender.signal(&thread, "go", true).await.unwrap();
        until(&mut done, &thread, RunState::Completed).await;
        latencies.push(sent.elapsed());
    }
    handle.shutdown().await.unwrap();
    drop((runtime, sender));
    remove_db(&path);
    latencies
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn summarize_wake(rt: &tokio::runtime::Runtime) {
    for (label, poll, n) in [
        ("poll 100 ms (default)", Duration::from_millis(100), 60),
        ("poll 5 ms", Duration::from_millis(5), 200),
    ] {
        let mut latencies = rt.block_on(wake_latencies("wake", poll, n));
        latencies.sort();
        println!(
            "worker: cross-runtime signal to completed run, {label}: p50 {:.1} ms, p99 {:.1} ms ({n} runs)",
            percentile(&latencies, 0.50).as_secs_f64() * 1e3,
            percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        );
    }
}

/// Submits `n` runs and lets a background worker suspend them all, waiting.
async fn waiting_runs(
    path: &Path,
    n: usize,
) -> (
    Runtime,
    WorkerHandle,
    mpsc::UnboundedReceiver<(String, RunState)>,
) {
    let (runtime, worker, mut done) = worker(path, Duration::from_millis(100), 16);
    for i in 0..n {
        runtime
            .submit("ticket", &format!("t{i}"), Ticket::default())
            .await
            .unwrap();
    }
    let handle = worker.start();
    for _ in 0..n {
        done.recv().await.unwrap();
    }
    let waiting = runtime
        .runs(&RunFilter::new().state(RunState::Waiting))
        .await
        .unwrap();
    assert_eq!(waiting.len(), n);
    (runtime, handle, done)
}

fn summarize_10k(rt: &tokio::runtime::Runtime) {
    const N: usize = 10_000;
    let path = temp_db("10k");
    rt.block_on(async {
        let (runtime, handle, mut done) = waiting_runs(&path, N).await;
        let started = Instant::now();
        let signals = (0..N).map(|i| {
            let runtime = runtime.clone();
            async move { runtime.signal(&format!("t{i}"), "go", true).await.unwrap() }
        });
        futures_util::future::join_all(signals).await;
        let mut completed = 0;
        while completed < N {
            if let Some((_, RunState::Completed)) = done.recv().await {
                completed += 1;
            }
        }
        let per_run = started.elapsed() / N as u32;
        println!(
            "worker: {N} waiting runs woken by {N} signals: {:.0} µs per run (budget ≤ 300 µs)",
            per_run.as_secs_f64() * 1e6
        );
        handle.shutdown().await.unwrap();
    });
    remove_db(&path);
}

/// This process's CPU time (user + system), from /proc.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // Clock ticks are 100 per second on Linux.
    Some(Duration::from_millis(ticks * 10))
}

fn summarize_idle(rt: &tokio::runtime::Runtime) {
    const N: usize = 10_000;
    let path = temp_db("idle");
    rt.block_on(async {
        let (_runtime, handle, _done) = waiting_runs(&path, N).await;
        // Let the last wake-ups settle.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (Some(before), wall) = (cpu_time(), Instant::now()) else {
            println!("worker: idle CPU not measured (no /proc)");
            return;
        };
        tokio::time::sleep(Duration::from_secs(2)).await;
        let used = cpu_time().unwrap() - before;
        println!(
            "worker: idle worker holding {N} waiting runs: {:.2}% of one core ({} ms CPU in {:.1} s)",
            used.as_secs_f64() / wall.elapsed().as_secs_f64() * 100.0,
            used.as_millis(),
            wall.elapsed().as_secs_f64()
        );
        handle.shutdown().await.unwrap();
    });
    remove_db(&path);
}

fn bench(c: &mut Criterion) {
    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap(),
    );
    summarize_wake(&rt);
    summarize_10k(&rt);
    summarize_idle(&rt);

    let path = temp_db("criterion");
    let (runtime, worker, done) = worker(&path, Duration::from_millis(5), 4);
    let sender = self::runtime(&path, Duration::from_millis(5));
    let done = Arc::new(tokio::sync::Mutex::new(done));
    let handle = rt.block_on(async { worker.start() });
    let mut i = 0u64;
    c.bench_function("worker_wake (poll 5 ms)", |b| {
        b.to_async(&*rt).iter(|| {
            i += 1;
            let thread = format!("c{i}");
            let (runtime, sender, done) = (runtime.clone(), sender.clone(), Arc::clone(&done));
            async move {
                let mut done = done.lock().await;
                runtime
                    .submit("ticket", &thread, Ticket::default())
                    .await
                    .unwrap();
                until(&mut done, &thread, RunState::Waiting).await;
                sender.signal(&thread, "go", true).await.unwrap();
                until(&mut done, &thread, RunState::Completed).await;
            }
        });
    });
    rt.block_on(handle.shutdown()).unwrap();
    remove_db(&path);
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(5));
    targets = bench
}
criterion_main!(benches);
