//! [`AgentState`]: what an agent run checkpoints.

use serde::{Deserialize, Serialize};

use crate::model::{Message, Usage};

/// The state of an agent run: the transcript and the counters the loop's limits read.
///
/// It is an ordinary graph state, checkpointed after every superstep, so an agent run can be
/// inspected (`runtime.get_state::<AgentState>(session)`), resumed and forked like any run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AgentState {
    /// The conversation so far (the system prompt is not stored; it comes from the agent).
    pub messages: Vec<Message>,
    /// Model turns taken in this run.
    pub turns: u32,
    /// Tokens used in this run.
    pub usage: Usage,
    /// Model turns spent on outputs that failed the output schema.
    #[serde(default)]
    pub schema_retries: u32,
    /// This run's own turn limit, when the caller set one (`run(..).max_turns(n)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// The user the run acts for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Why the loop stopped early (`max_turns_exceeded`, `budget:<cap>`), if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// The agent a handoff tool transferred the conversation to (swarms), if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<String>,
    /// The final answer, once there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

impl AgentState {
    /// A state that starts a conversation with one user message.
    pub fn new(prompt: impl Into<String>) -> Self {
        Self {
            messages: vec![Message::user(prompt)],
            ..Self::default()
        }
    }

    /// The last message, if any.
    pub fn last_message(&self) -> Option<&Message> {
        self.messages.last()
    }
}
