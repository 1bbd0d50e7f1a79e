//! Workers as users deploy them: separate processes on one SQLite file, and on one
//! PostgreSQL database (on the server `LOOMFLOW_PG_URL` names; skipped without it).
//!
//! Two worker processes run the expense graph; a third process submits the runs and a
//! fourth sends the approvals. One worker is killed with SIGKILL right after it paid one
//! expense (its payment journaled, the run not finished): the other worker takes the run
//! over once the lease runs out and finishes it without paying again. Every run completes
//! once, and every side effect happens once.
//!
//! The child processes re-run this test binary (`--ignored --exact worker_child`), with the
//! role in `LOOMFLOW_WORKER_ROLE`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/postgres.rs"]
mod postgres;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use loomflow::SignalError;
use loomflow::prelude::*;
use loomflow::runtime::{PostgresStore, RunFilter, RunState, SqliteStore};
use loomflow_tests::child_test_process;

use postgres::TempPgDb;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Expense {
    amount_cents: u64,
    approved: Option<bool>,
    paid: bool,
    slept: bool,
    timed_out: bool,
}

const THREADS: usize = 12;
/// The run the first worker to pay it hangs on (and is killed in).
const HANG_ON: &str = "exp-5";
const LEASE: Duration = Duration::from_millis(600);
/// On PostgreSQL: each store opens its connections (and prepares its statements on each)
/// as the test starts, against a server whose processes share the machine's two cores with
/// every test process; 600 ms is then short enough for a loaded machine to stall a live
/// execution past it (it loses its lease, as designed, and the race test counts that as a
/// failure).
const PG_LEASE: Duration = Duration::from_secs(2);

/// Payments under way in this process, and whether it stopped starting new ones.
static PAYING: AtomicUsize = AtomicUsize::new(0);
static FROZEN: AtomicBool = AtomicBool::new(false);

fn effect(dir: &Path, line: &str) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("effects.log"))
        .unwrap();
    // One write per line: appends from several processes must not interleave.
    file.write_all(format!("{line}\n").as_bytes()).unwrap();
}

fn expense_graph(dir: PathBuf) -> CompiledGraph<Expense> {
    let on_pay = dir.clone();
    Graph::new("expense")
        .node_fn("ask", move |expense: &mut Expense, ctx| {
            Box::pin(async move {
                expense.approved = Some(ctx.wait_for_signal("approve").await?);
                Ok(())
            })
        })
        .node_fn("pay", move |expense: &mut Expense, ctx| {
            let dir = on_pay.clone();
            Box::pin(async move {
                let thread = ctx.thread().to_owned();
                // A kill inside a journaled step (after its effect, before its record) would
                // rightly run it again; the test kills only between steps: once this process
                // freezes, no payment starts here, and it waits for those under way.
                PAYING.fetch_add(1, Ordering::SeqCst);
                if FROZEN.load(Ordering::SeqCst) {
                    PAYING.fetch_sub(1, Ordering::SeqCst);
                    std::future::pending::<()>().await;
                }
                let paid = ctx
                    .step("pay", || async {
                        effect(&dir, &format!("paid {thread}"));
                        Ok::<_, Error>(())
                    })
                    .await;
                PAYING.fetch_sub(1, Ordering::SeqCst);
                paid?;
                expense.paid = true;
                // The first worker to get here on HANG_ON stops dead, its payment
                // journaled: the test kills it.
                if thread == HANG_ON
                    && std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(dir.join("hung"))
                        .is_ok()
                {
                    FROZEN.store(true, Ordering::SeqCst);
                    while PAYING.load(Ordering::SeqCst) > 0 {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    println!("HUNG {thread}");
                    std::io::stdout().flush().unwrap();
                    std::future::pending::<()>().await;
                }
                Ok(())
            })
        })
        .node_fn("cool_down", |expense: &mut Expense, ctx| {
            Box::pin(async move {
                // Longer than the grace: the run suspends, sleeping, and a worker wakes it.
                ctx.sleep(Duration::from_millis(150)).await?;
                expense.slept = true;
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge("ask", "pay")
        .edge("pay", "cool_down")
        .edge("cool_down", END)
        .compile()
        .unwrap()
}

/// A graph whose one node takes its process down (as a stack overflow, an abort or the
/// out-of-memory killer would), until a file `healed` is in `dir`. Each entry is logged.
fn poison_graph(dir: PathBuf) -> CompiledGraph<u32> {
    Graph::new("poison")
        .node_fn("crash", move |n: &mut u32, _ctx| {
            let dir = dir.clone();
            Box::pin(async move {
                effect(&dir, "ENTERED");
                if !dir.join("healed").exists() {
                    std::process::abort();
                }
                *n += 1;
                Ok(())
            })
        })
        .edge(START, "crash")
        .edge("crash", END)
        .compile()
        .unwrap()
}

/// `ask` waits 300 ms for a signal nobody sends: the wait's deadline is stored, and a worker
/// carries the run on when it is due.
fn deadline_graph() -> CompiledGraph<Expense> {
    Graph::new("deadline")
        .node_fn("ask", |expense: &mut Expense, ctx| {
            Box::pin(async move {
                let answer = ctx
                    .wait_for_signal::<bool>("approve")
                    .timeout(Duration::from_millis(300))
                    .await;
                match answer {
                    Ok(approved) => expense.approved = Some(approved),
                    Err(loomflow::RunError::Signal(SignalError::Timeout { .. })) => {
                        expense.timed_out = true;
                    }
                    Err(other) => return Err(other.into()),
                }
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
        .unwrap()
}

/// The runtime of every process of a test: on the PostgreSQL database whose URL is in
/// `dir/pg_url` when there is one, else on the SQLite file `dir/runs.db`.
async fn runtime(dir: &Path) -> Runtime {
    match std::fs::read_to_string(dir.join("pg_url")) {
        Ok(url) => Runtime::builder()
            .store(PostgresStore::connect(&url).await.unwrap())
            .lease(PG_LEASE)
            .build(),
        Err(_) => Runtime::builder()
            .store(SqliteStore::open(dir.join("runs.db")).unwrap())
            .lease(LEASE)
            .build(),
    }
}

/// A fresh directory for a test's processes to share, named after `test`.
fn test_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("loomflow-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// For a PostgreSQL variant: a database of its own, its URL written where the processes
/// look. `None` (the test is skipped) without `LOOMFLOW_PG_URL`.
fn postgres_dir(test: &str, rt: &tokio::runtime::Runtime) -> Option<(PathBuf, TempPgDb)> {
    let db = rt.block_on(TempPgDb::create("worker processes"))?;
    let dir = test_dir(test);
    std::fs::write(dir.join("pg_url"), &db.url).unwrap();
    Some((dir, db))
}

/// A child process: a worker, a submitter or a signaller.
#[test]
#[ignore = "entry point of the child processes of the worker tests; run by them"]
fn worker_child() {
    let Ok(dir) = std::env::var("LOOMFLOW_WORKER_DIR") else {
        return;
    };
    let dir = PathBuf::from(dir);
    let role = std::env::var("LOOMFLOW_WORKER_ROLE").unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let runtime = runtime(&dir).await;
        match role.as_str() {
            "worker" => {
                let worker = Worker::builder(&runtime)
                    .graph(&expense_graph(dir.clone()))
                    .graph(&deadline_graph())
                    .graph(&poison_graph(dir.clone()))
                    .concurrency(4)
                    .poll_interval(Duration::from_millis(20))
                    .park_grace(Duration::from_millis(20))
                    .on_finished(|report| {
                        println!("FINISHED {} {}", report.thread, report.state);
                        std::io::stdout().flush().unwrap();
                    })
                    .build();
                let _handle = worker.start();
                println!("READY");
                std::io::stdout().flush().unwrap();
                std::future::pending::<()>().await
            }
            "submit" => {
                for i in 0..THREADS {
                    let expense = Expense {
                        amount_cents: 100 * i as u64,
                        ..Expense::default()
                    };
                    runtime
                        .submit("expense", &format!("exp-{i}"), expense)
                        .await
                        .unwrap();
                }
                println!("SUBMITTED");
            }
            "submit-poison" => {
                runtime.submit("poison", "poisoned", 0).await.unwrap();
                println!("SUBMITTED");
            }
            "submit-deadlines" => {
                for i in 0..3 {
                    runtime
                        .submit("deadline", &format!("late-{i}"), Expense::default())
                        .await
                        .unwrap();
                }
                println!("SUBMITTED");
            }
            "recover" => {
                // Races the worker: every run at once, each waiting for the worker (or the
                // signal) as needed.
                let graph = expense_graph(dir.clone());
                let recovers = (0..THREADS).map(|i| {
                    let (graph, runtime) = (graph.clone(), runtime.clone());
                    tokio::spawn(async move {
                        graph
                            .recover(&runtime, format!("exp-{i}"))
                            .wait_if_busy(Duration::from_secs(30))
                            .await
                    })
                });
                for recover in futures_util::future::join_all(recovers).await {
                    let outcome = recover.unwrap().unwrap();
                    assert!(outcome.is_completed(), "{outcome:?}");
                }
                println!("RECOVERED");
            }
            "signal" => {
                for i in 0..THREADS {
                    runtime
                        .signal(&format!("exp-{i}"), "approve", true)
                        .await
                        .unwrap();
                }
                println!("SIGNALLED");
            }
            other => panic!("unknown role {other}"),
        }
    });
}

fn assert_each_paid_once(dir: &Path) {
    let effects = std::fs::read_to_string(dir.join("effects.log")).unwrap();
    for i in 0..THREADS {
        let paid = effects
            .lines()
            .filter(|l| *l == format!("paid exp-{i}"))
            .count();
        assert_eq!(paid, 1, "exp-{i} was paid {paid} times:\n{effects}");
    }
}

struct Children {
    dir: PathBuf,
    children: Vec<Child>,
}

impl Children {
    /// Starts a child in `role`; its output lines go to the returned channel.
    fn spawn(&mut self, role: &str) -> (usize, mpsc::Receiver<String>) {
        let mut child = child_test_process("worker_child")
            .env("LOOMFLOW_WORKER_DIR", &self.dir)
            .env("LOOMFLOW_WORKER_ROLE", role)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        self.children.push(child);
        (self.children.len() - 1, rx)
    }

    /// Runs a child to its end.
    fn run(&mut self, role: &str) {
        let (index, _lines) = self.spawn(role);
        let status = self.children[index].wait().unwrap();
        assert!(status.success(), "{role} failed: {status}");
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn expect_line(rx: &mpsc::Receiver<String>, marker: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains(marker) => return line,
            Ok(_) => {}
            Err(_) => panic!("no line with {marker}"),
        }
    }
}

#[test]
fn wait_deadlines_fire_in_a_worker_process() {
    deadlines(&test_dir("deadlines"), &current_thread_runtime());
}

#[test]
fn on_postgres_wait_deadlines_fire_in_a_worker_process() {
    let rt = current_thread_runtime();
    if let Some((dir, _db)) = postgres_dir("deadlines-pg", &rt) {
        deadlines(&dir, &rt);
    }
}

fn deadlines(dir: &Path, rt: &tokio::runtime::Runtime) {
    let mut children = Children {
        dir: dir.to_owned(),
        children: Vec::new(),
    };
    drop(rt.block_on(runtime(dir)));
    let (_, worker_lines) = children.spawn("worker");
    expect_line(&worker_lines, "READY");
    children.run("submit-deadlines");
    // Each run suspends, waiting, then times out at its deadline: in any order.
    let mut expected: Vec<String> = (0..3)
        .flat_map(|i| {
            [
                format!("FINISHED late-{i} waiting"),
                format!("FINISHED late-{i} completed"),
            ]
        })
        .collect();
    while !expected.is_empty() {
        let line = expect_line(&worker_lines, "FINISHED late-");
        expected.retain(|e| !line.contains(e.as_str()));
    }
    rt.block_on(async {
        let runtime = runtime(dir).await;
        for i in 0..3 {
            let expense: Expense = runtime
                .get_state(&format!("late-{i}"))
                .await
                .unwrap()
                .unwrap();
            assert!(
                expense.timed_out && expense.approved.is_none(),
                "{expense:?}"
            );
        }
    });
}

#[test]
fn a_worker_and_a_recovering_process_race_and_every_run_completes_once() {
    race(&test_dir("race"), &current_thread_runtime());
}

#[test]
fn on_postgres_a_worker_and_a_recovering_process_race_and_every_run_completes_once() {
    let rt = current_thread_runtime();
    if let Some((dir, _db)) = postgres_dir("race-pg", &rt) {
        race(&dir, &rt);
    }
}

fn race(dir: &Path, rt: &tokio::runtime::Runtime) {
    // Nobody hangs in this test.
    std::fs::write(dir.join("hung"), "").unwrap();
    let mut children = Children {
        dir: dir.to_owned(),
        children: Vec::new(),
    };
    drop(rt.block_on(runtime(dir)));
    children.run("submit");
    let (_, worker_lines) = children.spawn("worker");
    expect_line(&worker_lines, "READY");
    let in_state = |state: RunState| {
        rt.block_on(async {
            let runtime = runtime(dir).await;
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let runs = runtime.runs(&RunFilter::new().state(state)).await.unwrap();
                if runs.len() == THREADS {
                    return;
                }
                assert!(Instant::now() < deadline, "runs never all {state}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
    };
    in_state(RunState::Waiting);
    // The recovering process and the signals start together; the worker wakes too.
    let (recoverer, recover_lines) = children.spawn("recover");
    children.run("signal");
    expect_line(&recover_lines, "RECOVERED");
    assert!(children.children[recoverer].wait().unwrap().success());
    in_state(RunState::Completed);
    assert_each_paid_once(dir);
}

#[test]
fn two_workers_and_a_signaller_every_run_completes_once_even_when_a_worker_is_killed() {
    two_workers(&test_dir("workers"), &current_thread_runtime());
}

#[test]
fn on_postgres_two_workers_and_a_signaller_every_run_completes_once_even_when_a_worker_is_killed() {
    let rt = current_thread_runtime();
    if let Some((dir, _db)) = postgres_dir("workers-pg", &rt) {
        two_workers(&dir, &rt);
    }
}

fn two_workers(dir: &Path, rt: &tokio::runtime::Runtime) {
    let mut children = Children {
        dir: dir.to_owned(),
        children: Vec::new(),
    };
    // Create the store before several processes open it at once.
    drop(rt.block_on(runtime(dir)));
    let (a, a_lines) = children.spawn("worker");
    let (b, b_lines) = children.spawn("worker");
    expect_line(&a_lines, "READY");
    expect_line(&b_lines, "READY");
    children.run("submit");
    children.run("signal");

    // Whichever worker paid HANG_ON first hangs: kill it with SIGKILL.
    let (hung, hung_lines, other_lines) = {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if Instant::now() >= deadline {
                let runs = rt.block_on(async { runtime(dir).await.runs(&RunFilter::new()).await });
                let runs = runs.unwrap();
                panic!("no worker hung on {HANG_ON}; the runs: {runs:#?}");
            }
            if let Ok(line) = a_lines.try_recv()
                && line.contains("HUNG")
            {
                break (a, a_lines, b_lines);
            }
            if let Ok(line) = b_lines.try_recv()
                && line.contains("HUNG")
            {
                break (b, b_lines, a_lines);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    children.children[hung].kill().unwrap();
    children.children[hung].wait().unwrap();
    drop(hung_lines);

    rt.block_on(async {
        let runtime = runtime(dir).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let done = runtime
                .runs(&RunFilter::new().state(RunState::Completed))
                .await
                .unwrap();
            if done.len() == THREADS {
                break;
            }
            if Instant::now() >= deadline {
                let mut stuck = runtime.runs(&RunFilter::new()).await.unwrap();
                stuck.retain(|r| r.state != RunState::Completed);
                let mut details = Vec::new();
                for run in &stuck {
                    details.push(format!(
                        "{run:?}\n  checkpoints: {:?}",
                        runtime.list_checkpoints(&run.thread).await.unwrap()
                    ));
                }
                panic!(
                    "only {} of {THREADS} runs completed; the others:\n{}",
                    done.len(),
                    details.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for i in 0..THREADS {
            let thread = format!("exp-{i}");
            let expense: Expense = runtime.get_state(&thread).await.unwrap().unwrap();
            assert!(
                expense.paid && expense.slept && expense.approved == Some(true),
                "{thread}: {expense:?}"
            );
        }
        let taken_over = runtime.run(HANG_ON).await.unwrap().record;
        assert!(taken_over.attempts >= 2, "{taken_over:?}");
    });
    // The survivor took the run over once the dead worker's lease ran out.
    expect_line(&other_lines, &format!("FINISHED {HANG_ON} completed"));
    assert_each_paid_once(dir);
}

/// A run whose node takes its process down (an abort here; a stack overflow or the
/// out-of-memory killer alike) is not run again for ever, taking down every worker that
/// claims it: after three executions in a row died holding it, the fourth worker fails it
/// (naming why) rather than run it, and carries on with the other runs. Its checkpoints
/// stand: once the cause is fixed, `recover` carries it on.
#[test]
fn a_run_that_keeps_killing_its_worker_is_failed_after_three_lapses() {
    let dir = test_dir("crash-loop");
    let rt = current_thread_runtime();
    poison(&dir, &rt);
}

#[test]
fn on_postgres_a_run_that_keeps_killing_its_worker_is_failed_after_three_lapses() {
    let rt = current_thread_runtime();
    if let Some((dir, _db)) = postgres_dir("crash-loop-pg", &rt) {
        poison(&dir, &rt);
    }
}

fn poison(dir: &Path, rt: &tokio::runtime::Runtime) {
    let mut children = Children {
        dir: dir.to_owned(),
        children: Vec::new(),
    };
    drop(rt.block_on(runtime(dir)));
    children.run("submit-poison");
    let entered = || {
        let log = std::fs::read_to_string(dir.join("effects.log")).unwrap_or_default();
        log.lines().filter(|line| *line == "ENTERED").count()
    };
    // Three workers in turn claim the run (each once the last one's lease ran out) and die.
    for died in 1..=3 {
        let (worker, _lines) = children.spawn("worker");
        let status = children.children[worker].wait().unwrap();
        assert!(
            !status.success(),
            "worker {died} should have died: {status}"
        );
        assert_eq!(entered(), died, "each ran the node once");
    }
    // The fourth fails the run without running it, and lives on to run the others.
    let (worker, lines) = children.spawn("worker");
    let failed = expect_line(&lines, "FINISHED poisoned");
    assert!(failed.ends_with("failed"), "{failed}");
    rt.block_on(async {
        let runtime = runtime(dir).await;
        let fine = Expense::default();
        runtime.submit("expense", "exp-fine", fine).await.unwrap();
    });
    expect_line(&lines, "FINISHED exp-fine");
    assert!(
        children.children[worker].try_wait().unwrap().is_none(),
        "the worker died"
    );
    assert_eq!(entered(), 3, "not run a fourth time");
    rt.block_on(async {
        let runtime = runtime(dir).await;
        let record = runtime.run("poisoned").await.unwrap().record;
        assert_eq!(record.state, RunState::Failed);
        let error = record.error.unwrap_or_default();
        assert!(
            error.contains("last 3 executions in a row lost its lease"),
            "{error}"
        );
        // Fixed, it is carried on from where it stood.
        std::fs::write(dir.join("healed"), "").unwrap();
        let recovered = poison_graph(dir.to_owned())
            .recover(&runtime, "poisoned")
            .wait_if_busy(Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(recovered.completed().unwrap(), 1);
    });
}
