//! Multi-agent shapes on scripted models: the path each takes, the final output, and a
//! diagram that parses in mermaid.js.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use loomflow::agent::Agent;
use loomflow::architecture::{PlanAndExecute, Router, Supervisor, Swarm, TeamState};
use loomflow::model::{ModelResponse, ScriptedModel, ToolCall};
use loomflow::prelude::*;
use loomflow_tests::check_mermaid;

fn scripted(name: &str, replies: &[&str]) -> Agent {
    Agent::builder(format!("You are {name}."))
        .name(name)
        .model(ScriptedModel::new(
            replies.iter().map(|r| ModelResponse::text(*r)),
        ))
        .build()
        .unwrap()
}

async fn run(graph: &CompiledGraph<TeamState>, task: &str) -> TeamState {
    graph
        .invoke(&Runtime::in_memory(), "team", TeamState::new(task))
        .await
        .unwrap()
        .completed()
        .unwrap()
}

#[tokio::test]
async fn router_sends_the_task_to_the_worker_the_classifier_names() {
    let router = Router::new(scripted("classifier", &["Billing."]))
        .worker(
            "billing",
            "invoices and refunds",
            scripted("billing", &["Your refund is on its way."]),
        )
        .worker("tech", "bugs and outages", scripted("tech", &["unused"]))
        .build()
        .unwrap();
    let team = run(&router, "Where is my refund?").await;
    assert_eq!(team.path, ["router", "billing"]);
    assert_eq!(team.output.as_deref(), Some("Your refund is on its way."));
    let text = router.to_mermaid();
    assert!(text.contains("subgraph n0 [\"router\"]"), "{text}");
    check_mermaid("shape_router", &text).unwrap();
}

#[tokio::test]
async fn router_fails_naming_a_worker_that_does_not_exist() {
    let router = Router::new(scripted("classifier", &["legal"]))
        .worker("billing", "invoices", scripted("billing", &["x"]))
        .build()
        .unwrap();
    let out = router
        .invoke(&Runtime::in_memory(), "t", TeamState::new("sue them"))
        .await
        .unwrap();
    let err = out.completed().unwrap_err();
    assert_eq!(
        err.to_string(),
        "branch from router chose legal, which is not one of its declared targets"
    );
}

#[tokio::test]
async fn supervisor_delegates_until_it_finishes() {
    let supervisor = Supervisor::new(scripted(
        "boss",
        &[
            "researcher: find three facts",
            "writer: write a paragraph",
            "FINISH: Paperclips are older than they look.",
        ],
    ))
    .worker(
        "researcher",
        "finds facts",
        scripted("researcher", &["fact 1; fact 2; fact 3"]),
    )
    .worker(
        "writer",
        "writes prose",
        scripted("writer", &["A paragraph."]),
    )
    .build()
    .unwrap();
    let team = run(&supervisor, "Write about paperclips").await;
    assert_eq!(
        team.path,
        [
            "supervisor",
            "researcher",
            "supervisor",
            "writer",
            "supervisor"
        ]
    );
    assert_eq!(
        team.output.as_deref(),
        Some("Paperclips are older than they look.")
    );
    assert_eq!(
        team.messages.len(),
        3,
        "the task and two contributions: {:?}",
        team.messages
    );
    check_mermaid("shape_supervisor", &supervisor.to_mermaid()).unwrap();
}

#[tokio::test]
async fn swarm_agents_hand_off_and_the_active_agent_is_checkpointed() {
    let triage = Agent::builder("You route customers.")
        .name("triage")
        .model(ScriptedModel::new([ModelResponse::tool_calls(vec![
            ToolCall::new("h1", "transfer_to_billing", json!({})),
        ])]))
        .build()
        .unwrap();
    let swarm = Swarm::new()
        .agent("triage", "first contact", triage)
        .agent(
            "billing",
            "money questions",
            scripted("billing", &["Refund issued."]),
        )
        .build()
        .unwrap();
    let runtime = Runtime::in_memory();
    let team = swarm
        .invoke(&runtime, "s", TeamState::new("refund please"))
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(team.path, ["triage", "billing"]);
    assert_eq!(team.output.as_deref(), Some("Refund issued."));
    let after_triage = runtime
        .list_checkpoints("s")
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.namespace.is_empty() && c.step == 1)
        .unwrap();
    assert_eq!(
        after_triage.state()["next"],
        json!("billing"),
        "the active agent is in the checkpoint"
    );
    assert_eq!(after_triage.next(), ["billing"]);
    let text = swarm.to_mermaid();
    assert!(
        text.contains("transfer_to_billing") || text.contains("billing"),
        "{text}"
    );
    check_mermaid("shape_swarm", &text).unwrap();
}

#[tokio::test]
async fn plan_and_execute_runs_each_step_then_replans_until_done() {
    let graph = PlanAndExecute::new(
        scripted("planner", &["1. gather prices\n2. compare them"]),
        scripted(
            "executor",
            &["prices: 3, 5", "3 is cheaper", "checked twice"],
        ),
        scripted(
            "replanner",
            &["double-check the cheapest", "DONE: buy the 3 one"],
        ),
    )
    .build()
    .unwrap();
    let team = run(&graph, "Which one should I buy?").await;
    assert_eq!(
        team.path,
        [
            "planner",
            "executor",
            "executor",
            "replanner",
            "executor",
            "replanner"
        ]
    );
    assert_eq!(team.output.as_deref(), Some("buy the 3 one"));
    assert_eq!(team.done.len(), 3);
    assert_eq!(
        team.done[0],
        ("gather prices".to_owned(), "prices: 3, 5".to_owned())
    );
    check_mermaid("shape_plan_and_execute", &graph.to_mermaid()).unwrap();
}

static REFUNDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// The tests that count REFUNDS run one at a time.
static REFUND_TESTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Refund an order. Moves money.
#[tool(approval)]
fn refund(order: String) -> String {
    REFUNDS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    format!("refunded {order}")
}

/// A team whose worker needs a person's approval to refund; each runtime (process) builds
/// it with the replies its models have not given yet (given ones are journaled).
fn refund_team(boss: &[&str], worker: Vec<ModelResponse>) -> CompiledGraph<TeamState> {
    let refunder = Agent::builder("You refund orders.")
        .name("refunder")
        .model(ScriptedModel::new(worker))
        .tool(refund)
        .durable_approvals()
        .build()
        .unwrap();
    Supervisor::new(scripted("boss", boss))
        .worker("refunder", "refunds orders", refunder)
        .build()
        .unwrap()
}

#[tokio::test]
async fn an_approval_inside_a_supervisors_worker_suspends_the_team_and_another_runtime_finishes_it()
{
    let _one_at_a_time = REFUND_TESTS.lock().await;
    let refunds_before = REFUNDS.load(std::sync::atomic::Ordering::SeqCst);
    let path =
        std::env::temp_dir().join(format!("loomflow-team-approval-{}.db", std::process::id()));
    let remove = || {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    };
    remove();
    let call = ToolCall::new("call_1", "refund", json!({ "order": "ord_42" }));
    {
        let team = refund_team(
            &["refunder: refund order 42"],
            vec![ModelResponse::tool_calls(vec![call])],
        );
        let runtime = Runtime::sqlite(&path).unwrap();
        let out = team
            .invoke(&runtime, "team", TeamState::new("Refund order 42"))
            .await
            .unwrap();
        let waiting = &out.interrupts()[0];
        assert_eq!(waiting.signal.as_deref(), Some("loomflow:approval:call_1"));
        assert_eq!(
            waiting.payload["details"]["approval"]["arguments"],
            json!({ "order": "ord_42" }),
            "the exact call is visible: {waiting:?}"
        );
    }
    assert_eq!(
        REFUNDS.load(std::sync::atomic::Ordering::SeqCst),
        refunds_before,
        "nothing is refunded before the approval"
    );

    // Another runtime on the same file lists the call and approves it.
    let runtime = Runtime::sqlite(&path).unwrap();
    let pending = runtime.pending_approvals("team").await.unwrap();
    assert_eq!(
        (pending.len(), pending[0].tool.as_str()),
        (1, "refund"),
        "{pending:?}"
    );
    runtime
        .decide_approval("team", "call_1", loomflow::tool::ApprovalDecision::Allow)
        .await
        .unwrap();
    let team = refund_team(
        &["FINISH: order 42 is refunded"],
        vec![ModelResponse::text("Refunded order 42.")],
    );
    let done = team
        .recover(&runtime, "team")
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(
        done.output.as_deref(),
        Some("order 42 is refunded"),
        "{done:?}"
    );
    assert_eq!(
        REFUNDS.load(std::sync::atomic::Ordering::SeqCst) - refunds_before,
        1,
        "the approved call ran once"
    );
    drop(runtime);
    remove();
}

#[tokio::test]
async fn a_worker_carries_a_team_on_once_its_approval_is_decided_from_another_runtime() {
    let path = std::env::temp_dir().join(format!(
        "loomflow-team-approval-worker-{}.db",
        std::process::id()
    ));
    let remove = || {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    };
    remove();
    let _one_at_a_time = REFUND_TESTS.lock().await;
    let call = ToolCall::new("call_7", "refund", json!({ "order": "ord_7" }));
    let refunds_before = REFUNDS.load(std::sync::atomic::Ordering::SeqCst);
    let team = refund_team(
        &["refunder: refund order 7"],
        vec![ModelResponse::tool_calls(vec![call])],
    );
    let runtime = Runtime::sqlite(&path).unwrap();
    let worker = Worker::builder(&runtime)
        .graph(&team)
        .park_grace(Duration::ZERO)
        .build();
    runtime
        .submit(team.name(), "team-w", TeamState::new("Refund order 7"))
        .await
        .unwrap();
    worker.run_until_idle().await.unwrap();
    let info = runtime.run("team-w").await.unwrap();
    assert_eq!(info.record.state, loomflow::runtime::RunState::Waiting);
    assert_eq!(
        REFUNDS.load(std::sync::atomic::Ordering::SeqCst),
        refunds_before
    );
    assert_eq!(
        info.interrupts[0].payload["details"]["approval"]["arguments"],
        json!({ "order": "ord_7" }),
        "the exact call is visible: {info:?}"
    );

    // Another runtime on the file approves; the worker, seeing the stored decision, finishes.
    let elsewhere = Runtime::sqlite(&path).unwrap();
    elsewhere
        .decide_approval("team-w", "call_7", loomflow::tool::ApprovalDecision::Allow)
        .await
        .unwrap();
    drop(elsewhere);
    // The rest of the team's script: the boss finishes.
    let team = refund_team(
        &["FINISH: order 7 is refunded"],
        vec![ModelResponse::text("Refunded order 7.")],
    );
    let worker = Worker::builder(&runtime)
        .graph(&team)
        .park_grace(Duration::ZERO)
        .build();
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    let done: TeamState = runtime.get_state("team-w").await.unwrap().unwrap();
    assert_eq!(
        done.output.as_deref(),
        Some("order 7 is refunded"),
        "{done:?}"
    );
    assert_eq!(
        REFUNDS.load(std::sync::atomic::Ordering::SeqCst) - refunds_before,
        1,
        "the approved call ran once"
    );
    drop(runtime);
    remove();
}
