//! [`ContextPolicy`]: what an agent does when its conversation grows too long for the
//! model: snip the oldest part, or compact it into a summary.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::AgentCore;
use super::budget::Ran;
use super::rate_limit::call_model;
use super::react::Chunks;
use super::state::AgentState;
use crate::context::Context;
use crate::model::{Message, Model, ModelRequest, Role, Transcript, Usage};
use crate::tool::AgentEvent;
use crate::{Error, Result};

/// The default number of recent exchanges a snip or a compaction keeps word for word.
pub const DEFAULT_KEEP_RECENT: usize = 4;

/// What an agent does when its conversation passes a token threshold, checked before every
/// model turn (so a run whose tool results pile up is trimmed while it runs).
///
/// The conversation is measured in *exchanges*: a user message, or an assistant message
/// with the results of the tools it called. Cuts fall only between exchanges, so a tool
/// result never loses its call. The system prompt is not part of the conversation and is
/// always sent; the run's latest user message is always kept, so the model never loses the
/// question it is answering.
///
/// Tokens are estimated at four characters a token over the messages' text and tool
/// arguments: a guide, not a count of any model's tokenizer.
///
/// # Examples
///
/// ```
/// use loomflow::agent::{Agent, ContextPolicy};
/// use loomflow::model::ScriptedModel;
///
/// // Past 50,000 tokens, keep the last 6 exchanges and drop the rest.
/// let snip = ContextPolicy::snip().above_tokens(50_000).keep_recent(6);
/// // Past 50,000 tokens, summarize all but the last 4 exchanges in one model call.
/// let compact = ContextPolicy::compact().above_tokens(50_000);
/// let agent = Agent::builder("You help.")
///     .model(ScriptedModel::new([]))
///     .context_policy(compact)
///     .build();
/// # let _ = (snip, agent);
/// ```
#[derive(Clone)]
#[must_use]
pub struct ContextPolicy {
    strategy: Strategy,
    above_tokens: u64,
    keep_recent: usize,
}

#[derive(Clone)]
enum Strategy {
    Snip,
    Compact { summarizer: Option<Arc<dyn Model>> },
}

impl std::fmt::Debug for ContextPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextPolicy")
            .field("strategy", &self.strategy_name())
            .field("above_tokens", &self.above_tokens)
            .field("keep_recent", &self.keep_recent)
            .finish()
    }
}

impl ContextPolicy {
    /// Drops the oldest exchanges: no model call, cheap, and what is dropped is gone.
    /// The default threshold is 100,000 tokens.
    pub fn snip() -> Self {
        Self {
            strategy: Strategy::Snip,
            above_tokens: 100_000,
            keep_recent: DEFAULT_KEEP_RECENT,
        }
    }

    /// Replaces the oldest exchanges with a summary the agent's model writes (or the
    /// [`summarizer`](Self::summarizer)). The summary call is a journaled step: a resumed
    /// run reads it back instead of asking again. A summary call that fails leaves the
    /// conversation as it was (and is tried again at the next turn).
    pub fn compact() -> Self {
        Self {
            strategy: Strategy::Compact { summarizer: None },
            above_tokens: 100_000,
            keep_recent: DEFAULT_KEEP_RECENT,
        }
    }

    /// The threshold: the policy acts when the conversation is estimated above this many
    /// tokens.
    pub fn above_tokens(mut self, tokens: u64) -> Self {
        self.above_tokens = tokens;
        self
    }

    /// How many recent exchanges are kept word for word (default 4, at least 1).
    pub fn keep_recent(mut self, exchanges: usize) -> Self {
        self.keep_recent = exchanges.max(1);
        self
    }

    /// The model that writes compaction summaries (default: the agent's own); a smaller,
    /// cheaper model is usually enough. Does nothing for [`snip`](Self::snip).
    pub fn summarizer(mut self, model: impl Model + 'static) -> Self {
        if let Strategy::Compact { summarizer } = &mut self.strategy {
            *summarizer = Some(Arc::new(model));
        }
        self
    }

    fn strategy_name(&self) -> &'static str {
        match self.strategy {
            Strategy::Snip => "snip",
            Strategy::Compact { .. } => "compact",
        }
    }
}

/// The estimated tokens of a conversation: a quarter of its characters.
pub(crate) fn estimate_tokens<'a>(messages: impl IntoIterator<Item = &'a Message>) -> u64 {
    let chars: usize = messages
        .into_iter()
        .map(|m| {
            m.text().len()
                + m.tool_calls()
                    .iter()
                    .map(|c| c.name.len() + c.arguments.to_string().len())
                    .sum::<usize>()
        })
        .sum();
    (chars as u64).div_ceil(4)
}

/// Where this run's messages begin once the messages before `cut` are dropped (but the
/// `pinned` one) and `offset` messages (a summary, the pinned one) put before the rest: a
/// start past the cut moves with the rest; one before it moves to the pinned message when
/// that is the run's, or else to the rest.
fn run_start_after_cut(start: usize, cut: usize, pinned: Option<usize>, offset: usize) -> usize {
    match pinned {
        _ if start >= cut => start - cut + offset,
        Some(pinned) if pinned >= start => offset - 1,
        _ => offset,
    }
}

/// Where each exchange starts: every user and assistant message (tool results belong to
/// the assistant message before them).
fn exchange_starts(messages: &Transcript) -> Vec<usize> {
    messages
        .iter()
        .enumerate()
        .filter(|(_, m)| matches!(m.role(), Role::User | Role::Assistant | Role::System))
        .map(|(i, _)| i)
        .collect()
}

/// The split of `messages` a policy keeping `keep` exchanges makes: the index the kept part
/// starts at, and the latest user message when it falls in the dropped part. `None` when
/// nothing would be dropped.
fn split(messages: &Transcript, keep: usize) -> Option<(usize, Option<usize>)> {
    let starts = exchange_starts(messages);
    if starts.len() <= keep {
        return None;
    }
    let cut = starts[starts.len() - keep];
    // The question: a note asking the model to answer again is no question of its own.
    let latest_user = messages
        .iter()
        .rposition(|m| m.role() == Role::User && !super::output::is_retry_note(m));
    Some((cut, latest_user.filter(|&u| u < cut)))
}

/// Applies the agent's policy to the run's conversation, before a model turn.
pub(super) async fn manage(core: &AgentCore, state: &mut AgentState, ctx: &Context) -> Result<()> {
    let Some(policy) = &core.context_policy else {
        return Ok(());
    };
    if estimate_tokens(&state.messages) <= policy.above_tokens {
        return Ok(());
    }
    let Some((mut cut, pinned)) = split(&state.messages, policy.keep_recent) else {
        return Ok(());
    };
    let snipping = matches!(policy.strategy, Strategy::Snip);
    if snipping && pinned.is_none() {
        // A snipped conversation starts with a user message, as providers require: the
        // cut moves on to the next one (there is one: the latest is past the cut).
        if let Some(next) = state
            .messages
            .iter()
            .skip(cut)
            .position(|m| m.role() == Role::User)
        {
            cut += next;
        }
    }
    let older: Vec<Message> = state
        .messages
        .iter()
        .take(cut)
        .enumerate()
        .filter(|(i, _)| Some(*i) != pinned)
        .map(|(_, m)| m.clone())
        .collect();
    // Nothing to take out, or only an earlier summary: trimming again would change nothing
    // (or summarize the summary at every turn).
    if older.is_empty() || older.iter().all(is_summary) {
        return Ok(());
    }
    let dropped = older.len();
    let summary = match &policy.strategy {
        Strategy::Snip => None,
        Strategy::Compact { summarizer } => {
            let model = summarizer.as_ref().unwrap_or(&core.model);
            let user = state.user.as_deref();
            // A rate limiter that fails at once (`RateLimitMode::Fail`) fails the run here
            // too, with its own error.
            let ran = Ran::default();
            let compacted: Compacted = ctx
                .step("compact", || {
                    ran.mark();
                    summarize(core, model.as_ref(), &older, user, ctx)
                })
                .await
                .map_err(super::rate_limit::surface)?;
            let (summary, usage, answered) = compacted.into_parts();
            // What the summary cost counts as the run's other calls do: in its usage, its
            // cost (by the model's name, or else the one the provider reported), and the
            // budgets.
            if usage != Usage::default() {
                state.usage += usage;
                let answered = answered.as_deref();
                let cost = super::react::add_cost(core, model.name(), state, &usage, answered);
                if ran.happened() {
                    core.budget.record(state.user.as_deref(), usage, cost);
                }
            }
            match summary {
                Some(summary) => Some(summary),
                None => return Ok(()), // the summary failed: the conversation stays whole
            }
        }
    };
    let mut kept = Transcript::new();
    if let Some(summary) = summary {
        kept.push(Message::user(format!("{SUMMARY_HEADING}\n{summary}")));
    }
    if let Some(user) = pinned {
        kept.push(state.messages[user].clone());
    }
    let offset = kept.len();
    kept.append_shared(&state.messages.tail(cut));
    state.messages = kept;
    state.run_start = run_start_after_cut(state.run_start, cut, pinned, offset);
    AgentEvent::ContextTrimmed {
        strategy: policy.strategy_name().to_owned(),
        removed: dropped,
    }
    .emit(ctx);
    tracing::info!(
        agent = %core.name,
        strategy = policy.strategy_name(),
        removed = dropped,
        "conversation trimmed to fit the context policy"
    );
    Ok(())
}

/// How a compaction's summary begins.
const SUMMARY_HEADING: &str = "[Summary of the earlier conversation]";

/// Whether `message` is a compaction's summary.
fn is_summary(message: &Message) -> bool {
    message.role() == Role::User && message.text().starts_with(SUMMARY_HEADING)
}

/// What the journaled `compact` step records: the summary, when the call gave one, the
/// tokens the call used, and the model the provider said answered. A journal written before
/// the usage was kept (the summary alone) still reads, as a call that used none.
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum Compacted {
    Counted {
        summary: Option<String>,
        usage: Usage,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answered: Option<String>,
    },
    Uncounted(Option<String>),
}

impl Compacted {
    fn into_parts(self) -> (Option<String>, Usage, Option<String>) {
        match self {
            Self::Counted {
                summary,
                usage,
                answered,
            } => (summary, usage, answered),
            Self::Uncounted(summary) => (summary, Usage::default(), None),
        }
    }
}

/// Asks `model` for a summary of `messages`, through the agent's rate limiter as any of its
/// calls; no summary when the call fails or gives an empty one. A limiter that refuses the
/// call (`RateLimitMode::Fail`) is the step's error, as it is for the agent's own calls.
async fn summarize(
    core: &AgentCore,
    model: &dyn Model,
    messages: &[Message],
    user: Option<&str>,
    ctx: &Context,
) -> Result<Compacted, Error> {
    let mut transcript = String::new();
    for message in messages {
        let role = match message.role() {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool result",
        };
        transcript.push_str(role);
        transcript.push_str(": ");
        transcript.push_str(message.text());
        for call in message.tool_calls() {
            transcript.push_str(&format!("\n  calls {}({})", call.name, call.arguments));
        }
        transcript.push('\n');
    }
    let request = ModelRequest::new(vec![
        Message::system(
            "You condense conversations. Write a short summary of the conversation you are \
             given that keeps what the assistant needs to carry on: the user's goals, facts \
             learned, tool results that matter, decisions made, and what is still to do. \
             Reply with the summary only.",
        ),
        Message::user(transcript),
    ]);
    // The summary is for the agent, not the user: its chunks are not streamed.
    let called = call_model(core, model, request, user, ctx, Chunks::Withhold).await;
    let response = match called {
        Ok(response) => response,
        Err(error @ Error::Agent(super::AgentError::RateLimited { .. })) => return Err(error),
        Err(error) => {
            tracing::warn!(model = model.name(), %error, "the summary failed; nothing is compacted");
            return Ok(Compacted::Counted {
                summary: None,
                usage: Usage::default(),
                answered: None,
            });
        }
    };
    let summary = if response.content.trim().is_empty() {
        tracing::warn!(
            model = model.name(),
            "the summary was empty; nothing is compacted"
        );
        None
    } else {
        Some(response.content)
    };
    Ok(Compacted::Counted {
        summary,
        usage: response.usage,
        answered: response.model,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolCall;
    use serde_json::json;

    /// Messages 0..10, cut at 6: the rest (6..) comes after `offset` messages.
    #[test]
    fn the_runs_start_moves_with_a_cut() {
        // Past the cut: moves with the rest, behind a summary and a pinned message.
        assert_eq!(run_start_after_cut(7, 6, Some(3), 2), 3);
        assert_eq!(run_start_after_cut(6, 6, None, 0), 0);
        // Before the cut, its prompt pinned: the pinned message, after the summary.
        assert_eq!(run_start_after_cut(3, 6, Some(3), 2), 1);
        assert_eq!(run_start_after_cut(3, 6, Some(3), 1), 0);
        // Before the cut, with only an earlier run's message pinned: the rest.
        assert_eq!(run_start_after_cut(4, 6, Some(2), 2), 2);
        assert_eq!(run_start_after_cut(4, 6, None, 1), 1);
    }

    #[test]
    fn a_compaction_journaled_before_its_usage_was_kept_still_reads() {
        let old: Compacted = serde_json::from_value(json!("the summary")).unwrap();
        assert_eq!(
            old.into_parts(),
            (Some("the summary".to_owned()), Usage::default(), None)
        );
        let failed: Compacted = serde_json::from_value(json!(null)).unwrap();
        assert_eq!(failed.into_parts(), (None, Usage::default(), None));
        let usage = Usage {
            input_tokens: 7,
            ..Usage::default()
        };
        let new = Compacted::Counted {
            summary: Some("s".to_owned()),
            usage,
            answered: Some("gpt-4o-2024".to_owned()),
        };
        let read: Compacted = serde_json::from_value(serde_json::to_value(&new).unwrap()).unwrap();
        assert_eq!(
            read.into_parts(),
            (Some("s".to_owned()), usage, Some("gpt-4o-2024".to_owned()))
        );
    }

    fn tool_loop() -> Transcript {
        let call = |id: &str| {
            Message::assistant_tool_calls(vec![ToolCall::new(id, "search", json!({ "q": id }))])
        };
        Transcript::from([
            Message::user("first question"),
            Message::assistant("first answer"),
            Message::user("second question"),
            call("a"),
            Message::tool_result("a", "result a"),
            call("b"),
            Message::tool_result("b", "result b"),
            call("c"),
            Message::tool_result("c", "result c"),
        ])
    }

    #[test]
    fn cuts_fall_between_exchanges_so_no_tool_result_loses_its_call() {
        let messages = tool_loop();
        for keep in 1..6 {
            let (cut, _) = split(&messages, keep).unwrap();
            assert_ne!(messages[cut].role(), Role::Tool, "keep {keep}");
        }
        assert_eq!(split(&messages, 6), None, "six exchanges: nothing to drop");
    }

    #[test]
    fn the_latest_user_message_is_pinned_when_a_tool_loop_outgrows_the_window() {
        let messages = tool_loop();
        assert_eq!(split(&messages, 2), Some((5, Some(2))));
        assert_eq!(split(&messages, 4), Some((2, None)));
    }

    /// A note asking for an answer that fits the output schema is not the question: the
    /// question stays pinned, and a snip does not start the conversation at the note.
    #[test]
    fn a_retry_note_is_not_taken_for_the_question() {
        let mut messages = tool_loop();
        messages.push(Message::assistant("not json"));
        messages.push(super::super::output::retry_note("expected an object"));
        assert_eq!(split(&messages, 2), Some((9, Some(2))));
    }

    #[test]
    fn tokens_are_estimated_from_text_and_tool_arguments() {
        assert_eq!(estimate_tokens(&[Message::user("abcdefgh")]), 2);
        let call = Message::assistant_tool_calls(vec![ToolCall::new("x", "ab", json!({}))]);
        assert_eq!(estimate_tokens(&[call]), 1);
    }
}
