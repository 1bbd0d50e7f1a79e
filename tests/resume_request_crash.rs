//! A resume request (`Runtime::request_resume`, as `loomflow resume` sends it) survives the
//! worker that took it being killed before the resumed step's checkpoint: another worker
//! takes the run over once the lease runs out and resumes it with the same value.
//!
//! The run is interrupted in this process; a worker process takes the request, gets the
//! value in the node, and hangs there until it is killed with SIGKILL. On SQLite, and on
//! PostgreSQL (on the server `LOOMFLOW_PG_URL` names; skipped without it).
//!
//! The child process re-runs this test binary (`--ignored --exact resume_worker_child`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/postgres.rs"]
mod postgres;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use loomflow::prelude::*;
use loomflow::runtime::{PostgresStore, RunState, SqliteStore};
use loomflow_tests::child_test_process;

use postgres::TempPgDb;

/// Set in the child: the node hangs once it has its value, until the process is killed.
static HANG_WITH_THE_VALUE: AtomicBool = AtomicBool::new(false);

/// `review` asks how many; the answer is added to the state.
fn review_graph() -> CompiledGraph<u32> {
    Graph::new("review")
        .node_fn("review", |n: &mut u32, ctx| {
            Box::pin(async move {
                let answer: u32 = ctx.interrupt(json!("how many?"))?;
                if HANG_WITH_THE_VALUE.load(Ordering::SeqCst) {
                    println!("ANSWERED {answer}");
                    std::io::stdout().flush().unwrap();
                    std::future::pending::<()>().await;
                }
                *n += answer;
                Ok(())
            })
        })
        .edge(START, "review")
        .edge("review", END)
        .compile()
        .unwrap()
}

async fn runtime(dir: &Path) -> Runtime {
    let builder = Runtime::builder().lease(Duration::from_millis(800));
    match std::fs::read_to_string(dir.join("pg_url")) {
        Ok(url) => builder
            .store(PostgresStore::connect(&url).await.unwrap())
            .build(),
        Err(_) => builder
            .store(SqliteStore::open(dir.join("runs.db")).unwrap())
            .build(),
    }
}

fn worker(runtime: &Runtime) -> Worker {
    Worker::builder(runtime)
        .graph(&review_graph())
        .poll_interval(Duration::from_millis(20))
        .build()
}

/// The worker process whose node hangs with the value.
#[test]
#[ignore = "entry point of the child process of the resume request test; run by it"]
fn resume_worker_child() {
    let Ok(dir) = std::env::var("LOOMFLOW_RESUME_DIR") else {
        return;
    };
    HANG_WITH_THE_VALUE.store(true, Ordering::SeqCst);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let runtime = runtime(Path::new(&dir)).await;
        let _handle = worker(&runtime).start();
        std::future::pending::<()>().await
    });
}

/// A child process, killed with SIGKILL when dropped (a failing test included).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn test_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("loomflow-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn a_killed_worker_leaves_the_request_for_the_next(dir: &Path, rt: &tokio::runtime::Runtime) {
    rt.block_on(async {
        let runtime = runtime(dir).await;
        let asked = review_graph().invoke(&runtime, "r1", 0).await.unwrap();
        assert_eq!(asked.interrupts().len(), 1, "{asked:?}");
        runtime.request_resume("r1", 7).await.unwrap();
    });

    let mut child = Killed(
        child_test_process("resume_worker_child")
            .env("LOOMFLOW_RESUME_DIR", dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.contains("ANSWERED") => {
                assert!(line.ends_with("ANSWERED 7"), "{line}");
                break;
            }
            Ok(_) => {}
            Err(_) => panic!("the worker process never took the request"),
        }
    }
    drop(child);

    rt.block_on(async {
        let runtime = runtime(dir).await;
        let handle = worker(&runtime).start();
        let deadline = Instant::now() + Duration::from_secs(30);
        let record = loop {
            let record = runtime.run("r1").await.unwrap().record;
            if record.state.is_finished() || Instant::now() > deadline {
                break record;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        handle.shutdown().await.unwrap();
        assert_eq!(record.state, RunState::Completed, "{record:?}");
        assert!(record.attempts >= 2, "taken over: {record:?}");
        let state: u32 = runtime.get_state("r1").await.unwrap().unwrap();
        assert_eq!(state, 7, "resumed with the request's value");
    });
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_resume_request_outlives_the_worker_killed_while_applying_it() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    a_killed_worker_leaves_the_request_for_the_next(&test_dir("resume-kill"), &rt);
}

#[test]
fn on_postgres_a_resume_request_outlives_the_worker_killed_while_applying_it() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(db) = rt.block_on(TempPgDb::create("resume request crash")) else {
        return;
    };
    let dir = test_dir("resume-kill-pg");
    std::fs::write(dir.join("pg_url"), &db.url).unwrap();
    a_killed_worker_leaves_the_request_for_the_next(&dir, &rt);
}
