//! Streamed Chat Completions: `data: {chunk}` events ending in `data: [DONE]`.

use std::collections::VecDeque;

use serde::Deserialize;

use super::response::{WireUsage, content_text, finish_reason, null_as_default};
use crate::model::sse::SseEvent;
use crate::model::transport::{EventDecoder, Target, decode_error, error_event};
use crate::model::{FinishReason, ModelError, StreamChunk, Usage};

#[derive(Deserialize)]
struct Chunk {
    #[serde(default, deserialize_with = "null_as_default")]
    choices: Vec<ChoiceDelta>,
    usage: Option<WireUsage>,
    error: Option<serde_json::Value>,
    model: Option<String>,
}

#[derive(Deserialize)]
struct ChoiceDelta {
    delta: Option<Delta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default, deserialize_with = "content_text")]
    content: Option<String>,
    refusal: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    tool_calls: Vec<ToolDelta>,
}

#[derive(Deserialize)]
struct ToolDelta {
    index: Option<usize>,
    id: Option<String>,
    function: Option<FunctionDelta>,
    /// Gemini's thought signature, to be sent back with the call.
    extra_content: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    name: Option<String>,
    /// A piece of JSON text per the API; some compatible servers send the whole object, as
    /// they do in a reply that is not streamed.
    arguments: Option<serde_json::Value>,
}

/// Decodes chunks; the finish reason is held back until `[DONE]`, so that the finish chunk is
/// last even when usage comes after it.
pub(super) struct Decoder {
    target: Target,
    finish: Option<FinishReason>,
    /// Whether the model's name was passed on (every chunk repeats it).
    model_seen: bool,
    /// Whether the model refused (sent `refusal` text).
    refused: bool,
    /// The tool calls seen so far, in order, as (the index the server gave, the call's id).
    /// A call is passed on under its position here.
    calls: Vec<(Option<usize>, String)>,
    /// Whether any text or tool call came: `[DONE]` after nothing at all, and no finish
    /// reason, is not a reply.
    received: bool,
}

impl Decoder {
    pub(super) fn new(target: Target) -> Self {
        Self {
            target,
            finish: None,
            model_seen: false,
            refused: false,
            calls: Vec::new(),
            received: false,
        }
    }

    /// Which call of the reply a tool-call delta belongs to. A delta continues the latest
    /// call the server gave the same index, unless it starts another: some compatible
    /// servers send no `index` (Gemini's), where a new id starts the next call, or send
    /// every call of a parallel batch under `index: 0` (Ollama's), where a new id with a
    /// function name does. (An id that changes on a fragment of arguments, with no name,
    /// still continues its call.)
    fn call_index(&mut self, index: Option<usize>, id: Option<&str>, named: bool) -> usize {
        let latest = match index {
            Some(_) => self.calls.iter().rposition(|(given, _)| *given == index),
            None => self.calls.iter().rposition(|(given, _)| given.is_none()),
        };
        if let Some(position) = latest {
            let known = &mut self.calls[position].1;
            match id {
                None => return position,
                Some(id) if known == id => return position,
                Some(id) if known.is_empty() => {
                    id.clone_into(known);
                    return position;
                }
                Some(_) if index.is_some() && !named => return position,
                Some(_) => {}
            }
        }
        self.calls.push((index, id.unwrap_or_default().to_owned()));
        self.calls.len() - 1
    }
}

impl EventDecoder for Decoder {
    /// A body that ends after the finish reason but without `[DONE]` (some compatible
    /// servers close right after the last chunk) sent a whole reply.
    fn end(&mut self, out: &mut VecDeque<Result<StreamChunk, ModelError>>) -> bool {
        let reason = match self.finish.take() {
            _ if self.refused => FinishReason::ContentFilter,
            Some(reason) => reason,
            None => return false,
        };
        out.push_back(Ok(StreamChunk::Finish { reason }));
        true
    }

    fn decode(
        &mut self,
        event: SseEvent,
        out: &mut VecDeque<Result<StreamChunk, ModelError>>,
    ) -> Result<bool, ModelError> {
        if event.event.as_deref() == Some("error") {
            let error = serde_json::from_str(&event.data)
                .unwrap_or_else(|_| serde_json::Value::String(event.data.clone()));
            return Err(error_event(&self.target, error));
        }
        if event.is_done() {
            let reason = match self.finish.take() {
                _ if self.refused => FinishReason::ContentFilter,
                Some(reason) => reason,
                None if !self.received => {
                    return Err(ModelError::StreamCut {
                        provider: self.target.provider.to_owned(),
                        model: self.target.model.clone(),
                    });
                }
                // A whole reply whose server named no reason (or only ever an empty one):
                // a plain stop, as `complete()` takes the same reply.
                None => FinishReason::Stop,
            };
            out.push_back(Ok(StreamChunk::Finish { reason }));
            return Ok(true);
        }
        // A keep-alive some proxies send (`data:` with nothing after it) says nothing.
        if event.data.trim().is_empty() {
            return Ok(false);
        }
        let chunk: Chunk = serde_json::from_str(&event.data)
            .map_err(|e| decode_error(&self.target, format!("bad stream chunk: {e}")))?;
        if let Some(error) = chunk.error {
            return Err(error_event(&self.target, error));
        }
        if !self.model_seen
            && let Some(model) = chunk.model.filter(|m| !m.is_empty())
        {
            self.model_seen = true;
            out.push_back(Ok(StreamChunk::Model { model }));
        }
        if let Some(choice) = chunk.choices.into_iter().next() {
            if let Some(delta) = choice.delta {
                if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                    self.received = true;
                    out.push_back(Ok(StreamChunk::Text { text }));
                }
                // A refusal streams as the reply's text, and the reply ends as filtered.
                if let Some(text) = delta.refusal.filter(|t| !t.is_empty()) {
                    self.refused = true;
                    out.push_back(Ok(StreamChunk::Text { text }));
                }
                for call in delta.tool_calls {
                    let (name, arguments) = match call.function {
                        Some(f) => (f.name, f.arguments),
                        None => (None, None),
                    };
                    let arguments = match arguments {
                        None | Some(serde_json::Value::Null) => String::new(),
                        Some(serde_json::Value::String(text)) => text,
                        Some(value) => value.to_string(),
                    };
                    let id = call.id.filter(|id| !id.is_empty());
                    self.received = true;
                    let index = self.call_index(
                        call.index,
                        id.as_deref(),
                        name.as_ref().is_some_and(|n| !n.is_empty()),
                    );
                    // A fragment that continues a call under another id (a proxy's) goes on
                    // under the call's first id: listeners see one id a call.
                    let id =
                        id.filter(|id| self.calls.get(index).is_some_and(|(_, known)| known == id));
                    out.push_back(Ok(StreamChunk::ToolCall {
                        index,
                        provider_extra: call.extra_content.filter(|extra| !extra.is_null()),
                        id,
                        name: name.filter(|n| !n.is_empty()),
                        arguments,
                    }));
                }
            }
            // An empty reason (some servers send `""` on every chunk) says nothing: taken
            // as a finish, a body cut after it would pass for a whole reply.
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                self.finish = Some(finish_reason(&reason));
            }
        }
        if let Some(usage) = chunk.usage {
            out.push_back(Ok(StreamChunk::Usage(Usage::from(usage))));
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::transport::sse_chunks;
    use crate::model::{ModelResponse, ToolCall, collect_stream};
    use proptest::prelude::*;
    use serde_json::json;
    use std::time::Duration;

    fn transcript() -> String {
        let chunks = [
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "Sür"}, "finish_reason": null}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "e."}, "finish_reason": null}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "id": "call_a", "type": "function", "function": {"name": "f", "arguments": "{\"x\""}},
                {"index": 1, "id": "call_b", "type": "function", "function": {"name": "g", "arguments": ""}}
            ]}, "finish_reason": null}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "function": {"arguments": ": 1}"}}]}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 5}}),
        ];
        let mut text = String::from(": hello\r\n\r\n");
        for chunk in chunks {
            text.push_str(&format!("data: {chunk}\r\n\r\n"));
        }
        text + "data: [DONE]\r\n\r\n"
    }

    fn decode(pieces: Vec<Vec<u8>>) -> Result<ModelResponse, ModelError> {
        let target = Target {
            provider: "openai",
            model: "m".into(),
            url: String::new(),
        };
        let body = futures_util::stream::iter(pieces.into_iter().map(Ok::<_, reqwest::Error>));
        let stream = sse_chunks(
            body,
            Decoder::new(target.clone()),
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
    fn decodes_text_parallel_tool_calls_and_usage() {
        let response = decode(vec![transcript().into_bytes()]).unwrap();
        assert_eq!(response.content, "Süre.");
        assert_eq!(
            response.tool_calls,
            vec![
                ToolCall::new("call_a", "f", json!({"x": 1})),
                ToolCall::new("call_b", "g", json!({}))
            ]
        );
        assert_eq!(response.finish_reason, FinishReason::ToolCalls);
        assert_eq!(response.usage.total_tokens(), 12);
    }

    /// A proxy's keep-alive (`data:` with nothing after it) between chunks changes nothing.
    #[test]
    fn an_empty_keep_alive_event_is_skipped() {
        let text = transcript().replacen("\r\n\r\ndata: ", "\r\n\r\ndata: \r\n\r\ndata: ", 3);
        assert_eq!(text.matches("data: \r\n").count(), 3, "{text}");
        let response = decode(vec![text.into_bytes()]).unwrap();
        assert_eq!(response.content, "Süre.");
        assert_eq!(response.usage.total_tokens(), 12);
    }

    #[test]
    fn a_body_that_ends_before_its_finish_reason_is_cut() {
        let text = transcript();
        // Without `[DONE]`, but past the finish reason: whole.
        let no_done = text.trim_end_matches("data: [DONE]\r\n\r\n");
        let whole = decode(vec![no_done.as_bytes().to_vec()]).unwrap();
        assert_eq!(whole.finish_reason, FinishReason::ToolCalls);
        // Before the chunk with the finish reason: cut.
        let before = &text[..text.find("\"finish_reason\":\"tool_calls\"").unwrap()];
        let before = &before[..before.rfind("data:").unwrap()];
        let err = decode(vec![before.as_bytes().to_vec()]).unwrap_err();
        assert!(matches!(err, ModelError::StreamCut { .. }), "{err:?}");
    }

    proptest! {
        #[test]
        fn any_split_decodes_to_the_same_response(cuts in proptest::collection::vec(0usize..2048, 0..30)) {
            let text = transcript().into_bytes();
            let pieces = crate::model::sse::tests::split_at(&text, &cuts);
            prop_assert_eq!(decode(pieces).unwrap(), decode(vec![text.clone()]).unwrap());
        }
    }
}
