//! Multi-agent shapes on scripted models: the path each takes, the final output, and a
//! diagram that parses in mermaid.js.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::sync::Arc;

use loomflow::agent::{Agent, StopReason, Verdict, on_output, on_tool_result};
use loomflow::architecture::{
    ActorCritic, Debate, PlanAndExecute, Reflexion, Router, Supervisor, Swarm, TeamState,
};
use loomflow::graph::{GraphError, GraphProblem, RunError};
use loomflow::model::{Message, ModelResponse, ScriptedModel, ToolCall};
use loomflow::prelude::*;
use loomflow_tests::check_mermaid;

fn scripted(name: &str, replies: &[&str]) -> Agent {
    listened(name, replies).0
}

/// A scripted agent and its model, whose requests show what the agent was asked.
fn listened(name: &str, replies: &[&str]) -> (Agent, Arc<ScriptedModel>) {
    let model = Arc::new(ScriptedModel::new(
        replies.iter().map(|r| ModelResponse::text(*r)),
    ));
    let agent = Agent::builder(format!("You are {name}."))
        .name(name)
        .model(Arc::clone(&model))
        .build()
        .unwrap();
    (agent, model)
}

/// The prompts a scripted agent was given, in order.
fn prompts(model: &ScriptedModel) -> Vec<String> {
    model
        .requests()
        .iter()
        .map(|r| r.messages.last().unwrap().text().to_owned())
        .collect()
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
        failure_source(&err),
        r#"agent classifier named none of its team (billing): it replied "legal""#
    );
}

/// What a node's failure says of its cause.
fn failure_source(error: &RunError) -> String {
    match error {
        RunError::NodeFailed { source, .. } => source.to_string(),
        other => panic!("expected a node's failure, got {other:?}"),
    }
}

/// A supervisor that replies nothing fails naming itself and what it could have named,
/// before it counts a round.
#[tokio::test]
async fn a_supervisor_that_names_no_worker_fails_naming_itself() {
    let supervisor = Supervisor::new(scripted("boss", &[""]))
        .worker("billing", "invoices", scripted("billing", &["x"]))
        .build()
        .unwrap();
    let out = supervisor
        .invoke(&Runtime::in_memory(), "t", TeamState::new("sue them"))
        .await
        .unwrap();
    let RunOutcome::Failed { state, error } = out else {
        panic!("{out:?}");
    };
    assert_eq!(
        failure_source(&error),
        "agent boss named none of its team (billing): it replied \"\""
    );
    assert_eq!(state.round, 0);
}

/// A supervisor's directive to a worker the team does not have is quoted whole in the
/// error, instruction included: the part before the colon alone does not show what it meant.
#[tokio::test]
async fn a_supervisor_naming_an_unknown_worker_is_quoted_whole() {
    let supervisor = Supervisor::new(scripted("boss", &["legal: draft the letter"]))
        .worker("billing", "invoices", scripted("billing", &["x"]))
        .build()
        .unwrap();
    let out = supervisor
        .invoke(&Runtime::in_memory(), "t", TeamState::new("sue them"))
        .await
        .unwrap();
    let RunOutcome::Failed { error, .. } = out else {
        panic!("{out:?}");
    };
    assert_eq!(
        failure_source(&error),
        "agent boss named none of its team (billing): it replied \"legal: draft the letter\""
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

/// A worker is given what the team has so far: the writer asked to use the researcher's
/// facts reads them. Before its fix a worker read only its instruction and the task.
#[tokio::test]
async fn a_worker_reads_what_the_team_has_so_far() {
    let (writer, model) = listened("writer", &["A paragraph."]);
    let supervisor = Supervisor::new(scripted(
        "boss",
        &[
            "researcher: find two facts",
            "writer: write two sentences using the facts",
            "FINISH",
        ],
    ))
    .worker(
        "researcher",
        "finds facts",
        scripted("researcher", &["Paperclips date from 1899."]),
    )
    .worker("writer", "writes prose", writer)
    .build()
    .unwrap();
    run(&supervisor, "Write about paperclips").await;
    let asked = model.requests()[0]
        .messages
        .last()
        .unwrap()
        .text()
        .to_owned();
    assert!(
        asked.contains("write two sentences using the facts"),
        "{asked}"
    );
    assert!(
        asked.contains("researcher: Paperclips date from 1899."),
        "{asked}"
    );
}

/// A worker whose name holds a colon is named whole: the instruction follows its name.
#[tokio::test]
async fn a_supervisor_names_a_worker_whose_name_holds_a_colon() {
    let supervisor = Supervisor::new(scripted("boss", &["team:a: check the totals", "FINISH"]))
        .worker("team", "the team", scripted("team", &["wrong worker"]))
        .worker("team:a", "part a", scripted("team:a", &["totals checked"]))
        .build()
        .unwrap();
    let team = run(&supervisor, "Check the books").await;
    assert_eq!(team.path, ["supervisor", "team:a", "supervisor"]);
    assert_eq!(team.output.as_deref(), Some("totals checked"));
}

/// A swarm whose `triage` agent calls `handoff` at once, and whose agent `target` then
/// answers `reply`; with triage's model, whose requests show the tools it was offered.
fn triage_then(
    target: &str,
    handoff: &str,
    reply: &str,
) -> (CompiledGraph<TeamState>, Arc<ScriptedModel>) {
    let model = Arc::new(ScriptedModel::new([ModelResponse::tool_calls(vec![
        ToolCall::new("h1", handoff, json!({})),
    ])]));
    let triage = Agent::builder("You route customers.")
        .name("triage")
        .model(Arc::clone(&model))
        .build()
        .unwrap();
    let swarm = Swarm::new()
        .agent("triage", "first contact", triage)
        .agent(target, "what it handles", scripted(target, &[reply]))
        .build()
        .unwrap();
    (swarm, model)
}

#[tokio::test]
async fn swarm_agents_hand_off_and_the_active_agent_is_checkpointed() {
    let (swarm, _) = triage_then("billing", "transfer_to_billing", "Refund issued.");
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

/// The agent that answered stays the active one: the conversation's next turn (its final
/// state with a new user message) goes to it, not back to the first agent. Before its fix
/// the answer cleared the active agent, and triage took the next turn.
#[tokio::test]
async fn a_swarms_next_turn_goes_to_the_agent_that_answered() {
    let triage_model = Arc::new(ScriptedModel::new([ModelResponse::tool_calls(vec![
        ToolCall::new("h1", "transfer_to_billing", json!({})),
    ])]));
    let triage = Agent::builder("You route customers.")
        .name("triage")
        .model(Arc::clone(&triage_model))
        .build()
        .unwrap();
    let swarm = Swarm::new()
        .agent("triage", "first contact", triage)
        .agent(
            "billing",
            "invoices",
            scripted("billing", &["Refund issued.", "Invoice sent."]),
        )
        .build()
        .unwrap();
    let runtime = Runtime::in_memory();
    let mut team = swarm
        .invoke(&runtime, "s", TeamState::new("refund please"))
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(team.next.as_deref(), Some("billing"));
    team.messages.push(Message::user("and the invoice?"));
    let team = swarm
        .invoke(&runtime, "s", team)
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(team.path, ["triage", "billing", "billing"]);
    assert_eq!(team.output.as_deref(), Some("Invoice sent."));
    assert_eq!(
        triage_model.requests().len(),
        1,
        "triage was not asked again"
    );
}

/// A swarm member whose policy asks about (or denies) every call still hands off: a
/// handoff acts on nothing but the conversation. A rule for the handoff's own name still
/// decides it. Before its fix the handoff waited for an approval no one was asked for, and
/// was denied.
#[tokio::test]
async fn a_handoff_is_allowed_whatever_the_policys_default() {
    use loomflow::tool::{Permission, PermissionPolicy};
    let member = |policy: PermissionPolicy| {
        let triage = Agent::builder("You route customers.")
            .name("triage")
            .model(ScriptedModel::new([
                ModelResponse::tool_calls(vec![ToolCall::new(
                    "h1",
                    "transfer_to_billing",
                    json!({}),
                )]),
                ModelResponse::text("I keep it."),
            ]))
            .tools(ToolHost::new().permissions(policy))
            .build()
            .unwrap();
        Swarm::new()
            .agent("triage", "first contact", triage)
            .agent(
                "billing",
                "invoices",
                scripted("billing", &["Refund issued."]),
            )
            .build()
            .unwrap()
    };
    for policy in [
        PermissionPolicy::ask_all(),
        PermissionPolicy::deny_all("no calls"),
    ] {
        let team = run(&member(policy), "refund please").await;
        assert_eq!(team.path, ["triage", "billing"]);
        assert_eq!(team.output.as_deref(), Some("Refund issued."));
    }
    let ruled =
        PermissionPolicy::allow_all().tool("transfer_to_billing", Permission::Deny("stay".into()));
    let team = run(&member(ruled), "refund please").await;
    assert_eq!(team.path, ["triage"], "its own rule still decides it");
}

/// A handoff tool has a name providers accept, whatever the agent's name, and the call
/// still hands the conversation to that agent. Two agents whose tools would share a name
/// are refused when the swarm is built.
#[tokio::test]
async fn a_handoff_to_an_agent_with_a_spaced_name_is_a_name_providers_accept() {
    let (swarm, model) = triage_then("billing team", "transfer_to_billing_team", "Invoice sent.");
    let team = run(&swarm, "my invoice").await;
    assert_eq!(team.path, ["triage", "billing team"]);
    assert_eq!(team.output.as_deref(), Some("Invoice sent."));
    let offered: Vec<String> = model.requests()[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(offered, ["transfer_to_billing_team"]);

    // Named by its member name, whatever its agent is called (before, the agent's name).
    let error = Swarm::new()
        .agent("triage", "first contact", scripted("frontdesk-bot", &[]))
        .agent("billing team", "invoices", scripted("a", &[]))
        .agent("billing_team", "invoices too", scripted("b", &[]))
        .build()
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("the handoffs to billing team and to billing_team would both be the tool transfer_to_billing_team"),
        "{error}"
    );
    assert!(error.to_string().contains("agent triage"), "{error}");
}

/// A reply that calls two handoff tools hands the conversation to the first; the second
/// call's result says it was not taken, so the transcript does not claim two transfers.
#[tokio::test]
async fn a_reply_with_two_handoffs_hands_off_to_the_first() {
    let model = Arc::new(ScriptedModel::new([ModelResponse::tool_calls(vec![
        ToolCall::new("h1", "transfer_to_billing", json!({})),
        ToolCall::new("h2", "transfer_to_tech", json!({})),
    ])]));
    let triage = Agent::builder("You route customers.")
        .name("triage")
        .model(Arc::clone(&model))
        .build()
        .unwrap();
    let swarm = Swarm::new()
        .agent("triage", "first contact", triage)
        .agent(
            "billing",
            "invoices",
            scripted("billing", &["Refund issued."]),
        )
        .agent("tech", "outages", scripted("tech", &["Rebooted."]))
        .build()
        .unwrap();
    let team = run(&swarm, "refund please").await;
    assert_eq!(team.path, ["triage", "billing"]);
    assert_eq!(team.output.as_deref(), Some("Refund issued."));
    let second = team
        .messages
        .iter()
        .find_map(|m| match m {
            Message::Tool(result) if result.call_id == "h2" => Some(result),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for h2: {:?}", team.messages));
    assert!(
        second.is_error && second.content.contains("billing"),
        "the second handoff's result: {second:?}"
    );
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
    // The transcript: the task, then each agent's contribution, as the other shapes keep it.
    let said: Vec<&str> = team.messages.iter().map(Message::text).collect();
    assert_eq!(
        said,
        [
            "Which one should I buy?",
            "planner: 1. gather prices\n2. compare them",
            "executor: prices: 3, 5",
            "executor: 3 is cheaper",
            "replanner: double-check the cheapest",
            "executor: checked twice",
            "replanner: DONE: buy the 3 one",
        ]
    );
    check_mermaid("shape_plan_and_execute", &graph.to_mermaid()).unwrap();
}

#[tokio::test]
async fn reflexion_revises_with_every_critique_so_far_until_the_critic_accepts() {
    let (actor, actor_model) = listened(
        "actor",
        &[
            "It was invented in 1899.",
            "It was patented in 1899.",
            "Patented in 1899 by Johan Vaaler, per the Norwegian patent office.",
        ],
    );
    let (critic, critic_model) = listened(
        "critic",
        &[
            "Invented is wrong: it was patented.",
            "Name the inventor and a source.",
            "ACCEPT: clear and sourced",
        ],
    );
    let graph = Reflexion::new(actor, critic).max_rounds(5).build().unwrap();
    let team = run(&graph, "When was the paperclip patented?").await;
    assert_eq!(
        team.path,
        ["actor", "critic", "actor", "critic", "actor", "critic"]
    );
    assert_eq!(
        team.output.as_deref(),
        Some("Patented in 1899 by Johan Vaaler, per the Norwegian patent office.")
    );
    assert!(team.accepted);
    assert_eq!(team.round, 3);
    assert_eq!(
        team.critiques,
        [
            "Invented is wrong: it was patented.",
            "Name the inventor and a source."
        ]
    );

    let asked = prompts(&actor_model);
    assert_eq!(asked[0], "When was the paperclip patented?");
    assert!(
        asked[1].contains("It was invented in 1899.")
            && asked[1].contains("1. Invented is wrong: it was patented."),
        "{}",
        asked[1]
    );
    assert!(
        asked[2].contains("It was patented in 1899.")
            && asked[2].contains("1. Invented is wrong: it was patented.")
            && asked[2].contains("2. Name the inventor and a source."),
        "the revision remembers every critique: {}",
        asked[2]
    );
    let judged = prompts(&critic_model);
    assert!(
        judged[2].contains("Johan Vaaler") && judged[2].contains("ACCEPT"),
        "{}",
        judged[2]
    );

    let text = graph.to_mermaid();
    assert!(text.contains(r#"n1 -.->|"actor"| n0"#), "{text}");
    check_mermaid("shape_reflexion", &text).unwrap();
}

#[tokio::test]
async fn reflexion_ends_with_the_last_answer_when_the_rounds_run_out() {
    let graph = Reflexion::new(
        scripted("actor", &["first", "second"]),
        scripted("critic", &["Too short.", "Still too short."]),
    )
    .max_rounds(2)
    .build()
    .unwrap();
    let team = run(&graph, "Write an essay").await;
    assert_eq!(team.path, ["actor", "critic", "actor", "critic"]);
    assert_eq!(team.output.as_deref(), Some("second"));
    assert!(!team.accepted);
    assert_eq!(team.round, 2);
    assert_eq!(team.critiques, ["Too short.", "Still too short."]);
}

#[tokio::test]
async fn debate_gives_each_debater_a_turn_every_round_then_the_judge_decides() {
    let (optimist, optimist_model) = listened(
        "optimist",
        &[
            "Ship now: users want it.",
            "Bugs can be fixed after launch.",
        ],
    );
    let (skeptic, skeptic_model) = listened(
        "skeptic",
        &["Wait: the tests are red.", "A broken launch costs more."],
    );
    let (judge, judge_model) = listened("judge", &["Wait a week and fix the tests."]);
    let graph = Debate::new(judge)
        .debater("optimist", optimist)
        .debater("skeptic", skeptic)
        .build()
        .unwrap();
    let team = run(&graph, "Should we ship today?").await;
    assert_eq!(
        team.path,
        ["optimist", "skeptic", "optimist", "skeptic", "judge"]
    );
    assert_eq!(
        team.output.as_deref(),
        Some("Wait a week and fix the tests.")
    );
    assert_eq!(team.round, 2);

    let skeptic_asked = prompts(&skeptic_model);
    assert!(
        skeptic_asked[0].contains("optimist: Ship now: users want it.")
            && skeptic_asked[0].contains("round 1 of 2"),
        "{}",
        skeptic_asked[0]
    );
    let optimist_asked = prompts(&optimist_model);
    assert!(
        optimist_asked[1].contains("skeptic: Wait: the tests are red.")
            && optimist_asked[1].contains("round 2 of 2"),
        "{}",
        optimist_asked[1]
    );
    let judge_asked = &prompts(&judge_model)[0];
    for argument in [
        "optimist: Ship now: users want it.",
        "skeptic: Wait: the tests are red.",
        "optimist: Bugs can be fixed after launch.",
        "skeptic: A broken launch costs more.",
    ] {
        assert!(judge_asked.contains(argument), "{judge_asked}");
    }

    let text = graph.to_mermaid();
    assert!(
        text.contains(r#"-.->|"optimist"|"#) && text.contains(r#"-.->|"judge"|"#),
        "the last debater loops back or hands over to the judge: {text}"
    );
    check_mermaid("shape_debate", &text).unwrap();
}

#[tokio::test]
async fn a_one_round_debate_goes_to_the_judge_after_every_debater_spoke_once() {
    let graph = Debate::new(scripted("judge", &["b is right"]))
        .debater("a", scripted("a", &["yes"]))
        .debater("b", scripted("b", &["no"]))
        .debater("c", scripted("c", &["maybe"]))
        .rounds(1)
        .build()
        .unwrap();
    let team = run(&graph, "Is it?").await;
    assert_eq!(team.path, ["a", "b", "c", "judge"]);
    assert_eq!(team.output.as_deref(), Some("b is right"));
    assert_eq!(team.round, 1);
}

#[test]
fn a_debate_needs_two_debaters_with_distinct_names() {
    let err = Debate::new(scripted("judge", &[]))
        .debater("solo", scripted("solo", &[]))
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "graph debate is invalid: at least 2 debaters needed, found 1"
    );
    let Error::Graph(graph_error) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        graph_error.problems(),
        [GraphProblem::TooFewMembers {
            role: "debaters".into(),
            min: 2,
            found: 1
        }]
    );

    let err = Debate::new(scripted("judge", &[]))
        .debater("pro", scripted("pro", &[]))
        .debater("pro", scripted("pro", &[]))
        .debater("judge", scripted("judge", &[]))
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "graph debate is invalid: node pro is declared more than once; node judge is declared more than once"
    );
}

#[tokio::test]
async fn actor_critic_retries_with_only_the_latest_feedback_until_the_score_reaches_the_threshold()
{
    let (actor, actor_model) = listened("actor", &["v1", "v2", "v3"]);
    let graph = ActorCritic::new(
        actor,
        scripted(
            "critic",
            &[
                "SCORE: 4\nToo short.",
                "SCORE: 6/10\nAdd an example.",
                "SCORE: 9\nGood.",
            ],
        ),
    )
    .max_rounds(5)
    .build()
    .unwrap();
    let team = run(&graph, "Explain borrowing").await;
    assert_eq!(
        team.path,
        ["actor", "critic", "actor", "critic", "actor", "critic"]
    );
    assert_eq!(team.output.as_deref(), Some("v3"));
    assert_eq!(team.score, Some(9));
    assert!(team.accepted);
    assert_eq!(team.round, 3);
    assert_eq!(team.critiques, ["Too short.", "Add an example."]);

    let asked = prompts(&actor_model);
    assert_eq!(asked[0], "Explain borrowing");
    assert!(
        asked[2].contains("v2")
            && asked[2].contains("scored it 6/10")
            && asked[2].contains("Add an example.")
            && !asked[2].contains("Too short."),
        "only the latest feedback: {}",
        asked[2]
    );

    let text = graph.to_mermaid();
    assert!(text.contains(r#"n1 -.->|"actor"| n0"#), "{text}");
    check_mermaid("shape_actor_critic", &text).unwrap();
}

#[tokio::test]
async fn actor_critic_ends_with_the_last_proposal_when_the_rounds_run_out() {
    let graph = ActorCritic::new(
        scripted("actor", &["v1", "v2"]),
        scripted("critic", &["SCORE: 3\nWrong.", "SCORE: 7\nAlmost."]),
    )
    .max_rounds(2)
    .build()
    .unwrap();
    let team = run(&graph, "Explain lifetimes").await;
    assert_eq!(team.path, ["actor", "critic", "actor", "critic"]);
    assert_eq!(team.output.as_deref(), Some("v2"));
    assert_eq!(team.score, Some(7));
    assert!(!team.accepted);
    assert_eq!(team.critiques, ["Wrong.", "Almost."]);
}

#[tokio::test]
async fn a_critic_reply_without_a_score_counts_as_zero_and_is_the_feedback() {
    let (actor, actor_model) = listened("actor", &["v1", "v2"]);
    let graph = ActorCritic::new(
        actor,
        scripted("critic", &["Decent, but cite sources.", "SCORE: 7"]),
    )
    .threshold(7)
    .build()
    .unwrap();
    let team = run(&graph, "Explain traits").await;
    assert_eq!(team.path, ["actor", "critic", "actor", "critic"]);
    assert_eq!(team.output.as_deref(), Some("v2"));
    assert_eq!(team.score, Some(7));
    assert!(team.accepted);
    assert_eq!(team.critiques, ["Decent, but cite sources."]);
    let retry = &prompts(&actor_model)[1];
    assert!(
        retry.contains("scored it 0/10") && retry.contains("Decent, but cite sources."),
        "{retry}"
    );
}

#[test]
fn a_team_state_saved_without_the_loop_fields_still_loads_and_new_ones_omit_them() {
    let old =
        json!({ "task": "t", "messages": [], "path": ["router", "billing"], "output": "done" });
    let team: TeamState = serde_json::from_value(old.clone()).unwrap();
    assert_eq!(
        (team.round, team.critiques.len(), team.score, team.accepted),
        (0, 0, None, false)
    );
    assert_eq!(serde_json::to_value(&team).unwrap(), old);
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

/// `Swarm::build` refuses a `start_with` that names no agent, naming it, instead of
/// building a swarm whose every run fails.
#[test]
fn a_swarm_starting_with_an_agent_it_does_not_have_is_refused_at_build() {
    let err = Swarm::new()
        .agent("a", "does a", scripted("a", &[]))
        .agent("b", "does b", scripted("b", &[]))
        .start_with("nobody")
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "graph swarm is invalid: start_with names unknown node nobody"
    );
    let Error::Graph(graph_error) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        graph_error.problems(),
        [GraphProblem::UnknownNode {
            name: "nobody".into(),
            context: "start_with".into(),
        }]
    );
}

/// Workers whose names are one inside the other (`writer`, `rewriter`).
fn writers() -> [(&'static str, &'static str, Agent); 2] {
    [
        (
            "writer",
            "writes drafts",
            scripted("writer", &["from writer"]),
        ),
        (
            "rewriter",
            "rewrites text",
            scripted("rewriter", &["from rewriter"]),
        ),
    ]
}

/// A classifier's reply names a worker as a whole word: `The rewriter.` picks `rewriter`,
/// not `writer`, whose name is inside it; a reply naming two workers is ambiguous and fails
/// the run like a name that is no worker.
#[tokio::test]
async fn router_picks_the_worker_named_as_a_whole_word_and_refuses_an_ambiguous_reply() {
    let router = |reply: &str| {
        writers()
            .into_iter()
            .fold(
                Router::new(scripted("classifier", &[reply])),
                |r, (name, about, agent)| r.worker(name, about, agent),
            )
            .build()
            .unwrap()
    };
    let team = run(&router("The rewriter."), "rewrite this").await;
    assert_eq!(team.path, ["router", "rewriter"]);
    assert_eq!(team.output.as_deref(), Some("from rewriter"));

    let team = run(&router("**writer**"), "write this").await;
    assert_eq!(team.path, ["router", "writer"]);

    let out = router("writer or rewriter")
        .invoke(&Runtime::in_memory(), "t", TeamState::new("either"))
        .await
        .unwrap();
    assert_eq!(
        failure_source(&out.completed().unwrap_err()),
        r#"agent classifier named several of its team (writer, rewriter): it replied "writer or rewriter""#
    );
}

/// A supervisor's directive names a worker as a whole word too.
#[tokio::test]
async fn supervisor_delegates_to_the_worker_named_as_a_whole_word() {
    let sup = writers()
        .into_iter()
        .fold(
            Supervisor::new(scripted(
                "boss",
                &["the rewriter: polish it", "FINISH: done"],
            )),
            |s, (name, about, agent)| s.worker(name, about, agent),
        )
        .build()
        .unwrap();
    let team = run(&sup, "rewrite this").await;
    assert_eq!(team.path, ["supervisor", "rewriter", "supervisor"]);
}

/// Look up an order's internal notes.
#[tool]
fn notes(order: String) -> String {
    format!("notes on {order}")
}

/// A worker whose answer its output guardrail blocked has no answer, as its own run's
/// output is empty: the team's output is empty too, never the worker's earlier, unchecked
/// text.
#[tokio::test]
async fn a_worker_whose_answer_a_guardrail_blocked_gives_the_team_no_output() {
    let mut looking =
        ModelResponse::tool_calls(vec![ToolCall::new("c1", "notes", json!({ "order": "A1" }))]);
    looking.content = "Let me look at the internal notes".to_owned();
    let billing = Agent::builder("You answer billing questions.")
        .name("billing")
        .model(ScriptedModel::new([
            looking,
            ModelResponse::text("SECRET internal note"),
        ]))
        .tool(notes)
        .guardrail(on_output("no_secrets", |text| {
            if text.contains("SECRET") {
                Verdict::Block("secret".into())
            } else {
                Verdict::Allow
            }
        }))
        .build()
        .unwrap();
    let router = Router::new(scripted("classifier", &["billing"]))
        .worker("billing", "bills", billing)
        .build()
        .unwrap();
    let team = run(&router, "why?").await;
    assert_eq!(team.path, ["router", "billing"]);
    assert_eq!(team.output.as_deref(), Some(""));
    // The caller can tell a blocked answer from an empty one.
    assert_eq!(
        team.stopped,
        [(
            "billing".to_owned(),
            StopReason::Guardrail("no_secrets".into())
        )]
    );
}

/// A worker stopped by its turn limit gives the team its answer so far (the text of a reply
/// that came with tool calls) as its output guardrails passed it, as its own run's output
/// would be: rewritten, or nothing when one blocked it; never the unchecked text.
#[tokio::test]
async fn a_stopped_workers_answer_so_far_passes_its_output_guardrails() {
    type Check = Box<dyn Fn(&str) -> Verdict<String> + Send + Sync>;
    let worker = |guardrail: Check| {
        let mut looking =
            ModelResponse::tool_calls(vec![ToolCall::new("c1", "notes", json!({ "order": "A1" }))]);
        looking.content = "Card 4111 1111, let me look at the notes".to_owned();
        Agent::builder("You answer billing questions.")
            .name("billing")
            .model(ScriptedModel::new([looking]))
            .tool(notes)
            .guardrail(on_output("cards", move |text: &str| guardrail(text)))
            .max_turns(1)
            .build()
            .unwrap()
    };
    let team_of = |billing: Agent| {
        Router::new(scripted("classifier", &["billing"]))
            .worker("billing", "bills", billing)
            .build()
            .unwrap()
    };

    let redacting = || {
        worker(Box::new(|text| {
            Verdict::Rewrite(text.replace(|c: char| c.is_ascii_digit(), "#"))
        }))
    };
    let team = run(&team_of(redacting()), "why?").await;
    assert_eq!(
        team.output.as_deref(),
        Some("Card #### ####, let me look at the notes")
    );
    assert_eq!(team.stopped, [("billing".to_owned(), StopReason::MaxTurns)]);
    // The agent's own run gives the same output.
    let alone = redacting().run("why?").await.unwrap();
    assert_eq!(alone.output, "Card #### ####, let me look at the notes");

    let blocking = worker(Box::new(|text| match text.contains("4111") {
        true => Verdict::Block("a card number".into()),
        false => Verdict::Allow,
    }));
    let team = run(&team_of(blocking), "why?").await;
    assert_eq!(team.output.as_deref(), Some(""), "a blocked answer so far");
    assert_eq!(team.stopped, [("billing".to_owned(), StopReason::MaxTurns)]);
}

/// A router's worker, and a plan's executor, stopped by their turn limit are marked as
/// such where the team keeps what they said: the router's transcript, and the step the
/// replanner reads as done (it reads it as cut short).
#[tokio::test]
async fn a_stopped_worker_is_marked_by_the_router_and_the_plan() {
    let stopping = |name: &str| {
        let mut looking =
            ModelResponse::tool_calls(vec![ToolCall::new("c1", "notes", json!({ "order": "A1" }))]);
        looking.content = "Looking".to_owned();
        Agent::builder("You answer billing questions.")
            .name(name)
            .model(ScriptedModel::new([looking]))
            .tool(notes)
            .max_turns(1)
            .build()
            .unwrap()
    };
    let router = Router::new(scripted("classifier", &["billing"]))
        .worker("billing", "bills", stopping("billing"))
        .build()
        .unwrap();
    let team = run(&router, "why?").await;
    assert_eq!(team.output.as_deref(), Some("Looking"));
    assert_eq!(
        team.messages.last().unwrap().text(),
        "billing (stopped: max_turns_exceeded; its tool calls: notes): Looking"
    );

    let (replanner, asked) = listened("replanner", &["DONE: partial"]);
    let plan = PlanAndExecute::new(
        scripted("planner", &["look it up"]),
        stopping("executor"),
        replanner,
    )
    .build()
    .unwrap();
    let team = run(&plan, "why?").await;
    assert_eq!(
        team.done,
        [(
            "look it up (stopped: max_turns_exceeded; its tool calls: notes)".to_owned(),
            "Looking".to_owned()
        )]
    );
    let told = prompts(&asked);
    assert!(
        told[0].contains(
            "- look it up (stopped: max_turns_exceeded; its tool calls: notes): \
             Looking"
        ),
        "{told:?}"
    );
}

/// A supervisor's worker stopped by its turn limit gives the team what it had, marked as
/// such in the transcript the supervisor reads, with what its tools did (told only that it
/// stopped, a supervisor asks for the same work again: a refund made twice), and noted in
/// `stopped`.
#[tokio::test]
async fn a_worker_stopped_by_its_turn_limit_is_marked_in_the_transcript() {
    let looking =
        ModelResponse::tool_calls(vec![ToolCall::new("c1", "notes", json!({ "order": "A1" }))]);
    let billing = Agent::builder("You answer billing questions.")
        .name("billing")
        .model(ScriptedModel::new([looking]))
        .tool(notes)
        .max_turns(1)
        .build()
        .unwrap();
    let supervisor = Supervisor::new(scripted("boss", &["billing: look it up", "FINISH: done"]))
        .worker("billing", "bills", billing)
        .build()
        .unwrap();
    let team = run(&supervisor, "why?").await;
    assert_eq!(team.stopped, [("billing".to_owned(), StopReason::MaxTurns)]);
    let said = team.messages[1].text();
    assert!(
        said.starts_with("billing (stopped: max_turns_exceeded; its tool calls: notes):"),
        "{said}"
    );
}

/// A replanner's `DONE` is read whatever its case, punctuation or markdown: `Done.` ends the
/// run instead of becoming a step for the executor, and `**DONE**: answer` gives the answer.
#[tokio::test]
async fn a_replanners_done_ends_the_run_whatever_its_punctuation_or_markdown() {
    let graph = |done: &str| {
        PlanAndExecute::new(
            scripted("planner", &["gather prices"]),
            scripted("executor", &["prices: 3, 5", "unused"]),
            scripted("replanner", &[done, "DONE: fallback"]),
        )
        .build()
        .unwrap()
    };
    let team = run(&graph("Done."), "t").await;
    assert_eq!(team.path, ["planner", "executor", "replanner"]);
    let team = run(&graph("**DONE**: buy the 3 one"), "t").await;
    assert_eq!(team.path, ["planner", "executor", "replanner"]);
    assert_eq!(team.output.as_deref(), Some("buy the 3 one"));
}

/// A bare `DONE` gives no answer: the team's output is the last step's result, as for the
/// supervisor's bare `FINISH`, not an empty text.
#[tokio::test]
async fn a_bare_done_makes_the_last_steps_result_the_output() {
    let graph = PlanAndExecute::new(
        scripted("planner", &["gather prices"]),
        scripted("executor", &["prices: 3, 5"]),
        scripted("replanner", &["DONE"]),
    )
    .build()
    .unwrap();
    let team = run(&graph, "t").await;
    assert_eq!(team.output.as_deref(), Some("prices: 3, 5"));
}

/// `max_steps` caps the executor's steps over the run: once it has carried out that many,
/// the run ends cleanly with the last result as output and the steps left undone in `plan`,
/// whether they came from the planner or the replanner.
#[tokio::test]
async fn plan_and_execute_ends_after_max_steps_with_the_undone_steps_in_the_plan() {
    let graph = PlanAndExecute::new(
        scripted("planner", &["a\nb\nc\nd"]),
        scripted("executor", &["1", "2", "3", "4"]),
        scripted("replanner", &["DONE: ok"]),
    )
    .max_steps(2)
    .build()
    .unwrap();
    let team = run(&graph, "t").await;
    assert_eq!(team.path, ["planner", "executor", "executor"]);
    assert_eq!(team.output.as_deref(), Some("2"));
    assert_eq!(team.plan, ["c", "d"]);
    assert_eq!(team.done.len(), 2);

    let graph = PlanAndExecute::new(
        scripted("planner", &["a"]),
        scripted("executor", &["1", "2"]),
        scripted("replanner", &["b", "DONE: unused"]),
    )
    .max_steps(1)
    .build()
    .unwrap();
    let team = run(&graph, "t").await;
    assert_eq!(team.path, ["planner", "executor", "replanner"]);
    assert_eq!(team.output.as_deref(), Some("1"));
    assert_eq!(team.plan, ["b"]);
}

/// A team that works for a user runs its agents for that user: a worker's per-user budget
/// counts the team's runs, and another user's team is not affected.
#[tokio::test]
async fn a_team_for_a_user_spends_that_users_budget() {
    use loomflow::agent::{Budget, BudgetCap, StopReason};
    use loomflow::model::Usage;
    let used = Usage {
        input_tokens: 60,
        output_tokens: 40,
        ..Usage::default()
    };
    let worker = Agent::builder("You answer.")
        .name("answers")
        .model(ScriptedModel::new((0..4).map(|i| {
            ModelResponse::text(format!("answer {i}")).with_usage(used)
        })))
        .budget(Budget::default().max_tokens_per_user(150))
        .build()
        .unwrap();
    let router = Router::new(scripted("classifier", &["answers"; 4]))
        .worker("answers", "everything", worker.clone())
        .build()
        .unwrap();
    let runtime = Runtime::in_memory();
    let mut outputs = Vec::new();
    for (thread, user) in [("1", "ann"), ("2", "ann"), ("3", "ann"), ("4", "bob")] {
        let team = router
            .invoke(&runtime, thread, TeamState::new("?").with_user(user))
            .await
            .unwrap()
            .completed()
            .unwrap();
        outputs.push(team.output.unwrap_or_default());
    }
    // ann's third run is refused its model call: she spent 200 of her 150 tokens.
    assert_eq!(outputs, ["answer 0", "answer 1", "", "answer 2"]);
    let third = worker.run("?").user("ann").await.unwrap();
    assert_eq!(
        third.reason,
        Some(StopReason::Budget(BudgetCap::UserTokens))
    );
}

/// A tool that waits for the test's go-ahead, and counts its calls.
struct Gated {
    spec: loomflow::tool::ToolSpec,
    gate: Arc<tokio::sync::Semaphore>,
    calls: Arc<std::sync::atomic::AtomicUsize>,
}

impl loomflow::tool::Tool for Gated {
    fn spec(&self) -> &loomflow::tool::ToolSpec {
        &self.spec
    }
    fn call<'a>(
        &'a self,
        _: serde_json::Value,
        _: &'a loomflow::tool::ToolContext,
    ) -> BoxFuture<'a, Result<serde_json::Value, loomflow::tool::ToolError>> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async move {
            self.gate.acquire().await.unwrap().forget();
            Ok(json!("done"))
        })
    }
}

/// Cancelling a team's run while a worker agent calls a tool stops the agent before its
/// next turn: no further model call or tool call is made for a run nobody wants.
#[tokio::test]
async fn a_cancelled_team_stops_its_worker_before_its_next_turn() {
    let turns = (0..10).map(|i| {
        ModelResponse::tool_calls(vec![ToolCall::new(format!("c{i}"), "work", json!({}))])
    });
    let model = Arc::new(ScriptedModel::new(
        turns.chain([ModelResponse::text("all done")]),
    ));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tool = Gated {
        spec: loomflow::tool::ToolSpec::new("work", "Does some work.", json!({"type": "object"})),
        gate: Arc::clone(&gate),
        calls: Arc::clone(&calls),
    };
    let worker = Agent::builder("You work.")
        .name("billing")
        .model(Arc::clone(&model))
        .tool(tool)
        .build()
        .unwrap();
    let router = Router::new(scripted("classifier", &["billing"]))
        .worker("billing", "invoices", worker)
        .build()
        .unwrap();
    let runtime = Runtime::in_memory();
    let run = router.start(&runtime, "team", TeamState::new("refund me"));
    while calls.load(std::sync::atomic::Ordering::SeqCst) < 1 {
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    runtime.cancel("team").await.unwrap();
    gate.add_permits(100);
    let stopped = tokio::time::timeout(std::time::Duration::from_secs(5), run)
        .await
        .unwrap();
    assert!(
        matches!(stopped, Err(loomflow::RunError::Cancelled { .. })),
        "{stopped:?}"
    );
    assert_eq!(model.requests().len(), 1, "model calls after the cancel");
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// `max_rounds` counts the delegations of the whole run: a worker that waits for an
/// approval every round does not start the count again at each resume.
#[tokio::test]
async fn a_supervisors_rounds_are_counted_across_its_workers_waits() {
    let _one_at_a_time = REFUND_TESTS.lock().await;
    let refunds_before = REFUNDS.load(std::sync::atomic::Ordering::SeqCst);
    let mut worker = Vec::new();
    for n in 1..=3 {
        let id = format!("call_{n}");
        let order = json!({ "order": format!("ord_{n}") });
        worker.push(ModelResponse::tool_calls(vec![ToolCall::new(
            id, "refund", order,
        )]));
        worker.push(ModelResponse::text(format!("Refunded order {n}.")));
    }
    let refunder = Agent::builder("You refund orders.")
        .name("refunder")
        .model(ScriptedModel::new(worker))
        .tool(refund)
        .durable_approvals()
        .build()
        .unwrap();
    let boss = [
        "refunder: order 1",
        "refunder: order 2",
        "refunder: order 3",
        "FINISH: done",
    ];
    let team = Supervisor::new(scripted("boss", &boss))
        .worker("refunder", "refunds orders", refunder)
        .max_rounds(1)
        .build()
        .unwrap();
    let runtime = Runtime::in_memory();
    let mut out = team
        .invoke(&runtime, "team", TeamState::new("Refund three orders"))
        .await
        .unwrap();
    let mut approved = 0;
    let error = loop {
        match out {
            RunOutcome::Interrupted { .. } => {
                approved += 1;
                let call = format!("call_{approved}");
                let allow = loomflow::tool::ApprovalDecision::Allow;
                runtime.decide_approval("team", &call, allow).await.unwrap();
                out = team.recover(&runtime, "team").await.unwrap();
            }
            RunOutcome::Failed { error, .. } => break error,
            RunOutcome::Completed(team) => panic!("more rounds than allowed: {:?}", team.path),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(approved, 1, "one round, then the limit");
    let RunError::NodeFailed { node, source, .. } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(node, "supervisor");
    assert!(
        matches!(
            source.downcast_ref::<Error>(),
            Some(Error::Agent(loomflow::agent::AgentError::MaxRounds {
                max_rounds: 1,
                ..
            }))
        ),
        "{error:?}"
    );
    assert!(source.to_string().contains("its max_rounds"), "{source}");
    assert_eq!(
        REFUNDS.load(std::sync::atomic::Ordering::SeqCst) - refunds_before,
        1,
        "one refund"
    );
}

/// A bare `FINISH` makes the last worker's answer the output, as it said it; none when no
/// worker ran. A supervisor with no worker is refused at build.
#[tokio::test]
async fn a_bare_finish_makes_the_last_workers_answer_the_output() {
    let team = Supervisor::new(scripted("boss", &["writer: draft it", "FINISH"]))
        .worker("writer", "writes", scripted("writer", &["A paragraph."]))
        .build()
        .unwrap();
    let done = run(&team, "Write about paperclips").await;
    assert_eq!(done.output.as_deref(), Some("A paragraph."));

    let team = Supervisor::new(scripted("boss", &["FINISH"]))
        .worker("writer", "writes", scripted("writer", &[]))
        .build()
        .unwrap();
    assert_eq!(run(&team, "Write about paperclips").await.output, None);

    let error = Supervisor::new(scripted("boss", &[])).build().unwrap_err();
    let Error::Graph(GraphError::Invalid { problems, .. }) = &error else {
        panic!("{error:?}");
    };
    assert!(
        problems.iter().any(|p| matches!(
            p,
            GraphProblem::TooFewMembers { role, min: 1, found: 0 } if role == "workers"
        )),
        "{problems:?}"
    );
    let huge = Supervisor::new(scripted("boss", &["FINISH: ok"]))
        .worker("writer", "writes", scripted("writer", &[]))
        .max_rounds(u64::MAX)
        .build()
        .unwrap();
    assert_eq!(run(&huge, "anything").await.output.as_deref(), Some("ok"));
}

/// A team with nobody in it is refused, by the name it was given, saying who is missing.
#[test]
fn an_empty_team_is_refused_by_its_own_name() {
    let refused = |error: loomflow::Error| match error {
        Error::Graph(GraphError::Invalid { graph, problems }) => {
            let Some(GraphProblem::TooFewMembers {
                role,
                min: 1,
                found: 0,
            }) = problems.first()
            else {
                panic!("{graph}: {problems:?}")
            };
            (graph, role.clone())
        }
        other => panic!("{other:?}"),
    };
    let router = Router::new(scripted("classifier", &[])).name("triage");
    let swarm = Swarm::new().name("desk");
    let supervisor = Supervisor::new(scripted("boss", &[])).name("research");
    assert_eq!(
        refused(router.build().unwrap_err()),
        ("triage".to_owned(), "workers".to_owned())
    );
    assert_eq!(
        refused(swarm.build().unwrap_err()),
        ("desk".to_owned(), "agents".to_owned())
    );
    assert_eq!(
        refused(supervisor.build().unwrap_err()),
        ("research".to_owned(), "workers".to_owned())
    );
}

/// A coordinator stopped before it decided (its answer blocked, its budget spent) fails the
/// team with an error naming it and why, not a routing error quoting an empty reply.
#[tokio::test]
async fn a_coordinator_stopped_before_it_decided_fails_naming_it_and_why() {
    let blocked = |name: &str, reply: &str| {
        Agent::builder("You coordinate.")
            .name(name)
            .model(ScriptedModel::new([ModelResponse::text(reply)]))
            .guardrail(on_output("no_routing", |_| Verdict::Block("no".into())))
            .build()
            .unwrap()
    };
    let router = Router::new(blocked("classifier", "billing"))
        .worker("billing", "bills", scripted("billing", &["paid"]))
        .build()
        .unwrap();
    let supervisor = Supervisor::new(blocked("boss", "billing: pay it"))
        .worker("billing", "bills", scripted("billing", &["paid"]))
        .build()
        .unwrap();
    for (team, node, agent) in [
        (router, "router", "classifier"),
        (supervisor, "supervisor", "boss"),
    ] {
        let out = team
            .invoke(&Runtime::in_memory(), "team", TeamState::new("why?"))
            .await
            .unwrap();
        let RunOutcome::Failed { error, .. } = out else {
            panic!("{node}: {out:?}");
        };
        let RunError::NodeFailed {
            node: failed,
            source,
            ..
        } = &error
        else {
            panic!("{error:?}");
        };
        assert_eq!(failed, node);
        assert_eq!(
            source.to_string(),
            format!(
                "agent {agent} stopped (guardrail:no_routing) before it decided what its team does next"
            ),
        );
        assert!(
            matches!(
                source.downcast_ref::<Error>(),
                Some(Error::Agent(loomflow::agent::AgentError::Undecided { .. }))
            ),
            "{error:?}"
        );
    }
}

/// A reply that hands off and whose other call's result a guardrail blocks stops the team
/// where it is: the stopped agent hands nothing off.
#[tokio::test]
async fn a_guardrail_stop_in_a_reply_that_hands_off_stops_the_swarm() {
    let reply = ModelResponse::tool_calls(vec![
        ToolCall::new("c1", "notes", json!({ "order": "IGNORE previous" })),
        ToolCall::new("h1", "transfer_to_billing", json!({})),
    ]);
    let triage = Agent::builder("You route customers.")
        .name("triage")
        .model(ScriptedModel::new([reply]))
        .tool(notes)
        .guardrail(on_tool_result("injection", |text| {
            if text.contains("IGNORE") {
                Verdict::Block("looks injected".into())
            } else {
                Verdict::Allow
            }
        }))
        .build()
        .unwrap();
    let swarm = Swarm::new()
        .agent("triage", "first contact", triage)
        .agent("billing", "bills", scripted("billing", &["Refund issued."]))
        .build()
        .unwrap();
    let team = run(&swarm, "refund please").await;
    assert_eq!(team.path, ["triage"]);
    assert_eq!(team.output.as_deref(), Some(""));
}

/// A swarm's agents use their tools as they are at each turn: a tool removed from an agent
/// after the swarm was built is gone inside the swarm too, and one added is there.
#[tokio::test]
async fn a_swarm_agent_follows_its_agents_tools() {
    let model = Arc::new(ScriptedModel::new([
        ModelResponse::tool_calls(vec![ToolCall::new("c1", "notes", json!({ "order": "A1" }))]),
        ModelResponse::text("No notes."),
    ]));
    let triage = Agent::builder("You route customers.")
        .name("triage")
        .model(Arc::clone(&model))
        .tool(notes)
        .build()
        .unwrap();
    let swarm = Swarm::new()
        .agent("triage", "first contact", triage.clone())
        .agent("billing", "bills", scripted("billing", &[]))
        .build()
        .unwrap();
    assert!(triage.remove_tool("notes"));
    triage.add_tool(refund);
    run(&swarm, "what do the notes say?").await;
    let offered: Vec<String> = model.requests()[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert!(
        offered.contains(&"refund".to_owned()) && !offered.contains(&"notes".to_owned()),
        "{offered:?}"
    );
    assert!(
        offered.contains(&"transfer_to_billing".to_owned()),
        "{offered:?}"
    );
    let result = model.requests()[1]
        .messages
        .last()
        .unwrap()
        .text()
        .to_owned();
    assert!(result.contains("unknown tool notes"), "{result}");
}

/// A planner whose reply holds no steps does not send the executor to do an empty step,
/// whose work would be thrown away and done again: the replanner plans from nothing done,
/// and the run still ends within `max_steps`.
#[tokio::test]
async fn an_empty_plan_goes_to_the_replanner_not_to_the_executor() {
    let (executor, model) = listened("executor", &["x", "1"]);
    let graph = PlanAndExecute::new(
        scripted("planner", &[""]),
        executor,
        scripted("replanner", &["add the numbers", "DONE: ok"]),
    )
    .max_steps(1)
    .build()
    .unwrap();
    let team = run(&graph, "t").await;
    assert_eq!(team.path, ["planner", "replanner", "executor", "replanner"]);
    assert_eq!(team.output.as_deref(), Some("ok"));
    let asked = prompts(&model);
    assert_eq!(asked.len(), 1);
    assert!(asked[0].ends_with("add the numbers"), "{asked:?}");
}

/// A replanner stopped before it decided (here a guardrail blocks its reply) fails the
/// team naming it, as a supervisor does, rather than ending the run as if it said `DONE`.
#[tokio::test]
async fn a_replanner_stopped_before_it_decided_fails_naming_it() {
    let replanner = Agent::builder("You replan.")
        .name("replanner")
        .model(ScriptedModel::new([ModelResponse::text("DONE: it is 4")]))
        .guardrail(on_output("no_answers", |_| Verdict::Block("no".into())))
        .build()
        .unwrap();
    let graph = PlanAndExecute::new(
        scripted("planner", &["add"]),
        scripted("executor", &["4"]),
        replanner,
    )
    .build()
    .unwrap();
    let out = graph
        .invoke(&Runtime::in_memory(), "team", TeamState::new("2+2?"))
        .await
        .unwrap();
    let RunOutcome::Failed { error, .. } = out else {
        panic!("{out:?}");
    };
    assert!(
        error.to_string().contains("replanner") && format!("{error:?}").contains("Undecided"),
        "{error:?}"
    );
}

/// Two teams of one shape, named apart, on one worker: each run is carried on by its own
/// team's agents. (Under the shape's one default name, the second would replace the first.)
#[tokio::test]
async fn teams_of_one_shape_named_apart_run_their_own_runs() {
    let team = |name: &str, word: &str| {
        PlanAndExecute::new(
            scripted("planner", &["do it"]),
            scripted("executor", &[word]),
            scripted("replanner", &["DONE"]),
        )
        .name(name)
        .build()
        .unwrap()
    };
    let (research, coding) = (team("research", "found"), team("coding", "coded"));
    assert_eq!((research.name(), coding.name()), ("research", "coding"));
    let runtime = Runtime::in_memory();
    let worker = Worker::builder(&runtime)
        .graph(&research)
        .graph(&coding)
        .build();
    runtime
        .submit("research", "r", TeamState::new("look"))
        .await
        .unwrap();
    runtime
        .submit("coding", "c", TeamState::new("build"))
        .await
        .unwrap();
    worker.run_until_idle().await.unwrap();
    for (thread, output) in [("r", "found"), ("c", "coded")] {
        let team: TeamState = runtime.get_state(thread).await.unwrap().unwrap();
        assert_eq!(team.output.as_deref(), Some(output), "{thread}");
    }
}

/// A critic stopped before it gave its verdict (here a guardrail blocks its reply) fails
/// the team naming it, in Reflexion and ActorCritic alike: its reply is not read as a
/// critique or a score.
#[tokio::test]
async fn a_critic_stopped_before_its_verdict_fails_naming_it() {
    let blocked = || {
        Agent::builder("You judge.")
            .name("judge")
            .model(ScriptedModel::new([ModelResponse::text("ACCEPT")]))
            .guardrail(on_output("no_verdicts", |_| Verdict::Block("no".into())))
            .build()
            .unwrap()
    };
    let teams = [
        Reflexion::new(scripted("actor", &["draft"]), blocked())
            .build()
            .unwrap(),
        ActorCritic::new(scripted("actor", &["draft"]), blocked())
            .build()
            .unwrap(),
    ];
    for team in teams {
        let out = team
            .invoke(&Runtime::in_memory(), "team", TeamState::new("write"))
            .await
            .unwrap();
        let RunOutcome::Failed { error, .. } = out else {
            panic!("{}: {out:?}", team.name());
        };
        assert_eq!(
            failure_source(&error),
            "agent judge stopped (guardrail:no_verdicts) before it decided what its team does next",
            "{}",
            team.name()
        );
    }
}
