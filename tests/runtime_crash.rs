//! Crash recovery for real: a child process runs a graph on a SQLite file and is killed with
//! SIGKILL at a chosen point (between supersteps, inside a journaled step, while suspended);
//! a fresh process carries the run on. Side effects are counted in a file outside the
//! database, so the counts span processes.
//!
//! The child is this same test binary, re-run with `--ignored --exact crash_child` and the
//! `LOOMFLOW_CRASH_*` variables.
//!
//! A process killed mid-run still holds its run's claim until the lease expires, so the
//! children use a short lease and recover with `wait_if_busy`, as an application restarting
//! after a crash would.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use loomflow::prelude::*;
use loomflow::runtime::SqliteStore;
use loomflow_tests::child_test_process;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Job {
    log: Vec<String>,
    charge: Option<String>,
    approved: Option<bool>,
}

/// Appends a line to the effects file: the record of what really ran, across processes.
fn effect(line: &str) {
    let path = std::env::var("LOOMFLOW_CRASH_EFFECTS").unwrap();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    writeln!(file, "{line}").unwrap();
    file.sync_all().unwrap();
}

/// Announces a pause point to the parent and, if asked to, waits there to be killed.
async fn maybe_pause(point: &str) {
    if std::env::var("LOOMFLOW_CRASH_PAUSE_AT").as_deref() == Ok(point) {
        println!("PAUSED {point}");
        std::io::stdout().flush().unwrap();
        std::future::pending::<()>().await;
    }
}

fn graph() -> CompiledGraph<Job> {
    let mut graph = Graph::new("crashy");
    for name in ["n1", "n2", "n3"] {
        graph = graph.node_fn(name, move |job: &mut Job, _ctx| {
            Box::pin(async move {
                effect(&format!("start {name}"));
                maybe_pause(name).await;
                job.log.push(name.to_owned());
                Ok(())
            })
        });
    }
    graph
        .node_fn("pay", |job: &mut Job, ctx| {
            Box::pin(async move {
                effect("start pay");
                let id: String = ctx
                    .step("charge", || async {
                        effect("charge attempt");
                        maybe_pause("charge").await;
                        effect("charge done");
                        Ok::<_, Error>("ch_1".to_owned())
                    })
                    .await?;
                maybe_pause("after_charge").await;
                job.charge = Some(id);
                Ok(())
            })
        })
        .node_fn("approve", |job: &mut Job, ctx| {
            Box::pin(async move {
                effect("start approve");
                let approved: bool = ctx.interrupt("approve the job?")?;
                job.approved = Some(approved);
                Ok(())
            })
        })
        .node_fn("wait", |job: &mut Job, ctx| {
            Box::pin(async move {
                effect("start wait");
                let note: String = ctx.wait_for_signal("note").await?;
                job.log.push(note);
                Ok(())
            })
        })
        .edge(START, "n1")
        .edge("n1", "n2")
        .edge("n2", "n3")
        .edge("n3", "pay")
        .edge("pay", "approve")
        .edge("approve", "wait")
        .edge("wait", END)
        .compile()
        .unwrap()
}

/// How long a child's claim on the run outlives the child.
const LEASE: Duration = Duration::from_millis(500);

/// The child process: one action on the database, then exit (unless killed first).
#[test]
#[ignore = "entry point of the child process of the crash tests; run by them"]
fn crash_child() {
    let Ok(db) = std::env::var("LOOMFLOW_CRASH_DB") else {
        return;
    };
    let action = std::env::var("LOOMFLOW_CRASH_ACTION").unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let runtime = Runtime::builder()
            .store(SqliteStore::open(&db).unwrap())
            .lease(LEASE)
            .build();
        let graph = graph();
        // A killed predecessor's claim runs out after LEASE.
        let patience = LEASE * 20;
        let outcome = match action.as_str() {
            "start" => graph
                .invoke(&runtime, "job-1", Job::default())
                .await
                .unwrap(),
            "recover" => graph
                .recover(&runtime, "job-1")
                .wait_if_busy(patience)
                .await
                .unwrap(),
            "resume" => graph
                .resume(&runtime, "job-1", true)
                .wait_if_busy(patience)
                .await
                .unwrap(),
            "signal" => {
                runtime.signal("job-1", "note", "signed").await.unwrap();
                println!("SIGNALLED");
                std::io::stdout().flush().unwrap();
                std::future::pending::<()>().await;
                unreachable!()
            }
            other => panic!("unknown action {other}"),
        };
        match outcome {
            RunOutcome::Completed(job) => {
                println!("COMPLETED {}", serde_json::to_string(&job).unwrap())
            }
            RunOutcome::Interrupted { interrupts, .. } => {
                println!("INTERRUPTED {}", interrupts[0].id)
            }
            other => println!("OTHER {other:?}"),
        }
    });
}

struct Scenario {
    dir: PathBuf,
}

impl Scenario {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("loomflow-crash-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self { dir }
    }

    fn spawn(&self, action: &str, pause_at: Option<&str>) -> Child {
        let mut cmd = child_test_process("crash_child");
        cmd.env("LOOMFLOW_CRASH_DB", self.dir.join("journal.db"))
            .env("LOOMFLOW_CRASH_EFFECTS", self.dir.join("effects.log"))
            .env("LOOMFLOW_CRASH_ACTION", action)
            .env_remove("LOOMFLOW_CRASH_PAUSE_AT")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(point) = pause_at {
            cmd.env("LOOMFLOW_CRASH_PAUSE_AT", point);
        }
        cmd.spawn().unwrap()
    }

    /// Runs the child until it prints a line starting with `marker`; kills it with SIGKILL
    /// when `kill` is set, else waits for it to exit. Returns the line.
    fn run_until(&self, action: &str, pause_at: Option<&str>, marker: &str, kill: bool) -> String {
        let mut child = self.spawn(action, pause_at);
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let marker_owned = marker.to_owned();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // libtest may print its own prefix on the same line.
                // Keep draining afterwards, so the child never writes to a closed pipe.
                if let Some(at) = line.find(&marker_owned) {
                    let _ = tx.send(line[at..].to_owned());
                }
            }
        });
        let line = rx.recv_timeout(Duration::from_secs(60));
        if kill || line.is_err() {
            child.kill().unwrap(); // SIGKILL on Unix
        }
        child.wait().unwrap();
        line.unwrap_or_else(|_| panic!("child {action} never printed {marker}"))
    }

    fn effects(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("effects.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn count(&self, line: &str) -> usize {
        self.effects().iter().filter(|l| *l == line).count()
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn killed_between_supersteps_finished_steps_do_not_run_again() {
    let s = Scenario::new("between");
    s.run_until("start", Some("n3"), "PAUSED n3", true);
    assert_eq!(s.effects(), ["start n1", "start n2", "start n3"]);

    let line = s.run_until("recover", None, "INTERRUPTED", false);
    assert_eq!(line, "INTERRUPTED approve#0");
    assert_eq!(s.count("start n1"), 1, "n1 finished before the crash");
    assert_eq!(s.count("start n2"), 1, "n2 finished before the crash");
    assert_eq!(s.count("start n3"), 2, "n3 was cut off, so it runs again");
    assert_eq!(s.count("charge done"), 1);
}

#[test]
fn killed_inside_a_journaled_step_it_runs_again_but_once_recorded_it_does_not() {
    let s = Scenario::new("in-step");
    // Killed inside the step: nothing was recorded, so the step runs again.
    s.run_until("start", Some("charge"), "PAUSED charge", true);
    assert_eq!(s.count("charge attempt"), 1);
    assert_eq!(s.count("charge done"), 0);

    // Killed after the step was recorded, later in the same node.
    s.run_until("recover", Some("after_charge"), "PAUSED after_charge", true);
    assert_eq!(s.count("charge attempt"), 2);
    assert_eq!(s.count("charge done"), 1);

    // The node runs again; the journal answers the step.
    let line = s.run_until("recover", None, "INTERRUPTED", false);
    assert_eq!(line, "INTERRUPTED approve#0");
    assert_eq!(s.count("start pay"), 3);
    assert_eq!(
        s.count("charge attempt"),
        2,
        "the recorded charge is not made again"
    );
    assert_eq!(s.count("charge done"), 1);
}

#[test]
fn killed_while_suspended_a_fresh_process_resumes_and_a_stored_signal_survives_a_crash() {
    let s = Scenario::new("suspended");
    // Run to the approval interrupt; the process is killed while the run is suspended.
    s.run_until("start", Some("never"), "INTERRUPTED approve#0", true);
    // A web handler process sends the note and dies right after `signal` returned Ok.
    s.run_until("signal", None, "SIGNALLED", true);
    // A fresh process resumes the approval; the run waits for the note and finds it stored.
    let line = s.run_until("resume", None, "COMPLETED", false);
    let job: Job = serde_json::from_str(line.trim_start_matches("COMPLETED ")).unwrap();

    let expected = Job {
        log: vec!["n1".into(), "n2".into(), "n3".into(), "signed".into()],
        charge: Some("ch_1".into()),
        approved: Some(true),
    };
    assert_eq!(job, expected, "the same state an uninterrupted run gives");
    for node in ["n1", "n2", "n3", "pay"] {
        assert_eq!(s.count(&format!("start {node}")), 1, "{node} ran once");
    }
    assert_eq!(
        s.count("start approve"),
        2,
        "approve ran, suspended, and ran again on resume"
    );
    assert_eq!(s.count("charge attempt"), 1);
}

#[test]
fn the_database_path_is_named_when_it_cannot_be_opened() {
    let missing = Path::new("/nonexistent-dir-for-loomflow/journal.db");
    let err = Runtime::sqlite(missing).unwrap_err();
    assert!(
        err.to_string()
            .contains("/nonexistent-dir-for-loomflow/journal.db"),
        "{err}"
    );
}
