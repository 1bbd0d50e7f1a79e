//! What an agent does with its memory: recall into the prompt within a token budget, and
//! (opt-in) extract memories from a finished run.

use serde_json::json;

use super::{Memory, MemoryError, MemoryId, MemoryItem, Scope};
use crate::model::{Message, ModelRequest, Role};

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
    /// Whether the model gets `remember` and `recall` tools (default `false`). The agent's
    /// permission policy allows them whatever its default, unless it has a rule for their
    /// names.
    pub tools: bool,
    /// Whether the model's `remember` tool may write to the agent's own scope, which is
    /// recalled into every user's prompt (default `false`: a user, or text injected into a
    /// conversation, must not put words into other users' prompts). The notes are filed
    /// under the agent's name, so such an agent must be given one (`AgentBuilder::name`).
    pub agent_writes: bool,
    /// Whether, after each run's answer, a model call extracts durable facts from the run's
    /// part of the conversation (its prompt onwards; a session's earlier runs were read
    /// after their own answers) and remembers them for the run's user (or session)
    /// (default `false`).
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
    super::matching::rank_across_scopes(&mut found);
    let heading = "What you remember from earlier conversations (it may be out of date):";
    let mut used = tokens(heading);
    let mut lines = Vec::new();
    for item in found {
        let line = format!("- ({}) {}", item.scope.kind(), item.text.trim());
        let cost = tokens(&line);
        // A text kept twice (stored before copies were refused) is shown once, as
        // `holds_text` tells copies apart: ASCII letters in any case.
        let shown = lines.iter().any(|l: &String| l.eq_ignore_ascii_case(&line));
        if used + cost > options.token_budget || shown {
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

/// The model request that asks for the durable facts of `messages` (the user's and the
/// assistant's text, in order).
pub(crate) fn extraction_request<'a>(
    messages: impl IntoIterator<Item = &'a Message>,
) -> ModelRequest {
    let transcript: Vec<String> = messages
        .into_iter()
        .filter(|m| matches!(m.role(), Role::User | Role::Assistant) && !m.text().is_empty())
        .map(|m| format!("{:?}: {}", m.role(), m.text()))
        .collect();
    ModelRequest::new(vec![
        Message::system(EXTRACT),
        Message::user(transcript.join("\n")),
    ])
}

/// Remembers under `scope` the facts of an extraction's `answer` that `scope` does not hold
/// yet, and returns their ids. An answer that is not a JSON array of strings remembers
/// nothing and is logged by its length only: it is the model's completion, which must not
/// reach a trace that records no content.
pub(crate) async fn remember_extracted(
    memory: &dyn Memory,
    scope: &Scope,
    session: &str,
    answer: &str,
) -> Result<Vec<MemoryId>, MemoryError> {
    let facts = match parse_string_array(answer) {
        Ok(facts) => facts,
        Err(problem) => {
            tracing::warn!(
                %scope,
                answer_chars = answer.chars().count(),
                problem,
                "memory extraction: the answer is not a JSON array of strings; nothing remembered"
            );
            return Ok(Vec::new());
        }
    };
    let mut ids = Vec::new();
    for fact in facts.iter().map(|f| f.trim()).filter(|f| !f.is_empty()) {
        // A fact the memory would refuse (too long, a NUL) is left out, not the ones after it.
        if let Err(refused) = super::text::check_text(scope, fact) {
            tracing::warn!(%scope, %refused, "memory extraction: a fact left out");
            continue;
        }
        // Looked up as it is: a recall's first hits need not hold it (items that repeat a
        // word of it rank above), and a fact of common words alone recalls nothing.
        if memory.holds_text(scope, fact).await? {
            continue;
        }
        let metadata = json!({ "source": "extraction", "session": session });
        ids.push(memory.remember(scope, fact, metadata).await?);
    }
    Ok(ids)
}

/// A JSON array of strings, also when a model wraps it in a code fence.
pub(crate) fn string_array(answer: &str) -> Option<Vec<String>> {
    parse_string_array(answer).ok()
}

/// [`string_array`], or why not, in words that quote nothing of the answer (serde's own
/// messages can quote the offending value).
///
/// The first array of strings the answer holds, from any of its `[`: a preface or a note
/// around it may hold brackets of its own (`Here is the list [JSON]: [...]`).
fn parse_string_array(answer: &str) -> Result<Vec<String>, String> {
    let mut first_error = None;
    for (start, _) in answer.match_indices('[') {
        let mut values = serde_json::Deserializer::from_str(&answer[start..]).into_iter();
        match values.next() {
            Some(Ok(array)) => return Ok(array),
            Some(Err(e)) => {
                first_error.get_or_insert_with(|| {
                    format!(
                        "{:?} error at line {} column {} of the array",
                        e.classify(),
                        e.line(),
                        e.column()
                    )
                });
            }
            None => {}
        }
    }
    Err(first_error.unwrap_or_else(|| "no JSON array".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One fact the memory refuses (a NUL in it) is left out; the facts after it are kept.
    /// Before, it ended the extraction with the memory's error, and those after it were lost.
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn a_fact_the_memory_refuses_does_not_stop_the_others() {
        let Ok(memory) = super::super::SqliteMemory::in_memory() else {
            panic!("an in-memory SQLite memory")
        };
        let scope = Scope::user("ada");
        let answer = r#"["Likes tea", "bad\u0000fact", "Lives in Lyon"]"#;
        let kept = remember_extracted(&memory, &scope, "s", answer).await;
        assert_eq!(kept.map(|ids| ids.len()).ok(), Some(2));
        let texts = memory.list(&scope, 10).await.unwrap_or_default();
        let mut texts: Vec<&str> = texts.iter().map(|item| item.text.as_str()).collect();
        texts.sort_unstable();
        assert_eq!(texts, ["Likes tea", "Lives in Lyon"]);
    }

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

    /// Brackets of a preface or a note around the array are not taken for it.
    #[test]
    fn an_array_is_found_past_other_brackets() {
        let ab = Some(vec!["a".to_owned(), "b".to_owned()]);
        assert_eq!(string_array("Here is the list [JSON]: [\"a\", \"b\"]"), ab);
        assert_eq!(string_array("[\"a\", \"b\"] (as asked [1])"), ab);
    }

    #[test]
    fn why_an_answer_is_not_an_array_quotes_none_of_it() {
        for answer in ["my SECRET", "[\"SECRET\", 4111]", "[SECRET]", "] SECRET ["] {
            let problem = parse_string_array(answer).unwrap_err();
            assert!(
                !problem.contains("SECRET") && !problem.contains("4111"),
                "{problem}"
            );
        }
    }
}
