//! The Messages reply (non-streamed), and the pieces streamed events share with it.

use serde::Deserialize;

use crate::model::transport::{Target, body_error, decode_error};
use crate::model::{ApiKey, FinishReason, ModelError, ModelResponse, ToolCall, Usage};

#[derive(Deserialize)]
struct Reply {
    /// `message`; `error` for an error object, which a 200 can carry too.
    #[serde(rename = "type")]
    kind: Option<String>,
    error: Option<serde_json::Value>,
    content: Option<Vec<Block>>,
    stop_reason: Option<String>,
    #[serde(default)]
    usage: WireUsage,
    model: Option<String>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: serde_json::Value,
    },
    #[serde(other)]
    Other,
}

/// The `usage` object of replies, `message_start` and `message_delta`.
#[derive(Clone, Copy, Default, Deserialize)]
pub(super) struct WireUsage {
    pub(super) input_tokens: Option<u64>,
    pub(super) output_tokens: Option<u64>,
    pub(super) cache_read_input_tokens: Option<u64>,
    pub(super) cache_creation_input_tokens: Option<u64>,
}

impl WireUsage {
    /// `later`'s fields where it has them, this one's elsewhere. The input side is counted
    /// once the prompt is read: a later 0 for it (which some compatible servers send in
    /// `message_delta`) keeps the count said before.
    pub(super) fn merge(self, later: Self) -> Self {
        let input = |later: Option<u64>, earlier: Option<u64>| match (later, earlier) {
            (Some(0), Some(earlier)) => Some(earlier),
            (later, earlier) => later.or(earlier),
        };
        Self {
            input_tokens: input(later.input_tokens, self.input_tokens),
            output_tokens: later.output_tokens.or(self.output_tokens),
            cache_read_input_tokens: input(
                later.cache_read_input_tokens,
                self.cache_read_input_tokens,
            ),
            cache_creation_input_tokens: input(
                later.cache_creation_input_tokens,
                self.cache_creation_input_tokens,
            ),
        }
    }
}

impl From<WireUsage> for Usage {
    /// Anthropic counts cache reads and writes apart from `input_tokens`; here they are part
    /// of the input, as with OpenAI, and cache reads are the cached tokens.
    fn from(usage: WireUsage) -> Self {
        let cached = usage.cache_read_input_tokens.unwrap_or(0);
        Usage {
            input_tokens: (usage.input_tokens.unwrap_or(0))
                .saturating_add(cached)
                .saturating_add(usage.cache_creation_input_tokens.unwrap_or(0)),
            output_tokens: usage.output_tokens.unwrap_or(0),
            cached_tokens: cached,
        }
    }
}

/// Maps `stop_reason`; a `tool_use` stop caused only by the output-schema tool is a plain stop.
pub(super) fn finish_reason(reason: Option<&str>, real_tool_calls: bool) -> FinishReason {
    match reason {
        None | Some("end_turn") | Some("stop_sequence") => FinishReason::Stop,
        Some("max_tokens") | Some("model_context_window_exceeded") => FinishReason::Length,
        Some("tool_use") if real_tool_calls => FinishReason::ToolCalls,
        Some("tool_use") => FinishReason::Stop,
        Some("refusal") => FinishReason::ContentFilter,
        Some(other) => FinishReason::Other(other.to_owned()),
    }
}

/// Reads a reply. An error object is the error it names, even in a 200; a body that is
/// neither is a decode error. A body without `type` is taken for a message when it has
/// `content` (compatible servers may leave `type` out).
pub(super) fn parse(
    bytes: &[u8],
    target: &Target,
    output_tool: Option<&str>,
    key: Option<&ApiKey>,
) -> Result<ModelResponse, ModelError> {
    let reply: Reply = serde_json::from_slice(bytes)
        .map_err(|e| decode_error(target, format!("not a message: {e}")))?;
    if let Some(error) = reply.error.filter(|e| !e.is_null()) {
        return Err(body_error(target, error, key));
    }
    let blocks = match (reply.kind.as_deref(), reply.content) {
        (Some("message") | None, Some(blocks)) => blocks,
        (Some("message"), None) => Vec::new(),
        (kind, _) => {
            let kind = kind.unwrap_or("none");
            return Err(decode_error(target, format!("not a message: type {kind}")));
        }
    };
    let mut text = String::new();
    let mut output = None;
    let mut tool_calls = Vec::new();
    // A reply the token limit ended on a tool call may hold that call unfinished, its input
    // what had been generated: it is dropped (and the reply says `Length`), not run.
    let mut blocks = blocks;
    let limited = finish_reason(reply.stop_reason.as_deref(), false) == FinishReason::Length;
    if limited && matches!(blocks.last(), Some(Block::ToolUse { .. })) {
        blocks.pop();
    }
    for block in blocks {
        match block {
            Block::Text { text: more } => text.push_str(&more),
            // The answer is the first call of the output tool alone: text around it is not
            // glued to the document, nor is a second call's input.
            Block::ToolUse { name, input, .. } if Some(name.as_str()) == output_tool => {
                output.get_or_insert_with(|| input.to_string());
            }
            Block::ToolUse { id, name, input } => {
                tool_calls.push(ToolCall::new(id, name, input));
            }
            Block::Other => {}
        }
    }
    Ok(ModelResponse {
        finish_reason: finish_reason(reply.stop_reason.as_deref(), !tool_calls.is_empty()),
        content: output.unwrap_or(text),
        tool_calls,
        usage: reply.usage.into(),
        model: reply.model,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn target() -> Target {
        Target {
            provider: "anthropic",
            model: "claude-x".into(),
            url: String::new(),
        }
    }

    #[test]
    fn parses_text_tool_use_and_cache_usage() {
        let body = json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [
                {"type": "thinking", "thinking": "hm", "signature": "s"},
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}}
            ],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 20, "cache_read_input_tokens": 5,
                      "cache_creation_input_tokens": 0}
        });
        let response = parse(body.to_string().as_bytes(), &target(), None, None).unwrap();
        assert_eq!(response.content, "Let me check.");
        assert_eq!(response.tool_calls[0].arguments, json!({"city": "Oslo"}));
        assert_eq!(response.finish_reason, FinishReason::ToolCalls);
        assert_eq!(
            response.usage,
            Usage {
                input_tokens: 15,
                output_tokens: 20,
                cached_tokens: 5
            }
        );
    }

    #[test]
    fn output_tool_input_becomes_the_text() {
        let body = json!({
            "content": [
                {"type": "tool_use", "id": "t", "name": "answer", "input": {"n": 4}},
                {"type": "tool_use", "id": "u", "name": "answer", "input": {}}
            ],
            "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 1}
        });
        let response = parse(body.to_string().as_bytes(), &target(), Some("answer"), None).unwrap();
        assert_eq!(response.content, "{\"n\":4}");
        assert!(response.tool_calls.is_empty());
        assert_eq!(response.finish_reason, FinishReason::Stop);
    }
}
