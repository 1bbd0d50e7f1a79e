//! An agent's long-term memory: what it recalls into a run's prompt, and what it extracts
//! from a run's conversation when asked to. Both are journaled steps of the `model` node.

use std::sync::Arc;

use super::AgentCore;
use super::state::AgentState;
use crate::Result;
use crate::context::Context;
use crate::graph::RunError;
use crate::memory::{
    Memory, MemoryId, MemoryOptions, Scope, extract_after_run, recall_for_prompt, run_scopes,
};
use crate::model::{Role, Usage};

/// The memory an agent was built with.
#[derive(Clone)]
pub(crate) struct AgentMemory {
    pub(crate) store: Arc<dyn Memory>,
    pub(crate) options: MemoryOptions,
}

/// At a run's first model turn: recalls what matches the user's last message, from the
/// run's user, session and agent scopes, into `state.recalled` (empty when nothing fits).
pub(super) async fn recall(core: &AgentCore, state: &mut AgentState, ctx: &Context) -> Result<()> {
    let Some(memory) = &core.memory else {
        return Ok(());
    };
    if state.recalled.is_some() {
        return Ok(());
    }
    let query = state
        .messages
        .iter()
        .rev()
        .find(|m| m.role() == Role::User)
        .map(|m| m.text().to_owned())
        .unwrap_or_default();
    let scopes = run_scopes(&core.name, ctx.thread(), state.user.as_deref());
    let recalled: String = ctx
        .step("memory:recall", || {
            recall_for_prompt(&*memory.store, &memory.options, &scopes, &query)
        })
        .await?;
    state.recalled = Some(recalled);
    Ok(())
}

/// After the run's answer, when extraction is on: one model call picks the durable facts of
/// the conversation, remembered for the run's user (or, without one, its session).
pub(super) async fn extract(core: &AgentCore, state: &mut AgentState, ctx: &Context) -> Result<()> {
    let Some(memory) = core.memory.as_ref().filter(|m| m.options.extract) else {
        return Ok(());
    };
    let scope = match &state.user {
        Some(user) if !user.trim().is_empty() => Scope::user(user),
        _ => Scope::session(ctx.thread()),
    };
    let messages = &state.messages;
    let extracted: std::result::Result<(Vec<MemoryId>, Usage), RunError> = ctx
        .step("memory:extract", || {
            extract_after_run(
                &*memory.store,
                core.model.as_ref(),
                &scope,
                ctx.thread(),
                messages,
            )
        })
        .await;
    let (_, usage) = match extracted {
        Ok(extracted) => extracted,
        // Extraction is a courtesy: a model or memory failure leaves the answer standing.
        Err(RunError::StepFailed { source, .. }) => {
            tracing::warn!(
                agent = %core.name,
                session = %ctx.thread(),
                error = %source,
                "extracting facts after the run failed; the run's answer stands"
            );
            return Ok(());
        }
        Err(error) => return Err(error.into()),
    };
    state.usage += usage;
    let cost = super::react::add_cost(core, state, &usage, None);
    core.budget.record(state.user.as_deref(), usage, cost);
    Ok(())
}
