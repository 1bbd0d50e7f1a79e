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
/// `approval`, `rate_limited`.
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
/// let events: Vec<_> = agent.run("hello").stream().await?.collect().await;
/// let chunks = events.iter().filter_map(AgentEvent::from_event).count();
/// assert!(chunks > 0, "the model's reply streams as chunks");
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
    /// The agent event an event of a run's stream carries, if it carries one.
    pub fn from_event(event: &Event) -> Option<Self> {
        match &event.kind {
            EventKind::Backend { data } => Self::deserialize(data).ok(),
            _ => None,
        }
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
