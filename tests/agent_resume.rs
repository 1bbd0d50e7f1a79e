//! Resuming an agent's session with a new prompt or from a chosen checkpoint, and tools
//! added to a built agent, removed from it, or given to one call.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use loomflow::agent::{Agent, AgentError};
use loomflow::model::{ModelRequest, ModelResponse, ScriptedModel, ToolCall};
use loomflow::prelude::*;
use loomflow::tool::{Tool, ToolContext, ToolError, ToolSpec};
use serde_json::Value;

/// A tool that answers with its name and counts its calls.
#[derive(Clone)]
struct Named {
    spec: ToolSpec,
    calls: Arc<AtomicUsize>,
}

impl Named {
    fn new(name: &str) -> Self {
        Self {
            spec: ToolSpec::new(
                name,
                format!("The {name} tool"),
                json!({ "type": "object" }),
            ),
            calls: Arc::default(),
        }
    }
}

impl Tool for Named {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call<'a>(&'a self, _: Value, _: &'a ToolContext) -> BoxFuture<'a, Result<Value, ToolError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move { Ok(json!(format!("{} ran", self.spec.name))) })
    }
}

fn call(id: &str, tool: &str) -> ModelResponse {
    ModelResponse::tool_calls(vec![ToolCall::new(id, tool, json!({}))])
}

fn tool_names(request: &ModelRequest) -> Vec<String> {
    request.tools.iter().map(|t| t.name.clone()).collect()
}

fn texts(request: &ModelRequest) -> Vec<String> {
    request
        .messages
        .iter()
        .map(|m| m.text().to_owned())
        .collect()
}

#[tokio::test]
async fn a_session_resumed_with_a_prompt_carries_its_conversation_on() {
    let model = Arc::new(ScriptedModel::new([
        ModelResponse::text("Paris."),
        ModelResponse::text("About 2 million."),
    ]));
    let agent = Agent::builder("You answer.")
        .model(Arc::clone(&model))
        .build()
        .unwrap();
    agent
        .run("Capital of France?")
        .session("s")
        .user("ann")
        .await
        .unwrap();
    let result = agent
        .resume("s")
        .prompt("How many people live there?")
        .await
        .unwrap();
    let state: loomflow::agent::AgentState = agent.runtime().get_state("s").await.unwrap().unwrap();
    assert_eq!(
        state.user.as_deref(),
        Some("ann"),
        "the session's user carries on"
    );
    assert_eq!(result.output, "About 2 million.");
    assert_eq!(result.turns, 1, "a new run counts its own turns");
    assert_eq!(
        texts(&model.requests()[1]),
        [
            "You answer.",
            "Capital of France?",
            "Paris.",
            "How many people live there?"
        ]
    );
}

#[tokio::test]
async fn a_session_resumed_from_an_earlier_checkpoint_forgets_what_came_after() {
    let model = Arc::new(ScriptedModel::new([
        ModelResponse::text("Paris."),
        ModelResponse::text("Berlin."),
        ModelResponse::text("Madrid."),
    ]));
    let db = loomflow_tests::TempDb::new("agent-time-travel");
    let agent = Agent::builder("You answer.")
        .model(Arc::clone(&model))
        .runtime(Runtime::sqlite(db.path()).unwrap())
        .build()
        .unwrap();
    agent.run("Capital of France?").session("s").await.unwrap();
    let after_first = agent
        .list_checkpoints("s")
        .await
        .unwrap()
        .last()
        .unwrap()
        .id;
    agent.run("Capital of Germany?").session("s").await.unwrap();

    let result = agent
        .resume("s")
        .from_checkpoint(after_first)
        .prompt("Capital of Spain?")
        .await
        .unwrap();
    assert_eq!(result.output, "Madrid.");
    assert_eq!(
        texts(&model.requests()[2]),
        [
            "You answer.",
            "Capital of France?",
            "Paris.",
            "Capital of Spain?"
        ],
        "the Germany exchange is not in the branch"
    );
    // The history keeps every run; the newest state is the branch.
    let state: loomflow::agent::AgentState = agent.runtime().get_state("s").await.unwrap().unwrap();
    assert_eq!(state.messages.len(), 4);
    assert!(agent.list_checkpoints("s").await.unwrap().len() > 4);
}

#[tokio::test]
async fn a_checkpoint_in_the_middle_of_a_turn_is_carried_on_from_its_step() {
    let search = Named::new("search");
    let model = Arc::new(ScriptedModel::new([
        call("c1", "search"),
        ModelResponse::text("first"),
        ModelResponse::text("second"),
    ]));
    let agent = Agent::builder("You search.")
        .model(Arc::clone(&model))
        .tool(search.clone())
        .build()
        .unwrap();
    agent.run("find it").session("s").await.unwrap();
    // The checkpoint written after the model asked for the search, before the tools ran.
    let mid_turn = agent
        .list_checkpoints("s")
        .await
        .unwrap()
        .into_iter()
        .find(|cp| {
            let state: loomflow::agent::AgentState =
                serde_json::from_value(cp.state().clone()).unwrap();
            state
                .last_message()
                .is_some_and(|m| !m.tool_calls().is_empty())
        })
        .unwrap();

    // With a prompt, it cannot be carried on: the call would lose its result.
    let error = agent
        .resume("s")
        .from_checkpoint(mid_turn.id)
        .prompt("new question")
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::Agent(AgentError::Checkpoint { session, checkpoint, problem, .. })
            if session == "s" && *checkpoint == mid_turn.id && problem.contains("c1")),
        "{error:?}"
    );
    // Without one, it runs on from the tools step: the search runs again.
    let result = agent
        .resume("s")
        .from_checkpoint(mid_turn.id)
        .await
        .unwrap();
    assert_eq!(result.output, "second");
    assert_eq!(search.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_unknown_checkpoint_is_an_error_naming_it() {
    let agent = Agent::builder("x")
        .model(ScriptedModel::new([ModelResponse::text("hi")]))
        .build()
        .unwrap();
    agent.run("hello").session("s").await.unwrap();
    let error = agent.resume("s").from_checkpoint(9_999).await.unwrap_err();
    assert!(
        matches!(
            &error,
            loomflow::Error::Runtime(loomflow::runtime::RuntimeError::UnknownCheckpoint {
                thread,
                checkpoint: 9_999,
            }) if thread == "s"
        ),
        "{error:?}"
    );
    assert_eq!(error.to_string(), "thread s has no checkpoint 9999");
}

#[tokio::test]
async fn tools_can_be_added_to_and_removed_from_a_built_agent() {
    let model = Arc::new(ScriptedModel::new([
        ModelResponse::text("one"),
        call("c1", "weather"),
        ModelResponse::text("sunny"),
        ModelResponse::text("three"),
    ]));
    let agent = Agent::builder("x")
        .model(Arc::clone(&model))
        .tool(Named::new("search"))
        .build()
        .unwrap();
    agent.run("a").await.unwrap();
    let weather = Named::new("weather");
    agent.add_tool(weather.clone());
    let names: Vec<_> = agent.tools().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["search", "weather"]);
    // A clone shares the agent's tools.
    assert_eq!(agent.clone().run("b").await.unwrap().output, "sunny");
    assert_eq!(weather.calls.load(Ordering::SeqCst), 1);
    assert!(agent.remove_tool("search"));
    assert!(!agent.remove_tool("search"));
    agent.run("c").await.unwrap();
    let requests = model.requests();
    assert_eq!(tool_names(&requests[0]), ["search"]);
    assert_eq!(tool_names(&requests[1]), ["search", "weather"]);
    assert_eq!(tool_names(&requests[3]), ["weather"]);
}

#[tokio::test]
async fn a_tool_given_to_one_call_is_offered_to_that_run_only() {
    let model = Arc::new(ScriptedModel::new([
        call("c1", "lookup"),
        ModelResponse::text("found"),
        ModelResponse::text("plain"),
    ]));
    let base = Named::new("lookup");
    let agent = Agent::builder("x")
        .model(Arc::clone(&model))
        .tool(base.clone())
        .tool(Named::new("search"))
        .build()
        .unwrap();
    // The call's own `lookup` wins over the agent's.
    let own = Named::new("lookup");
    let result = agent
        .run("find")
        .session("s")
        .tool(own.clone())
        .tool(Named::new("calendar"))
        .await
        .unwrap();
    assert_eq!(result.output, "found");
    assert_eq!(own.calls.load(Ordering::SeqCst), 1);
    assert_eq!(base.calls.load(Ordering::SeqCst), 0);
    agent.run("again").session("s").await.unwrap();
    let requests = model.requests();
    assert_eq!(tool_names(&requests[0]), ["calendar", "lookup", "search"]);
    assert_eq!(tool_names(&requests[2]), ["lookup", "search"]);
}

/// A tool that removes another tool from its agent when it runs.
struct Revoker {
    spec: ToolSpec,
    agent: Arc<std::sync::OnceLock<Agent>>,
    revokes: &'static str,
}

impl Tool for Revoker {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call<'a>(&'a self, _: Value, _: &'a ToolContext) -> BoxFuture<'a, Result<Value, ToolError>> {
        let agent = self.agent.get().expect("set before the run");
        assert!(agent.remove_tool(self.revokes));
        Box::pin(async { Ok(json!("revoked")) })
    }
}

/// A run given a tool of its own still follows the agent's tools: one removed from the
/// agent half way through is no longer offered from the next turn.
#[tokio::test]
async fn a_run_with_tools_of_its_own_follows_the_agents_tools() {
    let model = Arc::new(ScriptedModel::new([
        call("c1", "revoke"),
        ModelResponse::text("done"),
    ]));
    let agent = Agent::builder("x")
        .model(Arc::clone(&model))
        .tool(Named::new("delete_all"))
        .build()
        .unwrap();
    let handle = Arc::new(std::sync::OnceLock::new());
    let revoke = Revoker {
        spec: ToolSpec::new("revoke", "Revokes a tool", json!({ "type": "object" })),
        agent: Arc::clone(&handle),
        revokes: "delete_all",
    };
    assert!(handle.set(agent.clone()).is_ok());
    agent.run("clean up").tool(revoke).await.unwrap();
    let requests = model.requests();
    assert_eq!(tool_names(&requests[0]), ["delete_all", "revoke"]);
    assert_eq!(tool_names(&requests[1]), ["revoke"]);
}
