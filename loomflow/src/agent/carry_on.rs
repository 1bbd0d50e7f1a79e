//! What a new prompt on a session starts from: the conversation of the session's last run,
//! when that run is over, or is one a prompt may move on from.

use super::{Agent, AgentError, AgentState};
use crate::model::Message;
use crate::runtime::{Checkpoint, RunStatus};
use crate::{Error, Result};

/// Whether the session's row says the run of `cp` stopped part way (a dropped stream, a
/// timeout, a crash): nobody failed it, and nobody holds it. One that another task runs
/// now is not: a new run waits for the session's turn behind it. Leases are judged by the
/// system clock, as they are written; a lease this process's execution let go is free,
/// though its release may still be on its way to the store.
pub(super) async fn unfinished_at(
    runtime: &crate::Runtime,
    session: &str,
    cp: &Checkpoint,
) -> Result<bool> {
    let now_ms = crate::runtime::clock::now_ms();
    let row = runtime.store().get_run(session).await?;
    Ok(row.is_some_and(|row| {
        let held = (row.lease_owner.as_deref()).is_some_and(|owner| {
            row.lease_until_ms > now_ms && !runtime.let_go_here(session, owner)
        });
        row.run == cp.run && row.state == crate::runtime::RunState::Running && !held
    }))
}

/// Whether `session`'s run that wrote `cp` failed after it: its row says so.
pub(super) async fn failed_at(
    runtime: &crate::Runtime,
    session: &str,
    cp: &Checkpoint,
) -> Result<bool> {
    let row = runtime.store().get_run(session).await?;
    Ok(row.is_some_and(|row| row.run == cp.run && row.state == crate::runtime::RunState::Failed))
}

/// The state of a new run that carries the conversation of checkpoint `cp` on with
/// `prompt`.
pub(super) async fn continue_from(
    agent: &Agent,
    session: &str,
    cp: &Checkpoint,
    prompt: &str,
) -> Result<AgentState> {
    let problem = |problem: String| {
        Error::from(AgentError::Checkpoint {
            agent: agent.core.name.clone(),
            session: session.to_owned(),
            checkpoint: cp.id,
            problem,
        })
    };
    let previous = <AgentState as serde::Deserialize>::deserialize(cp.state())
        .map_err(|e| problem(format!("its state is not an agent's: {e}")))?;
    // A turn's results come after its calls, all at once: a conversation that ends on calls
    // has none of theirs (a result of an earlier turn's call may share an id with one).
    let unanswered: Vec<&str> = previous
        .last_message()
        .map(Message::tool_calls)
        .unwrap_or_default()
        .iter()
        .map(|c| c.id.as_str())
        .collect();
    // A run cancelled in the middle of a turn (waiting for an approval, say) is over, and
    // so is a failed one a new prompt moves on from (a tool result a guardrail blocked, with
    // `OnBlock::Fail`, fails again if carried on): its calls without results get what they
    // recorded, or a note that they had none, and the conversation goes on. Any other run
    // stopped there is carried on, not started over.
    let ended = match cp.status {
        RunStatus::Cancelled => Some("was cancelled"),
        // A failed step leaves the checkpoint before it: the run's row says it failed.
        _ if !unanswered.is_empty() => failed_at(&agent.runtime, session, cp)
            .await?
            .then_some("failed"),
        _ => None,
    };
    let Some(ended) = ended.or(unanswered.is_empty().then_some("")) else {
        return Err(problem(format!(
            "it is in the middle of a turn (tool calls {} have no results); carry it on \
             without a prompt",
            unanswered.join(", ")
        )));
    };
    let not_run =
        super::cancelled::results_of(&agent.runtime, (session, cp), &unanswered, ended).await?;
    let mut state = AgentState::new(prompt);
    state.messages = previous.messages;
    // A run that failed its output schema ends on the note that asked for a better answer
    // (the answer that failed it went with the failed step): the new prompt is not that
    // answer's turn, and a run without a schema would be told to reply with JSON. Its
    // notes go, each of them; its answers stay, what the model said.
    if state.messages.last().is_some_and(super::is_retry_note) {
        let mut at = 0;
        state.messages.retain(|message| {
            at += 1;
            at <= previous.run_start || !super::is_retry_note(message)
        });
    }
    state.messages.extend(not_run);
    state.run_start = state.messages.len();
    state.messages.push(Message::user(prompt));
    // The session goes on acting for the same user, unless the run names another.
    state.user = previous.user;
    // A run whose first model turn failed left its prompt as it was given: what the input
    // guardrails made of it went with the failed step. This run checks it with its own.
    // (It may have been carrying an earlier such prompt on itself.)
    if previous.turns == 0 && !previous.prompt_checked {
        state.check_from = Some(previous.check_from.unwrap_or(previous.run_start));
    }
    Ok(state)
}
