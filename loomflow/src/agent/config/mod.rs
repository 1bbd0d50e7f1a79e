//! Agents from TOML files: [`Agent::from_config`], the [`ToolRegistry`] the file picks its
//! tools from, and [`ConfigError`], which lists everything wrong with a file.

mod apply;
mod error;
mod file;
mod keys;
mod registry;
#[cfg(test)]
mod tests;

pub use error::{ConfigError, ConfigProblem, ConfigProblemKind};
pub use registry::ToolRegistry;

use std::path::Path;

use super::{Agent, AgentBuilder};
use crate::tool::ToolHost;
use apply::load;

impl Agent {
    /// Reads an agent from a TOML file, picking its tools from `registry`, and returns its
    /// **builder**, like [`Agent::builder`]: code layers on what a file cannot say (a
    /// [runtime](AgentBuilder::runtime), a [model object](AgentBuilder::model), hooks and an
    /// approval handler through [`map_tools`](AgentBuilder::map_tools), typed output), then
    /// calls [`build`](AgentBuilder::build). What code sets after this call wins over the file.
    ///
    /// Every key, all optional except `instructions`:
    ///
    /// - `name`, `instructions`, `model` (a model string as [`AgentBuilder::model_name`]
    ///   takes it, resolved by `build`; leave it out when code sets
    ///   [`model`](AgentBuilder::model)), `tools` (names in `registry`; the agent gets only
    ///   these), `max_turns`, `max_schema_retries`, `timeout` (seconds, `30` or `2.5`, or a
    ///   duration string, `"30s"`, `"2m"`, `"1m30s"`, `"500ms"`), `temperature`,
    ///   `max_tokens`, `durable_approvals`, `record_content`: as the builder methods of the
    ///   same names.
    /// - `[budget]`: `max_tokens`, `max_cost_usd`, `max_tokens_per_user`,
    ///   `max_cost_usd_per_user`, `max_wall_clock` (a duration, as `timeout`),
    ///   `prices_per_million` (as [`Budget`](super::Budget)).
    /// - `[context]`: `strategy` (`"snip"` or `"compact"`), `above_tokens`, `keep_recent`
    ///   (a [`ContextPolicy`](super::ContextPolicy); a compaction's summarizer is the
    ///   agent's model).
    /// - `[prices]`: model name → price per million tokens (a [`PriceTable`](crate::model::PriceTable)).
    /// - `[permissions]`: `default`, `destructive` (tools marked destructive) and
    ///   `[permissions.tools]`, tool name → permission; each `"allow"`, `"ask"` or `"deny"`
    ///   (a [`PermissionPolicy`](crate::tool::PermissionPolicy) on the agent's tool host). A tool named there must be one
    ///   of the agent's `tools` (or a tool its listed tool sets offer now). `"ask"` needs
    ///   someone to ask: `durable_approvals = true`, or an approval handler set with
    ///   [`map_tools`](AgentBuilder::map_tools); without one, asked calls are denied.
    ///
    /// Prices are `[input, output]` in US dollars per million tokens, or
    /// `{ input = .., output = .. }`.
    ///
    /// # Errors
    ///
    /// [`AgentError::Config`](super::AgentError::Config) with a [`ConfigError`] that names
    /// the file and lists every problem found, each with its line and column: the file
    /// cannot be read; it is not TOML; unknown keys (with the table, and the closest known
    /// key); a missing `instructions`; values of the wrong type or out of range (a bad
    /// permission, a zero `max_turns`, a model string no adapter takes, ...); tools that are
    /// not in `registry` (listing those that are); permissions for tools the agent does not
    /// get. A value of the wrong type stops the check there; everything else is collected.
    ///
    /// # Examples
    ///
    /// The file in full; the model is set in code (a scripted one here), over the file's.
    ///
    /// ```
    /// use loomflow::agent::{Agent, ToolRegistry};
    /// use loomflow::model::{ModelResponse, Role, ScriptedModel, ToolCall};
    /// use loomflow::prelude::*;
    ///
    /// /// Look up an order.
    /// #[tool]
    /// async fn lookup_order(id: u64) -> String {
    ///     format!("order {id}: shipped")
    /// }
    ///
    /// /// Refund an order.
    /// #[tool(destructive)]
    /// async fn refund(id: u64) -> String {
    ///     format!("order {id}: refunded")
    /// }
    ///
    /// // agent.toml
    /// const CONFIG: &str = r#"
    /// name = "support"
    /// instructions = "You answer questions about orders."
    /// model = "gpt-4o"                  # `.model(..)` in code wins over it
    /// tools = ["lookup_order", "refund"]
    /// max_turns = 8
    /// max_schema_retries = 2
    /// timeout = "2m"                    # or seconds: 120, 90.5
    /// temperature = 0.2
    /// max_tokens = 1024
    /// durable_approvals = false         # true: "ask" suspends the run until a person decides
    /// record_content = false            # spans record prompts and replies
    ///
    /// [budget]
    /// max_tokens = 50_000               # per run
    /// max_cost_usd = 0.50               # per run, at prices_per_million
    /// max_tokens_per_user = 1_000_000   # across a user's runs
    /// max_cost_usd_per_user = 20.0      # across a user's runs
    /// max_wall_clock = "10m"            # running time, over the run's legs
    /// prices_per_million = [2.50, 10.00]
    ///
    /// [context]                         # past 60k tokens, summarize all but 6 exchanges
    /// strategy = "compact"
    /// above_tokens = 60_000
    /// keep_recent = 6
    ///
    /// [prices]                          # for RunResult::cost_usd
    /// "gpt-4o" = { input = 2.50, output = 10.00 }
    ///
    /// [permissions]
    /// default = "allow"                 # "allow", "ask" or "deny"
    /// destructive = "ask"               # tools marked destructive
    ///
    /// [permissions.tools]
    /// refund = "deny"
    /// "#;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
    /// let registry = ToolRegistry::new().tool(lookup_order).tool(refund);
    /// // From a file: Agent::from_config("agent.toml", &registry)?
    /// let agent = Agent::from_config_str(CONFIG, &registry)?
    ///     .model(ScriptedModel::new([
    ///         ModelResponse::tool_calls(vec![
    ///             ToolCall::new("c1", "lookup_order", json!({ "id": 7 })),
    ///             ToolCall::new("c2", "refund", json!({ "id": 7 })),
    ///         ]),
    ///         ModelResponse::text("Order 7 has shipped; I may not refund it."),
    ///     ]))
    ///     .build()?;
    /// assert_eq!(agent.name(), "support");
    ///
    /// let result = agent.run("Where is order 7? Refund it.").await?;
    /// assert_eq!(result.output, "Order 7 has shipped; I may not refund it.");
    /// let results: Vec<&str> = result.messages.iter()
    ///     .filter(|m| m.role() == Role::Tool)
    ///     .map(|m| m.text())
    ///     .collect();
    /// assert!(results[0].contains("order 7: shipped"));
    /// assert!(results[1].contains("denied"), "the file denies refund: {}", results[1]);
    ///
    /// // A mistake is named, with where it is.
    /// let error = Agent::from_config_str("instructions = \"hi\"\nmax_turn = 3", &registry).unwrap_err();
    /// assert_eq!(
    ///     error.to_string(),
    ///     "agent configuration: line 2, column 1: unknown top-level key `max_turn` \
    ///      (did you mean `max_turns`?)"
    /// );
    /// # Ok(()) }
    /// ```
    pub fn from_config(
        path: impl AsRef<Path>,
        registry: &ToolRegistry,
    ) -> crate::Result<AgentBuilder> {
        let path = path.as_ref();
        let refused = |problems| ConfigError {
            path: Some(path.to_owned()),
            problems,
        };
        let text = std::fs::read_to_string(path).map_err(|error| {
            let kind = ConfigProblemKind::Unreadable {
                error: error.kind(),
                message: error.to_string(),
            };
            refused(vec![ConfigProblem::new(kind, None)])
        })?;
        Ok(load(&text, registry).map_err(refused)?)
    }

    /// [`Agent::from_config`] on TOML text rather than a file (its errors name no path).
    ///
    /// # Errors
    ///
    /// As [`Agent::from_config`].
    pub fn from_config_str(text: &str, registry: &ToolRegistry) -> crate::Result<AgentBuilder> {
        Ok(load(text, registry).map_err(|problems| ConfigError {
            path: None,
            problems,
        })?)
    }
}

impl AgentBuilder {
    /// Changes the agent's tool host in place, keeping its tools and permissions (from a
    /// configuration file, say), where [`tools`](Self::tools) would replace it: add hooks,
    /// an approval handler, timeouts.
    ///
    /// ```
    /// use loomflow::agent::Agent;
    /// use loomflow::tool::{ApprovalDecision, HookDecision, approver_fn};
    ///
    /// let builder = Agent::builder("You help.").map_tools(|host| {
    ///     host.before_tool(|_call| async { HookDecision::Continue })
    ///         .approval_handler(approver_fn(|_request| async { Ok(ApprovalDecision::Allow) }))
    /// });
    /// # let _ = builder;
    /// ```
    pub fn map_tools(mut self, change: impl FnOnce(ToolHost) -> ToolHost) -> Self {
        self.tools = change(std::mem::take(&mut self.tools));
        self
    }
}
