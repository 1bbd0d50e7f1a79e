//! Streamed Messages: `message_start`, `content_block_start` / `_delta` / `_stop`,
//! `message_delta`, `message_stop`, plus `ping` and `error`.

use std::collections::{HashMap, VecDeque};

use serde::Deserialize;

use super::response::{WireUsage, finish_reason};
use crate::model::sse::SseEvent;
use crate::model::transport::{EventDecoder, Target, decode_error};
use crate::model::{ModelError, StreamChunk, Usage};

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
    /// A tool call, numbered among the reply's tool calls.
    Tool(usize),
    /// The forced output-schema tool: its input streams out as text.
    Output,
    Other,
}

pub(super) struct Decoder {
    target: Target,
    output_tool: Option<String>,
    blocks: HashMap<usize, Block>,
    tool_calls: usize,
    output_seen: bool,
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
            output_seen: false,
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
        let parsed: Event = serde_json::from_str(&event.data)
            .map_err(|e| decode_error(&self.target, format!("bad stream event: {e}")))?;
        match parsed {
            Event::MessageStart { message } => {
                self.usage = message.usage;
                out.push_back(Ok(StreamChunk::Usage(Usage::from(self.usage))));
            }
            Event::ContentBlockStart {
                index,
                content_block,
            } => {
                let block = match content_block {
                    BlockStart::Text { text } => {
                        if !text.is_empty() {
                            out.push_back(Ok(StreamChunk::Text { text }));
                        }
                        Block::Text
                    }
                    // only the first call of the output tool is the answer
                    BlockStart::ToolUse { name, .. }
                        if self.output_seen && Some(&name) == self.output_tool.as_ref() =>
                    {
                        Block::Other
                    }
                    BlockStart::ToolUse { name, input, .. }
                        if Some(&name) == self.output_tool.as_ref() =>
                    {
                        self.output_seen = true;
                        if let Some(text) = initial_input(&input) {
                            out.push_back(Ok(StreamChunk::Text { text }));
                        }
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
                        }));
                        Block::Tool(ordinal)
                    }
                    BlockStart::Other => Block::Other,
                };
                self.blocks.insert(index, block);
            }
            Event::ContentBlockDelta { index, delta } => {
                match (self.blocks.get(&index), delta) {
                    (Some(Block::Text), BlockDelta::TextDelta { text })
                    | (Some(Block::Output), BlockDelta::InputJsonDelta { partial_json: text }) => {
                        out.push_back(Ok(StreamChunk::Text { text }));
                    }
                    (Some(Block::Tool(ordinal)), BlockDelta::InputJsonDelta { partial_json }) => {
                        out.push_back(Ok(StreamChunk::ToolCall {
                            index: *ordinal,
                            id: None,
                            name: None,
                            arguments: partial_json,
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
                let reason = finish_reason(self.stop_reason.as_deref(), self.tool_calls > 0);
                out.push_back(Ok(StreamChunk::Finish { reason }));
                return Ok(true);
            }
            Event::Error { error } => {
                return Err(ModelError::StreamError {
                    provider: self.target.provider.to_owned(),
                    model: self.target.model.clone(),
                    kind: error.kind,
                    message: error.message,
                });
            }
            Event::ContentBlockStop {} | Event::Ping {} | Event::Unknown => {}
        }
        Ok(false)
    }
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
