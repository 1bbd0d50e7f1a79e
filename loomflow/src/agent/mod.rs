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
mod builder;
mod cancelled;
mod carry_on;
mod config;
mod error;
mod guarded;
mod guardrail;
mod handoff;
mod memory;
mod observe;
mod output;
pub(crate) use output::is_retry_note;
mod rate_limit;
mod react;
mod result;
mod run;
mod state;
mod stop;
mod tools;
mod turns;
mod window;

pub use crate::tool::AgentEvent;
pub use budget::Budget;
pub use builder::AgentBuilder;
pub use config::{ConfigError, ConfigProblem, ConfigProblemKind, ToolRegistry};
pub use error::AgentError;
pub use guardrail::{
    GuardContext, GuardStage, Guardrail, OnBlock, Verdict, on_input, on_output, on_tool_result,
};
pub use rate_limit::{Limits, RateLimitMode, RateLimiter};
pub use result::RunResult;
pub(crate) use result::stopped_output;
pub use run::{AgentResume, AgentRun, AgentStream, DEFAULT_STREAM_CAPACITY};
pub use state::AgentState;
pub use stop::{BudgetCap, StopReason, UnknownStopReason};
pub use window::{ContextPolicy, DEFAULT_KEEP_RECENT};

use std::sync::Arc;
use std::time::Duration;

use crate::graph::CompiledGraph;
use crate::model::{Message, Model, ModelRequest, OutputSchema, PriceTable, Transcript};
use crate::runtime::Runtime;
use crate::tool::{Tool, ToolHost};
use output::OutputSpec;

/// The default number of model turns per run.
pub const DEFAULT_MAX_TURNS: u32 = 50;

/// What an agent is made of; shared by its graph's nodes.
pub(crate) struct AgentCore {
    pub(crate) name: String,
    /// The instructions, as the system message that opens every request: built once and
    /// shared by the requests.
    system: Arc<Message>,
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

    /// The output schema a turn asks for: the run's own (`output`), or the agent's.
    fn output_schema<'a>(&'a self, output: Option<&'a OutputSchema>) -> Option<&'a OutputSchema> {
        output.or(self.output.as_ref().map(|o| &o.schema))
    }

    /// Checks that none of `tools` has the name of the output schema the turn asks for
    /// (`output`, the run's own, or the agent's): its calls would be read as the answer.
    ///
    /// # Errors
    ///
    /// [`AgentError::OutputNamedAsTool`], naming the schema.
    fn check_output_name(
        &self,
        output: Option<&OutputSchema>,
        tools: &ToolHost,
    ) -> Result<(), AgentError> {
        match self.output_schema(output) {
            Some(schema) if tools.get(&schema.name).is_some() => {
                Err(AgentError::OutputNamedAsTool {
                    agent: self.name.clone(),
                    schema: schema.name.clone(),
                })
            }
            _ => Ok(()),
        }
    }

    /// The request of a model turn; `output` is the run's own output schema, if it has one
    /// (checked with [`check_output_name`](Self::check_output_name)).
    fn request(
        &self,
        messages: &Transcript,
        recalled: Option<&str>,
        output: Option<&OutputSchema>,
        tools: &ToolHost,
    ) -> ModelRequest {
        let mut all = Transcript::new();
        all.push_shared(Arc::clone(&self.system));
        if let Some(recalled) = recalled.filter(|r| !r.is_empty()) {
            all.push(Message::system(recalled));
        }
        // Shared, not copied: a turn costs what it adds, not what the conversation holds.
        all.append_shared(messages);
        let mut request = ModelRequest::new(all).tools(tools.definitions());
        if let Some(schema) = self.output_schema(output) {
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
    ///
    /// A tool named as the agent's output schema is added, and warned of: every turn that
    /// offers it fails its run ([`AgentError::OutputNamedAsTool`]).
    pub fn add_tool(&self, tool: impl Tool) {
        if let Some(output) = &self.core.output
            && tool.spec().name == output.schema.name
        {
            tracing::warn!(
                agent = %self.core.name,
                tool = %output.schema.name,
                "a tool added with the name of the agent's output schema: the agent's turns \
                 fail while it has it"
            );
        }
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

    /// Every checkpoint of a session the store keeps, oldest first (see
    /// [`Runtime::list_checkpoints`]).
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
    /// description) through `transfer_to_<name>` tools; used by swarms, which know it as
    /// `member` (the name its errors give).
    ///
    /// # Errors
    ///
    /// [`AgentError::Invalid`] when two targets' tools would have one name (`billing team`
    /// and `billing_team`), or one would take the name of a tool the agent has.
    pub(crate) fn with_handoffs(
        &self,
        member: &str,
        targets: &[(String, String)],
    ) -> crate::Result<Self> {
        let tools = self.core.tools.current();
        let mut extra: Vec<Arc<dyn crate::tool::Tool>> = Vec::new();
        let mut handoffs: Vec<(String, String)> = Vec::new();
        let mut problems = Vec::new();
        for (target, description) in targets {
            let tool = handoff::HandoffTool::new(target, description);
            let name = &tool.spec().name;
            if let Some((_, other)) = handoffs.iter().find(|(taken, _)| taken == name) {
                problems.push(format!(
                    "the handoffs to {other} and to {target} would both be the tool {name}"
                ));
            } else if tools.get(name).is_some() {
                problems.push(format!(
                    "the handoff to {target} would replace the agent's tool {name}"
                ));
            }
            handoffs.push((name.clone(), target.clone()));
            extra.push(Arc::new(tool));
        }
        if !problems.is_empty() {
            // Named as the team knows it: members often keep the default agent name.
            return Err(AgentError::Invalid {
                agent: member.to_owned(),
                problems,
            }
            .into());
        }
        let core = Arc::new(AgentCore {
            name: self.core.name.clone(),
            system: Arc::clone(&self.core.system),
            model: Arc::clone(&self.core.model),
            // The agent's own tools as they are at each turn (one added or removed after
            // the swarm was built too), and the handoffs.
            tools: Arc::new(tools::AgentTools::layered(
                Arc::clone(&self.core.tools),
                extra,
            )),
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
        let graph = react::build(&core, self.timeout)?;
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
