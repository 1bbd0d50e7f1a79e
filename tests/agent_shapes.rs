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
