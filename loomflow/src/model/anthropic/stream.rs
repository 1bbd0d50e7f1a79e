//! Streamed Messages: `message_start`, `content_block_start` / `_delta` / `_stop`,
//! `message_delta`, `message_stop`, plus `ping` and `error`.

use std::collections::{HashMap, VecDeque};

use serde::Deserialize;

use super::response::{WireUsage, finish_reason};
use crate::model::sse::SseEvent;
use crate::model::transport::{EventDecoder, Target, decode_error, error_event, stream_error};
use crate::model::{FinishReason, ModelError, StreamChunk, Usage};

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: usize,
        content_block: BlockStart,
    },
    ContentBlockDelta {
        index: usize,
        delta: BlockDelta,
    },
    ContentBlockStop {},
    MessageDelta {
        delta: MessageDeltaBody,
        #[serde(default)]
        usage: WireUsage,
    },
    MessageStop {},
    Ping {},
    Error {
        error: WireError,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct StartMessage {
    #[serde(default)]
    usage: WireUsage,
    model: Option<String>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockStart {
    Text {
        #[serde(default)]
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

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct MessageDeltaBody {
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireError {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    message: String,
}

enum Block {
    Text,
    /// Text while an output tool is expected: held back, and dropped once the tool comes
    /// (the answer is the tool's input alone, as a complete call gives it).
    HeldText,
    /// A tool call, numbered among the reply's tool calls.
    Tool(usize),
    /// The forced output-schema tool: its input is the answer, held until the end.
    Output,
    Other,
}

pub(super) struct Decoder {
    target: Target,
    output_tool: Option<String>,
    blocks: HashMap<usize, Block>,
    tool_calls: usize,
    /// Text held back until it is known whether the output tool comes.
    held_text: String,
    /// The output tool's input text, once its first call started.
    output: Option<String>,
    /// The text held back before the output tool's call started, and whether that call is
    /// the last block so far: a reply the token limit ended in it answers with the text,
    /// as a complete call does (which drops the unfinished call).
    text_before_output: String,
    output_last: bool,
    usage: WireUsage,
    stop_reason: Option<String>,
}

impl Decoder {
    pub(super) fn new(target: Target, output_tool: Option<String>) -> Self {
        Self {
            target,
            output_tool,
            blocks: HashMap::new(),
            tool_calls: 0,
            held_text: String::new(),
            output: None,
            text_before_output: String::new(),
            output_last: false,
            usage: WireUsage::default(),
            stop_reason: None,
        }
    }
}

impl EventDecoder for Decoder {
    fn decode(
        &mut self,
        event: SseEvent,
        out: &mut VecDeque<Result<StreamChunk, ModelError>>,
    ) -> Result<bool, ModelError> {
        // A keep-alive some proxies send (`data:` with nothing after it) says nothing.
        if event.data.trim().is_empty() {
            return Ok(false);
        }
        let parsed = serde_json::from_str::<Event>(&event.data);
        // An error a compatible server (llama.cpp) sends mid-stream in its own shape: its
        // `error:` line, an `error` event whose data is a bare error object (no `type` this
        // decoder knows), or a gateway's `{"error": {…}}` with no event name. Typed as the
        // same object in a body is.
        let unknown = matches!(parsed, Ok(Event::Unknown) | Err(_));
        if unknown && (event.event.as_deref() == Some("error") || holds_error(&event.data)) {
            let error = serde_json::from_str(&event.data)
                .unwrap_or_else(|_| serde_json::Value::String(event.data.clone()));
            return Err(error_event(&self.target, error));
        }
        let parsed =
            parsed.map_err(|e| decode_error(&self.target, format!("bad stream event: {e}")))?;
        match parsed {
            Event::MessageStart { message } => {
                if let Some(model) = message.model {
                    out.push_back(Ok(StreamChunk::Model { model }));
                }
                self.usage = message.usage;
                out.push_back(Ok(StreamChunk::Usage(Usage::from(self.usage))));
            }
            Event::ContentBlockStart {
                index,
                content_block,
            } => {
                self.output_last = false;
                let block = match content_block {
                    BlockStart::Text { .. } if self.output.is_some() => Block::Other,
                    BlockStart::Text { text } if self.output_tool.is_some() => {
                        self.held_text.push_str(&text);
                        Block::HeldText
                    }
                    BlockStart::Text { text } => {
                        if !text.is_empty() {
                            out.push_back(Ok(StreamChunk::Text { text }));
                        }
                        Block::Text
                    }
                    // only the first call of the output tool is the answer
                    BlockStart::ToolUse { name, .. }
                        if self.output.is_some() && Some(&name) == self.output_tool.as_ref() =>
                    {
                        Block::Other
                    }
                    BlockStart::ToolUse { name, input, .. }
                        if Some(&name) == self.output_tool.as_ref() =>
                    {
                        self.text_before_output = std::mem::take(&mut self.held_text);
                        self.output = Some(initial_input(&input).unwrap_or_default());
                        self.output_last = true;
                        Block::Output
                    }
                    BlockStart::ToolUse { id, name, input } => {
                        let ordinal = self.tool_calls;
                        self.tool_calls += 1;
                        out.push_back(Ok(StreamChunk::ToolCall {
                            index: ordinal,
                            id: Some(id),
                            name: Some(name),
                            arguments: initial_input(&input).unwrap_or_default(),
                            provider_extra: None,
                        }));
                        Block::Tool(ordinal)
                    }
                    BlockStart::Other => Block::Other,
                };
                self.blocks.insert(index, block);
            }
            Event::ContentBlockDelta { index, delta } => {
                match (self.blocks.get(&index), delta) {
                    (Some(Block::Text), BlockDelta::TextDelta { text }) => {
                        out.push_back(Ok(StreamChunk::Text { text }));
                    }
                    (Some(Block::Output), BlockDelta::InputJsonDelta { partial_json }) => {
                        if let Some(output) = &mut self.output {
                            output.push_str(&partial_json);
                        }
                    }
                    (Some(Block::HeldText), BlockDelta::TextDelta { text })
                        if self.output.is_none() =>
                    {
                        self.held_text.push_str(&text);
                    }
                    (Some(Block::Tool(ordinal)), BlockDelta::InputJsonDelta { partial_json }) => {
                        out.push_back(Ok(StreamChunk::ToolCall {
                            index: *ordinal,
                            id: None,
                            name: None,
                            arguments: partial_json,
                            provider_extra: None,
                        }));
                    }
                    (None, _) => {
                        return Err(decode_error(
                            &self.target,
                            format!("delta for content block {index}, which never started"),
                        ));
                    }
                    _ => {} // thinking, signatures and other deltas carry no reply text
                }
            }
            Event::MessageDelta { delta, usage } => {
                self.stop_reason = delta.stop_reason.or(self.stop_reason.take());
                self.usage = self.usage.merge(usage);
                out.push_back(Ok(StreamChunk::Usage(Usage::from(self.usage))));
            }
            Event::MessageStop {} => {
                // The answer as a complete call gives it: the output tool's input, or the text
                // when no output tool came.
                let limited =
                    finish_reason(self.stop_reason.as_deref(), false) == FinishReason::Length;
                let text = match self.output.take() {
                    Some(_) if limited && self.output_last => {
                        std::mem::take(&mut self.text_before_output)
                    }
                    Some(json) => compact(json),
                    None => std::mem::take(&mut self.held_text),
                };
                if !text.is_empty() {
                    out.push_back(Ok(StreamChunk::Text { text }));
                }
                let reason = finish_reason(self.stop_reason.as_deref(), self.tool_calls > 0);
                out.push_back(Ok(StreamChunk::Finish { reason }));
                return Ok(true);
            }
            Event::Error { error } => {
                return Err(stream_error(&self.target, error.kind, error.message));
            }
            Event::ContentBlockStop {} | Event::Ping {} | Event::Unknown => {}
        }
        Ok(false)
    }
}

/// Whether `data` is a JSON object with an `error` field: an error in a gateway's shape.
fn holds_error(data: &str) -> bool {
    serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(data)
        .is_ok_and(|object| object.get("error").is_some_and(|e| !e.is_null()))
}

/// The output tool's input text written as a complete call writes the parsed input (compact,
/// keys sorted), so that both give the same answer; as it came when it is not JSON (cut by
/// the token limit).
fn compact(json: String) -> String {
    if json.trim().is_empty() {
        return "{}".to_owned();
    }
    serde_json::from_str::<serde_json::Value>(&json).map_or(json, |value| value.to_string())
}

/// A tool block's `input` at its start: Anthropic sends `{}` and streams the rest; a server
/// that sends the whole input at once has it here.
fn initial_input(input: &serde_json::Value) -> Option<String> {
    match input {
        serde_json::Value::Object(map) if map.is_empty() => None,
        serde_json::Value::Null => None,
        other => Some(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::transport::sse_chunks;
    use crate::model::{FinishReason, ModelResponse, ToolCall, collect_stream};
    use proptest::prelude::*;
    use serde_json::json;
    use std::time::Duration;

    fn transcript() -> String {
        let events = [
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                "content": [], "model": "claude-x", "stop_reason": null,
                "usage": {"input_tokens": 20, "cache_read_input_tokens": 4, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "x"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "ping"}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Naïve "}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "plan."}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ""}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"q\": [1,"}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": " 2]}"}}),
            json!({"type": "content_block_stop", "index": 2}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 30}}),
            json!({"type": "message_stop"}),
        ];
        events
            .iter()
            .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
            .collect()
    }

    fn decode(pieces: Vec<Vec<u8>>) -> Result<ModelResponse, ModelError> {
        let target = Target {
            provider: "anthropic",
            model: "claude-x".into(),
            url: String::new(),
        };
        let body = futures_util::stream::iter(pieces.into_iter().map(Ok::<_, reqwest::Error>));
        let stream = sse_chunks(
            body,
            Decoder::new(target.clone(), None),
            Duration::from_secs(5),
            target,
            None,
        );
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
            .block_on(collect_stream(stream))
    }

    #[test]
    fn decodes_thinking_text_tool_use_and_usage() {
        let response = decode(vec![transcript().into_bytes()]).unwrap();
        assert_eq!(response.content, "Naïve plan.");
        assert_eq!(
            response.tool_calls,
            vec![ToolCall::new("toolu_1", "f", json!({"q": [1, 2]}))]
        );
        assert_eq!(response.finish_reason, FinishReason::ToolCalls);
        assert_eq!(
            response.usage,
            Usage {
                input_tokens: 24,
                output_tokens: 30,
                cached_tokens: 4
            }
        );
    }

    /// A compatible server's `message_delta` that says 0 input tokens (the prompt was
    /// counted in `message_start`) keeps the count; a proxy's empty keep-alive is skipped.
    #[test]
    fn a_zero_input_count_after_the_start_keeps_the_count() {
        let text = transcript().replace(
            r#""usage":{"output_tokens":30}"#,
            r#""usage":{"input_tokens":0,"cache_read_input_tokens":0,"output_tokens":30}"#,
        );
        assert!(text.contains(r#""input_tokens":0"#), "{text}");
        let text = text.replacen("\n\nevent: ", "\n\ndata: \n\nevent: ", 2);
        let response = decode(vec![text.into_bytes()]).unwrap();
        assert_eq!(response.content, "Naïve plan.");
        let usage = Usage {
            input_tokens: 24,
            output_tokens: 30,
            cached_tokens: 4,
        };
        assert_eq!(response.usage, usage);
    }

    #[test]
    fn a_body_without_message_stop_is_cut() {
        let text = transcript();
        let cut = &text[..text.find("event: message_stop").unwrap()];
        let err = decode(vec![cut.as_bytes().to_vec()]).unwrap_err();
        assert!(matches!(err, ModelError::StreamCut { .. }), "{err:?}");
    }

    proptest! {
        #[test]
        fn any_split_decodes_to_the_same_response(cuts in proptest::collection::vec(0usize..4096, 0..40)) {
            let text = transcript().into_bytes();
            let pieces = crate::model::sse::tests::split_at(&text, &cuts);
            prop_assert_eq!(decode(pieces).unwrap(), decode(vec![text.clone()]).unwrap());
        }
    }
}
