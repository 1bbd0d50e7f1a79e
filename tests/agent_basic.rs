//! Agents on scripted models: the ReAct loop, limits, budgets, output schemas, sessions,
//! streaming, diagrams, and an agent inside a user's graph.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::StreamExt;
use loomflow::agent::{Agent, AgentError, AgentEvent, AgentState, Budget, BudgetCap, StopReason};
use loomflow::model::{
    EchoModel, Message, Model, ModelError, ModelRequest, ModelResponse, ScriptedModel, StreamChunk,
    ToolCall, Usage,
};
use loomflow::prelude::*;
use loomflow::tool::Decision;
use loomflow::tool::{Tool, ToolContext, ToolError, ToolSpec};

/// A tool that adds two numbers and counts its calls.
struct Add {
    spec: ToolSpec,
    calls: Arc<AtomicUsize>,
}

impl Add {
    fn new() -> (Self, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let spec = ToolSpec::new(
            "add",
            "Add two numbers.",
            json!({ "type": "object", "properties": { "a": { "type": "number" }, "b": { "type": "number" } }, "required": ["a", "b"] }),
        );
        (
            Self {
                spec,
                calls: calls.clone(),
            },
            calls,
        )
    }
}

impl Tool for Add {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call<'a>(
        &'a self,
        args: serde_json::Value,
        _: &'a ToolContext,
    ) -> BoxFuture<'a, Result<serde_json::Value, ToolError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            Ok(json!(
                args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0)
            ))
        })
    }
}

fn add_call(id: &str) -> ModelResponse {
    ModelResponse::tool_calls(vec![ToolCall::new(id, "add", json!({ "a": 2, "b": 3 }))])
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

#[tokio::test]
async fn the_loop_calls_tools_until_the_model_answers() {
    let (add, calls) = Add::new();
    let model = Arc::new(ScriptedModel::new([
        add_call("c1"),
        ModelResponse::text("2 + 3 = 5").with_usage(usage(10, 5)),
    ]));
    let agent = Agent::builder("You add numbers.")
        .model(model.clone())
        .tool(add)
        .build()
        .unwrap();
    let result = agent.run("what is 2 + 3?").await.unwrap();
    assert_eq!(result.output, "2 + 3 = 5");
    assert_eq!(result.turns, 2);
    assert!(!result.interrupted);
    assert_eq!(result.usage.total_tokens(), 15);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        result.messages.len(),
        4,
        "user, assistant call, tool result, answer: {:?}",
        result.messages
    );
    assert_eq!(result.messages[2], Message::tool_result("c1", "5.0"));
    // The model saw the instructions, the tools and the tool's result.
    let requests = model.requests();
    assert_eq!(requests[0].messages[0], Message::system("You add numbers."));
    assert_eq!(requests[0].tools[0].name, "add");
    assert_eq!(
        requests[1].messages.last().unwrap(),
        &Message::tool_result("c1", "5.0")
    );
}

#[tokio::test]
async fn an_unknown_tool_becomes_an_error_result_the_model_reads() {
    let model = ScriptedModel::new([
        ModelResponse::tool_calls(vec![ToolCall::new("c1", "nope", json!({}))]),
        ModelResponse::text("sorry"),
    ]);
    let (add, _) = Add::new();
    let agent = Agent::builder("x").model(model).tool(add).build().unwrap();
    let result = agent.run("go").await.unwrap();
    assert_eq!(
        result.messages[2],
        Message::tool_error("c1", "unknown tool nope; known tools: add")
    );
    assert_eq!(result.output, "sorry");
}

#[tokio::test]
async fn max_turns_stops_the_run_cleanly_and_keeps_the_work() {
    let (add, calls) = Add::new();
    let model = ScriptedModel::new((0..10).map(|i| add_call(&format!("c{i}"))));
    let agent = Agent::builder("x")
        .model(model)
        .tool(add)
        .max_turns(3)
        .build()
        .unwrap();
    let result = agent.run("loop forever").await.unwrap();
    assert!(result.interrupted);
    assert_eq!(result.reason, Some(StopReason::MaxTurns));
    assert_eq!(result.turns, 3);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(result.messages.len(), 7);

    // A run may lower the limit for itself.
    let (add, _) = Add::new();
    let model = ScriptedModel::new((0..10).map(|i| add_call(&format!("c{i}"))));
    let agent = Agent::builder("x")
        .model(model)
        .tool(add)
        .max_turns(5)
        .build()
        .unwrap();
    let result = agent.run("loop").max_turns(2).await.unwrap();
    assert_eq!(
        (result.turns, result.reason),
        (2, Some(StopReason::MaxTurns))
    );
}

/// A run on a continued session that stops before it said anything has no answer so far:
/// the session's earlier answer is not this run's output.
#[tokio::test]
async fn a_stopped_run_does_not_give_an_earlier_runs_answer_as_its_own() {
    let (add, _) = Add::new();
    let model = ScriptedModel::new([
        ModelResponse::text("the answer to the first question"),
        add_call("c1"),
        add_call("c2"),
    ]);
    let agent = Agent::builder("x").model(model).tool(add).build().unwrap();
    agent.run("first").session("s").await.unwrap();
    let second = agent.run("second").session("s").max_turns(1).await.unwrap();
    assert_eq!(second.reason, Some(StopReason::MaxTurns));
    assert_eq!(second.output, "");
}

#[tokio::test]
async fn a_token_budget_stops_the_run_with_its_cap_as_the_reason() {
    let (add, _) = Add::new();
    let model =
        ScriptedModel::new((0..10).map(|i| add_call(&format!("c{i}")).with_usage(usage(400, 100))));
    let agent = Agent::builder("x")
        .model(model)
        .tool(add)
        .budget(Budget::default().max_tokens(1_200))
        .build()
        .unwrap();
    let result = agent.run("go").await.unwrap();
    assert_eq!(result.reason, Some(StopReason::Budget(BudgetCap::Tokens)));
    assert_eq!(
        result.turns, 3,
        "500 tokens a turn: the cap is reached after the third"
    );
}

#[tokio::test]
async fn a_per_user_budget_spans_runs() {
    let model = ScriptedModel::new(
        (0..5).map(|i| ModelResponse::text(format!("a{i}")).with_usage(usage(60, 40))),
    );
    let agent = Agent::builder("x")
        .model(model)
        .budget(Budget::default().max_tokens_per_user(150))
        .build()
        .unwrap();
    assert!(!agent.run("1").user("ann").await.unwrap().interrupted);
    assert!(!agent.run("2").user("ann").await.unwrap().interrupted);
    let third = agent.run("3").user("ann").await.unwrap();
    assert_eq!(
        third.reason,
        Some(StopReason::Budget(BudgetCap::UserTokens))
    );
    assert!(
        !agent.run("4").user("bob").await.unwrap().interrupted,
        "other users are not affected"
    );
}

/// What a [`Ruled`] model answers a request with: a reply after so many seconds, or none
/// (it never answers).
type Rule = fn(&ModelRequest) -> Option<(u64, ModelResponse)>;

/// A model that answers each request as its rule says; `stalled`, if given, is told when it
/// is asked and will not answer.
#[derive(Debug)]
struct Ruled {
    rule: Rule,
    stalled: Option<Arc<tokio::sync::Notify>>,
}

impl Ruled {
    fn new(rule: Rule) -> Self {
        Self {
            rule,
            stalled: None,
        }
    }
}

impl Model for Ruled {
    fn name(&self) -> &str {
        "ruled"
    }
    fn complete(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        let answer = (self.rule)(&request);
        if let (None, Some(stalled)) = (&answer, &self.stalled) {
            stalled.notify_one();
        }
        Box::pin(async move {
            let Some((seconds, response)) = answer else {
                return std::future::pending().await;
            };
            tokio::time::sleep(Duration::from_secs(seconds)).await;
            Ok(response)
        })
    }
    fn stream(&self, _: ModelRequest) -> loomflow::model::ChunkStream {
        Box::pin(futures_util::stream::pending())
    }
}

/// Never answers.
fn never(_: &ModelRequest) -> Option<(u64, ModelResponse)> {
    None
}

/// Answers the prompt `one` after 8 s, and nothing else ever.
fn slow_once(request: &ModelRequest) -> Option<(u64, ModelResponse)> {
    let one = request.messages.last().is_some_and(|m| m.text() == "one");
    one.then(|| (8, ModelResponse::text("done")))
}

/// Calls `add` once, then never answers again.
fn add_then_never(request: &ModelRequest) -> Option<(u64, ModelResponse)> {
    let called = request.messages.iter().any(|m| !m.tool_calls().is_empty());
    (!called).then(|| (0, add_call("c1")))
}

#[tokio::test(start_paused = true)]
async fn the_wall_clock_timeout_is_an_error_that_says_the_seconds() {
    let agent = Agent::builder("x")
        .model(Ruled::new(never))
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let err = agent.run("hello").session("s1").await.unwrap_err();
    assert!(
        matches!(err, Error::Agent(AgentError::Timeout { .. })),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "agent agent timed out after 30 s on session s1"
    );
}

/// The timeout covers the whole call, waiting for the session's turn behind another run
/// included; so does a stream's.
#[tokio::test(start_paused = true)]
async fn the_timeout_counts_the_wait_for_the_sessions_turn() {
    let agent = Agent::builder("x")
        .model(Ruled::new(slow_once))
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let first = tokio::spawn({
        let agent = agent.clone();
        async move { agent.run("one").session("s").await }
    });
    tokio::time::sleep(Duration::from_secs(4)).await;
    let start = tokio::time::Instant::now();
    let second = agent.run("two").session("s").await;
    assert_eq!(start.elapsed(), Duration::from_secs(10), "{second:?}");
    assert!(
        matches!(second, Err(Error::Agent(AgentError::Timeout { .. }))),
        "{second:?}"
    );
    assert_eq!(
        first.await.unwrap().unwrap().output,
        "done",
        "the first run's turn"
    );

    let first = tokio::spawn({
        let agent = agent.clone();
        async move { agent.run("one").session("t").await }
    });
    tokio::time::sleep(Duration::from_secs(4)).await;
    let start = tokio::time::Instant::now();
    let outcome = agent
        .run("two")
        .session("t")
        .stream()
        .await
        .unwrap()
        .outcome()
        .await;
    assert!(
        matches!(outcome, Err(Error::Agent(AgentError::Timeout { .. }))),
        "{outcome:?}"
    );
    assert_eq!(start.elapsed(), Duration::from_secs(10));
    assert_eq!(first.await.unwrap().unwrap().output, "done");
}

/// A run stopped part way (its timeout passed) is carried on, not started over: a new
/// prompt on its session is refused until it is resumed or cancelled, as the docs say. One
/// queued for the session's turn behind it is refused as the turn comes. Before, a run cut
/// between two turns was dropped and the new prompt continued its conversation.
#[tokio::test(start_paused = true)]
async fn a_session_whose_run_timed_out_takes_no_new_prompt() {
    let (add, _) = Add::new();
    // Cut between two turns: its first turn (a tool call and its result) checkpointed.
    let agent = Agent::builder("x")
        .model(Ruled::new(add_then_never))
        .tool(add)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let first = run_apart(&agent, "one");
    tokio::time::sleep(Duration::from_secs(4)).await;
    refused_as_unfinished(&agent.run("two").session("s").await);
    assert!(matches!(
        first.await.unwrap(),
        Err(Error::Agent(AgentError::Timeout { .. }))
    ));
    refused_as_unfinished(&agent.run("three").session("s").await);
    agent.runtime().cancel("s").await.unwrap();
    let fourth = agent.run("four").session("s").await;
    assert!(
        !matches!(
            fourth,
            Err(Error::Agent(AgentError::SessionUnfinished { .. }))
        ),
        "cancelled, the session takes a prompt again: {fourth:?}"
    );
}

/// `agent`'s run of `prompt` on the session `s`, in a task of its own.
fn run_apart(
    agent: &Agent,
    prompt: &'static str,
) -> tokio::task::JoinHandle<loomflow::Result<loomflow::agent::RunResult>> {
    let agent = agent.clone();
    tokio::spawn(async move { agent.run(prompt).session("s").await })
}

fn refused_as_unfinished(outcome: &loomflow::Result<loomflow::agent::RunResult>) {
    assert!(
        matches!(
            outcome,
            Err(Error::Agent(AgentError::SessionUnfinished { .. }))
        ),
        "{outcome:?}"
    );
}

/// So is one whose task was dropped between two turns (as a dropped stream drops it), on
/// SQLite (which lets the dropped claim go in the background) as in memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_run_was_dropped_takes_no_new_prompt() {
    let db = loomflow_tests::TempDb::new("dropped-session");
    for runtime in [Runtime::in_memory(), Runtime::sqlite(db.path()).unwrap()] {
        let (add, _) = Add::new();
        let second_turn = Arc::new(tokio::sync::Notify::new());
        let agent = Agent::builder("x")
            .model(Ruled {
                rule: add_then_never,
                stalled: Some(Arc::clone(&second_turn)),
            })
            .tool(add)
            .runtime(runtime)
            .build()
            .unwrap();
        let first = run_apart(&agent, "one");
        // Its first turn checkpointed, its second asked of the model: between two turns.
        second_turn.notified().await;
        first.abort();
        let _ = first.await;
        refused_as_unfinished(&agent.run("two").session("s").await);
    }
}

#[derive(Debug, Deserialize, PartialEq)]
struct Answer {
    city: String,
    temp_c: f64,
}

fn answer_schema() -> serde_json::Value {
    json!({ "type": "object", "properties": { "city": { "type": "string" }, "temp_c": { "type": "number" } }, "required": ["city", "temp_c"] })
}

#[tokio::test]
async fn an_output_that_fails_its_schema_is_retried_with_the_error_shown() {
    let model = Arc::new(ScriptedModel::new([
        ModelResponse::text("It is warm in Rome."),
        ModelResponse::text(r#"{"city": "Rome", "temp_c": 24.5}"#),
    ]));
    let agent = Agent::builder("x")
        .model(model.clone())
        .output_schema::<Answer>("answer", answer_schema())
        .build()
        .unwrap();
    let result = agent.run("weather in Rome?").await.unwrap();
    assert_eq!(
        result.parsed::<Answer>().unwrap(),
        Answer {
            city: "Rome".into(),
            temp_c: 24.5
        }
    );
    let second = &model.requests()[1];
    assert!(
        second.output_schema.is_some(),
        "the schema goes to the model"
    );
    let feedback = second.messages.last().unwrap().text();
    assert!(
        feedback.contains("does not match the required output schema"),
        "{feedback}"
    );
}

#[tokio::test]
async fn an_output_that_keeps_failing_its_schema_is_a_typed_error() {
    let model = ScriptedModel::new((0..5).map(|_| ModelResponse::text("no json here")));
    let agent = Agent::builder("x")
        .model(model)
        .output_schema::<Answer>("answer", answer_schema())
        .max_schema_retries(1)
        .build()
        .unwrap();
    let err = agent.run("?").await.unwrap_err();
    // The agent's own error, as a timeout is: not its loop node's failure wrapping it.
    assert!(
        matches!(
            err,
            Error::Agent(AgentError::OutputSchema { attempts: 2, .. })
        ),
        "{err:?}"
    );
}

/// A model call that fails gives the model's error (which names the provider and the
/// model), not the failure of the loop's step around it.
#[tokio::test]
async fn a_failed_model_call_is_the_models_error() {
    let agent = Agent::builder("x")
        .model(ScriptedModel::new([]))
        .build()
        .unwrap();
    let err = agent.run("hi").await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Model(loomflow::model::ModelError::ScriptExhausted { .. })
        ),
        "{err:?}"
    );
    let mut stream = agent.run("hi").session("streamed").stream().await.unwrap();
    while futures_util::StreamExt::next(&mut stream).await.is_some() {}
    let err = stream.outcome().await.unwrap_err();
    assert!(matches!(err, Error::Model(_)), "{err:?}");
}

#[test]
fn build_reports_every_problem() {
    let err = Agent::builder("x")
        .max_turns(0)
        .name(" ")
        .build()
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("no model"), "{text}");
    assert!(text.contains("max_turns must be at least 1"), "{text}");
    assert!(text.contains("name must not be empty"), "{text}");
    let err = Agent::builder("x")
        .model_name("gpt2-of-my-own")
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("does not resolve"), "{err}");
}

mod web {
    /// Search the web.
    #[loomflow::tool]
    pub(crate) fn search(query: String) -> String {
        format!("web: {query}")
    }
}

mod docs {
    /// Search our documents.
    #[loomflow::tool]
    pub(crate) fn search(query: String) -> String {
        format!("docs: {query}")
    }
}

/// Two tools of one name: the second would replace the first without a word, and a
/// temperature no provider takes would fail every call. Both refused at build.
#[test]
fn two_tools_of_one_name_and_a_wild_temperature_are_refused() {
    let err = Agent::builder("x")
        .model(EchoModel::new())
        .tool(web::search)
        .tool(docs::search)
        .temperature(7.5)
        .build()
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("two tools are named \"search\""), "{text}");
    assert!(
        text.contains("temperature 7.5 is not from 0 to 2"),
        "{text}"
    );
    assert!(
        Agent::builder("x")
            .model(EchoModel::new())
            .tool(web::search)
            .temperature(0.0)
            .build()
            .is_ok()
    );
    // A set's tool of the name is not a second tool: the agent's own wins over it, in
    // either order. And a host given with `tools(..)` replaces what was added before.
    let set = || SearchSet(vec![Arc::new(web::search) as Arc<dyn Tool>]);
    assert!(
        Agent::builder("x")
            .model(EchoModel::new())
            .tool_set(set())
            .tool(docs::search)
            .build()
            .is_ok()
    );
    assert!(
        Agent::builder("x")
            .model(EchoModel::new())
            .tool(docs::search)
            .tool_set(set())
            .build()
            .is_ok()
    );
    let replaced = Agent::builder("x")
        .model(EchoModel::new())
        .tool(web::search)
        .tool(docs::search)
        .tools(loomflow::tool::ToolHost::new().with(docs::search));
    assert!(replaced.build().is_ok());
}

/// Tools held as a set, as an MCP server's are.
struct SearchSet(Vec<Arc<dyn Tool>>);

impl loomflow::tool::ToolSet for SearchSet {
    fn name(&self) -> &str {
        "search-set"
    }
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.0.clone()
    }
}

#[tokio::test]
async fn a_session_continues_its_conversation_and_concurrent_runs_take_turns() {
    let agent = Agent::builder("x").model(EchoModel::new()).build().unwrap();
    let first = agent.run("hello").session("chat").await.unwrap();
    assert_eq!(first.output, "hello");
    let second = agent.run("again").session("chat").await.unwrap();
    assert_eq!(
        second.messages.len(),
        4,
        "the second run sees the first: {:?}",
        second.messages
    );

    let runs: Vec<_> = (0..8)
        .map(|i| {
            let agent = agent.clone();
            tokio::spawn(async move { agent.run(format!("m{i}")).session("busy").await.unwrap() })
        })
        .collect();
    let mut lengths = Vec::new();
    for run in runs {
        lengths.push(run.await.unwrap().messages.len());
    }
    lengths.sort_unstable();
    assert_eq!(
        lengths,
        (1..=8).map(|i| 2 * i).collect::<Vec<_>>(),
        "each run saw all earlier ones whole"
    );
}

#[tokio::test]
async fn streaming_yields_model_chunks_tool_calls_and_results() {
    let (add, _) = Add::new();
    let model = ScriptedModel::new([add_call("c1"), ModelResponse::text("five")]);
    let agent = Agent::builder("x").model(model).tool(add).build().unwrap();
    let events: Vec<_> = agent
        .run("2+3")
        .session("s")
        .stream()
        .await
        .unwrap()
        .collect()
        .await;
    let backend: Vec<AgentEvent> = events.clone();
    assert!(
        backend.iter().any(
            |e| matches!(e, AgentEvent::ToolCall { id, name, .. } if id == "c1" && name == "add")
        ),
        "{backend:?}"
    );
    assert!(
        backend.iter().any(
            |e| matches!(e, AgentEvent::ToolResult { content, is_error: false, .. } if content.starts_with('5'))
        ),
        "{backend:?}"
    );
    assert!(
        backend.iter().any(|e| matches!(
            e,
            AgentEvent::ModelChunk {
                chunk: StreamChunk::Text { .. }
            }
        )),
        "model text chunks: {backend:?}"
    );
    assert_eq!(events.last(), Some(&AgentEvent::Done));
    assert_eq!(
        events.first(),
        Some(&AgentEvent::NodeStarted {
            node: "model".into()
        })
    );
}

#[tokio::test]
async fn the_loop_is_a_graph_with_checkpoints_and_a_diagram_that_lists_the_tools() {
    let (add, _) = Add::new();
    let agent = Agent::builder("x")
        .model(ScriptedModel::new([
            add_call("c1"),
            ModelResponse::text("5"),
        ]))
        .tool(add)
        .build()
        .unwrap();
    agent.run("2+3").session("g").await.unwrap();
    let steps: Vec<u64> = agent
        .list_checkpoints("g")
        .await
        .unwrap()
        .iter()
        .map(|c| c.step)
        .collect();
    assert_eq!(steps, [0, 1, 2, 3], "input, model, tools, model");
    let text = agent.generate_graph();
    assert!(text.contains(r#"n1["tools<br/>add"]"#), "{text}");
    assert!(text.contains(r#"n0 -.->|"tools"| n1"#), "{text}");
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Report {
    question: String,
    answer: String,
    published: bool,
}

#[tokio::test]
async fn an_agent_is_a_node_of_a_users_graph() {
    let agent = Agent::builder("x").model(EchoModel::new()).build().unwrap();
    let graph = Graph::new("report")
        .subgraph(
            "research",
            agent.graph().clone(),
            |r: &Report| AgentState::new(&r.question),
            |r: &mut Report, s: AgentState| r.answer = s.output.unwrap_or_default(),
        )
        .node_sync("publish", |r: &mut Report| r.published = true)
        .edge(START, "research")
        .edge("research", "publish")
        .edge("publish", END)
        .compile()
        .unwrap();
    let report = graph
        .invoke(
            &Runtime::in_memory(),
            "r1",
            Report {
                question: "why?".into(),
                ..Report::default()
            },
        )
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(report.answer, "why?");
    assert!(report.published);
}

#[tokio::test]
async fn streaming_shows_permission_asks_and_approval_decisions() {
    use loomflow::tool::{ApprovalDecision, ToolHost, approver_fn};
    let (add, calls) = Add::new();
    let mut spec_add = add;
    spec_add.spec = spec_add.spec.clone().requires_approval(true);
    let host = ToolHost::new()
        .with(spec_add)
        .approval_handler(approver_fn(|_| async { Ok(ApprovalDecision::Allow) }));
    let model = ScriptedModel::new([add_call("c1"), ModelResponse::text("five")]);
    let agent = Agent::builder("x")
        .model(model)
        .tools(host)
        .build()
        .unwrap();
    let events: Vec<_> = agent
        .run("2+3")
        .session("p")
        .stream()
        .await
        .unwrap()
        .collect()
        .await;
    let decisions: Vec<(&str, Decision)> = events
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::Permission { decision, .. } => Some(("permission", decision)),
            AgentEvent::Approval { decision, .. } => Some(("approval", decision)),
            _ => None,
        })
        .collect();
    assert_eq!(
        decisions,
        [("permission", Decision::Ask), ("approval", Decision::Allow)]
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// An agent's timeout holds where the agent is a node of a larger graph (a team's member):
/// its node fails with the agent's `Timeout`, rather than waiting for ever.
#[tokio::test(start_paused = true)]
async fn the_timeout_holds_for_an_agent_used_as_a_node() {
    use loomflow::architecture::{Router, TeamState};
    let hung = Agent::builder("x")
        .name("researcher")
        .model(Ruled::new(never))
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let classifier = Agent::builder("route")
        .name("classifier")
        .model(loomflow::model::ScriptedModel::new([ModelResponse::text(
            "researcher",
        )]))
        .build()
        .unwrap();
    let team = Router::new(classifier)
        .worker("researcher", "looks things up", hung)
        .build()
        .unwrap();
    let out = team
        .invoke(&Runtime::in_memory(), "t1", TeamState::new("find it"))
        .await
        .unwrap();
    let RunOutcome::Failed { error, .. } = out else {
        panic!("{out:?}");
    };
    let loomflow::RunError::NodeFailed { node, source, .. } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(node, "researcher");
    assert_eq!(
        source.to_string(),
        "agent researcher timed out after 30 s on session t1"
    );
}
