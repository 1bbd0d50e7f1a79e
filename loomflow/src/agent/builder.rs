//! [`AgentBuilder`]: everything an [`Agent`] is configured with, checked when it is built.

use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::output::OutputSpec;
use super::{
    Agent, AgentCore, AgentError, Budget, ContextPolicy, DEFAULT_MAX_TURNS, Guardrail, OnBlock,
    RateLimiter, guardrail, memory, react, tools,
};
use crate::memory::{Memory, MemoryOptions};
use crate::model::{Model, OutputSchema, PriceTable};
use crate::runtime::Runtime;
use crate::tool::{Tool, ToolHost};

/// Configures an [`Agent`]; see [`Agent::builder`].
#[must_use]
pub struct AgentBuilder {
    name: Option<String>,
    instructions: String,
    model: Option<Arc<dyn Model>>,
    model_name: Option<String>,
    pub(super) tools: ToolHost,
    runtime: Option<Runtime>,
    max_turns: u32,
    max_schema_retries: u32,
    timeout: Option<Duration>,
    budget: Budget,
    pub(super) output: Option<OutputSpec>,
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
    /// The names of tools added twice (the second replaced the first): refused at build.
    named_twice: Vec<String>,
}

impl std::fmt::Debug for AgentBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("name", &self.name)
            .field(
                "model",
                &self
                    .model_name
                    .as_deref()
                    .map(crate::model::without_credentials),
            )
            .field("tools", &self.tools)
            .field("max_turns", &self.max_turns)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl AgentBuilder {
    pub(super) fn new(instructions: String) -> Self {
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
            named_twice: Vec::new(),
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
    /// ones before. With any guardrail (a guardrail may check any stage), a streamed run
    /// does not stream the model's text as it comes: the answer is shown as one chunk once
    /// it has been checked, and the text that comes with a reply's tool calls is not shown.
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
    /// [`Agent::resume`] carries the run on. The calls of one turn that need approval wait
    /// together: each is listed and decided, and one resume runs those decided (the others
    /// wait on). Overrides the tool host's approval handler.
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

    /// Adds a tool. Two tools of one name (two modules' `search`, say) are refused at
    /// [`build`](Self::build): name one otherwise (`#[tool(name = "docs_search")]`).
    pub fn tool(mut self, tool: impl Tool) -> Self {
        let name = &tool.spec().name;
        // A set's tool of the name is not a second tool: the agent's own wins over it.
        if self.tools.has_own(name) && !self.named_twice.contains(name) {
            self.named_twice.push(name.clone());
        }
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
    /// extraction are journaled steps: a resumed run does not repeat them. A recall the
    /// memory fails (its database unreachable) fails the run, as a model's failure does,
    /// rather than answering without what it should remember; a failed extraction is only
    /// logged, the answer given stands. A user or session id memory cannot keep (blank, or
    /// over [`MAX_SCOPE_ID_BYTES`](crate::memory::MAX_SCOPE_ID_BYTES)) is left out of the
    /// recall: a user's facts then go to the session.
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
    ///
    /// It replaces the host the builder had, tools included: the tools an `#[agent]`'s
    /// `tools(..)` declared, or that [`tool`](Self::tool) added before, are gone. To add
    /// permissions, an approver or hooks to the tools already there, use
    /// [`map_tools`](Self::map_tools).
    pub fn tools(mut self, host: ToolHost) -> Self {
        self.tools = host;
        self.named_twice.clear();
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
    /// It bounds each call of `run`, `stream` or `resume` on its own and stops the run where
    /// it is, as a crash would: its newest checkpoint stays, a [`Worker`](crate::Worker)
    /// serving the agent's graph or a `resume` carries it on, and
    /// [`Runtime::cancel`](crate::Runtime::cancel) ends it for good (after which a new
    /// prompt moves on from it). [`Budget::max_wall_clock`] is the other kind: it adds up
    /// the running time of every leg of a run and stops it cleanly before its next model
    /// turn. Time a streamed run spends held back by a slow reader of its events counts too.
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
    ///
    /// The model is asked for `schema` made strict, as for [`output`](Self::output): every
    /// property required (one `schema` does not require may be `null`, and is dropped from
    /// the answer) and no others; and a schema whose top is not an object is asked for as the
    /// property `result` of one, which the answer is read out of.
    ///
    /// `name` is what providers are told the schema is called: 1 to 64 letters, digits, `_`
    /// and `-`, and none of the agent's tools' names; [`build`](Self::build) refuses another.
    pub fn output_schema<T: DeserializeOwned + 'static>(
        mut self,
        name: impl Into<String>,
        schema: Value,
    ) -> Self {
        let sent = super::output::sent_schema(&schema);
        self.output = Some(OutputSpec::of::<T>(OutputSchema::new(name, sent), schema));
        self
    }

    /// How many times an answer that fails the output schema is retried (default 2).
    pub fn max_schema_retries(mut self, retries: u32) -> Self {
        self.max_schema_retries = retries;
        self
    }

    /// Sampling temperature for every request: from 0 to 2 (providers refuse others, and
    /// [`build`](Self::build) does).
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

    /// What the models' tokens cost, for [`RunResult::cost_usd`](super::RunResult::cost_usd) (default: no prices, and
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
    /// how a provider's 429 pauses every run, and the [`RateLimitMode`](super::RateLimitMode)s.
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
    /// resolve), a zero `max_turns`, an empty name, a budget cap or a price that is negative
    /// or not a number, a tool whose name providers refuse (1 to 64 of `[a-zA-Z0-9_-]`), a
    /// memory the agent writes its own notes to (`agent_writes`) with no name to file them
    /// under.
    pub fn build(self) -> crate::Result<Agent> {
        let mut problems = Vec::new();
        // Its notes are filed under its name: every unnamed agent would share them.
        if self.name.is_none() && self.memory.is_some() && self.memory_options.agent_writes {
            problems.push("an agent that writes its own memory (agent_writes) needs a name: set one with .name(..)".to_owned());
        }
        let name = self.name.unwrap_or_else(|| "agent".to_owned());
        let model = match (self.model, &self.model_name) {
            (Some(model), _) => Some(model),
            (None, Some(spec)) => match crate::model::resolve(spec) {
                Ok(model) => Some(model),
                Err(error) => {
                    let spec = crate::model::without_credentials(spec);
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
        // Every model call would ask for an answer of no tokens.
        if self.max_tokens == Some(0) {
            problems.push("max_tokens must be at least 1".to_owned());
        }
        if let Some(t) = self.temperature.filter(|t| !(0.0..=2.0).contains(t)) {
            problems.push(format!("temperature {t} is not from 0 to 2"));
        }
        for name in &self.named_twice {
            problems.push(format!(
                "two tools are named {name:?}, and the model could call only one: name one \
                 otherwise (#[tool(name = \"..\")])"
            ));
        }
        problems.extend(self.budget.problems());
        problems.extend(self.prices.problems());
        // Without a price, every run costs nothing, and the cap would never stop one.
        if self.budget.caps_cost() && !self.budget.priced_here() && self.prices.is_empty() {
            problems.push(
                "the budget caps a cost, but nothing prices tokens: give the agent prices \
                 (.prices(..), [prices] in a config file) or the budget \
                 (prices_per_million)"
                    .to_owned(),
            );
        }
        problems.extend(self.guardrails.problems());
        // A name providers refuse would fail every model call of every run; so would an
        // output schema's (OpenAI's schema name, Anthropic's output tool), and one a tool
        // also has would read that tool's calls as the answer.
        let mut definitions = self.tools.definitions();
        // The memory tools the agent will have count as its tools here too.
        if let Some(store) = self.memory.as_ref().filter(|_| self.memory_options.tools) {
            let memory_tools = crate::memory::memory_tools(store, &name, &self.memory_options);
            for tool in memory_tools {
                if definitions
                    .iter()
                    .all(|known| known.name != tool.spec().name)
                {
                    definitions.push(tool.spec().definition());
                }
            }
        }
        if let Some(output) = &self.output {
            let name = &output.schema.name;
            if !crate::tool::name::is_callable(name) {
                problems.push(format!(
                    "output schema {name:?} has a name model providers refuse: 1 to 64 \
                     letters, digits, _ and - (`{}` would be)",
                    crate::tool::name::callable_name("", name)
                ));
            } else if definitions.iter().any(|tool| tool.name == *name) {
                let memory = if self.tools.get(name).is_none() {
                    " (a memory tool: turn them off with MemoryOptions::with_tools(false))"
                } else {
                    ""
                };
                problems.push(format!(
                    "output schema {name:?} has the name of one of the agent's tools{memory}: \
                     name one or the other otherwise"
                ));
            }
        }
        for tool in definitions {
            if !crate::tool::name::is_callable(&tool.name) {
                problems.push(format!(
                    "tool {:?} has a name model providers refuse: 1 to 64 letters, digits, \
                     _ and - (`{}` would be)",
                    tool.name,
                    crate::tool::name::callable_name("", &tool.name)
                ));
            }
        }
        let Some(model) = model.filter(|_| problems.is_empty()) else {
            return Err(AgentError::Invalid {
                agent: name,
                problems,
            }
            .into());
        };
        // Not refused: the model a provider reports may be one the table prices. But a cap
        // the table cannot price stops nothing, silently otherwise.
        let priced = |model: &str| {
            (self.prices)
                .cost_usd(model, &crate::model::Usage::default())
                .is_some()
        };
        if self.budget.caps_cost() && !self.budget.priced_here() && !priced(model.name()) {
            tracing::warn!(agent = %name, model = %model.name(), "the budget caps a cost, but the prices have none for the agent's model: only calls whose reported model they price count");
        }
        let tools = if self.durable_approvals {
            self.tools
                .approval_handler(crate::tool::SignalApprover::new().or_suspend())
        } else {
            self.tools
        };
        if !tools.has_approver() {
            let asking: Vec<String> = (tools.list().into_iter())
                .filter(|spec| spec.requires_approval)
                .map(|spec| spec.name)
                .collect();
            if !asking.is_empty() {
                tracing::warn!(agent = %name, tools = %asking.join(", "), "tools that need approval, and nobody to ask: every call of them is denied; give the agent durable_approvals() or an approval handler");
            }
        }
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
            // A tool of the user's with the same name is kept. Turned on by the code, the
            // memory tools pass the policy's default (a config file cannot name them),
            // unless it has a rule for their names.
            for tool in crate::memory::memory_tools(&memory.store, &name, &memory.options) {
                if tools.get(&tool.spec().name).is_none() {
                    tools.add_allowed(tool);
                }
            }
        }
        let core = Arc::new(AgentCore {
            name: name.clone(),
            system: Arc::new(crate::model::Message::system(self.instructions)),
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
        let graph = react::build(&core, self.timeout)?;
        Ok(Agent {
            core,
            graph,
            runtime: self.runtime.unwrap_or_default(),
            timeout: self.timeout,
            sessions: Arc::default(),
        })
    }
}
