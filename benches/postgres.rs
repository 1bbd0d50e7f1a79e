//! The PostgreSQL store beside SQLite (issue 12), on the server `LOOMFLOW_PG_URL` names
//! (`.ci/postgres` starts one); without it the bench says so and does nothing.
//!
//! - `postgres: throughput`: 400 submitted runs, each waiting for a signal that is already
//!   sent, carried to completion by 1, 2 and 4 worker runtimes (each its own connections
//!   and pool, as separate processes would have): runs per second.
//! - `postgres: wake`: a signal sent by another runtime to the completion of the run it
//!   wakes (LISTEN/NOTIFY, polling as the fallback): p50 and p99.
//! - `postgres: one statement each`: wall time of a signal sent, a submit, a worker's
//!   claim with the finish of the claimed run, and a worker's poll that finds nothing to
//!   do, each one statement.
//! - `postgres: durable step`: one superstep of a 100-node chain, checkpointed, beside the
//!   same on SQLite at `synchronous=NORMAL` and `FULL`.
//!
//! The database is the one the URL names: the bench uses thread names of its own, and
//! leaves its rows there.

#![allow(clippy::expect_used, clippy::unwrap_used)] // benchmarks abort loudly on setup errors

use std::time::{Duration, Instant};

use loomflow::prelude::*;
use loomflow::runtime::{
    PostgresStore, RunFilter, RunState, SqliteOptions, SqliteStore, Store, Synchronous,
};
use loomflow_benches::{remove_db, temp_db};
use tokio::sync::mpsc;

#[derive(Clone, Default, Serialize, Deserialize)]
struct Ticket {
    approved: bool,
}

fn ticket_graph(name: &str) -> CompiledGraph<Ticket> {
    Graph::new(name)
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

fn chain(nodes: usize) -> CompiledGraph<u64> {
    let mut graph = Graph::new("chain");
    for i in 0..nodes {
        graph = graph.node_sync(format!("n{i}"), |n: &mut u64| *n += 1);
    }
    graph = graph.edge(START, "n0");
    for i in 1..nodes {
        graph = graph.edge(format!("n{}", i - 1), format!("n{i}"));
    }
    graph
        .edge(format!("n{}", nodes - 1), END)
        .recursion_limit(nodes as u64 + 10)
        .compile()
        .unwrap()
}

async fn pg(url: &str) -> Runtime {
    Runtime::builder()
        .store(PostgresStore::connect(url).await.unwrap())
        .build()
}

/// Runs per second with `workers` worker runtimes.
async fn throughput(url: &str, workers: usize, tag: &str) -> f64 {
    const RUNS: usize = 400;
    let graph = ticket_graph(&format!("bench_{tag}"));
    let sender = pg(url).await;
    for i in 0..RUNS {
        let thread = format!("{tag}-{i}");
        sender
            .submit(graph.name(), &thread, Ticket::default())
            .await
            .unwrap();
        sender.signal(&thread, "go", true).await.unwrap();
    }
    let started = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..workers {
        let runtime = pg(url).await;
        let worker = Worker::builder(&runtime)
            .graph(&graph)
            .concurrency(16)
            .poll_interval(Duration::from_millis(20))
            .build();
        handles.push((worker.start(), runtime));
    }
    let filter = RunFilter::new()
        .graph(graph.name())
        .state(RunState::Completed);
    loop {
        if sender.runs(&filter).await.unwrap().len() >= RUNS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let elapsed = started.elapsed();
    for (handle, _runtime) in handles {
        handle.shutdown().await.unwrap();
    }
    RUNS as f64 / elapsed.as_secs_f64()
}

async fn wake_latencies(url: &str, n: usize, tag: &str) -> Vec<Duration> {
    let graph = ticket_graph(&format!("wake_{tag}"));
    let runtime = pg(url).await;
    let (tx, mut done) = mpsc::unbounded_channel();
    let worker = Worker::builder(&runtime)
        .graph(&graph)
        .park_grace(Duration::ZERO)
        .on_finished(move |report| {
            let _ = tx.send((report.thread.clone(), report.state));
        })
        .build();
    let handle = worker.start();
    let sender = pg(url).await;
    let mut latencies = Vec::with_capacity(n);
    for i in 0..n {
        let thread = format!("{tag}-w{i}");
        sender
            .submit(graph.name(), &thread, Ticket::default())
            .await
            .unwrap();
        while let Some((t, s)) = done.recv().await {
            if t == thread && s == RunState::Waiting {
                break;
            }
        }
        tokio::time::sleep(Duration::from_micros((i as u64 * 7_919) % 100_000)).await;
        let sent = Instant::now();
        sender.signal(&thread, "go", true).await.unwrap();
        while let Some((t, s)) = done.recv().await {
            if t == thread && s == RunState::Completed {
                break;
            }
        }
        latencies.push(sent.elapsed());
    }
    handle.shutdown().await.unwrap();
    latencies
}

/// Wall µs of the store operations a worker and a sender make, each one statement:
/// (signal sent, submit, claim and finish, idle poll).
async fn single_statements(url: &str, tag: &str) -> (f64, f64, f64, f64) {
    const N: usize = 400;
    let store = PostgresStore::connect(url).await.unwrap();
    let sender = pg(url).await;
    let graphs = [format!("ops_{tag}")];
    let per = |started: Instant| started.elapsed().as_secs_f64() * 1e6 / N as f64;
    let started = Instant::now();
    for i in 0..N {
        let session = format!("{tag}-ops-{}", i % 50);
        sender.signal(&session, "go", i).await.unwrap();
    }
    let signal = per(started);
    let started = Instant::now();
    for i in 0..N {
        let thread = format!("{tag}-ops-run-{i}");
        store
            .submit_run(&thread, &graphs[0], json!(i), 5)
            .await
            .unwrap();
    }
    let submit = per(started);
    let started = Instant::now();
    for _ in 0..N {
        let run = store
            .claim_next_run(&graphs, "bench", u64::MAX / 4, 10, 10)
            .await
            .unwrap()
            .expect("a submitted run");
        store
            .finish_run(&run.record.thread, "bench", RunState::Completed, None)
            .await
            .unwrap();
    }
    let claim = per(started);
    let started = Instant::now();
    for _ in 0..N {
        let none = store
            .claim_next_run(&graphs, "bench", u64::MAX / 4, 10, 10)
            .await
            .unwrap();
        assert!(none.is_none());
    }
    (signal, submit, claim, per(started))
}

/// µs per superstep of a 100-node chain, checkpointed every step, over `runs` runs.
async fn step_cost(runtime: &Runtime, tag: &str, runs: usize) -> f64 {
    let graph = chain(100);
    let started = Instant::now();
    for i in 0..runs {
        graph
            .invoke(runtime, format!("{tag}-chain-{i}"), 0)
            .await
            .unwrap();
    }
    started.elapsed().as_secs_f64() * 1e6 / (runs * 100) as f64
}

fn main() {
    let Ok(url) = std::env::var("LOOMFLOW_PG_URL") else {
        println!("postgres: skipped (set LOOMFLOW_PG_URL, or start .ci/postgres)");
        return;
    };
    // `cargo test --benches` runs each bench once as a test: keep that quick.
    if std::env::args().any(|a| a == "--test") {
        println!("postgres: not measured under --test");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let tag = format!("b{}", std::process::id());
    rt.block_on(async {
        for workers in [1, 2, 4] {
            let rate = throughput(&url, workers, &format!("{tag}x{workers}")).await;
            println!("postgres: throughput with {workers} worker(s): {rate:.0} runs/s");
        }
        let mut latencies = wake_latencies(&url, 100, &tag).await;
        latencies.sort();
        let at = |p: f64| latencies[((latencies.len() - 1) as f64 * p).round() as usize];
        println!(
            "postgres: wake (signal from another runtime to completed run): p50 {:.1} ms, p99 {:.1} ms",
            at(0.50).as_secs_f64() * 1e3,
            at(0.99).as_secs_f64() * 1e3
        );
        let (signal, submit, claim, idle) = single_statements(&url, &tag).await;
        println!(
            "postgres: one statement each: signal sent {signal:.0} µs, submit {submit:.0} µs, claim + finish {claim:.0} µs, idle poll {idle:.0} µs (wall time)"
        );
        let pg_step = step_cost(&pg(&url).await, &tag, 5).await;
        let mut sqlite = Vec::new();
        for sync in [Synchronous::Normal, Synchronous::Full] {
            let path = temp_db(&format!("pg-compare-{sync:?}"));
            let store =
                SqliteStore::open_with(&path, SqliteOptions::default().synchronous(sync)).unwrap();
            let runtime = Runtime::with_store(store);
            sqlite.push((sync, step_cost(&runtime, &tag, 5).await));
            drop(runtime);
            remove_db(&path);
        }
        println!(
            "postgres: durable step {pg_step:.0} µs; SQLite NORMAL {:.0} µs, FULL {:.0} µs (wall time per checkpointed superstep)",
            sqlite[0].1, sqlite[1].1
        );
    });
}
