//! Agents from `agent.toml`: a real file in a temp dir, tools picked from a registry, the
//! file's permissions, turn limit, budget and prices in effect on a scripted model; and
//! every kind of mistake named in the error, with where it is.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use loomflow::agent::{
    Agent, AgentError, BudgetCap, ConfigError, ConfigProblemKind, StopReason, ToolRegistry,
};
use loomflow::model::{ModelResponse, Role, ScriptedModel, ToolCall, Usage};
use loomflow::prelude::*;
use loomflow::tool::{HookDecision, Tool, ToolContext, ToolError, ToolSet, ToolSpec};
use loomflow_tests::TempDir;

/// A tool that answers `"<name> done"` and counts its calls.
struct Counted {
    spec: ToolSpec,
    calls: Arc<AtomicUsize>,
}

impl Counted {
    fn new(name: &str) -> (Self, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let spec = ToolSpec::new(
            name,
            format!("The {name} tool."),
            json!({ "type": "object" }),
        );
        let tool = Self {
            spec,
            calls: Arc::clone(&calls),
        };
        (tool, calls)
    }

    fn destructive(mut self) -> Self {
        self.spec = self.spec.destructive(true);
        self
    }
}

impl Tool for Counted {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call<'a>(
        &'a self,
        _: serde_json::Value,
        _: &'a ToolContext,
    ) -> BoxFuture<'a, Result<serde_json::Value, ToolError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move { Ok(json!(format!("{} done", self.spec.name))) })
    }
}

/// Tools held as a set, like an MCP server's.
struct Ops(Vec<Arc<dyn Tool>>);

impl ToolSet for Ops {
    fn name(&self) -> &str {
        "ops"
    }
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.0.clone()
    }
}

fn call(id: &str, tool: &str) -> ToolCall {
    ToolCall::new(id, tool, json!({}))
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

/// The tool results of a run, in order.
fn tool_results(messages: &[loomflow::model::Message]) -> Vec<&str> {
    messages
        .iter()
        .filter(|m| m.role() == Role::Tool)
        .map(|m| m.text())
        .collect()
}

/// Writes `text` as `agent.toml` in a fresh temp dir.
fn write_config(text: &str) -> (TempDir, std::path::PathBuf) {
    let dir = TempDir::new("agent-config");
    let path = dir.join("agent.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

/// The `ConfigError` inside a refused configuration.
fn config_error(result: loomflow::Result<loomflow::agent::AgentBuilder>) -> ConfigError {
    match result {
        Err(loomflow::Error::Agent(AgentError::Config(error))) => error,
        Err(other) => panic!("not a configuration error: {other}"),
        Ok(builder) => panic!("accepted: {builder:?}"),
    }
}

const SUPPORT: &str = r#"
name = "support"
instructions = "You look orders up. You never delete anything."
tools = ["lookup", "delete_order", "archive"]
max_turns = 5
timeout = "30s"

[permissions]
default = "allow"
destructive = "ask"

[permissions.tools]
delete_order = "deny"
"#;

#[tokio::test]
async fn an_agent_from_a_file_runs_its_registered_tools_under_the_files_permissions() {
    let (lookup, lookups) = Counted::new("lookup");
    let (delete, deletes) = Counted::new("delete_order");
    let (archive, archives) = Counted::new("archive");
    let (unlisted, unlisted_calls) = Counted::new("refund");
    let registry = ToolRegistry::new()
        .tool(lookup)
        .tool(delete.destructive())
        .tool(archive.destructive())
        .tool(unlisted);
    let (_dir, path) = write_config(SUPPORT);

    let model = Arc::new(ScriptedModel::new([
        ModelResponse::tool_calls(vec![
            call("c1", "lookup"),
            call("c2", "delete_order"),
            call("c3", "archive"),
            call("c4", "refund"),
        ]),
        ModelResponse::text("Order 7 is in transit."),
    ]));
    let agent = Agent::from_config(&path, &registry)
        .unwrap()
        .model(Arc::clone(&model))
        .build()
        .unwrap();
    assert_eq!(agent.name(), "support");

    let result = agent.run("Where is order 7? Delete it.").await.unwrap();
    assert_eq!(result.output, "Order 7 is in transit.");
    assert!(!result.interrupted);
    assert_eq!(lookups.load(Ordering::SeqCst), 1, "listed and allowed: ran");
    assert_eq!(deletes.load(Ordering::SeqCst), 0, "denied by the file");
    assert_eq!(
        archives.load(Ordering::SeqCst),
        0,
        "destructive: asked, no approver"
    );
    assert_eq!(unlisted_calls.load(Ordering::SeqCst), 0, "not in `tools`");
    let results = tool_results(&result.messages);
    assert_eq!(
        results[..2],
        [
            "lookup done",
            "call to tool delete_order was denied: the agent's configuration does not allow it"
        ]
    );
    assert!(results[2].contains("denied"), "{}", results[2]);
    assert!(
        results[3].starts_with("unknown tool refund"),
        "{}",
        results[3]
    );

    // The model was offered exactly the listed tools, with the file's instructions.
    let request = &model.requests()[0];
    let mut offered: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    offered.sort_unstable();
    assert_eq!(offered, ["archive", "delete_order", "lookup"]);
    assert_eq!(
        request.messages[0].text(),
        "You look orders up. You never delete anything."
    );
}

#[tokio::test]
async fn max_turns_from_the_file_stops_the_run() {
    let (lookup, lookups) = Counted::new("lookup");
    let registry = ToolRegistry::new().tool(lookup);
    let (_dir, path) =
        write_config("instructions = \"Loop.\"\ntools = [\"lookup\"]\nmax_turns = 1\n");
    let agent = Agent::from_config(&path, &registry)
        .unwrap()
        .model(ScriptedModel::new((0..5).map(|i| {
            ModelResponse::tool_calls(vec![call(&format!("c{i}"), "lookup")])
        })))
        .build()
        .unwrap();
    let result = agent.run("go").await.unwrap();
    assert!(result.interrupted);
    assert_eq!(
        (result.turns, result.reason),
        (1, Some(StopReason::MaxTurns))
    );
    assert_eq!(lookups.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_files_budget_and_prices_take_effect() {
    let (lookup, _) = Counted::new("lookup");
    let registry = ToolRegistry::new().tool(lookup);
    let (_dir, path) = write_config(
        r#"
instructions = "x"
tools = ["lookup"]

[budget]
max_tokens = 1_200

[prices]
scripted = { input = 1.0, output = 4.0 }
"#,
    );
    let agent = Agent::from_config(&path, &registry)
        .unwrap()
        .model(ScriptedModel::new((0..10).map(|i| {
            ModelResponse::tool_calls(vec![call(&format!("c{i}"), "lookup")])
                .with_usage(usage(400, 100))
        })))
        .build()
        .unwrap();
    let result = agent.run("go").await.unwrap();
    assert_eq!(result.reason, Some(StopReason::Budget(BudgetCap::Tokens)));
    assert_eq!(
        result.turns, 3,
        "500 tokens a turn: the cap is reached after the third"
    );
    // 3 turns of 400 input at $1/M and 100 output at $4/M.
    let cost = result.cost_usd.expect("priced");
    assert!((cost - 3.0 * 0.0008).abs() < 1e-12, "{cost}");
}

#[tokio::test]
async fn ask_with_durable_approvals_suspends_the_run() {
    let (refund, refunds) = Counted::new("refund");
    let registry = ToolRegistry::new().tool(refund);
    let agent = Agent::from_config_str(
        r#"
instructions = "x"
tools = ["refund"]
durable_approvals = true
[permissions.tools]
refund = "ask"
"#,
        &registry,
    )
    .unwrap()
    .model(ScriptedModel::new([ModelResponse::tool_calls(vec![call(
        "c1", "refund",
    )])]))
    .build()
    .unwrap();
    let result = agent.run("refund order 7").session("s1").await.unwrap();
    assert_eq!(result.reason, Some(StopReason::Suspended));
    assert_eq!(result.pending.len(), 1);
    assert_eq!(refunds.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn code_layers_hooks_over_the_file_and_keeps_its_permissions() {
    let (lookup, lookups) = Counted::new("lookup");
    let (delete, deletes) = Counted::new("delete_order");
    let registry = ToolRegistry::new().tool(lookup).tool(delete);
    let seen = Arc::new(AtomicUsize::new(0));
    let hook_seen = Arc::clone(&seen);
    let agent = Agent::from_config_str(SUPPORT.replace(", \"archive\"", "").as_str(), &registry)
        .unwrap()
        .map_tools(move |host| {
            host.before_tool(move |_| {
                hook_seen.fetch_add(1, Ordering::SeqCst);
                async { HookDecision::Continue }
            })
        })
        .model(ScriptedModel::new([
            ModelResponse::tool_calls(vec![call("c1", "lookup"), call("c2", "delete_order")]),
            ModelResponse::text("done"),
        ]))
        .build()
        .unwrap();
    agent.run("go").await.unwrap();
    assert_eq!(seen.load(Ordering::SeqCst), 2, "the hook saw both calls");
    assert_eq!(lookups.load(Ordering::SeqCst), 1);
    assert_eq!(
        deletes.load(Ordering::SeqCst),
        0,
        "the file's deny still holds"
    );
}

#[tokio::test]
async fn a_tool_set_is_listed_by_its_registered_name() {
    let (restart, restarts) = Counted::new("restart");
    let (wipe, wipes) = Counted::new("wipe");
    let ops = Ops(vec![Arc::new(restart), Arc::new(wipe)]);
    let registry = ToolRegistry::new().set("ops", ops);
    let config = "instructions = \"x\"\ntools = [\"ops\"]\n[permissions.tools]\nwipe = \"deny\"\n";
    let agent = Agent::from_config_str(config, &registry)
        .unwrap()
        .model(ScriptedModel::new([
            ModelResponse::tool_calls(vec![call("c1", "restart"), call("c2", "wipe")]),
            ModelResponse::text("done"),
        ]))
        .build()
        .unwrap();
    agent.run("go").await.unwrap();
    assert_eq!(restarts.load(Ordering::SeqCst), 1);
    assert_eq!(wipes.load(Ordering::SeqCst), 0);

    // Permissions name a set's tools, not the set.
    let error = config_error(Agent::from_config_str(
        &config.replace("wipe = ", "ops = "),
        &registry,
    ));
    assert_eq!(
        error.to_string(),
        "agent configuration: line 4, column 7: `permissions.tools.ops`: `ops` is a tool set; \
         permissions name its tools (now: restart, wipe)"
    );
}

/// A listed tool that a listed set also offers is the agent's whatever the order of the
/// list: the tool added on its own wins over the set's, as `ToolHost::with_set` says.
/// Before, a list naming the set first left the tool out, and its calls reached the set.
#[tokio::test]
async fn a_listed_tool_wins_over_a_listed_sets_tool_of_its_name_in_any_order() {
    for list in [r#"["ops", "restart"]"#, r#"["restart", "ops"]"#] {
        let (local, locals) = Counted::new("restart");
        let (remote, remotes) = Counted::new("restart");
        let registry = ToolRegistry::new()
            .tool(local)
            .set("ops", Ops(vec![Arc::new(remote)]));
        let config = format!("instructions = \"x\"\ntools = {list}\n");
        let agent = Agent::from_config_str(&config, &registry)
            .unwrap()
            .model(ScriptedModel::new([
                ModelResponse::tool_calls(vec![call("c1", "restart")]),
                ModelResponse::text("done"),
            ]))
            .build()
            .unwrap();
        agent.run("go").await.unwrap();
        assert_eq!(locals.load(Ordering::SeqCst), 1, "{list}");
        assert_eq!(remotes.load(Ordering::SeqCst), 0, "{list}");
    }
}

// --- mistakes -------------------------------------------------------------------------

#[test]
fn an_unknown_top_level_key_is_named_with_its_file_and_line() {
    let (_dir, path) = write_config(&SUPPORT.replace("max_turns = 5", "max_turn = 5"));
    let error = config_error(Agent::from_config(
        &path,
        &ToolRegistry::new()
            .tool(Counted::new("lookup").0)
            .tool(Counted::new("delete_order").0)
            .tool(Counted::new("archive").0),
    ));
    assert_eq!(error.path.as_deref(), Some(path.as_path()));
    assert_eq!(
        error.to_string(),
        format!(
            "agent configuration {}: line 5, column 1: unknown top-level key `max_turn` (did you \
             mean `max_turns`?)",
            path.display()
        )
    );
}

#[test]
fn an_unknown_key_in_budget_is_named_with_its_table() {
    let (_dir, path) =
        write_config("instructions = \"x\"\n\n[budget]\nmax_tokens = 10\nmax_cost = 1.5\n");
    let error = config_error(Agent::from_config(&path, &ToolRegistry::new()));
    assert_eq!(
        error.problems[0].kind,
        ConfigProblemKind::UnknownKey {
            table: "budget".into(),
            key: "max_cost".into(),
            suggestion: Some("max_cost_usd".into()),
        }
    );
    assert!(
        error.to_string().ends_with(
            ": line 5, column 1: unknown key `max_cost` in [budget] (did you mean `max_cost_usd`?)"
        ),
        "{error}"
    );
}

#[test]
fn an_unregistered_tool_is_named_with_the_registered_ones() {
    let registry = ToolRegistry::new()
        .tool(Counted::new("search").0)
        .tool(Counted::new("lookup").0);
    let (_dir, path) =
        write_config("instructions = \"x\"\ntools = [\"lookup\", \"serach\", \"fetch\"]\n");
    let error = config_error(Agent::from_config(&path, &registry));
    let message = error.to_string();
    assert!(
        message.ends_with(
            ": line 2, column 20: tool `serach` is not in the registry (registered: lookup, \
             search); line 2, column 30: tool `fetch` is not in the registry (registered: \
             lookup, search)"
        ),
        "{message}"
    );
}

#[test]
fn a_missing_file_is_named() {
    let dir = TempDir::new("agent-config");
    let path = dir.join("nope.toml");
    let error = config_error(Agent::from_config(&path, &ToolRegistry::new()));
    assert!(matches!(
        error.problems[0].kind,
        ConfigProblemKind::Unreadable {
            error: std::io::ErrorKind::NotFound,
            ..
        }
    ));
    assert!(
        error.to_string().starts_with(&format!(
            "agent configuration {}: cannot be read: ",
            path.display()
        )),
        "{error}"
    );
}

#[test]
fn bad_toml_is_reported_with_line_and_column() {
    let (_dir, path) = write_config("instructions = \"x\"\ntools = [\"lookup\"\nmax_turns = 3\n");
    let error = config_error(Agent::from_config(&path, &ToolRegistry::new()));
    let [problem] = &error.problems[..] else {
        panic!("{error}");
    };
    assert!(
        matches!(problem.kind, ConfigProblemKind::Syntax { .. }),
        "{error}"
    );
    assert_eq!(problem.line, Some(3), "{error}");
    assert!(problem.column.is_some());
    assert!(error.to_string().contains(": line 3, column "), "{error}");
}

#[test]
fn bad_permissions_and_unlisted_tools_are_all_reported() {
    let registry = ToolRegistry::new().tool(Counted::new("lookup").0);
    let error = config_error(Agent::from_config_str(
        r#"
instructions = "x"
tools = ["lookup"]
[permissions]
default = "sometimes"
[permissions.tools]
lookup = "yes"
delete_order = "deny"
"#,
        &registry,
    ));
    let messages: Vec<String> = error.problems.iter().map(ToString::to_string).collect();
    assert_eq!(
        messages,
        [
            "line 5, column 11: `permissions.default`: expected \"allow\", \"ask\" or \"deny\", \
             got \"sometimes\"",
            "line 7, column 10: `permissions.tools.lookup`: expected \"allow\", \"ask\" or \
             \"deny\", got \"yes\"",
            "line 8, column 16: [permissions.tools] names `delete_order`, which is not one of \
             the agent's tools (lookup)",
        ]
    );
}

#[test]
fn a_value_of_the_wrong_type_is_named() {
    let error = config_error(Agent::from_config_str(
        "instructions = \"x\"\nmax_turns = \"ten\"\n",
        &ToolRegistry::new(),
    ));
    let message = error.to_string();
    assert!(
        message.starts_with("agent configuration: line 2, column 13: `max_turns`: invalid type"),
        "{message}"
    );
}

#[test]
fn the_readme_example_loads_and_its_error_message_is_what_it_says() {
    let readme = include_str!("../README.md");
    let section = &readme[readme.find("### Configuration files").unwrap()..];
    let block = |fence: &str| {
        let start = section.find(fence).unwrap() + fence.len();
        let end = start + section[start..].find("```").unwrap();
        section[start..end].to_owned()
    };
    let config = block("```toml\n");
    let registry = ToolRegistry::new()
        .tool(Counted::new("get_weather").0)
        .tool(Counted::new("book_trip").0);
    let builder = Agent::from_config_str(&config, &registry).unwrap();
    assert!(format!("{builder:?}").contains("forecaster"));

    let typos = config
        .replace("[\"get_weather\"", "[\"get_wether\"")
        .replace("max_turns = 10", "max_turn = 10");
    let error = config_error(Agent::from_config_str(&typos, &registry));
    let said = block("```text\n").replace('\n', " ");
    assert_eq!(
        error.to_string(),
        said.trim()
            .replace("configuration agent.toml:", "configuration:")
    );
}

#[tokio::test]
async fn the_files_context_policy_and_per_user_caps_take_effect() {
    let (_dir, path) = write_config(
        r#"
instructions = "x"

[budget]
max_wall_clock = "10m"
max_cost_usd_per_user = 0.001
prices_per_million = [1.0, 1.0]

[context]
strategy = "snip"
above_tokens = 1
keep_recent = 1
"#,
    );
    let model =
        Arc::new(ScriptedModel::new(["one", "two", "three"].map(|text| {
            ModelResponse::text(text).with_usage(usage(400, 100))
        })));
    let agent = Agent::from_config(&path, &ToolRegistry::new())
        .unwrap()
        .model(Arc::clone(&model))
        .build()
        .unwrap();
    agent.run("first").session("s").user("ann").await.unwrap();
    agent.run("second").session("s").user("ann").await.unwrap();
    // Snipped to its last exchange, the question: the first exchange is not sent.
    let sent: Vec<String> = model.requests()[1]
        .messages
        .iter()
        .map(|m| m.text().to_owned())
        .collect();
    assert_eq!(sent, ["x", "second"]);
    // Two runs of 500 tokens at $1/M spent ann's $0.001.
    let third = agent.run("third").session("s").user("ann").await.unwrap();
    assert_eq!(third.reason, Some(StopReason::Budget(BudgetCap::UserCost)));
}

#[test]
fn a_bad_context_strategy_is_named() {
    let (_dir, path) = write_config(
        "instructions = \"x\"\n\n[context]\nstrategy = \"summarise\"\nkeep_recnt = 2\n",
    );
    let error = config_error(Agent::from_config(&path, &ToolRegistry::new()));
    let message = error.to_string();
    assert!(
        message.contains("unknown key `keep_recnt` in [context] (did you mean `keep_recent`?)"),
        "{message}"
    );
    assert!(
        message.contains("context.strategy") && message.contains("\"summarise\""),
        "{message}"
    );
}
