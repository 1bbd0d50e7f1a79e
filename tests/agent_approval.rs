//! Approvals that survive restarts: an agent on a SQLite file suspends on a tool that needs
//! approval, the process exits, a second process decides, a third resumes. The tool runs
//! exactly once after an approval; after a rejection the model reads the reason.
//!
//! Each stage is a real child process: this test binary re-run with
//! `--ignored --exact approval_child` and the `LOOMFLOW_APPROVAL_*` variables.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/refunds.rs"]
mod refunds;

use std::io::Write;
use std::path::PathBuf;

use loomflow::agent::{Agent, RunResult};
use loomflow::model::{Message, ModelResponse, ScriptedModel, ToolCall};
use loomflow::prelude::*;
use loomflow::tool::{ApprovalDecision, ApprovalRequest};
use loomflow_tests::child_test_process;

/// Refund an order. Moves money.
#[tool(approval)]
fn refund(order: String, cents: u64) -> String {
    let path = std::env::var("LOOMFLOW_APPROVAL_EFFECTS").unwrap();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    writeln!(file, "refund {order} {cents}").unwrap();
    file.sync_all().unwrap();
    format!("refunded {cents} cents on {order}")
}

/// The agent as each process builds it. The scripted model replays only what the model has
/// not said yet in this conversation: a resumed run must not ask the model again for a
/// reply that is already in the journal.
fn agent(db: &str, replies: Vec<ModelResponse>) -> Agent {
    Agent::builder("You handle refunds.")
        .name("refunds")
        .model(ScriptedModel::new(replies))
        .tool(refund)
        .durable_approvals()
        .runtime(Runtime::sqlite(db).unwrap())
        .build()
        .unwrap()
}

fn print_result(result: &RunResult) {
    println!(
        "RESULT {}",
        serde_json::to_string(&json!({
            "interrupted": result.interrupted,
            "reason": result.reason,
            "pending": result.pending.iter().map(|p| &p.payload).collect::<Vec<_>>(),
            "output": result.output,
            "messages": result.messages,
        }))
        .unwrap()
    );
}

#[test]
#[ignore = "entry point of the child processes of the approval tests; run by them"]
fn approval_child() {
    let Ok(db) = std::env::var("LOOMFLOW_APPROVAL_DB") else {
        return;
    };
    let stage = std::env::var("LOOMFLOW_APPROVAL_STAGE").unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        match stage.as_str() {
            "ask" => {
                let call = ToolCall::new(
                    "call_7",
                    "refund",
                    json!({ "order": "ord_42", "cents": 1299 }),
                );
                let agent = agent(&db, vec![ModelResponse::tool_calls(vec![call])]);
                print_result(&agent.run("refund order 42").session("s1").await.unwrap());
            }
            "list" => {
                let runtime = Runtime::sqlite(&db).unwrap();
                let pending = runtime.pending_approvals("s1").await.unwrap();
                println!("PENDING {}", serde_json::to_string(&pending).unwrap());
            }
            "approve" | "reject" => {
                let runtime = Runtime::sqlite(&db).unwrap();
                let decision = if stage == "approve" {
                    ApprovalDecision::Allow
                } else {
                    ApprovalDecision::Deny {
                        reason: "no receipt attached".into(),
                    }
                };
                runtime
                    .decide_approval("s1", "call_7", decision)
                    .await
                    .unwrap();
                println!("DECIDED");
            }
            "resume" => {
                let agent = agent(&db, vec![ModelResponse::text("Done.")]);
                print_result(&agent.resume("s1").await.unwrap());
            }
            other => panic!("unknown stage {other}"),
        }
    });
}

struct Files {
    dir: PathBuf,
}

impl Files {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("loomflow-approval-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self { dir }
    }

    /// Runs one stage in a fresh process and returns what it printed after `marker`.
    fn stage(&self, stage: &str, marker: &str) -> String {
        let output = child_test_process("approval_child")
            .env("LOOMFLOW_APPROVAL_DB", self.dir.join("agents.db"))
            .env("LOOMFLOW_APPROVAL_EFFECTS", self.dir.join("effects.log"))
            .env("LOOMFLOW_APPROVAL_STAGE", stage)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "stage {stage} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let at = stdout
            .find(marker)
            .unwrap_or_else(|| panic!("stage {stage} printed no {marker}:\n{stdout}"));
        stdout[at + marker.len()..]
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .to_owned()
    }

    fn refunds(&self) -> usize {
        std::fs::read_to_string(self.dir.join("effects.log"))
            .unwrap_or_default()
            .lines()
            .count()
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn an_approval_sent_from_another_process_resumes_the_run_and_the_tool_runs_once() {
    let files = Files::new("approve");
    let asked: serde_json::Value = serde_json::from_str(&files.stage("ask", "RESULT ")).unwrap();
    assert_eq!(asked["interrupted"], json!(true));
    assert_eq!(asked["reason"], json!("suspended"));
    let pending = &asked["pending"][0]["details"]["approval"];
    assert_eq!(pending["tool"], json!("refund"));
    assert_eq!(pending["call_id"], json!("call_7"));
    assert_eq!(
        pending["arguments"],
        json!({ "order": "ord_42", "cents": 1299 }),
        "the exact call is visible"
    );
    assert_eq!(files.refunds(), 0, "nothing moved before the approval");

    // A process that did not park the call lists it, typed, from the store.
    let listed: Vec<ApprovalRequest> =
        serde_json::from_str(&files.stage("list", "PENDING ")).unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        (
            listed[0].session.as_str(),
            listed[0].call_id.as_str(),
            listed[0].tool.as_str()
        ),
        ("s1", "call_7", "refund")
    );
    assert_eq!(
        listed[0].arguments,
        json!({ "order": "ord_42", "cents": 1299 })
    );
    assert!(listed[0].requested_at_ms > 0, "when it was asked");

    files.stage("approve", "DECIDED");
    let listed: Vec<ApprovalRequest> =
        serde_json::from_str(&files.stage("list", "PENDING ")).unwrap();
    assert!(listed.is_empty(), "answered: no longer pending: {listed:?}");
    let done: serde_json::Value = serde_json::from_str(&files.stage("resume", "RESULT ")).unwrap();
    assert_eq!(done["interrupted"], json!(false));
    assert_eq!(done["output"], json!("Done."));
    assert_eq!(files.refunds(), 1, "the tool ran exactly once");
    let messages: Vec<Message> = serde_json::from_value(done["messages"].clone()).unwrap();
    assert_eq!(
        messages[2],
        Message::tool_result("call_7", "refunded 1299 cents on ord_42")
    );

    // Resuming a finished run does nothing more.
    files.stage("resume", "RESULT ");
    assert_eq!(files.refunds(), 1);
}

#[test]
fn a_rejection_sent_from_another_process_reaches_the_model_with_its_reason() {
    let files = Files::new("reject");
    files.stage("ask", "RESULT ");
    files.stage("reject", "DECIDED");
    let done: serde_json::Value = serde_json::from_str(&files.stage("resume", "RESULT ")).unwrap();
    assert_eq!(files.refunds(), 0, "a rejected call never runs");
    let messages: Vec<Message> = serde_json::from_value(done["messages"].clone()).unwrap();
    let Message::Tool(result) = &messages[2] else {
        panic!("{messages:?}")
    };
    assert!(result.is_error);
    assert!(
        result.content.contains("no receipt attached"),
        "{}",
        result.content
    );
}

/// A session whose run was cancelled while a call waited for approval takes a new prompt:
/// the call that was not run is told so in the conversation, and the model goes on from
/// there. Before its fix the session refused every prompt ("in the middle of a turn, carry
/// it on") and the cancelled run could not be carried on either.
#[tokio::test]
async fn a_session_cancelled_while_a_call_waits_takes_a_new_prompt() {
    let runtime = Runtime::in_memory();
    refunds::ask_for_refund(&runtime, "c-1", 500).await;
    runtime.cancel("c-1").await.unwrap();
    let replies = vec![loomflow::model::ModelResponse::text(
        "Nothing was refunded.",
    )];
    let next = refunds::agent(&runtime, replies)
        .run("what happened?")
        .session("c-1")
        .await
        .unwrap();
    assert_eq!(next.output, "Nothing was refunded.");
    let state: loomflow::agent::AgentState = runtime.get_state("c-1").await.unwrap().unwrap();
    let told = state.messages.iter().any(|m| {
        matches!(m, loomflow::model::Message::Tool(result)
            if result.call_id == "call_1" && result.content.contains("cancelled"))
    });
    assert!(told, "{:?}", state.messages);
}

/// A decision for a call whose run was cancelled is refused naming that: the run has
/// ended, and nothing waits (before, it read "no call call_1 waits for a decision", as for
/// a mistyped id). A mistyped id on a live run is still that.
#[tokio::test]
async fn a_decision_for_a_cancelled_run_says_the_run_has_ended() {
    let db = loomflow_tests::TempDb::new("decision-cancelled");
    for runtime in [Runtime::in_memory(), Runtime::sqlite(db.path()).unwrap()] {
        refunds::ask_for_refund(&runtime, "c-4", 500).await;
        let typo = runtime
            .decide_approval("c-4", "call_9", ApprovalDecision::Allow)
            .await
            .unwrap_err();
        assert!(
            matches!(
                &typo,
                loomflow::Error::Runtime(loomflow::RuntimeError::NoPendingApproval { .. })
            ),
            "{typo:?}"
        );
        runtime.cancel("c-4").await.unwrap();
        let ended = runtime
            .decide_approval("c-4", "call_1", ApprovalDecision::Allow)
            .await
            .unwrap_err();
        assert!(
            matches!(
                &ended,
                loomflow::Error::Runtime(loomflow::RuntimeError::ApprovalRunEnded {
                    state: loomflow::runtime::RunState::Cancelled,
                    ..
                })
            ),
            "{ended:?}"
        );
        assert!(
            ended.to_string().contains("its run has ended (cancelled)"),
            "{ended}"
        );
    }
}

/// Email the customer. Needs no approval.
#[tool]
fn email(to: String) -> String {
    format!("emailed {to}")
}

/// A refund agent that can also email, its approvals durable, answering with `replies`.
fn emailing_refunds(runtime: &Runtime, replies: Vec<ModelResponse>) -> Agent {
    Agent::builder("You handle refunds.")
        .model(ScriptedModel::new(replies))
        .tool(email)
        .tool(refunds::refund)
        .durable_approvals()
        .runtime(runtime.clone())
        .build()
        .unwrap()
}

/// A run cancelled while one call of a turn waited for approval, after another call of the
/// same turn ran: the next prompt's conversation gives the call that ran its real result
/// (the model must not be told it did not run, or it may send the email again), and the
/// waiting call a note that it had none.
#[tokio::test]
async fn a_cancelled_turn_tells_the_model_which_calls_ran() {
    let runtime = Runtime::in_memory();
    let agent = |replies| emailing_refunds(&runtime, replies);
    let calls = vec![
        ToolCall::new("call_e", "email", json!({ "to": "ada@example.com" })),
        refunds::call(500),
    ];
    let asked = agent(vec![ModelResponse::tool_calls(calls)])
        .run("refund and tell her")
        .session("c-2")
        .await
        .unwrap();
    assert!(asked.interrupted, "{asked:?}");
    runtime.cancel("c-2").await.unwrap();

    agent(vec![ModelResponse::text("Emailed; no refund.")])
        .run("what happened?")
        .session("c-2")
        .await
        .unwrap();
    let state: loomflow::agent::AgentState = runtime.get_state("c-2").await.unwrap().unwrap();
    let result_of = |id: &str| {
        state.messages.iter().find_map(|m| match m {
            Message::Tool(result) if result.call_id == id => Some(result.content.clone()),
            _ => None,
        })
    };
    assert_eq!(
        result_of("call_e").as_deref(),
        Some("emailed ada@example.com")
    );
    let waited = result_of("call_1").unwrap_or_default();
    assert!(
        waited.contains("cancelled before this call had one"),
        "{waited}"
    );
}

/// A turn cancelled while a call waited, whose calls reuse an id an earlier turn's call had
/// (a server that numbers calls per reply): the next prompt's conversation gives each of
/// that turn's calls a result. Before, the earlier turn's result counted as this call's:
/// the call that ran got none, and the providers refuse a call without a result.
#[tokio::test]
async fn a_cancelled_turn_whose_call_reuses_an_earlier_id_gives_it_a_result() {
    let runtime = Runtime::in_memory();
    let agent = |replies| emailing_refunds(&runtime, replies);
    let email_call = |to: &str| ToolCall::new("call_e", "email", json!({ "to": to }));
    agent(vec![
        ModelResponse::tool_calls(vec![email_call("ada@example.com")]),
        ModelResponse::text("Emailed."),
    ])
    .run("email her")
    .session("c-3")
    .await
    .unwrap();
    let calls = vec![email_call("bob@example.com"), refunds::call(500)];
    let asked = agent(vec![ModelResponse::tool_calls(calls)])
        .run("refund bob and tell him")
        .session("c-3")
        .await
        .unwrap();
    assert!(asked.interrupted, "{asked:?}");
    runtime.cancel("c-3").await.unwrap();

    agent(vec![ModelResponse::text("Emailed bob; no refund.")])
        .run("what happened?")
        .session("c-3")
        .await
        .unwrap();
    let state: loomflow::agent::AgentState = runtime.get_state("c-3").await.unwrap().unwrap();
    let results: Vec<&str> = state
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(result) if result.call_id == "call_e" => Some(result.content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        ["emailed ada@example.com", "emailed bob@example.com"],
        "{:?}",
        state.messages
    );
}

/// Two calls of one reply with the same id (a model that writes its own ids) wait for two
/// decisions: each is listed under an id of its own, and each decision reaches its call.
/// Before, both waited on one id: one decision was taken by whichever call looked first,
/// and the other call could never be decided.
#[tokio::test]
async fn two_calls_of_a_reply_with_one_id_are_decided_apart() {
    let runtime = Runtime::in_memory();
    let call = |cents: u64| {
        ToolCall::new(
            "call_0",
            "refund",
            json!({ "order": "ord_42", "cents": cents }),
        )
    };
    let replies = vec![
        ModelResponse::tool_calls(vec![call(10), call(10_000)]),
        ModelResponse::text("Refunded 10."),
    ];
    let asked = refunds::agent(&runtime, replies.clone())
        .run("refund")
        .session("c-4")
        .await
        .unwrap();
    assert!(asked.interrupted, "{asked:?}");
    let pending = runtime.pending_approvals("c-4").await.unwrap();
    let ids: Vec<&str> = pending.iter().map(|p| p.call_id.as_str()).collect();
    assert_eq!(ids.len(), 2, "{pending:?}");
    assert_ne!(ids[0], ids[1], "{pending:?}");
    for request in &pending {
        let decision = match request.arguments["cents"].as_u64() {
            Some(10) => ApprovalDecision::Allow,
            _ => ApprovalDecision::deny("too much"),
        };
        runtime
            .decide_approval("c-4", &request.call_id, decision)
            .await
            .unwrap();
    }
    let done = refunds::agent(&runtime, replies[1..].to_vec())
        .resume("c-4")
        .await
        .unwrap();
    assert_eq!(done.output, "Refunded 10.");
    let state: loomflow::agent::AgentState = runtime.get_state("c-4").await.unwrap().unwrap();
    let results: Vec<&str> = state
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(result) => Some(result.content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[0].contains("refunded 10 cents"), "{results:?}");
    assert!(results[1].contains("too much"), "{results:?}");
}

/// A rejection must say why, as the HTTP route and the command line ask: the model is told
/// the reason. A blank one is refused before anything is sent.
#[tokio::test]
async fn a_rejection_without_a_reason_is_refused() {
    let runtime = Runtime::in_memory();
    for reason in ["", "  "] {
        let refused = runtime
            .decide_approval("s", "call_1", ApprovalDecision::deny(reason))
            .await
            .unwrap_err();
        assert!(
            matches!(
                &refused,
                loomflow::Error::Runtime(loomflow::RuntimeError::BlankReason { session, call_id })
                    if session == "s" && call_id == "call_1"
            ),
            "{refused:?}"
        );
    }
}

/// A decision answers the request it was made for: one left queued (its run cancelled
/// before it took it) does not approve a later call that reuses the id, asked again at
/// another time; that call waits for a decision of its own.
#[tokio::test]
async fn a_left_over_decision_does_not_approve_a_later_call_of_the_same_id() {
    let db = loomflow_tests::TempDb::new("left-over-decision");
    for runtime in [Runtime::in_memory(), Runtime::sqlite(db.path()).unwrap()] {
        refunds::ask_for_refund(&runtime, "c-9", 500).await;
        runtime
            .decide_approval_by("c-9", "call_1", ApprovalDecision::Allow, "ada")
            .await
            .unwrap();
        runtime.cancel("c-9").await.unwrap();
        // A millisecond apart at least: a request is told apart by when it was asked.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let replies = vec![
            ModelResponse::tool_calls(vec![refunds::call(99_999)]),
            ModelResponse::text("Refunded."),
        ];
        let next = refunds::agent(&runtime, replies)
            .run("refund the big one")
            .session("c-9")
            .await
            .unwrap();
        assert!(next.interrupted, "{:?}", next.messages);
        let pending = runtime.pending_approvals("c-9").await.unwrap();
        assert_eq!(pending.len(), 1, "{pending:?}");
        assert_eq!(pending[0].arguments["cents"], 99_999);
    }
}
