//! What a tool call reports: its `execute_tool` span (see [`crate::telemetry`]) and its
//! audit entries (`tool_call`, `decision`).

use std::time::Duration;

use serde_json::{Value, json};
use tracing::Span;

use super::DispatchContext;
use crate::model::ToolCall;
use crate::runtime::{AuditEntry, AuditKind};
use crate::telemetry::{self, TARGET};
use crate::tool::ToolError;

/// How much of a tool's result the audit entry keeps.
const RESULT_IN_AUDIT: usize = 2_000;

/// How long a call's arguments may be, as JSON text, for the audit entry to keep them as
/// they are: longer ones (a file's body to write) are kept as their text, cut to this.
const ARGUMENTS_IN_AUDIT: usize = 16 * 1024;

/// The `execute_tool {name}` span of one call.
pub(super) fn tool_span(call: &ToolCall) -> Span {
    tracing::info_span!(
        target: TARGET,
        "execute_tool",
        otel.name = %format!("execute_tool {}", call.name),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %call.name,
        gen_ai.tool.call.id = %call.id,
        gen_ai.tool.type = "function",
        gen_ai.tool.call.arguments = tracing::field::Empty,
        gen_ai.tool.call.result = tracing::field::Empty,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// Records a call's result on its span: `error.type` and an `Error` status on failure, and with `content` on,
/// the arguments and the result.
pub(super) fn record_result(
    span: &Span,
    arguments: &Value,
    result: &Result<Value, ToolError>,
    content: bool,
) {
    if span.is_disabled() {
        return;
    }
    if let Err(error) = result {
        span.record("error.type", telemetry::error_type(error).as_str());
        span.record("otel.status_code", "ERROR");
    }
    if content {
        span.record("gen_ai.tool.call.arguments", arguments.to_string().as_str());
        let text = match result {
            Ok(Value::String(text)) => text.clone(),
            Ok(value) => value.to_string(),
            Err(error) => error.to_string(),
        };
        span.record("gen_ai.tool.call.result", text.as_str());
    }
}

/// The `tool_call` entry of a call that ran, or was refused before running.
pub(super) fn tool_call_entry(
    ctx: DispatchContext<'_>,
    call: &ToolCall,
    arguments: Value,
    result: &Result<Value, ToolError>,
    took: Duration,
) -> AuditEntry {
    let mut detail = json!({
        "call_id": call.id,
        "duration_ms": u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
    });
    put_arguments(&mut detail, arguments);
    match result {
        Ok(value) => {
            detail["outcome"] = Value::from("ok");
            let text = match value {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            detail["result"] = Value::from(clip(text, RESULT_IN_AUDIT));
        }
        Err(error) => {
            detail["outcome"] = Value::from("error");
            detail["error"] = Value::from(clip(error.to_string(), RESULT_IN_AUDIT));
        }
    }
    AuditEntry::new(ctx.session, AuditKind::ToolCall, &call.name, detail).actor(ctx.user)
}

/// The `decision` entry of a permission or approval decision about a call.
pub(super) fn decision_entry(
    ctx: DispatchContext<'_>,
    call: &ToolCall,
    actor: Option<String>,
    decision: &str,
    reason: Option<&str>,
    edited: Option<&Value>,
) -> AuditEntry {
    let mut detail = json!({ "call_id": call.id, "decision": decision });
    if let Some(reason) = reason {
        detail["reason"] = Value::from(reason);
    }
    if let Some(edited) = edited {
        put_arguments(&mut detail, edited.clone());
    }
    AuditEntry::new(ctx.session, AuditKind::Decision, &call.name, detail).actor(actor)
}

/// Files an entry: with the calling node's next write when the dispatch runs in a graph
/// node, straight to the runtime's store otherwise (and nowhere without a runtime).
pub(super) async fn record(ctx: DispatchContext<'_>, entry: AuditEntry) {
    if let Some(node) = ctx.node {
        node.record_audit(entry);
    } else if let Some(runtime) = ctx.runtime
        && let Err(error) = runtime.store().append_audit(vec![entry]).await
    {
        tracing::warn!(%error, session = %ctx.session, "could not write an audit entry");
    }
}

/// Puts a call's `arguments` in an entry's `detail`: as they are, or, past
/// [`ARGUMENTS_IN_AUDIT`] bytes of JSON, as that text cut short, with `arguments_clipped`.
fn put_arguments(detail: &mut Value, arguments: Value) {
    let text = arguments.to_string();
    if text.len() <= ARGUMENTS_IN_AUDIT {
        detail["arguments"] = arguments;
        return;
    }
    detail["arguments"] = Value::from(clip(text, ARGUMENTS_IN_AUDIT));
    detail["arguments_clipped"] = Value::Bool(true);
}

/// `text`, cut to at most `max` bytes (at a character boundary) and marked with `…` when it
/// was longer; in place, without a copy.
fn clip(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_arguments_are_kept_as_their_text_cut_short() {
        let mut detail = json!({});
        put_arguments(&mut detail, json!({ "path": "a.txt" }));
        assert_eq!(detail, json!({ "arguments": { "path": "a.txt" } }));
        let body = "x".repeat(ARGUMENTS_IN_AUDIT * 4);
        let mut detail = json!({});
        put_arguments(&mut detail, json!({ "path": "a.txt", "body": body }));
        let kept = detail["arguments"].as_str().unwrap_or_default();
        assert!(kept.starts_with(r#"{"body":"xxx"#), "{kept:.40}");
        assert_eq!(kept.len(), ARGUMENTS_IN_AUDIT + '…'.len_utf8());
        assert_eq!(detail["arguments_clipped"], true);
    }

    #[test]
    fn clip_cuts_long_text_at_a_character_boundary() {
        assert_eq!(clip("short".to_owned(), 10), "short");
        assert_eq!(clip("exactly".to_owned(), 7), "exactly");
        assert_eq!(clip("abcdef".to_owned(), 3), "abc…");
        // 'é' is two bytes: a cut inside it moves back to its start.
        assert_eq!(clip("aé".to_owned(), 2), "a…");
    }
}
