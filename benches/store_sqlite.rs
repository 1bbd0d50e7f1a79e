//! `store_sqlite`: raw costs of the SQLite store, below the executor.
//!
//! - `put_checkpoint/{normal,full}`: one small checkpoint written and committed, alone.
//!   At `synchronous=FULL` each lone commit pays an fsync.
//! - `concurrent_100_writers_full`: 100 tasks writing at once at FULL; criterion reports the
//!   time per write. The grouped commit lets them share fsyncs.
//! - Printed at the end: writes per second for one writer and for 100 (the speed-up the
//!   grouped commit buys), and the disk bytes per small checkpoint row and per suspended run
//!   (budget DESIGN.md §5: ≤ 1 KiB of disk per suspended run).

#![allow(clippy::expect_used, clippy::unwrap_used)] // benchmarks abort loudly on setup errors

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use loomflow::runtime::{Checkpoint, RunStatus, SqliteOptions, SqliteStore, Store, Synchronous};
use serde_json::json;

/// A fresh database path; removes the file and its WAL companions when dropped.
struct TempDb(PathBuf);

impl TempDb {
    fn new(name: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        Self(std::env::temp_dir().join(format!(
            "loomflow-bench-{name}-{}-{nanos}.db",
            std::process::id()
        )))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.0.display()));
        }
    }
}

fn open(path: &Path, synchronous: Synchronous) -> Arc<SqliteStore> {
    Arc::new(
        SqliteStore::open_with(path, SqliteOptions::default().synchronous(synchronous))
            .expect("open store"),
    )
}

/// A small checkpoint like a short workflow's step: a few fields of state, the next node.
fn small(thread: &str, step: u64) -> Checkpoint {
    Checkpoint::new(
        thread,
        1,
        "",
        step,
        RunStatus::Running,
        json!({
            "state": {"order": "ord_1042", "amount_cents": 1250, "approved": null, "step": step},
            "next": ["pay"],
        }),
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio")
}

/// `writers` tasks each writing `per_writer` checkpoints; returns the wall time.
async fn concurrent(store: &Arc<SqliteStore>, writers: u64, per_writer: u64) -> Duration {
    static ROUND: AtomicU64 = AtomicU64::new(0);
    let round = ROUND.fetch_add(1, Ordering::Relaxed);
    let start = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let store = Arc::clone(store);
            tokio::spawn(async move {
                let thread = format!("conc-{round}-{w}");
                for step in 0..per_writer {
                    store.put_checkpoint(small(&thread, step)).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("store_sqlite");
    for (label, synchronous) in [("normal", Synchronous::Normal), ("full", Synchronous::Full)] {
        let db = TempDb::new(label);
        let store = open(db.path(), synchronous);
        let step = AtomicU64::new(0);
        if synchronous == Synchronous::Full {
            group
                .sample_size(20)
                .measurement_time(Duration::from_secs(8));
        }
        group.bench_function(format!("put_checkpoint/{label}"), |b| {
            b.to_async(&rt).iter(|| {
                let checkpoint = small("lone", step.fetch_add(1, Ordering::Relaxed));
                let store = Arc::clone(&store);
                async move { store.put_checkpoint(checkpoint).await.unwrap() }
            });
        });
    }
    let db = TempDb::new("conc");
    let store = open(db.path(), Synchronous::Full);
    group.bench_function("concurrent_100_writers_full/per_write", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let store = Arc::clone(&store);
            async move {
                // 100 writers share `iters` writes (at least one each); time per write.
                let per_writer = iters.div_ceil(100).max(1);
                let elapsed = concurrent(&store, 100, per_writer).await;
                elapsed.mul_f64(iters as f64 / (100 * per_writer) as f64)
            }
        });
    });
    group.finish();
}

fn summary() {
    let rt = runtime();
    println!("\nstore_sqlite summary");

    let db = TempDb::new("summary-normal");
    let store = open(db.path(), Synchronous::Normal);
    let n = 5_000;
    let (start, cpu) = (Instant::now(), cpu_time());
    rt.block_on(async {
        for step in 0..n {
            store.put_checkpoint(small("one", step)).await.unwrap();
        }
    });
    let (wall, cpu) = (
        start.elapsed() / n as u32,
        cpu_time().zip(cpu).map(|(c, c0)| (c - c0) / n as u32),
    );
    println!(
        "  one writer, NORMAL: {wall:?} wall, {} CPU (all threads) per checkpoint",
        show(cpu)
    );
    let (start, cpu) = (Instant::now(), cpu_time());
    rt.block_on(async {
        for _ in 0..n {
            store.latest_checkpoint("one", "").await.unwrap().unwrap();
        }
    });
    let (wall, cpu) = (
        start.elapsed() / n as u32,
        cpu_time().zip(cpu).map(|(c, c0)| (c - c0) / n as u32),
    );
    println!(
        "  latest_checkpoint of a thread with {n} checkpoints: {wall:?} wall, {} CPU",
        show(cpu)
    );
    drop(store);
    let (start, cpu) = (Instant::now(), cpu_time());
    raw_sqlite_commit(n);
    let (wall, cpu) = (
        start.elapsed() / n as u32,
        cpu_time().zip(cpu).map(|(c, c0)| (c - c0) / n as u32),
    );
    println!(
        "  SQLite alone (same row, one connection, no threads), NORMAL: {wall:?} wall, {} CPU per commit",
        show(cpu)
    );

    let db = TempDb::new("summary-full");
    let store = open(db.path(), Synchronous::Full);
    let n = 300;
    let start = Instant::now();
    rt.block_on(async {
        for step in 0..n {
            store.put_checkpoint(small("one", step)).await.unwrap();
        }
    });
    let one = n as f64 / start.elapsed().as_secs_f64();
    let before = store.commit_stats();
    let elapsed = rt.block_on(concurrent(&store, 100, 30));
    let after = store.commit_stats();
    let hundred = 3_000.0 / elapsed.as_secs_f64();
    println!(
        "  one writer, FULL: {one:.0} writes/s ({:.0} µs each)",
        1e6 / one
    );
    println!(
        "  100 concurrent writers, FULL: {hundred:.0} writes/s ({:.1}x one writer)",
        hundred / one
    );
    println!(
        "    {} writes in {} commits: {:.1} writes per fsync",
        after.writes - before.writes,
        after.commits - before.commits,
        (after.writes - before.writes) as f64 / (after.commits - before.commits).max(1) as f64
    );
    drop(store);

    // Disk per row: 10,000 suspended runs, each an input checkpoint and an interrupted one.
    let db = TempDb::new("summary-disk");
    let store = open(db.path(), Synchronous::Normal);
    let runs = 10_000u64;
    rt.block_on(async {
        let tasks: Vec<_> = (0..4u64)
            .map(|part| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    for r in (part..runs).step_by(4) {
                        let thread = format!("refund-{r}");
                        store.put_checkpoint(small(&thread, 0)).await.unwrap();
                        let mut cp = small(&thread, 1);
                        cp.status = RunStatus::Interrupted;
                        cp.body["next"] = json!(["ask_manager"]);
                        cp.body["interrupts"] = json!([{
                            "id": "ask_manager#0",
                            "node": "ask_manager",
                            "index": 0,
                            "payload": {"question": "refund 12.50 EUR?"},
                        }]);
                        store.put_checkpoint(cp).await.unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
    drop(store); // closing checkpoints the WAL into the file
    let bytes = std::fs::metadata(db.path()).unwrap().len();
    let wal = std::fs::metadata(format!("{}-wal", db.path().display())).map_or(0, |m| m.len());
    println!(
        "  disk: {} bytes for {runs} suspended runs ({} rows): {:.0} bytes per row, {:.0} bytes per suspended run (wal left: {wal})",
        bytes,
        runs * 2,
        bytes as f64 / (runs * 2) as f64,
        bytes as f64 / runs as f64,
    );
}

fn show(cpu: Option<Duration>) -> String {
    cpu.map_or_else(|| "(unknown)".into(), |c| format!("{c:?}"))
}

/// CPU time used by this process so far (user + system, all threads), from /proc.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10)) // USER_HZ is 100 on Linux
}

/// The same insert and commit on a plain connection, on the calling thread, at NORMAL, with
/// the first schema's checkpoints table only (no run row). The floor the budgets use, with
/// the store's exact schema and rows at both levels, is `durable`'s `floor:` lines.
fn raw_sqlite_commit(n: u64) {
    let db = TempDb::new("raw");
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;
         CREATE TABLE checkpoints (id INTEGER PRIMARY KEY, thread TEXT NOT NULL,
             run INTEGER NOT NULL, namespace TEXT NOT NULL, step INTEGER NOT NULL,
             status TEXT NOT NULL, body TEXT NOT NULL);
         CREATE INDEX checkpoints_by_thread ON checkpoints (thread, namespace, id);",
    )
    .unwrap();
    let body = serde_json::to_string(&small("one", 0).body).unwrap();
    for step in 0..n {
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        conn.prepare_cached(
            "INSERT INTO checkpoints (thread, run, namespace, step, status, body)
             VALUES (?1, 1, '', ?2, 'running', ?3)",
        )
        .unwrap()
        .execute(rusqlite::params!["one", step as i64, body])
        .unwrap();
        conn.execute_batch("COMMIT").unwrap();
    }
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // `cargo bench` passes --bench; `cargo test --benches` does not, and only smoke-tests.
    if std::env::args().any(|a| a == "--bench") {
        summary();
    }
}
