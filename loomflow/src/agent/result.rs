//! [`RunResult`]: what an agent run gives back once it ended or suspended.

use serde::de::DeserializeOwned;

use super::guardrail::{Checked, GuardContext, GuardStage};
use super::{Agent, AgentState, StopReason};
use crate::graph::RunOutcome;
use crate::model::{Message, Usage};
use crate::runtime::Interrupt;
use crate::{Error, Result};

/// What an agent run produced.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RunResult {
    /// The session the run was on (generated when none was given).
    pub session: String,
    /// The final answer (when the run stopped early, this run's answer so far, once the
    /// output guardrails passed it: see [`AgentState::answer_so_far`]; empty when a
    /// guardrail stopped it; the cut or filtered reply itself when the reason is
    /// [`StopReason::Truncated`] or [`StopReason::ContentFilter`]).
    pub output: String,
    /// Tokens used by this run, across all its resumptions.
    pub usage: Usage,
    /// What the run cost in US dollars, across all its resumptions, at the agent's
    /// [prices](crate::agent::AgentBuilder::prices); `None` when it has none.
    pub cost_usd: Option<f64>,
    /// Model turns taken.
    pub turns: u32,
    /// Whether the run stopped before an answer: a limit, a budget, a guardrail, a final
    /// reply cut short or filtered, or a suspension.
    pub interrupted: bool,
    /// Why: a turn limit, a budget cap, a guardrail, [`StopReason::Truncated`] or
    /// [`StopReason::ContentFilter`], or a suspension (see `pending`).
    pub reason: Option<StopReason>,
    /// What a suspended run waits for (tool approvals, interrupts).
    pub pending: Vec<Interrupt>,
    /// The whole transcript.
    pub messages: Vec<Message>,
}

impl RunResult {
    /// The answer as a `T` (for runs with typed output: [`AgentBuilder::output`], or
    /// [`AgentRun::output`](super::AgentRun::output)).
    ///
    /// [`AgentBuilder::output`]: super::AgentBuilder::output
    ///
    /// # Errors
    ///
    /// The output is not JSON for a `T`.
    pub fn parsed<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_str(self.output.trim()).map_err(|e| Error::json("agent output", e))
    }

    fn from_state(
        session: String,
        state: AgentState,
        output: String,
        pending: Vec<Interrupt>,
    ) -> Self {
        let suspended = !pending.is_empty();
        let reason = if suspended {
            Some(StopReason::Suspended)
        } else {
            state.stopped
        };
        Self {
            session,
            output,
            usage: state.usage,
            cost_usd: state.cost_usd,
            turns: state.turns,
            interrupted: reason.is_some(),
            reason,
            pending,
            messages: state.messages.into_vec(),
        }
    }
}

/// The result of a run that completed or suspended; a failed run's error.
pub(super) async fn finish(
    agent: &Agent,
    session: String,
    outcome: RunOutcome<AgentState>,
) -> Result<RunResult> {
    let (state, pending) = match outcome {
        RunOutcome::Completed(state) => (state, Vec::new()),
        RunOutcome::Interrupted { state, interrupts } => (state, interrupts),
        RunOutcome::Failed { error, .. } => return Err(failure(error)),
    };
    let output = output_of(agent, &session, &state).await;
    Ok(RunResult::from_state(session, state, output, pending))
}

/// A failed run's error as the agent's caller matches it: the agent's loop is one node, and
/// what it failed with (`AgentError::OutputSchema`, `Error::Model`, …) is the error, as a
/// timeout is, rather than the node's failure wrapping it.
/// A model call is a journaled step of that node: its failure (`StepFailed`) gives the
/// model's error (`Error::Model`), which names the provider and the model.
fn failure(error: crate::RunError) -> crate::Error {
    use crate::RunError::{NodeFailed, StepFailed};
    match error {
        NodeFailed { source, node, step } => match source.downcast::<crate::Error>() {
            Ok(own) => own_failure(*own),
            Err(source) => NodeFailed { node, step, source }.into(),
        },
        StepFailed { source, node, name } => match source.downcast::<crate::Error>() {
            Ok(own) => own_failure(*own),
            Err(source) => match source.downcast::<crate::model::ModelError>() {
                Ok(model) => crate::Error::Model(*model),
                Err(source) => StepFailed { node, name, source }.into(),
            },
        },
        other => other.into(),
    }
}

/// What a node or a step of the agent's loop failed with: a step's failure inside it is
/// taken apart in turn.
fn own_failure(error: crate::Error) -> crate::Error {
    match error {
        crate::Error::Run(step @ crate::RunError::StepFailed { .. }) => failure(step),
        other => other,
    }
}

/// The output of a run that a guardrail stopped (none: never an earlier, unchecked text),
/// or that stopped on a cut or filtered reply (that reply, even empty, which its guardrails
/// checked); `None` for any other run, whose output is its answer. The team shapes read
/// their agents' answers by the same rule (`architecture::answer`).
pub(crate) fn stopped_output(state: &AgentState) -> Option<String> {
    match &state.stopped {
        Some(StopReason::Guardrail(_)) => Some(String::new()),
        Some(StopReason::Truncated | StopReason::ContentFilter) => Some(
            state
                .last_message()
                .map(|m| m.text().to_owned())
                .unwrap_or_default(),
        ),
        _ => None,
    }
}

/// What a run gives as its output: its answer, once there is one. A run that stopped
/// before one gives the answer so far ([`AgentState::answer`]), once the output guardrails
/// have passed it as they pass an answer: the text that came with a reply's tool calls
/// was not checked when it was given.
async fn output_of(agent: &Agent, session: &str, state: &AgentState) -> String {
    if let Some(output) = stopped_output(state) {
        return output;
    }
    if let Some(output) = state.output.as_ref().or(state.checked_so_far.as_ref()) {
        return output.clone();
    }
    // Not checked in the run: it suspended (its answer so far came with the calls it waits
    // on), or its checkpoint was written before runs checked their answers so far.
    let Some(so_far) = state.answer_so_far() else {
        return String::new();
    };
    let guardrails = &agent.core.guardrails;
    if guardrails.is_empty() {
        return so_far.to_owned();
    }
    let cx = GuardContext {
        agent: &agent.core.name,
        session,
        user: state.user.as_deref(),
    };
    match guardrails.text(GuardStage::Output, "", so_far, cx).await {
        Checked::Passed(None) => so_far.to_owned(),
        Checked::Passed(Some(rewritten)) => rewritten,
        Checked::Blocked { .. } => String::new(),
    }
}
