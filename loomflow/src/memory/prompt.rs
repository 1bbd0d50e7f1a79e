//! What an agent does with its memory: recall into the prompt within a token budget, and
//! (opt-in) extract memories from a finished run.

use serde_json::json;

use super::{Memory, MemoryError, MemoryId, MemoryItem, Scope};
use crate::model::{Message, Model, ModelRequest, Role, Transcript, Usage};

/// How an agent uses its memory (see [`AgentBuilder::memory_options`](crate::agent::AgentBuilder::memory_options)).
///
/// # Examples
///
/// ```
/// use loomflow::memory::MemoryOptions;
///
/// let options = MemoryOptions::default().token_budget(300).with_tools(true);
/// assert_eq!(options.recall_limit, 5);
/// assert!(!options.extract);
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct MemoryOptions {
    /// How many items are recalled from each scope at the start of a run (default 5; `0`
    /// turns recall into the prompt off).
    pub recall_limit: usize,
    /// The most tokens the recalled items may take in the prompt (default 400), counted
    /// as a quarter of their characters; the best matches go in first.
    pub token_budget: usize,
    /// Whether the model gets `remember` and `recall` tools (default `false`).
    pub tools: bool,
    /// Whether the model's `remember` tool may write to the agent's own scope, which is
    /// recalled into every user's prompt (default `false`: a user, or text injected into a
    /// conversation, must not put words into other users' prompts).
    pub agent_writes: bool,
    /// Whether, after each run's answer, a model call extracts durable facts from the
    /// conversation and remembers them for the run's user (or session) (default `false`).
    pub extract: bool,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        Self {
            recall_limit: 5,
            token_budget: 400,
            tools: false,
            agent_writes: false,
            extract: false,
        }
    }
}

impl MemoryOptions {
    /// Sets [`recall_limit`](Self::recall_limit).
    #[must_use]
    pub fn recall_limit(mut self, limit: usize) -> Self {
        self.recall_limit = limit;
        self
    }

    /// Sets [`token_budget`](Self::token_budget).
    #[must_use]
    pub fn token_budget(mut self, tokens: usize) -> Self {
        self.token_budget = tokens;
        self
    }

    /// Sets [`tools`](Self::tools).
    #[must_use]
    pub fn with_tools(mut self, yes: bool) -> Self {
        self.tools = yes;
        self
    }

    /// Sets [`agent_writes`](Self::agent_writes).
    #[must_use]
    pub fn agent_writes(mut self, yes: bool) -> Self {
        self.agent_writes = yes;
        self
    }

    /// Sets [`extract`](Self::extract).
    #[must_use]
    pub fn extract_after_run(mut self, yes: bool) -> Self {
        self.extract = yes;
        self
    }
}

/// A rough token count: a quarter of the characters, rounded up.
fn tokens(text: &str) -> usize {
    text.chars().count().div_ceil(4)
}

/// The items of `scopes` that best match `query`, best first across scopes, as many as fit
/// `budget` tokens, as a block for the system prompt; empty when nothing matches.
pub(crate) async fn recall_for_prompt(
    memory: &dyn Memory,
    options: &MemoryOptions,
    scopes: &[Scope],
    query: &str,
) -> Result<String, MemoryError> {
    if options.recall_limit == 0 {
        return Ok(String::new());
    }
    let mut found: Vec<MemoryItem> = Vec::new();
    for scope in scopes {
        found.extend(memory.recall(scope, query, options.recall_limit).await?);
    }
    found.sort_by(|a, b| b.score.total_cmp(&a.score));
    let heading = "What you remember from earlier conversations (it may be out of date):";
    let mut used = tokens(heading);
    let mut lines = Vec::new();
    for item in found {
        let line = format!("- ({}) {}", item.scope.kind(), item.text.trim());
        let cost = tokens(&line);
        if used + cost > options.token_budget {
            continue; // a shorter item further down may still fit
        }
        used += cost;
        lines.push(line);
    }
    if lines.is_empty() {
        return Ok(String::new());
    }
    Ok(format!("{heading}\n{}", lines.join("\n")))
}

const EXTRACT: &str = "You maintain a long-term memory about the user. From the conversation \
below, pick the durable facts worth remembering in later conversations: preferences, \
circumstances, decisions, commitments. Skip small talk and anything only true for this \
conversation. Answer with only a JSON array of short, self-contained statements, or [] if \
nothing is worth remembering.";

/// Asks `model` for the durable facts of `messages` and remembers the new ones under
/// `scope`. An answer that is not a JSON array of strings remembers nothing (and is
/// logged). Returns the new items' ids and the tokens the call used.
pub(crate) async fn extract_after_run(
    memory: &dyn Memory,
    model: &dyn Model,
    scope: &Scope,
    session: &str,
    messages: &Transcript,
) -> crate::Result<(Vec<MemoryId>, Usage)> {
    let transcript: Vec<String> = messages
        .iter()
        .filter(|m| matches!(m.role(), Role::User | Role::Assistant) && !m.text().is_empty())
        .map(|m| format!("{:?}: {}", m.role(), m.text()))
        .collect();
    let request = ModelRequest::new(vec![
        Message::system(EXTRACT),
        Message::user(transcript.join("\n")),
    ]);
    let response = model.complete(request).await?;
    let Some(facts) = string_array(&response.content) else {
        tracing::warn!(%scope, answer = %response.content, "memory extraction: the answer is not a JSON array of strings; nothing remembered");
        return Ok((Vec::new(), response.usage));
    };
    let mut ids = Vec::new();
    for fact in facts.iter().map(|f| f.trim()).filter(|f| !f.is_empty()) {
        let known = memory.recall(scope, fact, 3).await?;
        if known
            .iter()
            .any(|k| k.text.trim().eq_ignore_ascii_case(fact))
        {
            continue;
        }
        let metadata = json!({ "source": "extraction", "session": session });
        ids.push(memory.remember(scope, fact, metadata).await?);
    }
    Ok((ids, response.usage))
}

/// A JSON array of strings, also when a model wraps it in a code fence.
pub(crate) fn string_array(answer: &str) -> Option<Vec<String>> {
    let trimmed = answer.trim();
    let start = trimmed.find('[')?;
    let end = trimmed.rfind(']')?;
    serde_json::from_str(trimmed.get(start..=end)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_are_found_inside_fences() {
        assert_eq!(
            string_array("```json\n[\"a\", \"b\"]\n```"),
            Some(vec!["a".to_owned(), "b".to_owned()])
        );
        assert_eq!(string_array("[]"), Some(Vec::new()));
        assert_eq!(string_array("nothing to add"), None);
        assert_eq!(string_array("[1, 2]"), None);
    }
}
