//! [`AgentState`]: what an agent run checkpoints.

use serde::{Deserialize, Serialize};

use super::StopReason;
use crate::model::{Message, OutputSchema, Role, Transcript, Usage};

/// The state of an agent run: the transcript and the counters the loop's limits read.
///
/// It is an ordinary graph state, checkpointed after every superstep, so an agent run can be
/// inspected (`runtime.get_state::<AgentState>(session)`), resumed and forked like any run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AgentState {
    /// The conversation so far (the system prompt is not stored; it comes from the agent).
    pub messages: Transcript,
    /// Model turns taken in this run.
    pub turns: u32,
    /// Tokens used in this run.
    pub usage: Usage,
    /// What the run's model calls cost, in US dollars, at the agent's
    /// [prices](crate::agent::AgentBuilder::prices); `None` without prices. Checkpointed
    /// with the rest, so it adds up across the run's resumptions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Model turns spent on outputs that failed the output schema.
    #[serde(default)]
    pub schema_retries: u32,
    /// This run's own turn limit, when the caller set one (`run(..).max_turns(n)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// The user the run acts for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Why the loop stopped early (a turn limit, a budget, a guardrail, a cut or filtered
    /// reply), if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<StopReason>,
    /// The agent a handoff tool transferred the conversation to (swarms), if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<String>,
    /// This run's own output schema (`agent.run(..).output::<T>()`), kept so that a resumed
    /// run still asks for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<OutputSchema>,
    /// That schema as derived from the type, before it was made strict: it tells which
    /// fields the answer may go without, so that a `null` the strict schema allows for one
    /// is dropped before the answer is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_fields: Option<serde_json::Value>,
    /// The final answer, once there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// What this run recalled from the agent's long-term memory for its prompt (set at its
    /// first model turn when the agent has a memory; empty when nothing matched).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recalled: Option<String>,
    /// Milliseconds this run has spent running, added up over all its legs: the time a
    /// suspended run waits (for a person, a signal) is not counted. What
    /// [`Budget::max_wall_clock`](super::Budget::max_wall_clock) caps.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub running_ms: u64,
    /// Where this run's own messages begin in `messages`: a session's earlier runs come
    /// before them. What extraction reads (it remembers what this run was told, for this
    /// run's user); kept in step when the conversation is trimmed.
    #[serde(default, skip_serializing_if = "is_zero_index")]
    pub(crate) run_start: usize,
    /// This run's answer so far as the output guardrails passed it (rewritten, or empty
    /// when one blocked it), once the run stopped before its answer (a turn limit, a
    /// budget); `None` otherwise, and for an agent without guardrails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) checked_so_far: Option<String>,
    /// Whether the input guardrails checked this run's prompt. Set in the step of its first
    /// model turn, it is lost with that step when the turn fails: the session's next run
    /// then checks the prompt again (see `check_from`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub(crate) prompt_checked: bool,
    /// Where the messages the input guardrails check before this run's prompt begin: the
    /// prompt of the session's previous run, when that run failed before it was checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) check_from: Option<usize>,
    /// Up to when, in this leg, `running_ms` counts; not checkpointed, so a resumed leg
    /// starts counting afresh.
    #[serde(skip)]
    pub(crate) counted_to: super::budget::RunningMark,
}

impl AgentState {
    /// A state that starts a conversation with one user message.
    pub fn new(prompt: impl Into<String>) -> Self {
        Self {
            messages: Transcript::from([Message::user(prompt)]),
            ..Self::default()
        }
    }

    /// Adds the time since the last count in this leg to `running_ms`; in a new leg (a
    /// fresh or resumed run), starts counting.
    pub(crate) fn count_running_time(&mut self) {
        self.running_ms = self.counted_to.advance(self.running_ms);
    }

    /// The last message, if any.
    pub fn last_message(&self) -> Option<&Message> {
        self.messages.last()
    }

    /// The final answer, or the answer so far (see [`answer_so_far`](Self::answer_so_far))
    /// when the run stopped before one, as the agent's output guardrails passed it:
    /// rewritten, or empty when one blocked it.
    pub fn answer(&self) -> String {
        self.output
            .clone()
            .or_else(|| self.checked_so_far.clone())
            .or_else(|| self.answer_so_far().map(str::to_owned))
            .unwrap_or_default()
    }

    /// The text of this run's last model reply that has any: the answer so far of a run
    /// that stopped before its answer. A reply of an earlier run of the session is not
    /// this run's answer, so a run whose replies had no text yet has none. It is the text
    /// as the model gave it, before any guardrail: [`answer`](Self::answer) gives it as
    /// they passed it.
    pub fn answer_so_far(&self) -> Option<&str> {
        // Each model turn of this run added one assistant message.
        self.messages
            .iter()
            .rev()
            .filter(|m| m.role() == Role::Assistant)
            .take(self.turns as usize)
            .find(|m| !m.text().is_empty())
            .map(Message::text)
    }

    /// The text of the last assistant message that has any: the answer so far.
    pub fn last_assistant_text(&self) -> Option<&str> {
        self.messages
            .iter()
            .rev()
            .find(|m| m.role() == Role::Assistant && !m.text().is_empty())
            .map(Message::text)
    }
}

fn is_zero_index(n: &usize) -> bool {
    *n == 0
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}
