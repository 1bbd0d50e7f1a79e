//! [`Guardrail`]: checks on what enters an agent run and what leaves it.
//!
//! A guardrail looks at four things: the run's prompt (input), each tool call's arguments,
//! each tool result, and the final answer (output). For each it says [`Verdict::Allow`],
//! [`Verdict::Block`] with a reason, or [`Verdict::Rewrite`] with a replacement (redact a
//! card number, wrap untrusted text). Guardrails run in the order they were added, each
//! seeing the previous one's rewrite.
//!
//! Every check is a journaled step: a resumed or recovered run replays the verdicts it got
//! instead of asking again, so a guardrail that calls a moderation model is asked once.

use std::fmt;
use std::future::ready;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::graph::BoxFuture;

/// What a guardrail says about one thing it checked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", content = "value", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Verdict<T> {
    /// Let it through unchanged.
    Allow,
    /// Refuse it, with the reason.
    Block(String),
    /// Let it through as this instead.
    Rewrite(T),
}

/// Which of a run's checks a guardrail is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum GuardStage {
    /// The run's prompt, before the first model turn.
    Input,
    /// A tool call's arguments, before the tool runs.
    ToolCall,
    /// A tool's result, before the model reads it.
    ToolResult,
    /// The final answer, before the run returns it.
    Output,
}

impl GuardStage {
    /// The stage's name: `input`, `tool_call`, `tool_result`, `output`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Input => "input",
            Self::ToolCall => "tool_call",
            Self::ToolResult => "tool_result",
            Self::Output => "output",
        }
    }
}

impl fmt::Display for GuardStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whose run a guardrail is checking.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct GuardContext<'a> {
    /// The agent.
    pub agent: &'a str,
    /// The session.
    pub session: &'a str,
    /// The user the run acts for, when it has one.
    pub user: Option<&'a str>,
}

/// What a blocked prompt, tool result or answer does to the run (see
/// [`AgentBuilder::on_guardrail_block`](super::AgentBuilder::on_guardrail_block)). A
/// blocked tool call is always refused to the model instead, as a permission denial is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnBlock {
    /// The run stops cleanly: `interrupted`, with reason
    /// [`StopReason::Guardrail`](super::StopReason::Guardrail) naming the guardrail, and the
    /// work so far kept. A blocked answer is not returned as the output.
    #[default]
    Stop,
    /// The run fails with [`AgentError::Guardrail`](super::AgentError::Guardrail).
    Fail,
}

/// A check on an agent run's input, tool calls, tool results and output.
///
/// Implement the stages you care about; the others allow everything. For a check on one
/// stage, [`on_input`], [`on_output`] and [`on_tool_result`] make one from a closure.
///
/// # Examples
///
/// ```
/// use loomflow::agent::{Agent, GuardContext, Guardrail, Verdict};
/// use loomflow::graph::BoxFuture;
/// use loomflow::model::{ModelResponse, ScriptedModel};
///
/// /// Keeps card numbers out of answers.
/// struct NoCardNumbers;
///
/// impl Guardrail for NoCardNumbers {
///     fn name(&self) -> &str { "no_card_numbers" }
///
///     fn check_output<'a>(&'a self, text: &'a str, _: GuardContext<'a>)
///         -> BoxFuture<'a, Verdict<String>> {
///         let digits = text.chars().filter(char::is_ascii_digit).count();
///         Box::pin(async move {
///             if digits >= 16 { Verdict::Rewrite("[redacted]".to_owned()) } else { Verdict::Allow }
///         })
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
/// let agent = Agent::builder("You help with payments.")
///     .model(ScriptedModel::new([ModelResponse::text("Your card is 4111 1111 1111 1111.")]))
///     .guardrail(NoCardNumbers)
///     .build()?;
/// assert_eq!(agent.run("Which card?").await?.output, "[redacted]");
/// # Ok(()) }
/// ```
pub trait Guardrail: Send + Sync + 'static {
    /// The guardrail's name: stop reasons (`guardrail:<name>`), errors and events name it.
    fn name(&self) -> &str;

    /// Checks the run's prompt (the last user message; for an agent a conversation was
    /// handed to, the one before the handoff). A rewrite replaces the user message the
    /// model reads.
    fn check_input<'a>(
        &'a self,
        text: &'a str,
        cx: GuardContext<'a>,
    ) -> BoxFuture<'a, Verdict<String>> {
        let _ = (text, cx);
        Box::pin(ready(Verdict::Allow))
    }

    /// Checks a tool call before it runs. A block refuses the call (the model reads the
    /// reason, as for a permission denial); a rewrite replaces its arguments.
    ///
    /// Each call is checked once, and the verdict journaled: a call that waits for an
    /// approval runs, once approved, with the arguments the approver saw. `arguments` are
    /// the model's, before the tool host checks them: usually an object, but the text the
    /// model sent when it was not JSON (a string), which the host then refuses.
    fn check_tool_call<'a>(
        &'a self,
        tool: &'a str,
        arguments: &'a Value,
        cx: GuardContext<'a>,
    ) -> BoxFuture<'a, Verdict<Value>> {
        let _ = (tool, arguments, cx);
        Box::pin(ready(Verdict::Allow))
    }

    /// Checks a tool's result before the model reads it (for example, for instructions
    /// injected into a fetched web page). A rewrite replaces what the model reads.
    fn check_tool_result<'a>(
        &'a self,
        tool: &'a str,
        content: &'a str,
        cx: GuardContext<'a>,
    ) -> BoxFuture<'a, Verdict<String>> {
        let _ = (tool, content, cx);
        Box::pin(ready(Verdict::Allow))
    }

    /// Checks the final answer. A rewrite replaces the output and the transcript's last
    /// message.
    fn check_output<'a>(
        &'a self,
        text: &'a str,
        cx: GuardContext<'a>,
    ) -> BoxFuture<'a, Verdict<String>> {
        let _ = (text, cx);
        Box::pin(ready(Verdict::Allow))
    }
}

/// A guardrail on one text stage, from a closure; see [`on_input`].
struct TextGuard<F> {
    name: String,
    stage: GuardStage,
    check: F,
}

impl<F> Guardrail for TextGuard<F>
where
    F: Fn(&str) -> Verdict<String> + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn check_input<'a>(
        &'a self,
        text: &'a str,
        _: GuardContext<'a>,
    ) -> BoxFuture<'a, Verdict<String>> {
        Box::pin(ready(self.on(GuardStage::Input, text)))
    }

    fn check_tool_result<'a>(
        &'a self,
        _: &'a str,
        content: &'a str,
        _: GuardContext<'a>,
    ) -> BoxFuture<'a, Verdict<String>> {
        Box::pin(ready(self.on(GuardStage::ToolResult, content)))
    }

    fn check_output<'a>(
        &'a self,
        text: &'a str,
        _: GuardContext<'a>,
    ) -> BoxFuture<'a, Verdict<String>> {
        Box::pin(ready(self.on(GuardStage::Output, text)))
    }
}

impl<F> TextGuard<F>
where
    F: Fn(&str) -> Verdict<String>,
{
    fn on(&self, stage: GuardStage, text: &str) -> Verdict<String> {
        if stage == self.stage {
            (self.check)(text)
        } else {
            Verdict::Allow
        }
    }
}

/// A guardrail on the run's prompt, from a closure.
///
/// ```
/// use loomflow::agent::{Verdict, on_input};
///
/// let no_secrets = on_input("no_secrets", |text| {
///     if text.contains("password") { Verdict::Block("asks for a password".into()) } else { Verdict::Allow }
/// });
/// # let _ = no_secrets;
/// ```
pub fn on_input<F>(name: impl Into<String>, check: F) -> impl Guardrail
where
    F: Fn(&str) -> Verdict<String> + Send + Sync + 'static,
{
    TextGuard {
        name: name.into(),
        stage: GuardStage::Input,
        check,
    }
}

/// A guardrail on each tool result, from a closure.
pub fn on_tool_result<F>(name: impl Into<String>, check: F) -> impl Guardrail
where
    F: Fn(&str) -> Verdict<String> + Send + Sync + 'static,
{
    TextGuard {
        name: name.into(),
        stage: GuardStage::ToolResult,
        check,
    }
}

/// A guardrail on the final answer, from a closure.
pub fn on_output<F>(name: impl Into<String>, check: F) -> impl Guardrail
where
    F: Fn(&str) -> Verdict<String> + Send + Sync + 'static,
{
    TextGuard {
        name: name.into(),
        stage: GuardStage::Output,
        check,
    }
}

/// What a chain of guardrails decided: journaled, so a replayed step gets the same answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Checked<T> {
    /// Through, rewritten when `Some`.
    Passed(Option<T>),
    /// Stopped by `guardrail`.
    Blocked { guardrail: String, reason: String },
}

/// An agent's guardrails, in order.
#[derive(Clone, Default)]
pub(crate) struct Guardrails {
    guards: Vec<Arc<dyn Guardrail>>,
    pub(crate) on_block: OnBlock,
}

impl fmt::Debug for Guardrails {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.guards.iter().map(|g| g.name()))
            .finish()
    }
}

impl Guardrails {
    pub(crate) fn add(&mut self, guard: Arc<dyn Guardrail>) {
        self.guards.push(guard);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.guards.is_empty()
    }

    /// What is wrong with the guardrails' names: a block records `guardrail:<name>`, which
    /// must name one (an empty name would not read back, and the session could not go on).
    pub(crate) fn problems(&self) -> Vec<String> {
        let unnamed = self.guards.iter().filter(|g| g.name().trim().is_empty());
        unnamed
            .map(|_| "a guardrail has an empty name: give each one a name".to_owned())
            .take(1)
            .collect()
    }

    /// Runs a text through every guardrail's check for `stage`, each seeing the rewrite of
    /// the one before.
    pub(crate) async fn text(
        &self,
        stage: GuardStage,
        tool: &str,
        text: &str,
        cx: GuardContext<'_>,
    ) -> Checked<String> {
        let mut current: Option<String> = None;
        for guard in &self.guards {
            let seen = current.as_deref().unwrap_or(text);
            let verdict = match stage {
                GuardStage::Input => guard.check_input(seen, cx).await,
                GuardStage::ToolResult => guard.check_tool_result(tool, seen, cx).await,
                GuardStage::Output => guard.check_output(seen, cx).await,
                GuardStage::ToolCall => Verdict::Allow,
            };
            if let Some(blocked) = apply(guard.as_ref(), verdict, &mut current) {
                return blocked;
            }
        }
        Checked::Passed(current)
    }

    /// Runs a tool call's arguments through every guardrail.
    pub(crate) async fn tool_call(
        &self,
        tool: &str,
        arguments: &Value,
        cx: GuardContext<'_>,
    ) -> Checked<Value> {
        let mut current: Option<Value> = None;
        for guard in &self.guards {
            let seen = current.as_ref().unwrap_or(arguments);
            let verdict = guard.check_tool_call(tool, seen, cx).await;
            if let Some(blocked) = apply(guard.as_ref(), verdict, &mut current) {
                return blocked;
            }
        }
        Checked::Passed(current)
    }
}

/// Folds one verdict into the chain: a rewrite replaces `current`, a block ends it.
fn apply<T>(
    guard: &dyn Guardrail,
    verdict: Verdict<T>,
    current: &mut Option<T>,
) -> Option<Checked<T>> {
    match verdict {
        Verdict::Allow => None,
        Verdict::Rewrite(value) => {
            *current = Some(value);
            None
        }
        Verdict::Block(reason) => {
            tracing::info!(guardrail = guard.name(), %reason, "a guardrail blocked");
            Some(Checked::Blocked {
                guardrail: guard.name().to_owned(),
                reason,
            })
        }
    }
}
