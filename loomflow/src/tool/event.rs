//! [`AgentEvent`]: what the LLM layer reports on a run's event stream.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::context::Context;
use crate::event::{Event, EventKind};
use crate::model::StreamChunk;

/// What a permission policy or an approval decided about a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Decision {
    /// The call runs.
    Allow,
    /// The call is refused.
    Deny,
    /// A person must decide (permissions only).
    Ask,
    /// The call runs with edited arguments (approvals only).
    Edit,
}

/// An event of an agent's model or tools, carried on a run's stream as the data of
/// [`EventKind::Backend`]; read it back with [`AgentEvent::from_event`].
///
/// As JSON it is tagged by `type`: `model_chunk`, `tool_call`, `tool_result`, `permission`,
/// `approval`, `rate_limited`, `context_trimmed`, `guardrail_blocked`, and the run's own
/// moments (`node_started`, …).
///
/// # Examples
///
/// ```
/// use loomflow::agent::{Agent, AgentEvent};
/// use loomflow::model::ScriptedModel;
/// use loomflow::model::ModelResponse;
/// use futures_util::StreamExt;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
/// let agent = Agent::builder("a").model(ScriptedModel::new([ModelResponse::text("hi")])).build()?;
/// let events: Vec<AgentEvent> = agent.run("hello").stream().await?.collect().await;
/// let chunks = events.iter().filter(|e| matches!(e, AgentEvent::ModelChunk { .. })).count();
/// assert!(chunks > 0, "the model's reply streams as chunks");
/// assert_eq!(events.last(), Some(&AgentEvent::Done));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum AgentEvent {
    /// A piece of the model's reply as it streams.
    ModelChunk {
        /// The piece.
        chunk: StreamChunk,
    },
    /// A tool call is about to be dispatched.
    ToolCall {
        /// The model's id for the call.
        id: String,
        /// The tool.
        name: String,
        /// The arguments as the model sent them.
        arguments: Value,
    },
    /// A tool call finished.
    ToolResult {
        /// The model's id for the call.
        id: String,
        /// The tool.
        name: String,
        /// What the model is shown.
        content: String,
        /// Whether the call failed.
        is_error: bool,
    },
    /// The permission policy decided about a call.
    Permission {
        /// The model's id for the call.
        call_id: String,
        /// The tool.
        tool: String,
        /// Allow, deny or ask.
        decision: Decision,
    },
    /// A person (or an approval handler) decided about a call.
    Approval {
        /// The model's id for the call.
        call_id: String,
        /// The tool.
        tool: String,
        /// Allow, deny or edit.
        decision: Decision,
    },
    /// The conversation passed its [context policy](crate::agent::ContextPolicy)'s
    /// threshold and was trimmed before a model turn.
    ContextTrimmed {
        /// `snip` or `compact`.
        strategy: String,
        /// How many messages were taken out (a compaction adds its summary in their place).
        removed: usize,
    },
    /// A [guardrail](crate::agent::Guardrail) blocked something.
    GuardrailBlocked {
        /// The guardrail.
        guardrail: String,
        /// What it was checking: `input`, `tool_call`, `tool_result` or `output` (a
        /// `GuardStage`'s name).
        stage: String,
        /// Its reason.
        reason: String,
    },
    /// A node of the run's graph started (an agent's are `model` and `tools`; a node inside
    /// a subgraph is named `parent/child`).
    NodeStarted {
        /// The node.
        node: String,
    },
    /// A node finished its work for the step.
    NodeFinished {
        /// The node.
        node: String,
    },
    /// A node suspended the run to ask for a value (see
    /// [`RunResult::pending`](crate::agent::RunResult::pending)).
    Interrupted {
        /// The interrupt's id.
        id: String,
        /// What it asks.
        payload: Value,
    },
    /// A node waits for a signal.
    Waiting {
        /// The signal's name.
        signal: String,
    },
    /// A node's own event ([`Context::emit`](crate::Context::emit)).
    Custom {
        /// The event's name.
        name: String,
        /// Its payload.
        data: Value,
    },
    /// The run finished (completed, stopped or suspended): the last event of its stream.
    Done,
    /// The run failed, or timed out: the last event of its stream.
    Failed {
        /// The error, with its sources.
        message: String,
    },
    /// A model call waited for the agent's
    /// [rate limiter](crate::agent::RateLimiter) before it was sent.
    RateLimited {
        /// The model.
        model: String,
        /// How long it waited, in milliseconds.
        waited_ms: u64,
    },
}

impl AgentEvent {
    /// An event of a graph run's stream as an agent event: what a backend reported, or the
    /// run's own moments. `None` for a superstep's end and a node's sleep, which agents do not
    /// report.
    pub fn from_event(event: &Event) -> Option<Self> {
        let node = || event.node.clone().unwrap_or_default();
        Some(match &event.kind {
            EventKind::Backend { data } => return Self::deserialize(data).ok(),
            EventKind::NodeStart => Self::NodeStarted { node: node() },
            EventKind::NodeEnd => Self::NodeFinished { node: node() },
            EventKind::Interrupt { id, payload } => Self::Interrupted {
                id: id.clone(),
                payload: payload.clone(),
            },
            EventKind::Wait { signal, .. } => Self::Waiting {
                signal: signal.clone(),
            },
            EventKind::Custom { name, data } => Self::Custom {
                name: name.clone(),
                data: data.clone(),
            },
            EventKind::Done => Self::Done,
            EventKind::Error { message } => Self::Failed {
                message: message.clone(),
            },
            EventKind::Step { .. } | EventKind::Sleep { .. } => return None,
        })
    }

    /// Puts this event on the run's stream, as the node `ctx` belongs to.
    pub(crate) fn emit(&self, ctx: &Context) {
        if !ctx.has_listener() {
            return;
        }
        match serde_json::to_value(self) {
            Ok(data) => ctx.emit_kind(EventKind::Backend { data }),
            Err(error) => tracing::warn!(%error, "agent event did not serialize"),
        }
    }
}
