//! The `remember` and `recall` tools an agent's model may be given.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Memory, MemoryError, MemoryOptions, Scope};
use crate::error_chain::ErrorChain;
use crate::graph::BoxFuture;
use crate::tool::{Tool, ToolContext, ToolError, ToolSpec};

/// Whether memory can keep a scope of this id: not blank, not over
/// [`MAX_SCOPE_ID_BYTES`](super::MAX_SCOPE_ID_BYTES), no NUL ([`Scope::check`]'s rules;
/// the kind does not matter to them). Such a scope holds nothing, and a recall in it is
/// refused.
fn keepable(id: &str) -> bool {
    super::Scope::session(id).check().is_ok()
}

/// The run's user as memory sees it: a user id memory cannot keep (blank, too long, or
/// holding a NUL) is
/// no user, so what would be the user's is kept with the session (recall, extraction and
/// the `remember` tool alike).
pub(crate) fn memory_user(user: Option<&str>) -> Option<&str> {
    user.filter(|u| keepable(u))
}

/// The scopes a run reads: its user's (when it has one), its session's (when memory can
/// keep its id), its agent's.
pub(crate) fn run_scopes(agent: &str, session: &str, user: Option<&str>) -> Vec<Scope> {
    let mut scopes = Vec::with_capacity(3);
    if let Some(user) = memory_user(user) {
        scopes.push(Scope::user(user));
    }
    if keepable(session) {
        scopes.push(Scope::session(session));
    }
    scopes.push(Scope::agent(agent));
    scopes
}

/// The `remember` and `recall` tools for the agent `agent`.
pub(crate) fn memory_tools(
    memory: &Arc<dyn Memory>,
    agent: &str,
    options: &MemoryOptions,
) -> [Arc<dyn Tool>; 2] {
    let (abouts, whose) = if options.agent_writes {
        (
            json!(["user", "session", "agent"]),
            "the user's (default), this conversation's, or your own (shared with everyone \
             you serve)",
        )
    } else {
        (
            json!(["user", "session"]),
            "the user's (default) or this conversation's",
        )
    };
    let remember = Remember {
        spec: ToolSpec::new(
            "remember",
            format!(
                "Store a short, self-contained fact in long-term memory, to recall in later \
                 conversations. `about` says whose memory: {whose}."
            ),
            json!({
                "type": "object",
                "properties": {
                    "text": { "type": "string", "description": "The fact, as one sentence" },
                    "about": { "type": "string", "enum": abouts }
                },
                "required": ["text"]
            }),
        ),
        memory: Arc::clone(memory),
        agent: agent.to_owned(),
        agent_writes: options.agent_writes,
    };
    let recall = Recall {
        spec: ToolSpec::new(
            "recall",
            "Search long-term memory (the user's, this conversation's and your own) for \
             facts about a topic. Returns the best matches first.",
            json!({
                "type": "object",
                "properties": {
                    "query": { "type": "string", "description": "Words to look for" },
                    "k": { "type": "integer", "minimum": 1, "maximum": 50 }
                },
                "required": ["query"]
            }),
        ),
        memory: Arc::clone(memory),
        agent: agent.to_owned(),
        default_k: options.recall_limit.max(1),
    };
    [Arc::new(remember), Arc::new(recall)]
}

struct Remember {
    spec: ToolSpec,
    memory: Arc<dyn Memory>,
    agent: String,
    /// Whether it may write to the agent's scope ([`MemoryOptions::agent_writes`]).
    agent_writes: bool,
}

impl Tool for Remember {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call<'a>(
        &'a self,
        arguments: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move {
            let failed = |message: String| ToolError::Failed {
                tool: self.spec.name.clone(),
                message,
            };
            let text = arguments["text"].as_str().unwrap_or_default();
            let user = memory_user(ctx.user.as_deref());
            let scope = match (arguments["about"].as_str().unwrap_or("user"), user) {
                ("user", Some(user)) => Scope::user(user),
                // A run without a user keeps "user" facts with its session.
                ("user", None) | ("session", _) => Scope::session(&ctx.session),
                ("agent", _) if self.agent_writes => Scope::agent(&self.agent),
                ("agent", _) => {
                    return Err(ToolError::Denied {
                        tool: self.spec.name.clone(),
                        reason: "the agent's shared memory is read-only to the model \
                                 (MemoryOptions::agent_writes)"
                            .to_owned(),
                    });
                }
                (other, _) => {
                    return Err(ToolError::InvalidArguments {
                        tool: self.spec.name.clone(),
                        message: format!(
                            "field `about`: expected user, session or agent, got {other}"
                        ),
                    });
                }
            };
            // The model's text that cannot be kept is its argument's fault, said before the
            // memory is asked anything about it.
            let wrong_text = |e: MemoryError| ToolError::InvalidArguments {
                tool: self.spec.name.clone(),
                message: format!("field `text`: {e}"),
            };
            super::text::check_text(&scope, text).map_err(wrong_text)?;
            // A fact kept already (the model said it twice, or the call ran again after a
            // crash) is not stored twice: copies would crowd the prompt's recall.
            let held = self.memory.holds_text(&scope, text).await;
            if held.map_err(|e| failed(ErrorChain(&e).to_string()))? {
                return Ok(json!({ "already_remembered": true, "about": scope.kind() }));
            }
            let metadata = json!({ "source": "tool", "session": ctx.session });
            let id = self
                .memory
                .remember(&scope, text, metadata)
                .await
                .map_err(|e| match e {
                    MemoryError::EmptyText { .. }
                    | MemoryError::TextTooLong { .. }
                    | MemoryError::NulCharacter { field: "text", .. } => wrong_text(e),
                    e => failed(ErrorChain(&e).to_string()),
                })?;
            Ok(json!({ "remembered": id, "about": scope.kind() }))
        })
    }
}

struct Recall {
    spec: ToolSpec,
    memory: Arc<dyn Memory>,
    agent: String,
    default_k: usize,
}

impl Tool for Recall {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call<'a>(
        &'a self,
        arguments: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move {
            let query = arguments["query"].as_str().unwrap_or_default();
            let k = arguments["k"]
                .as_u64()
                .and_then(|k| usize::try_from(k).ok())
                .unwrap_or(self.default_k);
            let mut found = Vec::new();
            for scope in run_scopes(&self.agent, &ctx.session, ctx.user.as_deref()) {
                let items =
                    self.memory
                        .recall(&scope, query, k)
                        .await
                        .map_err(|e| ToolError::Failed {
                            tool: self.spec.name.clone(),
                            message: ErrorChain(&e).to_string(),
                        })?;
                found.extend(items);
            }
            super::matching::rank_across_scopes(&mut found);
            found.truncate(k);
            Ok(Value::Array(
                found
                    .into_iter()
                    .map(|item| json!({ "id": item.id, "about": item.scope.kind(), "text": item.text }))
                    .collect(),
            ))
        })
    }
}
