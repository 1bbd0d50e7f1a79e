//! Agents: a model, tools and instructions, run as a ReAct loop that is a graph.
//!
//! An [`Agent`] compiles to a [`CompiledGraph<AgentState>`](crate::CompiledGraph) with a
//! `model` node and a `tools` node, so it checkpoints, suspends, streams and renders like any
//! graph, and can be a node of a larger graph ([`Agent::graph`]).
//!
//! # Examples
//!
//! ```
//! use loomflow::agent::Agent;
//! use loomflow::model::{ModelResponse, ScriptedModel, ToolCall};
//! use loomflow::tool::{Tool, ToolContext, ToolError, ToolSpec};
//! use loomflow::prelude::*;
//!
//! struct Weather(ToolSpec);
//!
//! impl Tool for Weather {
//!     fn spec(&self) -> &ToolSpec { &self.0 }
//!     fn call<'a>(&'a self, args: serde_json::Value, _: &'a ToolContext)
//!         -> BoxFuture<'a, Result<serde_json::Value, ToolError>> {
//!         Box::pin(async move { Ok(json!({ "city": args["city"], "sky": "clear" })) })
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
//! let model = ScriptedModel::new([
//!     ModelResponse::tool_calls(vec![ToolCall::new("c1", "weather", json!({ "city": "Oslo" }))]),
//!     ModelResponse::text("Clear skies in Oslo."),
//! ]);
//! let agent = Agent::builder("You answer questions about the weather.")
//!     .model(model)
//!     .tool(Weather(ToolSpec::new("weather", "Current weather", json!({ "type": "object" }))))
//!     .build()?;
//! let result = agent.run("Weather in Oslo?").await?;
//! assert_eq!(result.output, "Clear skies in Oslo.");
//! assert_eq!(result.turns, 2);
//! # Ok(()) }
//! ```

mod budget;
mod config;
mod error;
mod guarded;
mod guardrail;
mod handoff;
mod memory;
mod observe;
mod output;
mod rate_limit;
mod react;
mod run;
mod state;
mod stop;
mod tools;
mod turns;
mod window;

pub use crate::tool::AgentEvent;
pub use budget::Budget;
pub use config::{ConfigError, ConfigProblem, ConfigProblemKind, ToolRegistry};
pub use error::AgentError;
pub use guardrail::{
    GuardContext, GuardStage, Guardrail, OnBlock, Verdict, on_input, on_output, on_tool_result,
};
pub use rate_limit::{Limits, RateLimitMode, RateLimiter};
pub use run::{AgentResume, AgentRun, AgentStream, DEFAULT_STREAM_CAPACITY, RunResult};
pub use state::AgentState;
pub use stop::{BudgetCap, StopReason, UnknownStopReason};
pub use window::{ContextPolicy, DEFAULT_KEEP_RECENT};

use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::graph::CompiledGraph;
use crate::memory::{Memory, MemoryOptions};
use crate::model::{Message, Model, ModelRequest, OutputSchema, PriceTable};
use crate::runtime::Runtime;
use crate::tool::{Tool, ToolHost};
use output::OutputSpec;

/// The default number of model turns per run.
pub const DEFAULT_MAX_TURNS: u32 = 50;

/// What an agent is made of; shared by its graph's nodes.
pub(crate) struct AgentCore {
    pub(crate) name: String,
    instructions: String,
    pub(crate) model: Arc<dyn Model>,
    pub(crate) tools: Arc<tools::AgentTools>,
    pub(crate) max_turns: u32,
    pub(crate) max_schema_retries: u32,
    pub(crate) budget: Budget,
    pub(crate) output: Option<OutputSpec>,
    temperature: Option<f32>,
    max_tokens: Option<u32>,
    /// Handoff tools (swarms): tool name → the agent it transfers to.
    pub(crate) handoffs: Vec<(String, String)>,
    /// Whether `chat` spans record the messages sent and received.
    pub(crate) record_content: bool,
    /// What each model's tokens cost.
    pub(crate) prices: PriceTable,
    /// Long-term memory, when the agent has one.
    pub(crate) memory: Option<memory::AgentMemory>,
    /// Checks on the run's input, tool calls, tool results and output.
    pub(crate) guardrails: guardrail::Guardrails,
    /// What happens when the conversation grows past a threshold.
    pub(crate) context_policy: Option<ContextPolicy>,
    /// Paces the model calls, when the agent has a limiter.
    pub(crate) rate_limiter: Option<RateLimiter>,
}

impl AgentCore {
    pub(crate) fn handoff_target(&self, tool: &str) -> Option<&str> {
        self.handoffs
            .iter()
            .find(|(name, _)| name == tool)
            .map(|(_, target)| target.as_str())
    }

    fn recursion_limit(&self) -> u64 {
        // each turn is a model step and a tools step; schema retries add model steps
        2 * u64::from(self.max_turns) + u64::from(self.max_schema_retries) + 4
    }

    /// The request of a model turn; `output` is the run's own output schema, if it has one.
    fn request(
        &self,
        messages: &[Message],
        recalled: Option<&str>,
        output: Option<&OutputSchema>,
        tools: &ToolHost,
    ) -> ModelRequest {
        let mut all = Vec::with_capacity(messages.len() + 2);
        all.push(Message::system(&self.instructions));
        if let Some(recalled) = recalled.filter(|r| !r.is_empty()) {
            all.push(Message::system(recalled));
        }
        all.extend_from_slice(messages);
        let mut request = ModelRequest::new(all).tools(tools.definitions());
        if let Some(schema) = output.or(self.output.as_ref().map(|o| &o.schema)) {
            request = output::ask_for(request, schema, self.model.supports_output_schema());
        }
        if let Some(t) = self.temperature {
            request = request.temperature(t);
        }
        if let Some(m) = self.max_tokens {
            request = request.max_tokens(m);
        }
        request
    }
}

/// A configured agent. Cheap to clone; one agent serves many concurrent runs.
#[derive(Clone)]
pub struct Agent {
    core: Arc<AgentCore>,
    graph: CompiledGraph<AgentState>,
    runtime: Runtime,
    timeout: Option<Duration>,
    /// Runs on one session take turns.
    sessions: Arc<turns::SessionTurns>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("name", &self.core.name)
            .field("model", &self.core.model.name())
            .field("tools", &self.core.tools)
            .field("max_turns", &self.core.max_turns)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// Starts configuring an agent with its instructions (the system prompt).
    pub fn builder(instructions: impl Into<String>) -> AgentBuilder {
        AgentBuilder::new(instructions.into())
    }

    /// The agent's name.
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// The runtime the agent's runs are on.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The ReAct loop as a compiled graph: use it as a node of a larger graph
    /// (`graph.subgraph("research", agent.graph().clone(), ..)`), or run it directly.
    pub fn graph(&self) -> &CompiledGraph<AgentState> {
        &self.graph
    }

    /// The loop's Mermaid diagram, with the agent's tools listed on the `tools` node.
    pub fn generate_graph(&self) -> String {
        let specs = self.core.tools.current().list();
        let tools: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        if tools.is_empty() {
            return self.graph.to_mermaid();
        }
        // The tools are listed under the node's name, in a copy of the shape: the label is
        // escaped and placed by the renderer like any other.
        let mut shape = (**self.graph.shape()).clone();
        if let Some(node) = shape.nodes.iter_mut().find(|n| n.name == "tools") {
            node.name = format!("tools\n{}", tools.join(", "));
        }
        crate::graph::mermaid::to_mermaid(&shape)
    }

    /// Adds a tool to the agent, replacing one of the same name. Every clone of the agent
    /// shares its tools, and runs going on see the tool from their next model turn.
    pub fn add_tool(&self, tool: impl Tool) {
        self.core.tools.update(|host| host.add(tool));
    }

    /// Removes one of the agent's tools by name; returns whether it had one. Tools of a
    /// [`ToolSet`](crate::tool::ToolSet) (an MCP server's) come and go with their set.
    pub fn remove_tool(&self, name: &str) -> bool {
        self.core.tools.update(|host| host.remove(name))
    }

    /// The specs of the agent's tools now, by name.
    pub fn tools(&self) -> Vec<crate::tool::ToolSpec> {
        self.core.tools.current().list()
    }

    /// Sends a signal to one of the agent's sessions (see [`Runtime::signal`]).
    ///
    /// # Errors
    ///
    /// As [`Runtime::signal`].
    pub async fn signal(
        &self,
        session: &str,
        name: &str,
        payload: impl serde::Serialize,
    ) -> crate::Result<crate::runtime::Delivery> {
        Ok(self.runtime.signal(session, name, payload).await?)
    }

    /// Every checkpoint of a session, oldest first.
    ///
    /// # Errors
    ///
    /// A store failure.
    pub async fn list_checkpoints(
        &self,
        session: &str,
    ) -> crate::Result<Vec<crate::runtime::Checkpoint>> {
        Ok(self.runtime.list_checkpoints(session).await?)
    }

    /// A copy of this agent that can hand the conversation off to `targets` (name,
    /// description) through `transfer_to_<name>` tools; used by swarms.
    pub(crate) fn with_handoffs(&self, targets: &[(String, String)]) -> crate::Result<Self> {
        let mut tools = (*self.core.tools.current()).clone();
        let mut handoffs = Vec::new();
        for (target, description) in targets {
            let tool = handoff::HandoffTool::new(target, description);
            handoffs.push((tool.spec().name.clone(), target.clone()));
            tools.add(tool);
        }
        let core = Arc::new(AgentCore {
            name: self.core.name.clone(),
            instructions: self.core.instructions.clone(),
            model: Arc::clone(&self.core.model),
            tools: Arc::new(tools::AgentTools::new(tools)),
            max_turns: self.core.max_turns,
            max_schema_retries: self.core.max_schema_retries,
            budget: self.core.budget.clone(),
            output: self.core.output.clone(),
            temperature: self.core.temperature,
            max_tokens: self.core.max_tokens,
            handoffs,
            record_content: self.core.record_content,
            prices: self.core.prices.clone(),
            memory: self.core.memory.clone(),
            guardrails: self.core.guardrails.clone(),
            context_policy: self.core.context_policy.clone(),
            rate_limiter: self.core.rate_limiter.clone(),
        });
        let graph = react::build(&core)?;
        Ok(Self {
            core,
            graph,
            runtime: self.runtime.clone(),
            timeout: self.timeout,
            sessions: Arc::default(),
        })
    }

    /// Waits for `session`'s turn: runs on one session take turns.
    async fn turn(&self, session: &str) -> turns::Turn {
        self.sessions.take(session).await
    }
}

/// Configures an [`Agent`]; see [`Agent::builder`].
#[must_use]
pub struct AgentBuilder {
    name: Option<String>,
    instructions: String,
    model: Option<Arc<dyn Model>>,
    model_name: Option<String>,
    tools: ToolHost,
    runtime: Option<Runtime>,
    max_turns: u32,
    max_schema_retries: u32,
    timeout: Option<Duration>,
    budget: Budget,
    output: Option<OutputSpec>,
    temperature: Option<f32>,
    max_tokens: Option<u32>,
    durable_approvals: bool,
    record_content: bool,
    prices: PriceTable,
    memory: Option<Arc<dyn Memory>>,
    memory_options: MemoryOptions,
    guardrails: guardrail::Guardrails,
    context_policy: Option<ContextPolicy>,
    rate_limiter: Option<RateLimiter>,
}

impl std::fmt::Debug for AgentBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("name", &self.name)
            .field("model", &self.model_name)
            .field("tools", &self.tools)
            .field("max_turns", &self.max_turns)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl AgentBuilder {
    fn new(instructions: String) -> Self {
        Self {
            name: None,
            instructions,
            model: None,
            model_name: None,
            tools: ToolHost::new(),
            runtime: None,
            max_turns: DEFAULT_MAX_TURNS,
            max_schema_retries: 2,
            timeout: None,
            budget: Budget::default(),
            output: None,
            temperature: None,
            max_tokens: None,
            durable_approvals: false,
            record_content: false,
            prices: PriceTable::new(),
            memory: None,
            memory_options: MemoryOptions::default(),
            guardrails: guardrail::Guardrails::default(),
            context_policy: None,
            rate_limiter: None,
        }
    }

    /// What to do when the conversation grows past a token threshold: snip its oldest part
    /// or compact it into a summary (default: neither; the whole conversation is sent).
    /// See [`ContextPolicy`].
    pub fn context_policy(mut self, policy: ContextPolicy) -> Self {
        self.context_policy = Some(policy);
        self
    }

    /// Adds a [`Guardrail`]: a check on the run's prompt, tool calls, tool results and
    /// answer. Guardrails run in the order they were added, each seeing the rewrites of the
    /// ones before. With an output guardrail, a streamed run does not stream the model's
    /// text as it comes: the answer is only shown once it has been checked.
    pub fn guardrail(mut self, guardrail: impl Guardrail) -> Self {
        self.guardrails.add(Arc::new(guardrail));
        self
    }

    /// What a blocked prompt, tool result or answer does (default [`OnBlock::Stop`]: the
    /// run stops cleanly with reason `guardrail:<name>`).
    pub fn on_guardrail_block(mut self, on_block: OnBlock) -> Self {
        self.guardrails.on_block = on_block;
        self
    }

    /// Tool calls that need approval suspend the run until a person decides, from any
    /// process and however much later (a [`SignalApprover`](crate::tool::SignalApprover) in
    /// [`or_suspend`](crate::tool::SignalApprover::or_suspend) mode): the run reports
    /// `interrupted` with the exact pending call in `pending` (under `details.approval`);
    /// [`Runtime::decide_approval`](crate::Runtime::decide_approval) answers it and
    /// [`Agent::resume`] carries the run on. Overrides the tool host's approval handler.
    pub fn durable_approvals(mut self) -> Self {
        self.durable_approvals = true;
        self
    }

    /// The agent's name (default `agent`), used for its graph, errors and spans.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The model.
    pub fn model(mut self, model: impl Model + 'static) -> Self {
        self.model = Some(Arc::new(model));
        self
    }

    /// The model, by name (`"gpt-4o"`, `"claude-…"`, `"openai-compatible:NAME@URL"`, …),
    /// resolved when the agent is built; keys come from the environment.
    pub fn model_name(mut self, model: impl Into<String>) -> Self {
        self.model_name = Some(model.into());
        self
    }

    /// Adds a tool.
    pub fn tool(mut self, tool: impl Tool) -> Self {
        self.tools.add(tool);
        self
    }

    /// Adds a set of tools whose list can change, such as an MCP server's tools (see
    /// [`ToolHost::with_set`]); they go through the same permissions, approvals and hooks.
    pub fn tool_set(mut self, set: impl crate::tool::ToolSet) -> Self {
        self.tools = self.tools.with_set(set);
        self
    }

    /// Long-term memory (default none). At each run's first model turn the agent recalls
    /// what matches the user's message from the run's user, session and agent scopes and
    /// puts it in the prompt, within the [token budget](MemoryOptions::token_budget); with
    /// [`MemoryOptions`] (see [`memory_options`](Self::memory_options)) the model also gets
    /// `remember` and `recall` tools, and facts are extracted after each run. Recall and
    /// extraction are journaled steps: a resumed run does not repeat them.
    pub fn memory(mut self, memory: impl Memory) -> Self {
        self.memory = Some(Arc::new(memory));
        self
    }

    /// How the agent uses its [memory](Self::memory) (default [`MemoryOptions::default`]:
    /// recall into the prompt only).
    pub fn memory_options(mut self, options: MemoryOptions) -> Self {
        self.memory_options = options;
        self
    }

    /// Uses this tool host (with its permissions, approver and hooks) for the agent's tools.
    pub fn tools(mut self, host: ToolHost) -> Self {
        self.tools = host;
        self
    }

    /// The runtime runs go on (default: a new in-memory runtime).
    pub fn runtime(mut self, runtime: Runtime) -> Self {
        self.runtime = Some(runtime);
        self
    }

    /// The most model turns a run may take (default 50); past it the run stops cleanly with
    /// `interrupted` and reason `max_turns_exceeded`.
    pub fn max_turns(mut self, max_turns: u32) -> Self {
        self.max_turns = max_turns;
        self
    }

    /// A wall-clock limit per run; past it the run fails with [`AgentError::Timeout`].
    ///
    /// It bounds each call of `run`, `stream` or `resume` on its own and cancels the run
    /// where it is. [`Budget::max_wall_clock`] is the other kind: it adds up the running
    /// time of every leg of a run and stops it cleanly before its next model turn.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Token, cost and running-time caps; past one the run stops cleanly with reason
    /// `budget:<cap>`.
    pub fn budget(mut self, budget: Budget) -> Self {
        self.budget = budget;
        self
    }

    /// The answer must be JSON that deserializes into `T`, described to the model by
    /// `schema` (a JSON Schema). An answer that does not fit is sent back with the error, up
    /// to [`max_schema_retries`](Self::max_schema_retries) times.
    pub fn output_schema<T: DeserializeOwned + 'static>(
        mut self,
        name: impl Into<String>,
        schema: Value,
    ) -> Self {
        self.output = Some(OutputSpec::of::<T>(OutputSchema::new(name, schema)));
        self
    }

    /// How many times an answer that fails the output schema is retried (default 2).
    pub fn max_schema_retries(mut self, retries: u32) -> Self {
        self.max_schema_retries = retries;
        self
    }

    /// Sampling temperature for every request.
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// Output token limit for every request.
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// Whether the agent's spans record content: the messages each `chat` span sends and
    /// receives (`gen_ai.input.messages`, `gen_ai.output.messages`), and each tool call's
    /// arguments and result. Default `false`: prompts and completions may be private, so
    /// they are recorded only when asked for. See [`crate::telemetry`].
    pub fn record_content(mut self, record: bool) -> Self {
        self.record_content = record;
        self
    }

    /// What the models' tokens cost, for [`RunResult::cost_usd`] (default: no prices, and
    /// no cost). A run's cost adds up over all its resumptions.
    ///
    /// ```
    /// use loomflow::agent::Agent;
    /// use loomflow::model::{PriceTable, ScriptedModel};
    ///
    /// let agent = Agent::builder("You help.")
    ///     .model(ScriptedModel::new([]))
    ///     .prices(PriceTable::new().model("gpt-4o", 2.50, 10.00))
    ///     .build();
    /// # let _ = agent;
    /// ```
    pub fn prices(mut self, prices: PriceTable) -> Self {
        self.prices = prices;
        self
    }

    /// Paces the agent's model calls (default: not paced). Give several agents clones of
    /// one [`RateLimiter`] and their runs share its buckets; see there for what is counted,
    /// how a provider's 429 pauses every run, and the [`RateLimitMode`]s.
    ///
    /// ```
    /// use loomflow::agent::{Agent, Limits, RateLimiter};
    /// use loomflow::model::ScriptedModel;
    ///
    /// let agent = Agent::builder("You help.")
    ///     .model(ScriptedModel::new([]))
    ///     .rate_limiter(RateLimiter::new().per_user(Limits::new().requests_per_minute(20)))
    ///     .build();
    /// # let _ = agent;
    /// ```
    pub fn rate_limiter(mut self, limiter: RateLimiter) -> Self {
        self.rate_limiter = Some(limiter);
        self
    }

    /// Builds the agent.
    ///
    /// # Errors
    ///
    /// [`AgentError::Invalid`] listing every problem: no model (or one that does not
    /// resolve), a zero `max_turns`, an empty name.
    pub fn build(self) -> crate::Result<Agent> {
        let name = self.name.unwrap_or_else(|| "agent".to_owned());
        let mut problems = Vec::new();
        let model = match (self.model, &self.model_name) {
            (Some(model), _) => Some(model),
            (None, Some(spec)) => match crate::model::resolve(spec) {
                Ok(model) => Some(model),
                Err(error) => {
                    problems.push(format!("model {spec} does not resolve: {error}"));
                    None
                }
            },
            (None, None) => {
                problems.push("no model: set one with .model(..) or .model_name(..)".to_owned());
                None
            }
        };
        if self.max_turns == 0 {
            problems.push("max_turns must be at least 1".to_owned());
        }
        if name.trim().is_empty() {
            problems.push("name must not be empty".to_owned());
        }
        if self.timeout.is_some_and(|t| t.is_zero()) {
            problems.push("timeout must be more than zero".to_owned());
        }
        let Some(model) = model.filter(|_| problems.is_empty()) else {
            return Err(AgentError::Invalid {
                agent: name,
                problems,
            }
            .into());
        };
        let tools = if self.durable_approvals {
            self.tools
                .approval_handler(crate::tool::SignalApprover::new().or_suspend())
        } else {
            self.tools
        };
        let mut tools = if self.record_content {
            tools.record_content(true)
        } else {
            tools
        };
        let memory = self.memory.map(|store| memory::AgentMemory {
            store,
            options: self.memory_options,
        });
        if let Some(memory) = memory.as_ref().filter(|m| m.options.tools) {
            // A tool of the user's with the same name is kept.
            for tool in crate::memory::memory_tools(&memory.store, &name, &memory.options) {
                if tools.get(&tool.spec().name).is_none() {
                    tools.add_arc(tool);
                }
            }
        }
        let core = Arc::new(AgentCore {
            name: name.clone(),
            instructions: self.instructions,
            model,
            tools: Arc::new(tools::AgentTools::new(tools)),
            max_turns: self.max_turns,
            max_schema_retries: self.max_schema_retries,
            budget: self.budget,
            output: self.output,
            temperature: self.temperature,
            max_tokens: self.max_tokens,
            handoffs: Vec::new(),
            record_content: self.record_content,
            prices: self.prices,
            memory,
            guardrails: self.guardrails,
            context_policy: self.context_policy,
            rate_limiter: self.rate_limiter,
        });
        let graph = react::build(&core)?;
        Ok(Agent {
            core,
            graph,
            runtime: self.runtime.unwrap_or_default(),
            timeout: self.timeout,
            sessions: Arc::default(),
        })
    }
}
