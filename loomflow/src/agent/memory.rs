//! An agent's long-term memory: what it recalls into a run's prompt, and what it extracts
//! from a run's conversation when asked to. Both are journaled steps of the `model` node.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::AgentCore;
use super::budget::Ran;
use super::rate_limit::call_model;
use super::react::Chunks;
use super::state::AgentState;
use crate::Result;
use crate::context::Context;
use crate::graph::RunError;
use crate::memory::{
    Memory, MemoryId, MemoryOptions, Scope, extraction_request, memory_user, recall_for_prompt,
    remember_extracted, run_scopes,
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

/// What the journaled extraction call records: its answer, the tokens it used, and the
/// model the provider said answered. A journal written before the model was kept (the
/// answer and the tokens, as a pair) still reads.
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum Extracted {
    Answered {
        answer: String,
        usage: Usage,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answered: Option<String>,
    },
    Pair(String, Usage),
}

impl Extracted {
    fn into_parts(self) -> (String, Usage, Option<String>) {
        match self {
            Self::Answered {
                answer,
                usage,
                answered,
            } => (answer, usage, answered),
            Self::Pair(answer, usage) => (answer, usage, None),
        }
    }
}

/// After the run's answer, when extraction is on: one model call picks the durable facts of
/// the conversation, remembered for the run's user (or, without one, its session).
pub(super) async fn extract(core: &AgentCore, state: &mut AgentState, ctx: &Context) -> Result<()> {
    let Some(memory) = core.memory.as_ref().filter(|m| m.options.extract) else {
        return Ok(());
    };
    let scope = match memory_user(state.user.as_deref()) {
        Some(user) => Scope::user(user),
        None => Scope::session(ctx.thread()),
    };
    // Through the agent's own model path: a `chat` span, the rate limiter, no chunks
    // streamed to the run's listener (the answer is JSON for the memory, not for the user).
    // This run's messages only: the session's earlier runs were extracted after their own
    // answers, and may have acted for another user.
    let request = extraction_request(state.messages.iter().skip(state.run_start));
    let user = state.user.as_deref();
    let ran = Ran::default();
    // The answer is journaled before anything is remembered: a run carried on after a crash
    // remembers the same facts, which `remember_extracted` finds already kept, rather than
    // asking again for facts that may come back worded otherwise.
    let extracted: std::result::Result<Extracted, RunError> = ctx
        .step("memory:extract:answer", || async {
            ran.mark();
            let response =
                call_model(core, &*core.model, request, user, ctx, Chunks::Withhold).await?;
            Ok::<_, crate::Error>(Extracted::Answered {
                answer: response.content,
                usage: response.usage,
                answered: response.model,
            })
        })
        .await;
    let (answer, usage, answered) = match extracted {
        Ok(extracted) => extracted.into_parts(),
        Err(error) => return courtesy(core, ctx, error),
    };
    state.usage += usage;
    // Priced as the run's other calls are: by the model's name, or else by the one the
    // provider said answered.
    let answered = answered.as_deref();
    let cost = super::react::add_cost(core, core.model.name(), state, &usage, answered);
    if ran.happened() {
        core.budget.record(state.user.as_deref(), usage, cost);
    }
    let remembered: std::result::Result<Vec<MemoryId>, RunError> = ctx
        .step("memory:extract:remember", || {
            remember_extracted(&*memory.store, &scope, ctx.thread(), &answer)
        })
        .await;
    match remembered {
        Ok(_) => Ok(()),
        Err(error) => courtesy(core, ctx, error),
    }
}

/// Extraction is a courtesy: a model or memory failure leaves the run's answer standing,
/// and is logged. Anything else (a suspension, a store failure) is the run's.
fn courtesy(core: &AgentCore, ctx: &Context, error: RunError) -> Result<()> {
    match error {
        RunError::StepFailed { source, .. } => {
            tracing::warn!(
                agent = %core.name,
                session = %ctx.thread(),
                error = %crate::error_chain::ErrorChain(&*source),
                "extracting facts after the run failed; the run's answer stands"
            );
            Ok(())
        }
        error => Err(error.into()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// An extraction journaled before the answering model was kept, as a pair, reads back;
    /// one journaled now keeps the model.
    #[test]
    fn an_extraction_journaled_as_a_pair_still_reads() {
        let usage = Usage {
            input_tokens: 3,
            ..Usage::default()
        };
        let old = serde_json::to_value(("[]", usage)).unwrap();
        let (answer, read, answered) = serde_json::from_value::<Extracted>(old)
            .unwrap()
            .into_parts();
        assert_eq!((answer.as_str(), read, answered), ("[]", usage, None));
        let new = Extracted::Answered {
            answer: "[]".to_owned(),
            usage,
            answered: Some("gpt-x".to_owned()),
        };
        let new = serde_json::to_value(new).unwrap();
        let (_, _, answered) = serde_json::from_value::<Extracted>(new)
            .unwrap()
            .into_parts();
        assert_eq!(answered.as_deref(), Some("gpt-x"));
    }
}
