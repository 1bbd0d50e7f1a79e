//! Where the ReAct loop asks its guardrails: the prompt before the first model turn, the
//! answer before it is returned (both journaled steps of the `model` node), each tool call
//! in a journaled step of its own before it runs, and each result inside the call's step.

use serde::{Deserialize, Serialize};

use super::guardrail::{Checked, GuardContext, GuardStage, OnBlock};
use super::state::AgentState;
use super::{AgentCore, AgentError, StopReason};
use crate::context::Context;
use crate::model::{Message, Role, ToolCall};
use crate::runtime::{AuditEntry, AuditKind};
use crate::tool::AgentEvent;
use crate::{Error, Result};

/// Whose run the guardrails check.
pub(super) fn guard_context<'a>(
    core: &'a AgentCore,
    state: &'a AgentState,
    ctx: &'a Context,
) -> GuardContext<'a> {
    GuardContext {
        agent: &core.name,
        session: ctx.thread(),
        user: state.user.as_deref(),
    }
}

/// Checks the run's prompt (the transcript's last user message) once, before its first
/// model turn. The prompt is usually the last message; for an agent a conversation was
/// handed to (a [`Swarm`](crate::architecture::Swarm) member), the handoff's call and
/// result follow it, and it is checked all the same.
///
/// Before it, the prompts of the session's earlier runs that failed before theirs was
/// checked (see `AgentState::check_from`): each is rewritten, or taken out when blocked
/// (nothing answered it), and the run goes on with its own prompt.
pub(super) async fn check_input(
    core: &AgentCore,
    state: &mut AgentState,
    ctx: &Context,
) -> Result<()> {
    if core.guardrails.is_empty() || state.turns > 0 {
        return Ok(());
    }
    let Some(mut at) = last_user_message(state) else {
        return Ok(());
    };
    if let Some(from) = state.check_from.take() {
        let mut earlier = from;
        while earlier < at {
            if state.messages[earlier].role() != Role::User {
                earlier += 1;
                continue;
            }
            let kept = check_earlier_prompt(core, state, ctx, earlier).await?;
            match kept {
                true => earlier += 1,
                false => at -= 1,
            }
        }
    }
    let text = state.messages[at].text().to_owned();
    let cx = guard_context(core, state, ctx);
    let checked: Checked<String> = ctx
        .step("guard:input", || async {
            Ok::<_, Error>(core.guardrails.text(GuardStage::Input, "", &text, cx).await)
        })
        .await?;
    state.prompt_checked = true;
    match checked {
        Checked::Passed(None) => Ok(()),
        Checked::Passed(Some(rewritten)) => {
            if let Some(prompt) = state.messages.get_mut(at) {
                *prompt = Message::user(rewritten);
            }
            Ok(())
        }
        Checked::Blocked { guardrail, reason } => {
            // Not kept: a later run on the session would send it to the model. One that
            // another agent has answered already stays, as the answer needs its question.
            if at + 1 == state.messages.len() {
                state.messages.pop();
            }
            blocked(core, state, ctx, GuardStage::Input, guardrail, reason)
        }
    }
}

fn last_user_message(state: &AgentState) -> Option<usize> {
    (0..state.messages.len())
        .rev()
        .find(|&at| state.messages[at].role() == Role::User)
}

/// Checks the prompt at `at` that an earlier run of the session left unchecked; returns
/// whether it is kept (as it was, or rewritten). A blocked one is taken out: nothing
/// answered it, and this run's prompt is what the run is for.
async fn check_earlier_prompt(
    core: &AgentCore,
    state: &mut AgentState,
    ctx: &Context,
    at: usize,
) -> Result<bool> {
    let text = state.messages[at].text().to_owned();
    let cx = guard_context(core, state, ctx);
    let checked: Checked<String> = ctx
        .step("guard:earlier_input", || async {
            Ok::<_, Error>(core.guardrails.text(GuardStage::Input, "", &text, cx).await)
        })
        .await?;
    match checked {
        Checked::Passed(None) => Ok(true),
        Checked::Passed(Some(rewritten)) => {
            if let Some(prompt) = state.messages.get_mut(at) {
                *prompt = Message::user(rewritten);
            }
            Ok(true)
        }
        Checked::Blocked { guardrail, reason } => {
            emit_block(ctx, GuardStage::Input, &guardrail, &reason);
            state.messages.remove(at);
            state.run_start = state.run_start.saturating_sub(1);
            Ok(false)
        }
    }
}

/// Checks the answer the model just gave (the transcript's last message, also in
/// `state.output`): a rewrite replaces both, a block takes both away.
pub(super) async fn check_output(
    core: &AgentCore,
    state: &mut AgentState,
    ctx: &Context,
) -> Result<Rewritten> {
    let Some(answer) = state.output.clone().filter(|_| !core.guardrails.is_empty()) else {
        return Ok(Rewritten(false));
    };
    let cx = guard_context(core, state, ctx);
    let checked: Checked<String> = ctx
        .step("guard:output", || async {
            Ok::<_, Error>(
                core.guardrails
                    .text(GuardStage::Output, "", &answer, cx)
                    .await,
            )
        })
        .await?;
    match checked {
        Checked::Passed(None) => {
            show_checked(ctx, answer).await;
            Ok(Rewritten(false))
        }
        Checked::Passed(Some(rewritten)) => {
            if let Some(last) = state.messages.last_mut() {
                *last = Message::assistant(&rewritten);
            }
            state.output = Some(rewritten.clone());
            show_checked(ctx, rewritten).await;
            Ok(Rewritten(true))
        }
        Checked::Blocked { guardrail, reason } => {
            state.output = None;
            state.messages.pop();
            blocked(core, state, ctx, GuardStage::Output, guardrail, reason)?;
            Ok(Rewritten(false))
        }
    }
}

/// Whether the output guardrails rewrote the answer they checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Rewritten(pub(super) bool);

/// Checks the answer so far of a run that stopped before its answer (a turn limit, a
/// budget): the text of a reply that came with tool calls, which no guardrail saw. What
/// the output guardrails make of it is kept in the state as the run's output (see
/// [`AgentState::answer`]): the text, rewritten, or nothing when one blocked it, and shown
/// on the run's stream as one text chunk. A block does not change why the run stopped,
/// whatever the guardrails' [`OnBlock`].
pub(super) async fn check_answer_so_far(
    core: &AgentCore,
    state: &mut AgentState,
    ctx: &Context,
) -> Result<()> {
    if core.guardrails.is_empty() {
        return Ok(());
    }
    let Some(so_far) = state.answer_so_far().map(str::to_owned) else {
        return Ok(());
    };
    let cx = guard_context(core, state, ctx);
    let checked: Checked<String> = ctx
        .step("guard:answer_so_far", || async {
            Ok::<_, Error>(
                core.guardrails
                    .text(GuardStage::Output, "", &so_far, cx)
                    .await,
            )
        })
        .await?;
    let passed = match checked {
        Checked::Passed(None) => so_far,
        Checked::Passed(Some(rewritten)) => rewritten,
        Checked::Blocked { guardrail, reason } => {
            emit_block(ctx, GuardStage::Output, &guardrail, &reason);
            String::new()
        }
    };
    // The stream held the text back as the model gave it: it shows what passed, as it
    // shows a whole answer.
    if !passed.is_empty() && ctx.has_listener() {
        show_checked(ctx, passed.clone()).await;
    }
    state.checked_so_far = Some(passed);
    Ok(())
}

/// Streams an answer its guardrails passed (as they rewrote it), as one text chunk: an
/// agent with guardrails holds its answer's text back while the model streams it.
async fn show_checked(ctx: &Context, text: String) {
    if !ctx.has_listener() {
        return;
    }
    // A cancel stops the run after this step, as it would without a stream.
    let _ = ctx.event_room().await;
    AgentEvent::ModelChunk {
        chunk: crate::model::StreamChunk::Text { text },
    }
    .emit(ctx);
}

/// What a tool call's journaled step records: what the model reads, and the guardrail that
/// blocked the result, if one did. Journals written before guardrails (a two-element
/// array) still read.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct ToolStepOutcome {
    pub(super) content: String,
    pub(super) is_error: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) blocked: Option<(String, String)>,
}

/// What the guardrails said of a call: the call to run instead of it (a rewrite), or the
/// refusal the model reads.
pub(super) type CallVerdict = std::result::Result<Option<ToolCall>, String>;

/// The guardrails' verdict on each of a reply's calls, each journaled as its own step
/// (`guard:tool:<call id>`): a call that suspends for an approval carries on as it was
/// checked then, which is what the approver saw, and the guardrails are not asked again.
/// Empty when the agent has no guardrails.
pub(super) async fn check_tool_calls(
    core: &AgentCore,
    calls: &[ToolCall],
    cx: GuardContext<'_>,
    ctx: &Context,
) -> Result<Vec<CallVerdict>> {
    if core.guardrails.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<String> = calls
        .iter()
        .map(|c| ["guard:tool:", &c.id].concat())
        .collect();
    let steps = calls.iter().zip(&names).map(|(call, name)| {
        ctx.step(name, move || async move {
            Ok::<_, Error>(check_tool_call(core, call, cx, ctx).await)
        })
    });
    let verdicts = futures_util::future::join_all(steps).await;
    verdicts
        .into_iter()
        .map(|verdict| verdict.map_err(Error::from))
        .collect()
}

/// The call the tool host runs: the guardrails' rewrite of it, or `Err` with what the model
/// reads when a guardrail refused it.
async fn check_tool_call(
    core: &AgentCore,
    call: &ToolCall,
    cx: GuardContext<'_>,
    ctx: &Context,
) -> std::result::Result<Option<ToolCall>, String> {
    if core.guardrails.is_empty() {
        return Ok(None);
    }
    match core
        .guardrails
        .tool_call(&call.name, &call.arguments, cx)
        .await
    {
        Checked::Passed(None) => Ok(None),
        Checked::Passed(Some(arguments)) => Ok(Some(ToolCall {
            arguments,
            ..call.clone()
        })),
        Checked::Blocked { guardrail, reason } => {
            emit_block(ctx, GuardStage::ToolCall, &guardrail, &reason);
            // The call never reaches the tool host, which audits the calls it decides:
            // the refusal is audited here, with this journaled step.
            let detail =
                serde_json::json!({ "call_id": call.id, "decision": "deny", "reason": reason });
            let entry = AuditEntry::new(ctx.thread(), AuditKind::Decision, &call.name, detail);
            ctx.record_audit(entry.actor(Some(format!("guardrail:{guardrail}"))));
            Err(format!("blocked by guardrail {guardrail}: {reason}"))
        }
    }
}

/// Checks a tool's result; a blocked result is replaced by a note for the model.
pub(super) async fn check_tool_result(
    core: &AgentCore,
    tool: &str,
    mut outcome: ToolStepOutcome,
    cx: GuardContext<'_>,
) -> ToolStepOutcome {
    if core.guardrails.is_empty() {
        return outcome;
    }
    match core
        .guardrails
        .text(GuardStage::ToolResult, tool, &outcome.content, cx)
        .await
    {
        Checked::Passed(None) => {}
        Checked::Passed(Some(rewritten)) => outcome.content = rewritten,
        Checked::Blocked { guardrail, reason } => {
            outcome.content = format!("blocked by guardrail {guardrail}: {reason}");
            outcome.is_error = true;
            outcome.blocked = Some((guardrail, reason));
        }
    }
    outcome
}

/// Stops the run, or fails it, because `guardrail` blocked what it checked at `stage`.
pub(super) fn blocked(
    core: &AgentCore,
    state: &mut AgentState,
    ctx: &Context,
    stage: GuardStage,
    guardrail: String,
    reason: String,
) -> Result<()> {
    emit_block(ctx, stage, &guardrail, &reason);
    match core.guardrails.on_block {
        OnBlock::Stop => {
            state.stopped = Some(StopReason::Guardrail(guardrail));
            // A stopped run hands nothing off, though a sibling call of the reply that
            // was blocked asked to: the team stops with it.
            state.handoff = None;
            Ok(())
        }
        OnBlock::Fail => Err(AgentError::Guardrail {
            agent: core.name.clone(),
            guardrail,
            stage,
            reason,
        }
        .into()),
    }
}

fn emit_block(ctx: &Context, stage: GuardStage, guardrail: &str, reason: &str) {
    AgentEvent::GuardrailBlocked {
        guardrail: guardrail.to_owned(),
        stage: stage.as_str().to_owned(),
        reason: reason.to_owned(),
    }
    .emit(ctx);
}
