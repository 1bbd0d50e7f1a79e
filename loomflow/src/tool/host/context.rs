//! What a dispatch knows about where it happens, and what each call returns.

use serde_json::Value;

use crate::context::Context;
use crate::model::ToolCall;
use crate::runtime::Runtime;
use std::time::Duration;

use crate::tool::ToolError;

/// Where a dispatch happens: the run's session and user, its runtime, and the node's
/// context when the dispatch runs inside a graph node (approvals use it to suspend).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct DispatchContext<'a> {
    /// The session (thread).
    pub session: &'a str,
    /// The user, if known.
    pub user: Option<&'a str>,
    /// The runtime, for approvals by signal.
    pub runtime: Option<&'a Runtime>,
    /// The calling node's context.
    pub node: Option<&'a Context>,
    /// How long the host asking for an approval waits for the decision at most (its
    /// [`approval_timeout`](super::ToolHost::approval_timeout)); set by the host for its
    /// approval handler. A handler whose wait outlives an execution (a run suspended and
    /// carried on later) keeps its deadline within it.
    pub approval_timeout: Option<Duration>,
    /// The slots the calls' bodies take, one each while it runs: shared by the calls of one
    /// turn so that their approvals and hooks wait outside the host's concurrency limit.
    pub(crate) slots: Option<&'a tokio::sync::Semaphore>,
}

impl<'a> DispatchContext<'a> {
    /// A context for a session.
    pub fn new(session: &'a str) -> Self {
        Self {
            session,
            user: None,
            runtime: None,
            node: None,
            approval_timeout: None,
            slots: None,
        }
    }

    /// Sets the user.
    #[must_use]
    pub fn user(mut self, user: Option<&'a str>) -> Self {
        self.user = user;
        self
    }

    /// Sets the runtime.
    #[must_use]
    pub fn runtime(mut self, runtime: &'a Runtime) -> Self {
        self.runtime = Some(runtime);
        self
    }

    /// Sets the calling node's context.
    #[must_use]
    pub fn node(mut self, node: &'a Context) -> Self {
        self.node = Some(node);
        self
    }

    /// Sets the slots the calls' bodies take (see [`ToolHost::dispatch`](super::ToolHost)).
    pub(crate) fn slots(mut self, slots: &'a tokio::sync::Semaphore) -> Self {
        self.slots = Some(slots);
        self
    }
}

/// The result of one call, ready to send back to the model.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ToolOutcome {
    /// The model's id for the call.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The value (or the error's text), as the model reads it.
    pub content: String,
    /// Whether the call failed.
    pub is_error: bool,
}

impl ToolOutcome {
    /// The outcome of `call`, its content cut to at most `max_bytes`.
    pub(super) fn new(call: &ToolCall, result: Result<Value, ToolError>, max_bytes: usize) -> Self {
        let (content, is_error) = match result {
            Ok(Value::String(text)) => (text, false),
            Ok(value) => (value.to_string(), false),
            Err(error) => (error.to_string(), true),
        };
        Self {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content: cut_to(content, max_bytes),
            is_error,
        }
    }
}

/// `content` cut to at most `max` bytes (at a character's edge), saying how much was left
/// out: what the model reads, the transcript and every checkpoint of it keep.
fn cut_to(mut content: String, max: usize) -> String {
    let total = content.len();
    if total <= max {
        return content;
    }
    let cut = (0..=max)
        .rev()
        .find(|&at| content.is_char_boundary(at))
        .unwrap_or(0);
    content.truncate(cut);
    content.push_str(&format!(
        "\n[cut: {} of {total} bytes left out]",
        total - cut
    ));
    content
}
