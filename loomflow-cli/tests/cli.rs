//! The `loomflow` binary as an operator uses it, on a SQLite file a program wrote: list and
//! show runs, send a signal that a run then receives, approve and reject pending tool calls,
//! cancel, delete, render the graph; and the exit codes scripts test.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "../../tests/support/asker.rs"]
mod asker;
#[path = "../../tests/support/held_run.rs"]
mod held_run;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use asker::asker;
use held_run::HeldRun;
use loomflow::agent::Agent;
use loomflow::model::{ModelResponse, ScriptedModel, ToolCall};
use loomflow::prelude::*;
use loomflow::runtime::RunState;

struct Db(PathBuf);

impl Db {
    fn new(name: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("loomflow-cli-{name}-{}.db", std::process::id()));
        let db = Self(path);
        db.remove();
        db
    }

    fn remove(&self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.0.display()));
        }
    }

    fn url(&self) -> String {
        format!("sqlite:{}", self.0.display())
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Runs `loomflow --db <db> args...`.
fn loomflow(db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_loomflow"))
        .arg("--db")
        .arg(format!("sqlite:{}", db.display()))
        .args(args)
        .env_remove("LOOMFLOW_DB")
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Refund {
    order: String,
    approved: Option<bool>,
}

fn refund_graph() -> CompiledGraph<Refund> {
    Graph::new("refund")
        .node_fn("ask_manager", |r: &mut Refund, ctx| {
            Box::pin(async move {
                r.approved = Some(ctx.wait_for_signal("review").or_suspend().await?);
                Ok(())
            })
        })
        .node_sync("pay", |_r: &mut Refund| {})
        .edge(START, "ask_manager")
        .edge("ask_manager", "pay")
        .edge("pay", END)
        .compile()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_listed_shown_signalled_drawn_and_cancelled() {
    let db = Db::new("runs");
    let runtime = Runtime::sqlite(&db.0).unwrap();
    let graph = refund_graph();
    for order in ["ord_1", "ord_2"] {
        let input = Refund {
            order: order.into(),
            approved: None,
        };
        let outcome = graph.invoke(&runtime, order, input).await.unwrap();
        assert_eq!(outcome.interrupts().len(), 1);
    }

    let listed = loomflow(&db.0, &["runs", "--status", "waiting"]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    let text = stdout(&listed);
    assert!(text.starts_with("THREAD"), "{text}");
    assert!(text.contains("ord_1") && text.contains("ord_2") && text.contains("review"));
    let listed = loomflow(&db.0, &["--json", "runs", "--graph", "refund"]);
    let records: Vec<serde_json::Value> = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0]["state"], "waiting");
    // A page at a time: a full page ends with the next one's `--after`.
    let first = loomflow(&db.0, &["runs", "--limit", "1"]);
    let (more, first) = (stderr(&first), stdout(&first));
    let (_, after) = more.split_once("more: --after ").expect(&more);
    let second = loomflow(
        &db.0,
        &["runs", "--limit", "1", "--after", after.trim_end()],
    );
    assert!(!stderr(&second).contains("more:"), "the last page");
    let second = stdout(&second);
    let listed_first = if first.contains("ord_1") {
        "ord_1"
    } else {
        "ord_2"
    };
    let listed_second = if listed_first == "ord_1" {
        "ord_2"
    } else {
        "ord_1"
    };
    assert!(
        second.contains(listed_second) && !second.contains(listed_first),
        "{second}"
    );
    let bad = loomflow(&db.0, &["runs", "--after", "yesterday"]);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));

    let shown = loomflow(&db.0, &["show", "ord_1"]);
    let text = stdout(&shown);
    assert!(shown.status.success(), "{}", stderr(&shown));
    for expected in [
        "state      waiting",
        "ask_manager#signal:review",
        "\"order\": \"ord_1\"",
    ] {
        assert!(text.contains(expected), "{expected} missing from:\n{text}");
    }

    let drawn = stdout(&loomflow(&db.0, &["graph", "ord_1"]));
    assert!(drawn.starts_with("flowchart TD"), "{drawn}");
    assert!(drawn.contains(r#"n0["ask_manager"]:::current"#), "{drawn}");
    assert!(drawn.contains("n0 --> n1"), "{drawn}");

    let sent = loomflow(&db.0, &["signal", "ord_1", "review", "true", "--key", "k1"]);
    assert!(sent.status.success(), "{}", stderr(&sent));
    // The same key, as a file or a copy and paste gives it (as over HTTP, it is trimmed).
    let again = loomflow(
        &db.0,
        &["signal", "ord_1", "review", "true", "--key", " k1\n"],
    );
    assert!(stdout(&again).contains("duplicate"), "{}", stdout(&again));
    // Until the run is carried on, `show` says what it waits for has come.
    let shown = stdout(&loomflow(&db.0, &["show", "ord_1"]));
    assert!(
        shown.contains("it has come: a worker or `recover`"),
        "{shown}"
    );
    let shown = loomflow(&db.0, &["--json", "show", "ord_1"]);
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(
        shown["answered_interrupts"],
        json!(["ask_manager#signal:review"])
    );
    let untouched = stdout(&loomflow(&db.0, &["show", "ord_2"]));
    assert!(!untouched.contains("it has come"), "{untouched}");
    // The run, carried on by the program, receives what the CLI sent.
    let done = graph
        .recover(&Runtime::sqlite(&db.0).unwrap(), "ord_1")
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(done.approved, Some(true));
    // The run has ended: a late signal would wait for the thread's next run. Refused.
    let late = loomflow(&db.0, &["signal", "ord_1", "review", "false"]);
    assert_eq!(late.status.code(), Some(4), "{}", stderr(&late));
    assert!(stderr(&late).contains("completed"), "{}", stderr(&late));
    // Nor is there anything to cancel: refused, so that `cancel X && …` does not read as done.
    let ended = loomflow(&db.0, &["cancel", "ord_1"]);
    assert_eq!(ended.status.code(), Some(4), "{}", stderr(&ended));
    assert!(
        stderr(&ended).contains("has ended (completed)"),
        "{}",
        stderr(&ended)
    );
    let reserved = loomflow(&db.0, &["signal", "ord_2", "loomflow:approval:x", "1"]);
    assert_eq!(reserved.status.code(), Some(4), "{}", stderr(&reserved));
    let empty_key = loomflow(&db.0, &["signal", "ord_2", "review", "1", "--key", ""]);
    assert_eq!(empty_key.status.code(), Some(2), "{}", stderr(&empty_key));

    let cancelled = loomflow(&db.0, &["cancel", "ord_2"]);
    assert!(
        stdout(&cancelled).contains("ord_2: cancelled"),
        "{}",
        stdout(&cancelled)
    );
    let runtime = Runtime::sqlite(&db.0).unwrap();
    assert_eq!(
        runtime.run("ord_2").await.unwrap().record.state,
        RunState::Cancelled
    );
}

/// `loomflow` in a process of its own, from a test that keeps its runtime going.
async fn loomflow_apart(db: &Path, args: &[&str]) -> Output {
    let (db, args) = (
        db.to_owned(),
        args.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
    );
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        loomflow(&db, &args)
    })
    .await
    .unwrap()
}

/// `delete` takes a suspended run's thread away, and is refused (4) while a run executes
/// in another process: the program here holds its claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_removes_a_thread_and_is_refused_while_its_run_executes() {
    let db = Db::new("delete");
    let runtime = Runtime::sqlite(&db.0).unwrap();
    asker::<u32>()
        .invoke(&runtime, "ord_9", None)
        .await
        .unwrap();
    let held = HeldRun::start(&runtime, "busy", 1).await;
    let refused = loomflow_apart(&db.0, &["delete", "busy"]).await;
    assert_eq!(refused.status.code(), Some(4), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("thread busy is busy"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(held.finish().await, 2);

    let deleted = loomflow_apart(&db.0, &["delete", "ord_9"]).await;
    assert!(deleted.status.success(), "{}", stderr(&deleted));
    assert!(
        stdout(&deleted).contains(
            "ord_9: deleted its run, 2 checkpoints, 0 journal entries, 0 pending signals"
        ),
        "{}",
        stdout(&deleted)
    );
    assert_eq!(loomflow(&db.0, &["show", "ord_9"]).status.code(), Some(3));
    assert!(runtime.list_checkpoints("ord_9").await.unwrap().is_empty());
    let json = loomflow_apart(&db.0, &["--json", "delete", "busy"]).await;
    let counted: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(counted["checkpoints"], 2, "{counted}");
    assert_eq!(
        (&counted["thread"], &counted["run"]),
        (&json!("busy"), &json!(true))
    );
}

#[test]
fn exit_codes_say_what_went_wrong() {
    let db = Db::new("codes");
    drop(Runtime::sqlite(&db.0).unwrap());
    let code = |args: &[&str]| loomflow(&db.0, args).status.code().unwrap();
    assert_eq!(code(&["show", "nobody"]), 3, "no such run");
    assert_eq!(code(&["signal", "t", "go", "{not json"]), 2, "bad JSON");
    assert_eq!(code(&["signal", "t", "go", "1"]), 3, "a thread with no run");
    // JSON as deep as loomflow keeps it is JSON, though serde_json alone stops at 128.
    let nested = |levels: usize| format!("{}{}", "[".repeat(levels), "]".repeat(levels));
    assert_eq!(code(&["signal", "t", "go", &nested(200)]), 3, "deep JSON");
    assert_eq!(code(&["signal", "t", "go", &nested(600)]), 2, "too deep");
    assert_eq!(code(&["runs", "--status", "sleepy"]), 2, "unknown status");
    // A word the shell took the quotes of: the error says how to write a string.
    let word = loomflow(&db.0, &["resume", "t", "yes"]);
    assert_eq!(word.status.code(), Some(2), "{}", stderr(&word));
    assert!(stderr(&word).contains(r#"'"yes"'"#), "{}", stderr(&word));
    assert_eq!(code(&["approve", "t", "call_1"]), 3, "nothing pending");
    assert_eq!(code(&["frobnicate"]), 2, "unknown command");
    let missing = Command::new(env!("CARGO_BIN_EXE_loomflow"))
        .args(["--db", "sqlite:/nonexistent/dir/x.db", "runs"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(3), "{}", stderr(&missing));
    // A directory is not found either (SQLite would say "disk I/O error").
    let dir = std::env::temp_dir();
    let directory = Command::new(env!("CARGO_BIN_EXE_loomflow"))
        .args(["--db", dir.to_str().unwrap(), "runs"])
        .output()
        .unwrap();
    assert_eq!(directory.status.code(), Some(3), "{}", stderr(&directory));
    assert!(
        stderr(&directory).contains("is a directory"),
        "{}",
        stderr(&directory)
    );
    let none = Command::new(env!("CARGO_BIN_EXE_loomflow"))
        .arg("runs")
        .env_remove("LOOMFLOW_DB")
        .output()
        .unwrap();
    assert_eq!(none.status.code(), Some(2));
    assert!(stderr(&none).contains("LOOMFLOW_DB"), "{}", stderr(&none));
    // The environment names the store too.
    let via_env = Command::new(env!("CARGO_BIN_EXE_loomflow"))
        .arg("runs")
        .env("LOOMFLOW_DB", db.url())
        .output()
        .unwrap();
    assert!(via_env.status.success(), "{}", stderr(&via_env));
    // A value read from a file keeps its newline; an empty placeholder names no store.
    let padded = Command::new(env!("CARGO_BIN_EXE_loomflow"))
        .arg("runs")
        .env("LOOMFLOW_DB", format!(" {}\n", db.url()))
        .output()
        .unwrap();
    assert!(padded.status.success(), "{}", stderr(&padded));
    let empty = Command::new(env!("CARGO_BIN_EXE_loomflow"))
        .arg("runs")
        .env("LOOMFLOW_DB", "")
        .output()
        .unwrap();
    assert_eq!(empty.status.code(), Some(2), "{}", stderr(&empty));
    assert!(stderr(&empty).contains("no store"), "{}", stderr(&empty));
}

/// The command line opens only a store at its own schema, and changes nothing before it has
/// checked: a file another application uses gets no tables (and keeps its journal mode),
/// and an older store is not upgraded behind its workers' backs (who would then refuse it).
#[test]
fn a_file_that_is_not_a_current_loomflow_store_is_left_as_it_is() {
    let foreign = Db::new("foreign");
    let conn = rusqlite::Connection::open(&foreign.0).unwrap();
    conn.execute_batch("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
        .unwrap();
    drop(conn);
    let before = std::fs::read(&foreign.0).unwrap();
    for args in [&["runs"][..], &["show", "t"], &["signal", "t", "go", "1"]] {
        let output = loomflow(&foreign.0, args);
        assert_eq!(
            output.status.code(),
            Some(3),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains("no loomflow store"),
            "{}",
            stderr(&output)
        );
    }
    assert_eq!(
        std::fs::read(&foreign.0).unwrap(),
        before,
        "the file is as it was"
    );
    let conn = rusqlite::Connection::open(&foreign.0).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete");
    drop(conn);

    let older = Db::new("older");
    drop(Runtime::sqlite(&older.0).unwrap());
    let conn = rusqlite::Connection::open(&older.0).unwrap();
    conn.execute("UPDATE meta SET schema_version = 10", [])
        .unwrap();
    let output = loomflow(&older.0, &["runs"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("older than"),
        "{}",
        stderr(&output)
    );
    let version: i64 = conn
        .query_row("SELECT schema_version FROM meta", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 10, "not upgraded");
}

/// A payload the store refuses (nested deeper than it keeps, though it parses) is refused
/// (4), not a store failure (1) that a script would try again.
#[tokio::test]
async fn a_payload_the_store_refuses_is_4() {
    let db = Db::new("refused");
    let runtime = Runtime::sqlite(&db.0).unwrap();
    runtime.submit("refund", "t", json!({})).await.unwrap();
    drop(runtime);
    let nested = format!("{}1{}", "[".repeat(511), "]".repeat(511));
    let output = loomflow_apart(&db.0, &["signal", "t", "go", &nested]).await;
    assert_eq!(output.status.code(), Some(4), "{}", stderr(&output));
}

/// `serve` stops gracefully on SIGTERM (`docker stop`, systemd), as on Ctrl-C: it exits 0
/// rather than being killed by the signal.
#[cfg(unix)]
#[test]
fn serve_stops_on_sigterm() {
    let db = Db::new("sigterm");
    drop(Runtime::sqlite(&db.0).unwrap());
    let (mut server, _addr) = serve(&db, &[("LOOMFLOW_TOKEN", "tok")]);
    let sent = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let status = server.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
}

/// Refund an order. Moves money.
#[tool(approval)]
fn refund(order: String, cents: u64) -> String {
    format!("refunded {cents} cents on {order}")
}

fn agent(db: &Path, replies: Vec<ModelResponse>) -> Agent {
    Agent::builder("You handle refunds.")
        .name("refunds")
        .model(ScriptedModel::new(replies))
        .tool(refund)
        .durable_approvals()
        .runtime(Runtime::sqlite(db).unwrap())
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_calls_are_shown_with_their_arguments_and_decided() {
    let db = Db::new("approvals");
    for session in ["s1", "s2"] {
        let call = ToolCall::new(
            "call_7",
            "refund",
            json!({ "order": "ord_42", "cents": 1299 }),
        );
        let asked = agent(&db.0, vec![ModelResponse::tool_calls(vec![call])])
            .run("refund order 42")
            .session(session)
            .await
            .unwrap();
        assert!(asked.interrupted);
    }
    let shown = stdout(&loomflow(&db.0, &["show", "s1"]));
    for expected in [
        "approvals:",
        "call_7  tool refund",
        "\"order\": \"ord_42\"",
        "\"cents\": 1299",
    ] {
        assert!(
            shown.contains(expected),
            "{expected} missing from:\n{shown}"
        );
    }
    let json_shown: serde_json::Value =
        serde_json::from_slice(&loomflow(&db.0, &["--json", "show", "s1"]).stdout).unwrap();
    assert_eq!(json_shown["approvals"][0]["arguments"]["cents"], 1299);

    // Edited arguments are an object of the tool's arguments; anything else is bad usage,
    // and the call stays pending.
    for edit in ["[1, 2]", "\"ord_42\"", "null"] {
        let bad = loomflow(&db.0, &["approve", "s2", "call_7", "--edit", edit]);
        assert_eq!(
            bad.status.code(),
            Some(2),
            "--edit {edit}: {}",
            stderr(&bad)
        );
        assert!(stderr(&bad).contains("JSON object"), "{}", stderr(&bad));
    }

    let rejected = loomflow(
        &db.0,
        &[
            "reject",
            "s1",
            "call_7",
            "--reason",
            "no receipt",
            "--by",
            "grace",
        ],
    );
    assert!(rejected.status.success(), "{}", stderr(&rejected));
    // `show` prints when each request was made, as `--asked-at` takes it: a decision for
    // another request (one the call made before, or will make later, under the same id) is
    // refused, and the call stays pending.
    let s2: serde_json::Value =
        serde_json::from_slice(&loomflow(&db.0, &["--json", "show", "s2"]).stdout).unwrap();
    let asked_at = s2["approvals"][0]["requested_at_ms"].as_u64().unwrap();
    let shown = stdout(&loomflow(&db.0, &["show", "s2"]));
    assert!(shown.contains(&format!("({asked_at} ms)")), "{shown}");
    let earlier = (asked_at - 1).to_string();
    let stale = loomflow(&db.0, &["approve", "s2", "call_7", "--asked-at", &earlier]);
    assert_eq!(stale.status.code(), Some(4), "{}", stderr(&stale));
    assert!(
        stderr(&stale).contains(&format!("waits on the request asked at {asked_at} ms")),
        "{}",
        stderr(&stale)
    );
    let asked_at = asked_at.to_string();
    let edited = loomflow(
        &db.0,
        &[
            "approve",
            "s2",
            "call_7",
            "--edit",
            r#"{"order": "ord_42", "cents": 500}"#,
            "--asked-at",
            &asked_at,
        ],
    );
    assert!(edited.status.success(), "{}", stderr(&edited));
    let again = loomflow(&db.0, &["approve", "s2", "call_7"]);
    assert_eq!(
        again.status.code(),
        Some(4),
        "decided already: {}",
        stderr(&again)
    );

    let refused = agent(&db.0, vec![ModelResponse::text("Not refunded.")])
        .resume("s1")
        .await
        .unwrap();
    let transcript = serde_json::to_string(&refused.messages).unwrap();
    assert!(transcript.contains("no receipt"), "{transcript}");
    let paid = agent(&db.0, vec![ModelResponse::text("Refunded.")])
        .resume("s2")
        .await
        .unwrap();
    let transcript = serde_json::to_string(&paid.messages).unwrap();
    assert!(
        transcript.contains("refunded 500 cents on ord_42"),
        "{transcript}"
    );

    // The audit log says who decided what, and what ran.
    let log: serde_json::Value = serde_json::from_slice(
        &loomflow(&db.0, &["--json", "audit", "s1", "--kind", "decision"]).stdout,
    )
    .unwrap();
    assert_eq!(log[0]["actor"], "grace");
    assert_eq!(log[0]["detail"]["decision"], "deny");
    assert_eq!(log[0]["detail"]["reason"], "no receipt");
    let log: serde_json::Value =
        serde_json::from_slice(&loomflow(&db.0, &["--json", "audit", "s2"]).stdout).unwrap();
    let decision = log
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "decision")
        .unwrap();
    assert_eq!(decision["detail"]["decision"], "edit");
    assert_eq!(decision["detail"]["arguments"]["cents"], 500);
    // Paged with --limit and --after (the last id of a page), the log reads whole, once.
    let ids = |log: &serde_json::Value| -> Vec<u64> {
        (log.as_array().unwrap().iter())
            .map(|e| e["id"].as_u64().unwrap())
            .collect()
    };
    let all = ids(&log);
    assert!(all.len() >= 3, "{log}");
    let (mut paged, mut after) = (Vec::<u64>::new(), None::<u64>);
    loop {
        let mut args = vec![
            "--json".to_owned(),
            "audit".into(),
            "s2".into(),
            "--limit".into(),
        ];
        args.push("2".into());
        if let Some(id) = after {
            args.extend(["--after".to_owned(), id.to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let page = ids(&serde_json::from_slice(&loomflow(&db.0, &args).stdout).unwrap());
        paged.extend(&page);
        match page.last() {
            Some(&last) if page.len() == 2 => after = Some(last),
            _ => break,
        }
    }
    assert_eq!(paged, all);
    let table = stdout(&loomflow(&db.0, &["audit", "s2", "--kind", "tool_call"]));
    assert!(
        table.contains("tool_call") && table.contains("refund"),
        "{table}"
    );
    assert!(table.contains("\"cents\":500"), "{table}");
    let bad = loomflow(&db.0, &["audit", "s2", "--kind", "toolcall"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("unknown audit kind"),
        "{}",
        stderr(&bad)
    );
}

/// Operators deciding the same call at the same moment: one decision is taken, the others
/// are told so, and none is left over to answer a later call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_decided_by_several_at_once_is_decided_once() {
    let db = Db::new("decided-once");
    for round in 0..3 {
        let session = format!("race-{round}");
        let call = ToolCall::new("call_1", "refund", json!({ "order": "ord_1", "cents": 10 }));
        let asked = agent(&db.0, vec![ModelResponse::tool_calls(vec![call])])
            .run("refund order 1")
            .session(&session)
            .await
            .unwrap();
        assert!(asked.interrupted);
        let deciders: Vec<_> = [
            vec!["approve", &session, "call_1"],
            vec!["reject", &session, "call_1", "--reason", "no"],
            vec!["approve", &session, "call_1"],
            vec!["reject", &session, "call_1", "--reason", "no"],
        ]
        .into_iter()
        .map(|args| {
            Command::new(env!("CARGO_BIN_EXE_loomflow"))
                .arg("--db")
                .arg(format!("sqlite:{}", db.0.display()))
                .args(args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
        let codes: Vec<i32> = deciders
            .into_iter()
            .map(|child| child.wait_with_output().unwrap().status.code().unwrap())
            .collect();
        assert_eq!(
            codes.iter().filter(|&&code| code == 0).count(),
            1,
            "exactly one decision is taken: {codes:?}"
        );
        assert!(
            codes.iter().all(|&code| [0, 3, 4].contains(&code)),
            "the others are told nothing is pending (3) or it was decided (4): {codes:?}"
        );
        let carried_on = agent(&db.0, vec![ModelResponse::text("Done.")])
            .resume(&session)
            .await
            .unwrap();
        assert!(!carried_on.interrupted);
        let runtime = Runtime::sqlite(&db.0).unwrap();
        let stored = runtime.store().pending_signals().await.unwrap();
        let left = stored.iter().filter(|s| s.session == session).count();
        assert_eq!(left, 0, "no decision left over on {session}");
    }
}

/// `loomflow serve` on `db`, with `env` set: the server, and the address it listens on.
fn serve(db: &Db, env: &[(&str, &str)]) -> (std::process::Child, String) {
    use std::io::{BufRead, BufReader};

    let mut command = Command::new(env!("CARGO_BIN_EXE_loomflow"));
    command.args(["--db", &db.url(), "serve", "--listen", "127.0.0.1:0"]);
    for var in [
        "LOOMFLOW_TOKEN",
        "LOOMFLOW_GITHUB_SECRET",
        "LOOMFLOW_SIGNING_SECRET",
    ] {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    let mut server = command
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    (server, addr)
}

/// The reply to `POST path` with `body` and the `headers` lines (each ending in CRLF).
fn post(addr: &str, path: &str, headers: &str, body: &str) -> String {
    use std::io::{Read, Write};

    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
         {headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    reply
}

const REVIEW: &str = "/v1/threads/ord_9/signals/review";

#[test]
fn serve_answers_signals_and_refuses_callers_without_the_token() {
    let db = Db::new("serve");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let runtime = Runtime::sqlite(&db.0).unwrap();
        runtime.submit("refund", "ord_9", json!({})).await.unwrap();
    });
    let (mut server, addr) = serve(&db, &[("LOOMFLOW_TOKEN", "tok")]);
    let body = r#"{"approved": true}"#;
    let refused = post(&addr, REVIEW, "", body);
    let accepted = post(&addr, REVIEW, "Authorization: Bearer tok\r\n", body);
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    assert!(accepted.starts_with("HTTP/1.1 202"), "{accepted}");

    // Without a token (or with an empty one) every request would be refused: it says so
    // and does not start.
    for token in [None, Some("")] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_loomflow"));
        command.args(["--db", &db.url(), "serve", "--listen", "127.0.0.1:0"]);
        match token {
            Some(token) => command.env("LOOMFLOW_TOKEN", token),
            None => command.env_remove("LOOMFLOW_TOKEN"),
        };
        let output = command.output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(
            stderr(&output).contains("needs a bearer token"),
            "{}",
            stderr(&output)
        );
    }
}

/// A webhook receiver needs no token: `serve` with only a signing secret starts, accepts a
/// signed signal and refuses an unsigned one. An empty secret, which anyone could sign
/// with, is refused at start.
#[test]
fn serve_with_only_a_webhook_secret_accepts_signed_signals() {
    let db = Db::new("serve-signed");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let runtime = Runtime::sqlite(&db.0).unwrap();
        runtime.submit("refund", "ord_9", json!({})).await.unwrap();
    });
    let (mut server, addr) = serve(&db, &[("LOOMFLOW_SIGNING_SECRET", "sec")]);
    let body = r#"{"approved": true}"#;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let signature = loomflow::http::signature_header("sec", now, REVIEW, "d-1", body.as_bytes());
    let signed = format!("X-Loomflow-Delivery: d-1\r\nX-Loomflow-Signature: {signature}\r\n");
    let refused = post(&addr, REVIEW, "", body);
    let accepted = post(&addr, REVIEW, &signed, body);
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    assert!(accepted.starts_with("HTTP/1.1 202"), "{accepted}");

    for var in ["LOOMFLOW_GITHUB_SECRET", "LOOMFLOW_SIGNING_SECRET"] {
        let output = Command::new(env!("CARGO_BIN_EXE_loomflow"))
            .args(["--db", &db.url(), "serve", "--listen", "127.0.0.1:0"])
            .env("LOOMFLOW_TOKEN", "tok")
            .env(var, "")
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(stderr(&output).contains(var), "{}", stderr(&output));
    }
}

/// `serve` on an address another process holds fails as the machine's failure (1), not as
/// bad usage; an address that is not one is bad usage (2).
#[test]
fn serve_on_an_address_in_use_fails_with_1() {
    let db = Db::new("serve-in-use");
    drop(Runtime::sqlite(&db.0).unwrap());
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    for (listen, code) in [(addr.as_str(), 1), ("not-an-address", 2)] {
        let output = Command::new(env!("CARGO_BIN_EXE_loomflow"))
            .args(["--db", &db.url(), "serve", "--listen", listen, "--no-auth"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(code), "{}", stderr(&output));
        assert!(
            stderr(&output).contains("cannot listen on"),
            "{}",
            stderr(&output)
        );
    }
}

/// What a command prints comes from callers, tools and models: a control character in it
/// is shown escaped, never sent to the operator's terminal as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_are_printed_escaped() {
    let db = Db::new("control");
    let runtime = Runtime::sqlite(&db.0).unwrap();
    runtime
        .submit("refund\u{1b}]52;c;AAAA\u{7}", "t\u{1b}[2J", json!({}))
        .await
        .unwrap();
    // A name that would print a row of its own, as if another run were there.
    let forged = "x\nord_7      refund  completed";
    runtime.submit("refund", forged, json!({})).await.unwrap();
    drop(runtime);
    let output = loomflow(&db.0, &["runs"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert_eq!(text.lines().count(), 3, "a header and two runs: {text}");
    assert!(text.contains("x\\u000aord_7"), "{text}");
    // Nor in `show`, whose facts are a line each.
    let show = loomflow(&db.0, &["show", forged]);
    assert!(show.status.success(), "{}", stderr(&show));
    let said = stdout(&show);
    assert!(
        !said.lines().any(|line| line.starts_with("ord_7")),
        "{said}"
    );
    assert!(said.contains("x\\u000aord_7"), "{said}");
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}'),
        "{text:?}"
    );
    assert!(text.contains("refund\\u001b]52;c;AAAA\\u0007"), "{text}");
    assert!(text.contains("t\\u001b[2J"), "{text}");
    // `--json` output stays JSON, whatever the text holds.
    let db2 = Db::new("control-json");
    let runtime = Runtime::sqlite(&db2.0).unwrap();
    runtime
        .submit("g\u{9b}31m\u{7f}", "t", json!({}))
        .await
        .unwrap();
    drop(runtime);
    let output = loomflow(&db2.0, &["--json", "runs"]);
    let runs: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(runs[0]["graph"], "g\u{9b}31m\u{7f}", "{runs}");
}

#[test]
fn the_audit_of_a_thread_that_never_ran_is_not_found() {
    let db = Db::new("audit-unknown");
    drop(Runtime::sqlite(&db.0).unwrap());
    let output = loomflow(&db.0, &["audit", "ord_typo"]);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("has no run"),
        "{}",
        stderr(&output)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_run_is_resumed_from_the_command_line() {
    let db = Db::new("resume");
    let runtime = Runtime::sqlite(&db.0).unwrap();
    let graph = Graph::new("ask")
        .node_fn("ask", |answer: &mut Option<bool>, ctx| {
            Box::pin(async move {
                *answer = Some(ctx.interrupt(json!({"question": "refund?"}))?);
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
        .unwrap();
    let outcome = graph.invoke(&runtime, "q1", None).await.unwrap();
    assert_eq!(outcome.interrupts().len(), 1);
    let shown = stdout(&loomflow(&db.0, &["show", "q1"]));
    assert!(shown.contains("state      interrupted"), "{shown}");

    // A mistyped interrupt id is refused at once, and spoils nothing sent after it.
    let typo = loomflow(&db.0, &["resume", "q1", "true", "--interrupt", "ask#9"]);
    assert_eq!(typo.status.code(), Some(3), "{}", stderr(&typo));
    assert!(
        stderr(&typo).contains("ask#9 is not pending"),
        "{}",
        stderr(&typo)
    );
    let resumed = loomflow(&db.0, &["resume", "q1", "true"]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    // The program carries the run on; the request is applied.
    let done = graph
        .recover(&Runtime::sqlite(&db.0).unwrap(), "q1")
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(done, Some(true));
    let again = loomflow(&db.0, &["resume", "q1", "true"]);
    assert_eq!(again.status.code(), Some(4), "{}", stderr(&again));
    assert!(
        stderr(&again).contains("not interrupted"),
        "{}",
        stderr(&again)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgresql_store_is_read_through_its_url() {
    let Ok(url) = std::env::var("LOOMFLOW_PG_URL") else {
        eprintln!("skipped: the CLI on PostgreSQL (set LOOMFLOW_PG_URL, or run .ci/run)");
        return;
    };
    // A database the server does not have is not found, as a missing SQLite file is.
    let missing = match url.starts_with("postgres") {
        true if url.contains('?') => format!("{url}&dbname=loomflow_no_such_db"),
        true => format!("{url}?dbname=loomflow_no_such_db"),
        false => format!("{url} dbname=loomflow_no_such_db"),
    };
    let none = Command::new(env!("CARGO_BIN_EXE_loomflow"))
        .args(["--db", &missing, "runs"])
        .output()
        .unwrap();
    assert_eq!(none.status.code(), Some(3), "{}", stderr(&none));
    assert!(
        stderr(&none).contains("no database loomflow_no_such_db"),
        "{}",
        stderr(&none)
    );
    let runtime = Runtime::postgres(&url).await.unwrap();
    let thread = format!("cli-pg-{}", std::process::id());
    runtime.submit("refund", &thread, json!({})).await.unwrap();
    let shown = Command::new(env!("CARGO_BIN_EXE_loomflow"))
        .args(["--db", &url, "show", &thread])
        .output()
        .unwrap();
    assert!(shown.status.success(), "{}", stderr(&shown));
    assert!(
        stdout(&shown).contains("state      queued"),
        "{}",
        stdout(&shown)
    );
    let cancelled = Command::new(env!("CARGO_BIN_EXE_loomflow"))
        .args(["--db", &url, "cancel", &thread])
        .output()
        .unwrap();
    assert!(
        stdout(&cancelled).contains("cancelled"),
        "{}",
        stdout(&cancelled)
    );
}

/// A connection string is never repeated in an error: it may hold a password. A libpq
/// `key=value` string is PostgreSQL's (its errors show the server without the password).
#[test]
fn a_connection_string_is_never_repeated_in_an_error() {
    for (db, code) in [
        ("postgress://app:hunter2@db/flows", 2),
        (
            "host=127.0.0.1 port=1 user=app password=hunter2 dbname=flows",
            1,
        ),
        ("app:hunter2@db/flows", 3),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_loomflow"))
            .args(["--db", db, "runs"])
            .env_remove("LOOMFLOW_DB")
            .output()
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(code),
            "{db}: {}",
            stderr(&output)
        );
        assert!(
            !stderr(&output).contains("hunter2"),
            "{db}: {}",
            stderr(&output)
        );
    }
}

/// Every argument is checked before the store is opened: bad usage is 2 whatever the store,
/// even one that is not there.
#[test]
fn bad_usage_is_2_before_the_store_is_opened() {
    let code = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_loomflow"))
            .args(["--db", "sqlite:/nonexistent/dir/x.db"])
            .args(args)
            .env_remove("LOOMFLOW_DB")
            .output()
            .unwrap();
        (output.status.code(), stderr(&output))
    };
    for args in [
        &["signal", "t", "go", "{not json"][..],
        &["signal", "t", "", "1"],
        &["signal", "t", "go", "1", "--key", ""],
        &["runs", "--status", "sleepy"],
        &["audit", "--kind", "gossip"],
        &["approve", "t", "call_1", "--edit", "[1]"],
        &["approve", "t", "call_1", "--by", ""],
        &["reject", "t", "call_1", "--by", " "],
        // The model is told why: a blank reason tells it nothing.
        &["reject", "t", "call_1", "--reason", " "],
        // A blank secret is as empty: anyone could sign with it.
        &["serve", "--github-secret", " \n"],
        &["resume", "t", "{not json"],
        // --no-auth would leave the token or the secret unchecked.
        &["serve", "--no-auth", "--token", "tok"],
        &["serve", "--no-auth", "--github-secret", "s3cret"],
        // Allowed host names are for a server without authentication only.
        &["serve", "--token", "tok", "--allow-host", "ops.internal"],
        // An empty page would read as the last one.
        &["runs", "--limit", "0"],
        &["audit", "t", "--limit", "0"],
        // A key is taken as the HTTP header takes it: trimmed, printable ASCII.
        &["signal", "t", "go", "1", "--key", "   "],
        &["signal", "t", "go", "1", "--key", "web\u{7}"],
    ] {
        let (status, err) = code(args);
        assert_eq!(status, Some(2), "{args:?}: {err}");
        assert!(!err.contains("no SQLite file"), "{args:?}: {err}");
    }
    let from_env = Command::new(env!("CARGO_BIN_EXE_loomflow"))
        .args(["--db", "sqlite:/nonexistent/dir/x.db", "serve", "--no-auth"])
        .env("LOOMFLOW_TOKEN", "tok")
        .output()
        .unwrap();
    assert_eq!(from_env.status.code(), Some(2), "{}", stderr(&from_env));
    assert!(
        stderr(&from_env).contains("--no-auth"),
        "{}",
        stderr(&from_env)
    );
}

/// Help shows that `LOOMFLOW_DB` is read, never what it holds: a connection string may carry
/// a password.
#[test]
fn help_does_not_show_the_connection_string() {
    for args in [&["--help"][..], &["runs", "--help"], &["serve", "--help"]] {
        let output = Command::new(env!("CARGO_BIN_EXE_loomflow"))
            .args(args)
            .env("LOOMFLOW_DB", "postgres://app:hunter2@db/flows")
            .output()
            .unwrap();
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        assert!(stdout(&output).contains("LOOMFLOW_DB"), "{args:?}");
        assert!(!stdout(&output).contains("hunter2"), "{args:?}");
    }
}

/// A reader that stops reading (`loomflow runs | head -1`) ends the command quietly, with 0:
/// not a panic, and not 101.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_stops_reading_ends_the_command_quietly() {
    let db = Db::new("pipe");
    let runtime = Runtime::sqlite(&db.0).unwrap();
    let graph = refund_graph();
    let input = Refund {
        order: "ord_1".into(),
        approved: None,
    };
    graph.invoke(&runtime, "ord_1", input).await.unwrap();
    for args in [&["runs"][..], &["show", "ord_1"], &["--json", "runs"]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_loomflow"))
            .args(["--db", &db.url()])
            .args(args)
            .env_remove("LOOMFLOW_DB")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The reader goes away before the command writes anything.
        drop(child.stdout.take());
        let output = child.wait_with_output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(stderr(&output).is_empty(), "{args:?}: {}", stderr(&output));
    }
}

/// `--json graph` prints JSON, as every other command does with `--json`; deleting a thread
/// that never ran is not found, not a deletion of nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_graph_and_the_delete_of_a_thread_that_never_ran() {
    let db = Db::new("json-graph");
    let runtime = Runtime::sqlite(&db.0).unwrap();
    let input = Refund {
        order: "ord_1".into(),
        approved: None,
    };
    refund_graph()
        .invoke(&runtime, "ord_1", input)
        .await
        .unwrap();
    let drawn = loomflow(&db.0, &["--json", "graph", "ord_1"]);
    assert!(drawn.status.success(), "{}", stderr(&drawn));
    let drawn: serde_json::Value = serde_json::from_slice(&drawn.stdout).unwrap();
    assert_eq!(drawn["thread"], "ord_1");
    assert_eq!(drawn["current"], json!(["ask_manager"]));
    assert!(
        drawn["mermaid"]
            .as_str()
            .unwrap()
            .starts_with("flowchart TD"),
        "{drawn}"
    );

    let typo = loomflow(&db.0, &["delete", "ord_typo"]);
    assert_eq!(typo.status.code(), Some(3), "{}", stderr(&typo));
    assert!(
        stderr(&typo).contains("thread ord_typo has no run"),
        "{}",
        stderr(&typo)
    );
}

/// A command that reads keeps every stored signal it loads: a signal sent hours ago to a
/// session whose run has not started yet (the workers keep pending signals longer than
/// the default hour) is still there after `show`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_reads_deletes_no_stored_signal() {
    use loomflow::runtime::{MailboxConfig, ManualClock, SqliteStore};
    let db = Db::new("keeps-signals");
    {
        let hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(2 * 3_600);
        let sender = Runtime::builder()
            .store(SqliteStore::open(&db.0).unwrap())
            .clock(ManualClock::new(hours_ago))
            .signals(MailboxConfig::default().pending_signal_ttl(None))
            .build();
        sender.signal("ord_8", "review", json!(true)).await.unwrap();
        let input = Refund {
            order: "ord_7".into(),
            approved: None,
        };
        refund_graph()
            .invoke(&sender, "ord_7", input)
            .await
            .unwrap();
    }
    for args in [&["show", "ord_7"][..], &["signal", "ord_7", "other", "1"]] {
        let output = loomflow_apart(&db.0, args).await;
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
    }
    let store = SqliteStore::open(&db.0).unwrap();
    let pending = loomflow::runtime::Store::pending_signals(&store)
        .await
        .unwrap();
    assert!(
        pending
            .iter()
            .any(|s| s.session == "ord_8" && s.name == "review"),
        "{pending:?}"
    );
}

/// A run carried on with a changed graph (`allow_graph_change`) describes the new structure
/// in the first checkpoint it writes under it: `graph` draws that one, with the node the run
/// stands at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graph_of_a_run_whose_graph_changed_draws_the_new_graph() {
    let db = Db::new("graph-changed");
    let runtime = Runtime::sqlite(&db.0).unwrap();
    let input = Refund {
        order: "ord_1".into(),
        approved: None,
    };
    refund_graph()
        .invoke(&runtime, "ord_1", input)
        .await
        .unwrap();
    let with_audit = Graph::new("refund")
        .node_fn("ask_manager", |r: &mut Refund, ctx| {
            Box::pin(async move {
                r.approved = Some(ctx.wait_for_signal("review").or_suspend().await?);
                Ok(())
            })
        })
        .node_fn("audit", |_r: &mut Refund, ctx| {
            Box::pin(async move {
                let _: bool = ctx.wait_for_signal("audited").or_suspend().await?;
                Ok(())
            })
        })
        .node_sync("pay", |_r: &mut Refund| {})
        .edge(START, "ask_manager")
        .edge("ask_manager", "audit")
        .edge("audit", "pay")
        .edge("pay", END)
        .compile()
        .unwrap();
    runtime.signal("ord_1", "review", true).await.unwrap();
    let outcome = with_audit
        .recover(&runtime, "ord_1")
        .allow_graph_change()
        .await
        .unwrap();
    assert_eq!(outcome.interrupts()[0].node, "audit");

    let drawn = loomflow(&db.0, &["graph", "ord_1"]);
    assert!(drawn.status.success(), "{}", stderr(&drawn));
    let drawn = stdout(&drawn);
    assert!(drawn.contains(r#"["audit"]:::current"#), "{drawn}");
}

fn wait_for_review<'a>(r: &'a mut Refund, ctx: &'a Context) -> BoxFuture<'a, NodeResult> {
    Box::pin(async move {
        r.approved = Some(ctx.wait_for_signal("review").or_suspend().await?);
        Ok(())
    })
}

/// Two branches waiting for signals of one name: one signal answers one of them, and `show`
/// says so of one only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_signal_answers_one_of_two_waits_for_its_name() {
    let db = Db::new("two-waits");
    let runtime = Runtime::sqlite(&db.0).unwrap();
    let graph = Graph::new("two_reviews")
        .node_fn("first", wait_for_review)
        .node_fn("second", wait_for_review)
        .edge(START, "first")
        .edge(START, "second")
        .edge("first", END)
        .edge("second", END)
        .compile()
        .unwrap();
    let input = Refund {
        order: "ord_1".into(),
        approved: None,
    };
    let suspended = graph.invoke(&runtime, "ord_1", input).await.unwrap();
    assert_eq!(suspended.interrupts().len(), 2, "{suspended:?}");
    drop(runtime);

    let answered = |db: &Db| {
        let shown = loomflow(&db.0, &["--json", "show", "ord_1"]);
        let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
        shown["answered_interrupts"].as_array().unwrap().len()
    };
    assert_eq!(answered(&db), 0);
    let sent = loomflow(&db.0, &["signal", "ord_1", "review", "true"]);
    assert!(sent.status.success(), "{}", stderr(&sent));
    assert_eq!(answered(&db), 1);
    let sent = loomflow(&db.0, &["signal", "ord_1", "review", "false"]);
    assert!(sent.status.success(), "{}", stderr(&sent));
    assert_eq!(answered(&db), 2);
}

/// A payload the run's wait cannot read fails the run at every recover until an operator
/// drops it; the corrected one queued behind it is then taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_signal_takes_a_payload_no_wait_can_read_out_of_the_queue() {
    let db = Db::new("drop-signal");
    let runtime = Runtime::sqlite(&db.0).unwrap();
    let graph = refund_graph();
    let suspended = graph
        .invoke(&runtime, "ord_1", Refund::default())
        .await
        .unwrap();
    assert_eq!(suspended.interrupts().len(), 1, "{suspended:?}");
    for payload in [r#""yes""#, "true"] {
        let sent = loomflow(&db.0, &["signal", "ord_1", "review", payload]);
        assert!(sent.status.success(), "{}", stderr(&sent));
    }
    let failed = graph.recover(&runtime, "ord_1").await.unwrap();
    assert!(matches!(failed, RunOutcome::Failed { .. }), "{failed:?}");

    let dropped = loomflow(&db.0, &["drop-signal", "ord_1", "review", "--by", "ops"]);
    assert!(dropped.status.success(), "{}", stderr(&dropped));
    assert_eq!(
        stdout(&dropped),
        "dropped signal review of ord_1, unread: \"yes\"\n"
    );
    let done = graph.recover(&runtime, "ord_1").await.unwrap();
    assert_eq!(done.completed().unwrap().approved, Some(true));

    let none = loomflow(&db.0, &["drop-signal", "ord_1", "review"]);
    assert_eq!(none.status.code(), Some(3), "{}", stderr(&none));
    assert!(stderr(&none).contains("no signal review is pending for thread ord_1"));
    let audit = loomflow(&db.0, &["--json", "audit", "ord_1", "--kind", "decision"]);
    let audit: serde_json::Value = serde_json::from_slice(&audit.stdout).unwrap();
    assert_eq!(audit[0]["actor"], "ops", "{audit}");
    assert_eq!(audit[0]["detail"]["payload"], "yes", "{audit}");
}

/// `submit` queues a run that a worker of the program then carries out; `fork` starts a
/// thread from a suspension, which then takes its own answer; both refuse bad arguments
/// before opening the store, and a fork from a checkpoint the thread lacks is not found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_queues_a_run_and_fork_starts_a_thread_from_a_suspension() {
    let db = Db::new("submit-fork");
    let runtime = Runtime::sqlite(&db.0).unwrap();
    let input = r#"{"order": "ord_9", "approved": null}"#;
    let queued = loomflow(&db.0, &["submit", "refund", "ord_9", input]);
    assert!(queued.status.success(), "{}", stderr(&queued));
    assert!(
        stdout(&queued).contains("ord_9: a run of refund is queued"),
        "{}",
        stdout(&queued)
    );
    let again = loomflow(&db.0, &["submit", "refund", "ord_9", input]);
    assert_eq!(again.status.code(), Some(4), "{}", stderr(&again));
    for bad in [["submit", " ", "t", "1"], ["submit", "refund", "t", "yes"]] {
        let refused = loomflow(&db.0, &bad);
        assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    }

    let worker = Worker::builder(&runtime)
        .graph(&refund_graph())
        .park_grace(std::time::Duration::ZERO)
        .build();
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    let suspension = (runtime.list_checkpoints("ord_9").await.unwrap().iter())
        .rfind(|cp| cp.status == loomflow::runtime::RunStatus::Interrupted)
        .expect("the run waits for its review")
        .id;

    let id = suspension.to_string();
    let forked = loomflow(&db.0, &["fork", "ord_9", &id, "ord_9b"]);
    assert!(forked.status.success(), "{}", stderr(&forked));
    assert!(
        stdout(&forked).contains("ord_9b: forked from checkpoint"),
        "{}",
        stdout(&forked)
    );
    let sent = loomflow(&db.0, &["signal", "ord_9b", "review", "false"]);
    assert!(sent.status.success(), "{}", stderr(&sent));
    let done = refund_graph().recover(&runtime, "ord_9b").await.unwrap();
    assert_eq!(done.completed().unwrap().approved, Some(false));

    let missing = loomflow(&db.0, &["fork", "ord_9", "999999", "ord_9c"]);
    assert_eq!(missing.status.code(), Some(3), "{}", stderr(&missing));
    let blank = loomflow(&db.0, &["submit", "refund", " ", input]);
    assert_eq!(blank.status.code(), Some(2), "{}", stderr(&blank));
    // An input from a file, or from stdin.
    let file = db.0.with_extension("input.json");
    std::fs::write(&file, input).unwrap();
    let from_file = loomflow(
        &db.0,
        &["submit", "refund", "ord_f", &format!("@{}", file.display())],
    );
    assert!(from_file.status.success(), "{}", stderr(&from_file));
    std::fs::remove_file(&file).unwrap();
    let gone = loomflow(
        &db.0,
        &["submit", "refund", "ord_g", &format!("@{}", file.display())],
    );
    assert_eq!(gone.status.code(), Some(2), "{}", stderr(&gone));
    // A pipe is read once: `-`, or a file that is one.
    for (thread, from) in [("ord_s", "-"), ("ord_p", "@/dev/stdin")] {
        let mut piped = Command::new(env!("CARGO_BIN_EXE_loomflow"))
            .args(["--db", &db.url(), "submit", "refund", thread, from])
            .env_remove("LOOMFLOW_DB")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        let mut stdin = piped.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
        drop(stdin);
        let piped = piped.wait_with_output().unwrap();
        assert!(piped.status.success(), "{from}: {}", stderr(&piped));
    }
    for thread in ["ord_f", "ord_s", "ord_p"] {
        let row = runtime.store().get_run(thread).await.unwrap().unwrap();
        assert_eq!(row.state, RunState::Queued, "{thread}");
    }

    // Back onto its own thread: the run waiting there is replaced, and that is said.
    let id = suspension.to_string();
    let back = loomflow(&db.0, &["fork", "ord_9", &id, "ord_9"]);
    assert!(back.status.success(), "{}", stderr(&back));
    assert!(
        stdout(&back).contains("(its run 1, waiting, was replaced)"),
        "{}",
        stdout(&back)
    );
}

/// Under `--json` a failure is JSON on stderr too, with the exit code in it: a script that
/// reads the output as JSON reads its errors the same way.
#[test]
fn under_json_a_failure_is_json_on_stderr() {
    let db = Db::new("json-error");
    drop(Runtime::sqlite(&db.0).unwrap());
    let shown = loomflow(&db.0, &["--json", "show", "ord_\u{1b}missing"]);
    assert_eq!(shown.status.code(), Some(3), "{}", stderr(&shown));
    let error: serde_json::Value = serde_json::from_str(stderr(&shown).trim()).unwrap();
    assert_eq!(error["error"]["exit_code"], 3, "{error}");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("ord_\u{1b}missing"), "{message}");
    let usage = loomflow(&db.0, &["--json", "signal", "t", "review", "yes"]);
    assert_eq!(usage.status.code(), Some(2), "{}", stderr(&usage));
    let error: serde_json::Value = serde_json::from_str(stderr(&usage).trim()).unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not JSON"),
        "{error}"
    );
}
