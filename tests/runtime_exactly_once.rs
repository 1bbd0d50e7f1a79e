//! Exactly once under concurrency: several executions of one run at once, in one process and
//! in several processes on one SQLite file, as users meet it (a double click, a retried
//! webhook, two services reacting to one event).
//!
//! The graph is an expense approval: `ask_manager` waits for the signal `manager_decision`
//! (suspending the run until it is sent), then `pay` pays inside `ctx.step`. Side effects
//! are appended to a file outside the database, so the counts span processes.
//!
//! The multi-process test re-runs this test binary as child processes (`--ignored --exact
//! exactly_once_child`); each opens its own runtime on the file for every trial and calls
//! `recover` on the same threads at the same moment. (Racing the worker of issue 11 against
//! a manual `recover` comes with the worker.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use loomflow::RunError;
use loomflow::prelude::*;
use loomflow::runtime::{SqliteStore, StoreError};
use loomflow_tests::child_test_process;
use tokio::sync::{Notify, mpsc as tmpsc};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Expense {
    amount_cents: u64,
    approved: Option<bool>,
    payment: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Decision {
    approved: bool,
}

/// Where side effects are recorded: `received <thread>` when `ask_manager` gets the
/// decision, `paid <thread>` when the payment is made.
type Effects = Arc<dyn Fn(String) + Send + Sync>;

/// What the payment does besides recording itself: in the in-process tests it parks until
/// the test lets it finish, so that a second execution is sure to overlap it.
type Hold = Arc<dyn Fn() -> futures_util::future::BoxFuture<'static, ()> + Send + Sync>;

fn graph(effects: Effects, hold: Hold) -> CompiledGraph<Expense> {
    let on_receive = Arc::clone(&effects);
    Graph::new("expense")
        .node_fn("ask_manager", move |expense: &mut Expense, ctx| {
            let effects = Arc::clone(&on_receive);
            Box::pin(async move {
                let decision: Decision =
                    ctx.wait_for_signal("manager_decision").or_suspend().await?;
                effects(format!("received {}", ctx.thread()));
                expense.approved = Some(decision.approved);
                Ok(())
            })
        })
        .node_fn("pay", move |expense: &mut Expense, ctx| {
            let effects = Arc::clone(&effects);
            let hold = Arc::clone(&hold);
            let amount = expense.amount_cents;
            Box::pin(async move {
                let payment: String = ctx
                    .step("pay", || async {
                        effects(format!("paid {}", ctx.thread()));
                        hold().await;
                        Ok::<_, Error>(format!("payment of {amount} cents"))
                    })
                    .await?;
                expense.payment = Some(payment);
                Ok(())
            })
        })
        .edge(START, "ask_manager")
        .branch("ask_manager", ["pay", END], |e: &Expense| {
            if e.approved == Some(true) { "pay" } else { END }
        })
        .edge("pay", END)
        .compile()
        .unwrap()
}

fn input() -> Expense {
    Expense {
        amount_cents: 4_200,
        ..Expense::default()
    }
}

/// The state a run reaches when nothing races it.
fn expected() -> Expense {
    Expense {
        amount_cents: 4_200,
        approved: Some(true),
        payment: Some("payment of 4200 cents".into()),
    }
}

/// A fresh database path; removes the file and its WAL companions when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "loomflow-once-{name}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// ---------------------------------------------------------------------------------------
// In one process.

/// A payment that tells the test it started, then waits until the test lets it finish.
struct Gate {
    entered: tokio::sync::Mutex<tmpsc::UnboundedReceiver<()>>,
    open: Arc<Notify>,
    hold: Hold,
}

impl Gate {
    fn new() -> Self {
        let (tx, rx) = tmpsc::unbounded_channel();
        let open = Arc::new(Notify::new());
        let notify = Arc::clone(&open);
        let hold: Hold = Arc::new(move || {
            let tx = tx.clone();
            let notify = Arc::clone(&notify);
            Box::pin(async move {
                let _ = tx.send(());
                notify.notified().await;
            })
        });
        Self {
            entered: tokio::sync::Mutex::new(rx),
            open,
            hold,
        }
    }

    async fn wait_entered(&self) {
        self.entered.lock().await.recv().await.unwrap();
    }
}

fn counting() -> (Effects, Arc<Mutex<Vec<String>>>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&log);
    (Arc::new(move |line| sink.lock().unwrap().push(line)), log)
}

fn count(log: &Mutex<Vec<String>>, line: &str) -> usize {
    log.lock().unwrap().iter().filter(|l| *l == line).count()
}

async fn suspended_and_signalled(graph: &CompiledGraph<Expense>, rt: &Runtime, thread: &str) {
    let outcome = graph.invoke(rt, thread, input()).await.unwrap();
    assert!(
        matches!(outcome, RunOutcome::Interrupted { .. }),
        "{outcome:?}"
    );
    rt.signal(thread, "manager_decision", Decision { approved: true })
        .await
        .unwrap();
}

async fn two_recovers_in_one_process(rt: Runtime) {
    let (effects, log) = counting();
    let gate = Gate::new();
    let graph = graph(effects, Arc::clone(&gate.hold));
    suspended_and_signalled(&graph, &rt, "exp-1").await;

    let first = graph.recover(&rt, "exp-1").start();
    gate.wait_entered().await; // the first is paying, under its claim
    let second = graph.recover(&rt, "exp-1").await;
    match second {
        Err(RunError::Busy {
            thread,
            owner,
            until,
        }) => {
            assert_eq!(thread, "exp-1");
            assert!(!owner.is_empty());
            assert!(until > std::time::SystemTime::now(), "a live lease");
            let message = RunError::Busy {
                thread,
                owner: owner.clone(),
                until,
            }
            .to_string();
            assert!(
                message.starts_with("thread exp-1 is busy: its run is held by ")
                    && message.contains(&owner),
                "{message}"
            );
        }
        other => panic!("the loser is told the run is busy, not {other:?}"),
    }
    gate.open.notify_one();
    let state = first.await.unwrap().completed().unwrap();
    assert_eq!(state, expected());
    assert_eq!(count(&log, "paid exp-1"), 1);
    assert_eq!(count(&log, "received exp-1"), 1);

    // Once the winner let go, a recover returns the current outcome.
    let again = graph.recover(&rt, "exp-1").await.unwrap();
    assert_eq!(again.completed().unwrap(), expected());
    assert_eq!(count(&log, "paid exp-1"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_the_second_of_two_concurrent_recovers_is_told_busy() {
    two_recovers_in_one_process(Runtime::in_memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_the_second_of_two_concurrent_recovers_is_told_busy() {
    let dir = TempDir::new("inproc");
    two_recovers_in_one_process(Runtime::sqlite(dir.0.join("journal.db")).unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recover_that_waits_gets_the_outcome_the_winner_reached() {
    let (effects, log) = counting();
    let gate = Gate::new();
    let graph = graph(effects, Arc::clone(&gate.hold));
    let rt = Runtime::in_memory();
    suspended_and_signalled(&graph, &rt, "exp-2").await;

    let first = graph.recover(&rt, "exp-2").start();
    gate.wait_entered().await;
    let second = graph
        .recover(&rt, "exp-2")
        .wait_if_busy(Duration::from_secs(30))
        .start();
    gate.open.notify_one();
    assert_eq!(first.await.unwrap().completed().unwrap(), expected());
    assert_eq!(second.await.unwrap().completed().unwrap(), expected());
    assert_eq!(count(&log, "paid exp-2"), 1);
    assert_eq!(count(&log, "received exp-2"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_resume_or_fork_into_a_busy_thread_is_refused_too() {
    let (effects, _log) = counting();
    let gate = Gate::new();
    let graph = graph(effects, Arc::clone(&gate.hold));
    let rt = Runtime::in_memory();
    suspended_and_signalled(&graph, &rt, "exp-3").await;
    let first = graph.recover(&rt, "exp-3").start();
    gate.wait_entered().await;

    let started = graph.invoke(&rt, "exp-3", input()).await;
    assert!(matches!(started, Err(RunError::Busy { .. })), "{started:?}");
    let resumed = graph.resume(&rt, "exp-3", true).await;
    assert!(matches!(resumed, Err(RunError::Busy { .. })), "{resumed:?}");
    let forked = rt.fork("exp-3", 1, "exp-3").await;
    assert!(
        matches!(forked, Err(loomflow::RuntimeError::Busy { .. })),
        "{forked:?}"
    );
    gate.open.notify_one();
    assert_eq!(first.await.unwrap().completed().unwrap(), expected());
}

/// A direct run holds its thread from its claim, before it has written anything (with
/// `Durability::Exit`, until it ends): a submit for a worker is refused meanwhile, on every
/// store, rather than queuing a second execution that takes the lease from under it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_into_a_thread_a_direct_run_holds_is_refused() {
    let db = std::env::temp_dir().join(format!("loomflow-submit-held-{}.db", std::process::id()));
    for runtime in [Runtime::in_memory(), Runtime::sqlite(&db).unwrap()] {
        let gate = Gate::new();
        let hold = Arc::clone(&gate.hold);
        let graph = Graph::new("held")
            .node_fn("work", move |n: &mut u32, _ctx| {
                let hold = Arc::clone(&hold);
                Box::pin(async move {
                    hold().await;
                    *n += 1;
                    Ok(())
                })
            })
            .edge(START, "work")
            .edge("work", END)
            .compile()
            .unwrap();
        let direct = graph
            .run(&runtime, "t", 0)
            .durability(Durability::Exit)
            .start();
        gate.wait_entered().await;
        match runtime.submit("held", "t", 10).await {
            Err(loomflow::RuntimeError::RunActive { state, .. }) => {
                assert_eq!(state, loomflow::runtime::RunState::Running)
            }
            other => panic!("a held thread must refuse a submit, got {other:?}"),
        }
        gate.open.notify_one();
        assert_eq!(direct.await.unwrap().completed().unwrap(), 1);
        runtime.submit("held", "t", 10).await.unwrap();
    }
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
}

/// Another process claims `thread`'s run as it would two minutes from now, when the lease
/// of this one's execution has long run out.
async fn taken_over(rt: &Runtime, thread: &str) {
    let later = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 120_000;
    let taken = rt
        .store()
        .claim(thread, "another-process", later + 30_000, later)
        .await
        .unwrap();
    assert_eq!(taken, loomflow::runtime::Claim::Claimed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_lost_its_claim_records_nothing_more_and_says_so() {
    let dir = TempDir::new("lost");
    let (effects, log) = counting();
    let gate = Gate::new();
    let graph = graph(effects, Arc::clone(&gate.hold));
    let rt = Runtime::sqlite(dir.0.join("journal.db")).unwrap();
    suspended_and_signalled(&graph, &rt, "exp-4").await;
    let checkpoints = rt.list_checkpoints("exp-4").await.unwrap().len();

    let first = graph.recover(&rt, "exp-4").start();
    gate.wait_entered().await;
    // The process stalls past its lease (as if paused for a minute), and another takes the
    // run over: seen from the store, the lease expired.
    taken_over(&rt, "exp-4").await;
    gate.open.notify_one();

    match first.await {
        Err(RunError::Store(StoreError::LeaseLost { thread, .. })) => assert_eq!(thread, "exp-4"),
        other => panic!("the run stops with the lost lease, not {other:?}"),
    }
    assert_eq!(count(&log, "paid exp-4"), 1, "the payment had started");
    let key = loomflow::runtime::JournalKey::new("exp-4", 1, "", 2, "pay", "pay", 0);
    assert_eq!(
        rt.store().get_journal(&key).await.unwrap(),
        None,
        "its result was not journaled under a lost claim"
    );
    let after = rt.list_checkpoints("exp-4").await.unwrap();
    assert_eq!(
        after.len(),
        checkpoints + 1,
        "one checkpoint (ask_manager's step, written while the claim held), nothing after"
    );
    assert_eq!(after.last().unwrap().step, 1);
}

/// A run that does not write each step (`Exit`, `Async`) whose lease another execution
/// took while a node ran learns it from the heartbeat, and runs no further node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_writes_later_stops_at_the_next_step_once_its_lease_is_gone() {
    for durability in [Durability::Exit, Durability::Async] {
        let dir = TempDir::new("lost-later");
        let gate = Gate::new();
        let hold = Arc::clone(&gate.hold);
        let after = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let ran = Arc::clone(&after);
        let graph = Graph::new("later")
            .node_fn("first", move |n: &mut u32, _ctx| {
                let hold = Arc::clone(&hold);
                Box::pin(async move {
                    hold().await;
                    *n += 1;
                    Ok(())
                })
            })
            .node_fn("second", move |n: &mut u32, _ctx| {
                ran.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                *n += 1;
                Box::pin(async { Ok(()) })
            })
            .edge(START, "first")
            .edge("first", "second")
            .edge("second", END)
            .compile()
            .unwrap();
        let rt = Runtime::builder()
            .store(SqliteStore::open(dir.0.join("runs.db")).unwrap())
            .lease(Duration::from_millis(300))
            .build();
        let run = graph.run(&rt, "t", 0).durability(durability).start();
        gate.wait_entered().await;
        // Another process takes the run over, as if this one had stalled past its lease.
        taken_over(&rt, "t").await;
        // The heartbeat (every 100 ms with this lease) finds the lease gone.
        tokio::time::sleep(Duration::from_secs(2)).await;
        gate.open.notify_one();
        match run.await {
            Err(RunError::Store(StoreError::LeaseLost { thread, .. })) => assert_eq!(thread, "t"),
            other => panic!("{durability:?}: the run stops with the lost lease, not {other:?}"),
        }
        assert_eq!(
            after.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "{durability:?}: no node ran after the lease was gone"
        );
    }
}

// ---------------------------------------------------------------------------------------
// In several processes.

/// Appends a line to the effects file named by `LOOMFLOW_ONCE_EFFECTS`.
fn file_effects(path: PathBuf) -> Effects {
    Arc::new(move |line: String| {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        // One write per line: O_APPEND keeps concurrent writers' lines whole.
        file.write_all(format!("{line} {}\n", std::process::id()).as_bytes())
            .unwrap();
    })
}

/// A payment provider that takes a moment (the call a real `pay` would make).
fn provider_latency() -> Hold {
    Arc::new(|| Box::pin(tokio::time::sleep(Duration::from_millis(15))))
}

/// The child process: for each `go <trial> <wait|nowait> <thread,...>` line on stdin, opens
/// a runtime on the file and recovers those threads, all at once; prints one `RESULT` line
/// per thread, then `DONE <trial>`.
#[test]
#[ignore = "entry point of the child processes of the exactly-once test; run by it"]
fn exactly_once_child() {
    let Ok(db) = std::env::var("LOOMFLOW_ONCE_DB") else {
        return;
    };
    let effects = file_effects(std::env::var("LOOMFLOW_ONCE_EFFECTS").unwrap().into());
    let graph = graph(effects, provider_latency());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    println!("READY");
    std::io::stdout().flush().unwrap();
    let mut stdin = std::io::stdin().lock();
    let mut line = String::new();
    while {
        line.clear();
        stdin.read_line(&mut line).unwrap() > 0
    } {
        let words: Vec<&str> = line.split_whitespace().collect();
        let ["go", trial, mode, threads] = words[..] else {
            break;
        };
        let wait = mode == "wait";
        rt.block_on(async {
            // A fresh runtime per trial, as a fresh process would have.
            let runtime = Runtime::builder()
                .store(SqliteStore::open(&db).unwrap())
                .build();
            let runs = threads.split(',').map(|thread| {
                let mut run = graph.recover(&runtime, thread);
                if wait {
                    run = run.wait_if_busy(Duration::from_secs(30));
                }
                async move { (thread, run.await) }
            });
            for (thread, result) in futures_util::future::join_all(runs).await {
                let verdict = match result {
                    Ok(RunOutcome::Completed(state)) => {
                        format!("completed {}", serde_json::to_string(&state).unwrap())
                    }
                    Err(RunError::Busy { owner, .. }) => format!("busy {owner}"),
                    other => format!("other {other:?}"),
                };
                println!("RESULT {trial} {thread} {verdict}");
            }
        });
        println!("DONE {trial}");
        std::io::stdout().flush().unwrap();
    }
}

/// A child process and the lines it prints.
struct Racer {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Racer {
    fn spawn(db: &Path, effects: &Path) -> Self {
        let mut child = child_test_process("exactly_once_child")
            .env("LOOMFLOW_ONCE_DB", db)
            .env("LOOMFLOW_ONCE_EFFECTS", effects)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // libtest may print its own prefix on the same line.
                for marker in ["READY", "RESULT ", "DONE "] {
                    if let Some(at) = line.find(marker) {
                        let _ = tx.send(line[at..].to_owned());
                    }
                }
            }
        });
        let mut racer = Self {
            child,
            stdin,
            lines,
        };
        racer.expect("READY");
        racer
    }

    fn next(&mut self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(60))
            .expect("a child answered within a minute")
    }

    fn expect(&mut self, prefix: &str) {
        let line = self.next();
        assert!(line.starts_with(prefix), "expected {prefix}, got {line}");
    }
}

impl Drop for Racer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the children said about one thread.
#[derive(Debug, Default)]
struct Verdicts {
    completed: Vec<Expense>,
    busy: usize,
    other: Vec<String>,
}

/// Tallies over a group of trials.
#[derive(Debug, Default)]
struct Tally {
    threads: usize,
    /// Threads raced without `wait_if_busy`.
    nowait: usize,
    /// Threads on which every execution but the winner was told busy.
    all_losers_busy: usize,
    /// Results that were a completed run found by a loser that came after the winner let go.
    late_completed: usize,
}

/// Runs `trials` trials with `n` child processes, each recovering the same `per_trial`
/// threads at once; asserts the exactly-once properties for every thread.
fn race(name: &str, n: usize, trials: usize, per_trial: usize) -> Tally {
    let dir = TempDir::new(name);
    let db = dir.0.join("journal.db");
    let effects_path = dir.0.join("effects.log");
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let parent_effects = file_effects(effects_path.clone());
    let graph = graph(parent_effects, provider_latency());
    let runtime = tokio.block_on(async { Runtime::sqlite(&db).unwrap() });

    // The reference: the same story with nothing racing.
    tokio.block_on(async {
        suspended_and_signalled(&graph, &runtime, "reference").await;
        let state = graph.recover(&runtime, "reference").await.unwrap();
        assert_eq!(state.completed().unwrap(), expected());
    });

    let mut racers: Vec<Racer> = (0..n).map(|_| Racer::spawn(&db, &effects_path)).collect();
    let mut tally = Tally::default();
    for trial in 0..trials {
        // Every fifth trial, the losers wait for the claim instead of being told busy.
        let wait = trial % 5 == 4;
        let threads: Vec<String> = (0..per_trial)
            .map(|i| format!("{name}-{trial}-{i}"))
            .collect();
        tokio.block_on(async {
            for thread in &threads {
                suspended_and_signalled(&graph, &runtime, thread).await;
            }
        });
        let command = format!(
            "go {trial} {} {}\n",
            if wait { "wait" } else { "nowait" },
            threads.join(",")
        );
        // The start line goes to every child back to back: they race from here.
        for racer in &mut racers {
            racer.stdin.write_all(command.as_bytes()).unwrap();
            racer.stdin.flush().unwrap();
        }
        let mut verdicts: BTreeMap<String, Verdicts> = BTreeMap::new();
        for racer in &mut racers {
            loop {
                let line = racer.next();
                if line.starts_with("DONE ") {
                    break;
                }
                let mut words = line.splitn(4, ' ');
                let (_, _, thread, verdict) = (
                    words.next(),
                    words.next(),
                    words.next().unwrap().to_owned(),
                    words.next().unwrap(),
                );
                let entry = verdicts.entry(thread).or_default();
                if let Some(state) = verdict.strip_prefix("completed ") {
                    entry.completed.push(serde_json::from_str(state).unwrap());
                } else if verdict.starts_with("busy ") {
                    entry.busy += 1;
                } else {
                    entry.other.push(verdict.to_owned());
                }
            }
        }

        let effects = std::fs::read_to_string(&effects_path).unwrap_or_default();
        let pending = tokio.block_on(runtime.store().pending_signals()).unwrap();
        for thread in &threads {
            let v = &verdicts[thread];
            // Lines are `<what> <thread> <pid>`.
            let says = |what: &str| {
                effects
                    .lines()
                    .filter(|l| l.split(' ').take(2).eq([what, thread.as_str()]))
                    .count()
            };
            assert_eq!(says("paid"), 1, "{thread}: paid exactly once\n{effects}");
            assert_eq!(
                says("received"),
                1,
                "{thread}: the decision was received exactly once"
            );
            assert!(
                !pending.iter().any(|s| s.session == *thread),
                "{thread}: the decision was consumed"
            );
            assert!(
                v.other.is_empty(),
                "{thread}: unexpected results {:?}",
                v.other
            );
            assert_eq!(
                v.completed.len() + v.busy,
                n,
                "{thread}: one result per process"
            );
            assert!(!v.completed.is_empty(), "{thread}: someone completed it");
            for state in &v.completed {
                assert_eq!(
                    *state,
                    expected(),
                    "{thread}: the state a race-free run reaches"
                );
            }
            let final_state: Expense = tokio.block_on(runtime.get_state(thread)).unwrap().unwrap();
            assert_eq!(final_state, expected(), "{thread}: the stored final state");
            if wait {
                assert_eq!(v.busy, 0, "{thread}: waiting losers get the outcome");
            } else {
                tally.nowait += 1;
                tally.late_completed += v.completed.len() - 1;
                if v.busy == n - 1 {
                    tally.all_losers_busy += 1;
                }
            }
            tally.threads += 1;
        }
    }
    for racer in &mut racers {
        let _ = racer.stdin.write_all(b"quit\n");
    }
    tally
}

#[test]
fn many_processes_recovering_one_run_pay_once() {
    let started = Instant::now();
    for (n, trials) in [(2, 50), (3, 30), (8, 20)] {
        let begun = Instant::now();
        let tally = race(&format!("n{n}"), n, trials, 2);
        eprintln!(
            "N={n}: {trials} trials, {} threads, {:?}; every loser busy on {} of {} \
             threads raced without waiting, {} late completions",
            tally.threads,
            begun.elapsed(),
            tally.all_losers_busy,
            tally.nowait,
            tally.late_completed
        );
        // A loser that starts only after the winner let go finds the run completed: that is
        // the current outcome, checked above. Most must have overlapped the winner, or this
        // test would not be racing anything.
        assert!(
            tally.all_losers_busy * 2 >= tally.nowait,
            "the processes raced: on most threads every loser was told busy ({tally:?})"
        );
    }
    eprintln!("all: {:?}", started.elapsed());
}

// ---------------------------------------------------------------------------------------
// Atomic consumption: two runtimes on one file, as two processes would be.

/// Opens a runtime on `db` and has it load the stored signals into its mailbox now (any
/// signal operation does), as a process that started earlier would have.
async fn loaded(db: &Path) -> Runtime {
    let rt = Runtime::sqlite(db).unwrap();
    rt.signal("elsewhere", "warm_up", 0).await.unwrap();
    rt
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_taken_by_one_runtime_is_not_received_by_another_that_had_it_queued() {
    let dir = TempDir::new("two-mailboxes");
    let db = dir.0.join("journal.db");
    let a = loaded(&db).await;
    a.signal("s", "note", "first").await.unwrap();
    let b = loaded(&db).await; // has "first" queued too
    let got: String = a.wait_for_signal("s", "note", None).await.unwrap();
    assert_eq!(got, "first");

    b.signal("s", "note", "second").await.unwrap();
    let got: String = b.wait_for_signal("s", "note", None).await.unwrap();
    assert_eq!(got, "second", "b skips the payload a consumed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_wait_skips_a_payload_another_runtime_consumed_and_suspends() {
    let dir = TempDir::new("node-wait");
    let db = dir.0.join("journal.db");
    let (effects, log) = counting();
    let graph = graph(effects, Arc::new(|| Box::pin(async {})));
    let a = loaded(&db).await;
    a.signal("exp-5", "manager_decision", Decision { approved: true })
        .await
        .unwrap();
    let b = loaded(&db).await; // has the decision queued too
    let done = graph.invoke(&a, "exp-5", input()).await.unwrap();
    assert_eq!(done.completed().unwrap(), expected());

    // A second expense on the thread, from the other process: the decision was the first
    // one's, so this run waits for its own.
    let second = graph.invoke(&b, "exp-5", input()).await.unwrap();
    assert!(
        matches!(&second, RunOutcome::Interrupted { interrupts, .. }
            if interrupts[0].signal.as_deref() == Some("manager_decision")),
        "{second:?}"
    );
    assert_eq!(count(&log, "received exp-5"), 1);
    assert_eq!(count(&log, "paid exp-5"), 1);
}

/// An execution whose lease ran out while it could not renew it (its thread blocked in a
/// node), and whose run another execution in the same process then claimed, learns it as
/// that claim is granted, and runs no further node: it used to carry on to its next write,
/// which in `Async` or `Exit` mode may be its last, running every step after it a second
/// time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_granted_in_the_same_process_stops_the_execution_it_replaced() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let blocked_once = Arc::new(AtomicBool::new(true));
    let seconds = Arc::new(AtomicUsize::new(0));
    let (entered, in_first) = mpsc::channel::<()>();
    let entered = Mutex::new(entered);
    let (block, ran) = (Arc::clone(&blocked_once), Arc::clone(&seconds));
    let graph = Graph::new("blocking")
        .node_sync("first", move |n: &mut u32| {
            if block.swap(false, Ordering::SeqCst) {
                let _ = entered.lock().unwrap().send(());
                // Blocks its runtime's only thread, and so the heartbeat renewing its lease.
                std::thread::sleep(Duration::from_millis(1_500));
            }
            *n += 1;
        })
        .node_sync("second", move |n: &mut u32| {
            ran.fetch_add(1, Ordering::SeqCst);
            *n += 1;
        })
        .edge(START, "first")
        .edge("first", "second")
        .edge("second", END)
        .compile()
        .unwrap();
    let rt = Runtime::builder()
        .lease(Duration::from_millis(300))
        .durability(Durability::Async)
        .build();
    let (first_graph, first_rt) = (graph.clone(), rt.clone());
    let first = std::thread::spawn(move || {
        let single = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        single.block_on(first_graph.invoke(&first_rt, "t", 0))
    });
    in_first.recv().unwrap();
    let second = graph
        .recover(&rt, "t")
        .wait_if_busy(Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(second.completed().unwrap(), 2);
    match first.join().unwrap() {
        Err(RunError::Store(StoreError::LeaseLost { thread, .. })) => assert_eq!(thread, "t"),
        other => panic!("the first execution stops with its lost lease, not {other:?}"),
    }
    assert_eq!(seconds.load(Ordering::SeqCst), 1, "`second` ran once");
}
