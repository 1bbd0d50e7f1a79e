//! Durable execution on a SQLite file, through the public API (DESIGN.md §5):
//!
//! - `durable_linear`: a 100-node chain, a checkpoint per superstep, per node, at
//!   `synchronous=NORMAL` (budget ≤ 30 µs) and `FULL` (budget: one fsync per superstep at most;
//!   each superstep is exactly one store write, hence one commit).
//! - `durable_concurrent`: 100 runs at once at `FULL`: steps per second against one run's rate
//!   (budget ≥ 20×, from grouped commits), and the steps each fsync covers, by the store's
//!   commit counter. The ratio of rates depends on the disk: where an fsync is quick, one
//!   run is fast and the CPU caps the hundred; the steps per fsync show the grouping itself.
//! - `interrupt_resume`: suspend then resume on SQLite (budget ≤ 1 ms per cycle).
//! - `suspended_runs`: 10,000 runs suspended, then all resumed (budget ≤ 200 µs per run each
//!   way, ≤ 1 KiB of disk per suspended run).
//!
//! Criterion measures the first three; the summary lines (`durable: ...`) print per-unit
//! figures to compare with the budgets. Files go to the system temp directory.
//!
//! Then, measured in the same run:
//!
//! - `floor: durable step <x> µs CPU, raw SQLite <y> µs, ratio <z> (FULL|NORMAL)`: the process
//!   CPU time (every thread, from `CLOCK_PROCESS_CPUTIME_ID`) per superstep of the 100-node
//!   chain, against the floor: rusqlite alone, on the calling thread, writing the same rows
//!   into a file with the same schema and pragmas. The floor replays what a durable run
//!   wrote, read back from its file: the store's own `CREATE` statements from
//!   `sqlite_master`, the run's checkpoint rows byte for byte (input and one per superstep,
//!   one transaction each), and in each of those transactions the run's row brought to what
//!   the store leaves it at (lease expiry, update time, run state; created with the first
//!   checkpoint, released with the last). Both are divided by the same number of
//!   supersteps; each figure is the median of seven rounds on fresh files (the machine's
//!   load shows in the spread, printed with them).
//! - `interrupt_resume: <n> commits per cycle that sync`: write transactions of one interrupt
//!   and resume cycle at FULL that fsync, by the store's own counter
//!   ([`SqliteStore::commit_stats`]), averaged over ten cycles, with all the cycle's
//!   transactions beside them (claims and the input checkpoint commit without an fsync),
//!   checked against the commit frames appended to the WAL file. A breakdown names the store calls of one cycle and the commits each
//!   made (`+1`), and the same for a run of the 100-node chain.

#![allow(clippy::expect_used, clippy::unwrap_used)] // benchmarks abort loudly on setup errors

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use criterion::{Criterion, criterion_group, criterion_main};
use loomflow::prelude::*;
use loomflow::runtime::{SqliteOptions, SqliteStore, Synchronous};
use loomflow_benches::{remove_db, temp_db};
use rusqlite::{Connection, TransactionBehavior, params};

#[path = "traced_store.rs"]
mod traced_store;

use traced_store::{Call, Traced};

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
            "durable_linear {label}: {per_node:.1} µs per node, wall time (commits per run: `durable_linear calls` below)"
        ));
        drop(runtime);
        remove_db(&path);
    }
    group.finish();

    // durable_concurrent
    {
        let path = temp_db("concurrent");
        // The store's commit counter shows the grouping whatever the disk's speed: the
        // ratio of the rates depends on how long an fsync takes here.
        let store = Arc::new(
            SqliteStore::open_with(
                &path,
                SqliteOptions::default().synchronous(Synchronous::Full),
            )
            .unwrap(),
        );
        let runtime = Runtime::with_store(Traced::new(Arc::clone(&store)));
        let short = chain(20);
        let synced_before = store.commit_stats().synced;
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
        let one_synced = store.commit_stats().synced - synced_before;
        let synced_before = store.commit_stats().synced;
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
        let many_synced = store.commit_stats().synced - synced_before;
        summary.push(format!(
            "durable_concurrent full: one run {one_rate:.0} steps/s, 100 runs {many_rate:.0} steps/s = {:.1}x (budget 20x); steps per fsync: one run {:.1}, 100 runs {:.1}",
            many_rate / one_rate,
            f64::from(5 * 20) / one_synced.max(1) as f64,
            f64::from(100 * 20) / many_synced.max(1) as f64,
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

    // The floor, and the commits of an interrupt + resume cycle.
    let mut lines = Vec::new();
    for (label, sync, runs) in [
        ("FULL", Synchronous::Full, 20),
        ("NORMAL", Synchronous::Normal, 50),
    ] {
        lines.extend(floor(&rt, &graph, label, sync, runs));
    }
    lines.extend(commits(&rt, &ask, &graph));
    for line in lines {
        println!("{line}");
    }
}

/// CPU time used by the whole process so far: every thread, those that exited included.
fn cpu_now() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID)
        .unwrap()
        .into()
}

fn now_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// A checkpoint row as the store wrote it: run, namespace, step, status, body, error.
type CheckpointRow = (i64, String, i64, String, String, Option<String>);

/// What a durable run of the chain wrote, read back from its file.
struct Written {
    /// The store's `CREATE` statements, in the order its migrations left them.
    schema: Vec<String>,
    /// The run's checkpoint rows, oldest first.
    checkpoints: Vec<CheckpointRow>,
    /// The run's row once it finished: graph, fingerprint, state, lease owner, lease
    /// expiry, runnable time.
    finished: (
        Option<String>,
        Option<String>,
        String,
        Option<String>,
        i64,
        Option<i64>,
    ),
    /// Audit rows in the file (the floor writes none).
    audit_rows: i64,
}

fn read_written(path: &Path, thread: &str) -> Written {
    let conn = Connection::open(path).unwrap();
    let schema = conn
        .prepare(
            "SELECT sql FROM sqlite_master
             WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' ORDER BY rowid",
        )
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<Vec<String>, _>>()
        .unwrap();
    let checkpoints = conn
        .prepare(
            "SELECT run, namespace, step, status, body, error FROM checkpoints
             WHERE thread = ?1 ORDER BY id",
        )
        .unwrap()
        .query_map([thread], |row| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
                row.get(5)?,
            ))
        })
        .unwrap()
        .collect::<Result<Vec<CheckpointRow>, _>>()
        .unwrap();
    let finished = conn
        .query_row(
            "SELECT graph, fingerprint, status, lease_owner, lease_until_ms, runnable_at_ms
             FROM runs WHERE thread = ?1",
            [thread],
            |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                ))
            },
        )
        .unwrap();
    let audit_rows = conn
        .query_row("SELECT count(*) FROM audit", [], |row| row.get(0))
        .unwrap();
    Written {
        schema,
        checkpoints,
        finished,
        audit_rows,
    }
}

/// A connection as the store opens its writer (WAL, the synchronous level), on a new file
/// with the store's schema.
fn raw_connection(path: &Path, sync: Synchronous, written: &Written) -> Connection {
    let mut conn = Connection::open(path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let level = match sync {
        Synchronous::Full => "FULL",
        _ => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", level).unwrap();
    let tx = conn.transaction().unwrap();
    for sql in &written.schema {
        tx.execute_batch(sql).unwrap();
    }
    tx.commit().unwrap();
    conn
}

/// Writes a run's rows as the store left them, on `thread`: each checkpoint row in a
/// transaction of its own, which also brings the run's row to what the store leaves it at
/// after that checkpoint (created with the first, released with the last).
fn replay(conn: &mut Connection, written: &Written, thread: &str) {
    let (graph, fingerprint, state, owner, until, runnable) = &written.finished;
    let last = written.checkpoints.len() - 1;
    for (i, (run, namespace, step, status, body, error)) in written.checkpoints.iter().enumerate() {
        let now = now_ms();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .unwrap();
        if i == 0 {
            tx.prepare_cached(
                "INSERT INTO runs (thread, run, status, graph, fingerprint, lease_owner,
                                   lease_until_ms, attempts, runnable_at_ms, created_at_ms,
                                   updated_at_ms)
                 VALUES (?1, ?2, 'running', ?3, ?4, 'raw', ?5, 1, 0, ?6, ?6)",
            )
            .unwrap()
            .execute(params![thread, run, graph, fingerprint, now + 30_000, now])
            .unwrap();
        } else if i < last {
            tx.prepare_cached(
                "UPDATE runs SET run = ?2, status = 'running', lease_until_ms = ?3,
                                 updated_at_ms = ?4
                 WHERE thread = ?1",
            )
            .unwrap()
            .execute(params![thread, run, now + 30_000, now])
            .unwrap();
        } else {
            tx.prepare_cached(
                "UPDATE runs SET run = ?2, status = ?3, lease_owner = ?4, lease_until_ms = ?5,
                                 runnable_at_ms = ?6, updated_at_ms = ?7
                 WHERE thread = ?1",
            )
            .unwrap()
            .execute(params![thread, run, state, owner, until, runnable, now])
            .unwrap();
        }
        tx.prepare_cached(
            "INSERT INTO checkpoints (thread, run, namespace, step, status, body, error)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .unwrap()
        .execute(params![thread, run, namespace, step, status, body, error])
        .unwrap();
        tx.commit().unwrap();
    }
}

/// Rounds of the floor measurement, each on fresh files.
const ROUNDS: usize = 7;

/// The `floor:` line for one synchronous level: CPU per superstep of the chain, durable and
/// raw, over `runs` runs (after two runs of warm-up), median of [`ROUNDS`] rounds.
fn floor(
    rt: &tokio::runtime::Runtime,
    graph: &CompiledGraph<Counter>,
    label: &str,
    sync: Synchronous,
    runs: usize,
) -> Vec<String> {
    let steps = (runs * 100) as f64;
    let warm: Vec<String> = (0..2).map(|i| format!("w{i}")).collect();
    let timed: Vec<String> = (0..runs).map(|i| format!("s{i}")).collect();
    let (mut durable, mut raw, mut durable_wall, mut raw_wall) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut written = None;
    for round in 0..ROUNDS {
        // Durable: the chain through the runtime.
        let path = temp_db(&format!("floor-durable-{label}-{round}"));
        let runtime = runtime(&path, sync);
        rt.block_on(async {
            for thread in &warm {
                graph
                    .invoke(&runtime, thread.clone(), Counter::default())
                    .await
                    .unwrap();
            }
        });
        let (cpu, wall) = (cpu_now(), Instant::now());
        rt.block_on(async {
            for thread in &timed {
                let out = graph
                    .invoke(&runtime, thread.clone(), Counter::default())
                    .await
                    .unwrap();
                assert_eq!(out.state().n, 100);
            }
        });
        durable.push((cpu_now() - cpu).as_secs_f64() * 1e6 / steps);
        durable_wall.push(wall.elapsed().as_secs_f64() * 1e6 / steps);
        drop(runtime);
        let written = written.get_or_insert_with(|| read_written(&path, "s0"));
        remove_db(&path);

        // Raw: the same rows, rusqlite alone.
        let path = temp_db(&format!("floor-raw-{label}-{round}"));
        let mut conn = raw_connection(&path, sync, written);
        for thread in &warm {
            replay(&mut conn, written, thread);
        }
        let (cpu, wall) = (cpu_now(), Instant::now());
        for thread in &timed {
            replay(&mut conn, written, thread);
        }
        raw.push((cpu_now() - cpu).as_secs_f64() * 1e6 / steps);
        raw_wall.push(wall.elapsed().as_secs_f64() * 1e6 / steps);
        drop(conn);
        remove_db(&path);
    }
    let written = written.unwrap();
    let bodies: Vec<usize> = written.checkpoints.iter().map(|c| c.4.len()).collect();
    let (first, rest) = bodies.split_first().unwrap();
    let show = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let detail = format!(
        "floor detail ({label}): {ROUNDS} rounds of {runs} runs of the 100-node chain, {} checkpoint rows each (bodies: the first {first} bytes, the others {}-{}), {} audit rows; CPU per step by round: durable {}, raw {}; wall per step: durable {:.1} µs, raw {:.1} µs; load average {}",
        written.checkpoints.len(),
        rest.iter().min().unwrap(),
        rest.iter().max().unwrap(),
        written.audit_rows,
        show(&durable),
        show(&raw),
        median(&mut durable_wall),
        median(&mut raw_wall),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    );
    let (durable, raw) = (median(&mut durable), median(&mut raw));
    vec![
        format!(
            "floor: durable step {durable:.1} µs CPU, raw SQLite {raw:.1} µs, ratio {:.2} ({label})",
            durable / raw
        ),
        detail,
    ]
}

/// Commit frames in a WAL file, with the salt that tells whether it was restarted since.
fn wal_commit_frames(db: &Path) -> Option<(u32, u64)> {
    let mut path = db.as_os_str().to_owned();
    path.push("-wal");
    let bytes = std::fs::read(path).ok()?;
    let word = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    let page = match word(8)? {
        1 => 65_536,
        size => size as usize,
    };
    let salt = (word(16)?, word(20)?);
    let mut commits = 0;
    let mut at = 32;
    while at + 24 + page <= bytes.len() && (word(at + 8)?, word(at + 12)?) == salt {
        if word(at + 4)? != 0 {
            commits += 1; // a frame that ends a transaction holds the database size
        }
        at += 24 + page;
    }
    Some((salt.0, commits))
}

/// Lets writes queued by dropped handles (a claim's release) reach the file.
fn settle(rt: &tokio::runtime::Runtime) {
    rt.block_on(async { tokio::time::sleep(Duration::from_millis(50)).await });
}

fn take(log: &Mutex<Vec<Call>>) -> Vec<Call> {
    std::mem::take(&mut *log.lock().unwrap())
}

/// The calls in order, `+n` after those during which `n` commits were made.
fn show_calls(calls: &[Call]) -> String {
    calls
        .iter()
        .map(|call| match call.commits() {
            0 => call.name.clone(),
            n => format!("{} +{n}", call.name),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs of the same method folded: `put_checkpoint_claimed ×99 +99`.
fn fold_calls(calls: &[Call]) -> String {
    let mut folded: Vec<(String, usize, u64)> = Vec::new();
    for call in calls {
        let method = call.name.split('(').next().unwrap_or_default().to_owned();
        match folded.last_mut() {
            Some((last, count, commits)) if *last == method => {
                *count += 1;
                *commits += call.commits();
            }
            _ => folded.push((method, 1, call.commits())),
        }
    }
    folded
        .iter()
        .map(|(method, count, commits)| {
            let times = if *count > 1 {
                format!(" ×{count}")
            } else {
                String::new()
            };
            let plus = if *commits > 0 {
                format!(" +{commits}")
            } else {
                String::new()
            };
            format!("{method}{times}{plus}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `interrupt_resume:` line and the breakdowns, at FULL.
fn commits(
    rt: &tokio::runtime::Runtime,
    ask: &CompiledGraph<Counter>,
    chain: &CompiledGraph<Counter>,
) -> Vec<String> {
    let path = temp_db("commits");
    let store = Arc::new(
        SqliteStore::open_with(
            &path,
            SqliteOptions::default().synchronous(Synchronous::Full),
        )
        .unwrap(),
    );
    let traced = Traced::new(Arc::clone(&store));
    let log = traced.log();
    let runtime = Runtime::with_store(traced);
    let suspend = |thread: &str| {
        rt.block_on(async {
            let out = ask
                .invoke(&runtime, thread.to_owned(), Counter::default())
                .await
                .unwrap();
            assert_eq!(out.interrupts().len(), 1);
        });
    };
    let resume = |thread: &str| {
        rt.block_on(async {
            let done = ask.resume(&runtime, thread.to_owned(), 7).await.unwrap();
            assert_eq!(done.state().n, 7);
        });
    };

    // Warm-up: the runtime's first calls load stored signals, the writer's first group prunes.
    suspend("warm");
    resume("warm");
    settle(rt);
    take(&log);

    // One cycle, call by call.
    let before = store.commit_stats();
    suspend("c0");
    settle(rt);
    let invoked = take(&log);
    resume("c0");
    settle(rt);
    let resumed = take(&log);
    let one = store.commit_stats().commits - before.commits;
    let one_synced = store.commit_stats().synced - before.synced;

    // Ten more, counted by the store and in the WAL.
    let cycles = 10;
    let (counted_from, wal_before) = (store.commit_stats(), wal_commit_frames(&path));
    for i in 1..=cycles {
        let thread = format!("c{i}");
        suspend(&thread);
        resume(&thread);
    }
    settle(rt);
    let (counted, synced, wal_after) = (
        store.commit_stats().commits - counted_from.commits,
        store.commit_stats().synced - counted_from.synced,
        wal_commit_frames(&path),
    );
    take(&log);
    let per_cycle = counted as f64 / f64::from(cycles);
    let synced_per_cycle = synced as f64 / f64::from(cycles);
    let wal = match (wal_before, wal_after) {
        (Some((salt, frames)), Some((salt_after, frames_after))) if salt == salt_after => {
            format!("{} commit frames in the WAL", frames_after - frames)
        }
        _ => "the WAL was restarted meanwhile, its frames not counted".to_owned(),
    };

    // A run of the 100-node chain.
    let before = store.commit_stats().commits;
    rt.block_on(async {
        chain
            .invoke(&runtime, "linear".to_owned(), Counter::default())
            .await
            .unwrap();
    });
    settle(rt);
    let linear = take(&log);
    let linear_commits = store.commit_stats().commits - before;

    drop(runtime);
    drop(store);
    remove_db(&path);
    vec![
        format!(
            "interrupt_resume: {synced_per_cycle} commits per cycle that sync ({per_cycle} in all: claims and the input checkpoint record no work and are not synced on their own)"
        ),
        format!(
            "interrupt_resume detail (FULL): {cycles} cycles: {counted} commits by the store's counter ({synced} synced), {wal}; the cycle below: {one} commits ({one_synced} synced)"
        ),
        format!(
            "interrupt_resume calls: invoke (suspends): {}; resume: {}",
            show_calls(&invoked),
            show_calls(&resumed)
        ),
        format!(
            "durable_linear calls (FULL, 100-node chain): {linear_commits} commits: {}",
            fold_calls(&linear)
        ),
    ]
}

criterion_group!(benches, bench);
criterion_main!(benches);
