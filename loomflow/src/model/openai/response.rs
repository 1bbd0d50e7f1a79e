//! The Chat Completions reply (non-streamed), and the pieces streamed chunks share with it.

use serde::Deserialize;

use crate::model::response::parse_arguments;
use crate::model::transport::{Target, body_error, decode_error};
use crate::model::{ApiKey, FinishReason, ModelError, ModelResponse, ToolCall, Usage};

#[derive(Deserialize)]
struct Completion {
    /// An error object, which some gateways send with a 200.
    error: Option<serde_json::Value>,
    #[serde(default, deserialize_with = "null_as_default")]
    choices: Vec<Choice>,
    usage: Option<WireUsage>,
    model: Option<String>,
}

#[derive(Deserialize)]
struct Choice {
    message: WireMessage,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireMessage {
    #[serde(default, deserialize_with = "content_text")]
    content: Option<String>,
    refusal: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    tool_calls: Vec<WireToolCall>,
}

#[derive(Deserialize)]
struct WireToolCall {
    #[serde(default, deserialize_with = "null_as_default")]
    id: String,
    function: WireFunction,
    /// Gemini's thought signature, to be sent back with the call.
    extra_content: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct WireFunction {
    name: String,
    /// A JSON text per the API; some compatible servers send the object itself.
    #[serde(default)]
    arguments: Option<serde_json::Value>,
}

/// A field that may be absent or `null`: gateways that serialise every field (LiteLLM and
/// other pydantic-based servers) send `"tool_calls": null` where OpenAI leaves it out.
pub(super) fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// A message's `content`, or a streamed delta's: a string, or a list of parts (Mistral's
/// reasoning models send `[{"type": "thinking", …}, {"type": "text", "text": …}]`), whose
/// `text` parts are the reply; the model's thinking and other parts are left out.
pub(super) fn content_text<'de, D>(deserializer: D) -> Result<Option<String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Content {
        Text(String),
        // As values: a part of another shape (a `null`, a bare string) is left out, not a
        // reply that fails to decode.
        Parts(Vec<serde_json::Value>),
    }
    let text_of = |part: serde_json::Value| match part {
        serde_json::Value::Object(mut fields) if fields.get("type") == Some(&"text".into()) => {
            match fields.remove("text") {
                Some(serde_json::Value::String(text)) => Some(text),
                _ => None,
            }
        }
        _ => None,
    };
    Ok(match Option::<Content>::deserialize(deserializer)? {
        None => None,
        Some(Content::Text(text)) => Some(text),
        Some(Content::Parts(parts)) => Some(parts.into_iter().filter_map(text_of).collect()),
    })
}

/// The `usage` object of replies and of the last streamed chunk.
#[derive(Deserialize)]
pub(super) struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

impl From<WireUsage> for Usage {
    fn from(usage: WireUsage) -> Self {
        Usage {
            input_tokens: usage.prompt_tokens,
            output_tokens: usage.completion_tokens,
            cached_tokens: usage
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .unwrap_or(0),
        }
    }
}

pub(super) fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

/// Reads a completion; an error object is the error it names, even in a 200.
pub(super) fn parse(
    bytes: &[u8],
    target: &Target,
    key: Option<&ApiKey>,
) -> Result<ModelResponse, ModelError> {
    let completion: Completion = serde_json::from_slice(bytes)
        .map_err(|e| decode_error(target, format!("not a chat completion: {e}")))?;
    if let Some(error) = completion.error.filter(|e| !e.is_null()) {
        return Err(body_error(target, error, key));
    }
    let Some(choice) = completion.choices.into_iter().next() else {
        return Err(decode_error(target, "the reply has no choices"));
    };
    let cut_short = choice.finish_reason.as_deref() == Some("length");
    let mut tool_calls = Vec::with_capacity(choice.message.tool_calls.len());
    for call in choice.message.tool_calls {
        let arguments = match call.function.arguments {
            // Cut before its first argument: not an empty object.
            Some(serde_json::Value::String(text)) if cut_short && text.trim().is_empty() => {
                continue;
            }
            Some(serde_json::Value::Null) | None if cut_short => continue,
            Some(serde_json::Value::String(text)) => match parse_arguments(&text) {
                Ok(arguments) => arguments,
                // The token limit cut the call short: it is dropped and the reply says
                // `Length`, rather than a decode error that hides why.
                Err(_) if cut_short => continue,
                // Kept as the text it is: the tool host answers the call with an error the
                // model reads, and the run goes on.
                Err(_) => serde_json::Value::String(text),
            },
            Some(serde_json::Value::Null) | None => parse_arguments("").unwrap_or_default(),
            Some(value) => value,
        };
        tool_calls.push(ToolCall {
            id: call.id,
            name: call.function.name,
            arguments,
            provider_extra: call.extra_content.filter(|extra| !extra.is_null()),
        });
    }
    // A refusal is the provider declining: its text is the reply, and it is no plain stop.
    let refusal = choice.message.refusal.filter(|r| !r.is_empty());
    let finish_reason = match &refusal {
        Some(_) => FinishReason::ContentFilter,
        None => finish_reason(
            (choice.finish_reason.as_deref())
                .filter(|r| !r.is_empty())
                .unwrap_or("stop"),
        ),
    };
    let content = choice
        .message
        .content
        .filter(|c| !c.is_empty())
        .or(refusal)
        .unwrap_or_default();
    Ok(ModelResponse {
        content,
        tool_calls,
        finish_reason,
        usage: completion.usage.map(Usage::from).unwrap_or_default(),
        model: completion.model,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_parallel_tool_calls_and_usage() {
        let body = json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-x",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null,
                "tool_calls": [
                    {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": "{\"x\":1}"}},
                    {"id": "call_b", "type": "function", "function": {"name": "g", "arguments": ""}}
                ]}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14,
                      "prompt_tokens_details": {"cached_tokens": 8}}
        });
        let target = Target {
            provider: "openai",
            model: "gpt-x".into(),
            url: String::new(),
        };
        let response = parse(body.to_string().as_bytes(), &target, None).unwrap();
        assert_eq!(response.finish_reason, FinishReason::ToolCalls);
        assert_eq!(response.tool_calls[0].arguments, json!({"x": 1}));
        assert_eq!(response.tool_calls[1].arguments, json!({}));
        assert_eq!(response.usage.cached_tokens, 8);
    }
}
