//! Streamed Chat Completions: `data: {chunk}` events ending in `data: [DONE]`.

use std::collections::VecDeque;

use serde::Deserialize;

use super::response::{WireUsage, finish_reason};
use crate::model::sse::SseEvent;
use crate::model::transport::{EventDecoder, Target, decode_error, error_details};
use crate::model::{FinishReason, ModelError, StreamChunk, Usage};

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<ChoiceDelta>,
    usage: Option<WireUsage>,
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct ChoiceDelta {
    delta: Option<Delta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    content: Option<String>,
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ToolDelta>,
}

#[derive(Deserialize)]
struct ToolDelta {
    index: Option<usize>,
    id: Option<String>,
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    name: Option<String>,
    arguments: Option<String>,
}

/// Decodes chunks; the finish reason is held back until `[DONE]`, so that the finish chunk is
/// last even when usage comes after it.
pub(super) struct Decoder {
    target: Target,
    finish: Option<FinishReason>,
}

impl Decoder {
    pub(super) fn new(target: Target) -> Self {
        Self {
            target,
            finish: None,
        }
    }
}

impl EventDecoder for Decoder {
    fn decode(
        &mut self,
        event: SseEvent,
        out: &mut VecDeque<Result<StreamChunk, ModelError>>,
    ) -> Result<bool, ModelError> {
        if event.is_done() {
            let reason = self
                .finish
                .take()
                .unwrap_or_else(|| FinishReason::Other("unspecified".into()));
            out.push_back(Ok(StreamChunk::Finish { reason }));
            return Ok(true);
        }
        let chunk: Chunk = serde_json::from_str(&event.data)
            .map_err(|e| decode_error(&self.target, format!("bad stream chunk: {e}")))?;
        if let Some(error) = chunk.error {
            let (kind, message) = error_details(&serde_json::json!({ "error": error }).to_string());
            return Err(ModelError::StreamError {
                provider: self.target.provider.to_owned(),
                model: self.target.model.clone(),
                kind,
                message,
            });
        }
        if let Some(choice) = chunk.choices.into_iter().next() {
            if let Some(delta) = choice.delta {
                if let Some(text) = delta.content.or(delta.refusal).filter(|t| !t.is_empty()) {
                    out.push_back(Ok(StreamChunk::Text { text }));
                }
                for (position, call) in delta.tool_calls.into_iter().enumerate() {
                    let (name, arguments) = match call.function {
                        Some(f) => (f.name, f.arguments.unwrap_or_default()),
                        None => (None, String::new()),
                    };
                    out.push_back(Ok(StreamChunk::ToolCall {
                        index: call.index.unwrap_or(position),
                        id: call.id.filter(|id| !id.is_empty()),
                        name: name.filter(|n| !n.is_empty()),
                        arguments,
                    }));
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.finish = Some(finish_reason(&reason));
            }
        }
        if let Some(usage) = chunk.usage {
            out.push_back(Ok(StreamChunk::Usage(Usage::from(usage))));
        }
        Ok(false)
    }
}
