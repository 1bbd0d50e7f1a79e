//! In-process fakes: [`ScriptedModel`] replays responses, [`EchoModel`] repeats the user.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use super::{
    BoxFuture, ChunkStream, Message, Model, ModelError, ModelRequest, ModelResponse, StreamChunk,
    Usage,
};

/// A model that replays a fixed list of responses, one per call, tool calls included.
///
/// Streaming yields the same response cut into chunks (text in word-sized pieces, each tool
/// call's arguments in fragments), so code that folds streams sees what a real adapter sends.
/// Every request received is recorded for assertions. Once the script is spent, calls fail
/// with [`ModelError::ScriptExhausted`].
///
/// # Examples
///
/// ```
/// use futures_util::StreamExt;
/// use loomflow::model::{Model, ModelRequest, ModelResponse, ScriptedModel, StreamChunk};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let model = ScriptedModel::new(vec![ModelResponse::text("one two")]);
/// let mut stream = model.stream(ModelRequest::default());
/// let mut text = String::new();
/// while let Some(chunk) = stream.next().await {
///     if let StreamChunk::Text { text: piece } = chunk? {
///         text.push_str(&piece);
///     }
/// }
/// assert_eq!(text, "one two");
/// assert_eq!(model.requests().len(), 1);
/// let err = model.complete(ModelRequest::default()).await.unwrap_err();
/// assert_eq!(err.to_string(), "scripted model ran out of responses: its script had 1");
/// # Ok::<_, loomflow::model::ModelError>(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct ScriptedModel {
    script: Mutex<Script>,
    len: usize,
    name: String,
    native_output: bool,
}

#[derive(Debug)]
struct Script {
    remaining: VecDeque<ModelResponse>,
    requests: Vec<ModelRequest>,
}

impl ScriptedModel {
    /// A model that answers with `responses`, in order.
    pub fn new(responses: impl IntoIterator<Item = ModelResponse>) -> Self {
        let remaining: VecDeque<_> = responses.into_iter().collect();
        Self {
            len: remaining.len(),
            script: Mutex::new(Script {
                remaining,
                requests: Vec::new(),
            }),
            name: "scripted".to_owned(),
            native_output: true,
        }
    }

    /// Plays a model without structured output
    /// ([`Model::supports_output_schema`] is `false`): agents ask for their output schema in
    /// the prompt.
    #[must_use]
    pub fn without_structured_output(mut self) -> Self {
        self.native_output = false;
        self
    }

    /// Goes by `name` (default `scripted`) in spans, logs and price tables: a stand-in for
    /// a real model, say `openai:gpt-4o`.
    #[must_use]
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The requests received so far, in order.
    pub fn requests(&self) -> Vec<ModelRequest> {
        self.lock().requests.clone()
    }

    /// How many responses are left.
    pub fn remaining(&self) -> usize {
        self.lock().remaining.len()
    }

    fn lock(&self) -> MutexGuard<'_, Script> {
        // A panic while holding this lock cannot leave the script half-updated.
        crate::sync::lock(&self.script)
    }

    fn next(&self, request: ModelRequest) -> Result<ModelResponse, ModelError> {
        let mut script = self.lock();
        script.requests.push(request);
        script
            .remaining
            .pop_front()
            .ok_or(ModelError::ScriptExhausted { len: self.len })
    }
}

impl Model for ScriptedModel {
    fn name(&self) -> &str {
        &self.name
    }

    fn supports_output_schema(&self) -> bool {
        self.native_output
    }

    fn complete(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        let result = self.next(request);
        Box::pin(async move { result })
    }

    fn stream(&self, request: ModelRequest) -> ChunkStream {
        let items: Vec<Result<StreamChunk, ModelError>> = match self.next(request) {
            Ok(response) => response_chunks(&response).into_iter().map(Ok).collect(),
            Err(error) => vec![Err(error)],
        };
        Box::pin(futures_util::stream::iter(items))
    }
}

/// A model that replies with the text of the last user message.
///
/// # Examples
///
/// ```
/// use loomflow::model::{EchoModel, Message, Model, ModelRequest};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let reply = EchoModel::new()
///     .complete(ModelRequest::new(vec![Message::user("ping")]))
///     .await?;
/// assert_eq!(reply.content, "ping");
/// # Ok::<_, loomflow::model::ModelError>(())
/// # }).unwrap();
/// ```
#[derive(Clone, Debug, Default)]
pub struct EchoModel {
    _private: (),
}

impl EchoModel {
    /// An echo model.
    pub fn new() -> Self {
        Self::default()
    }

    fn reply(request: &ModelRequest) -> ModelResponse {
        let text = request
            .messages
            .iter()
            .rev()
            .find_map(|m| match m {
                Message::User { content } => Some(content.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let input: usize = request
            .messages
            .iter()
            .map(|m| m.text().split_whitespace().count())
            .sum();
        let output = text.split_whitespace().count();
        ModelResponse::text(text).with_usage(Usage {
            input_tokens: input as u64,
            output_tokens: output as u64,
            cached_tokens: 0,
        })
    }
}

impl Model for EchoModel {
    fn name(&self) -> &str {
        "echo"
    }

    fn complete(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        let response = Self::reply(&request);
        Box::pin(async move { Ok(response) })
    }

    fn stream(&self, request: ModelRequest) -> ChunkStream {
        let chunks = response_chunks(&Self::reply(&request));
        Box::pin(futures_util::stream::iter(chunks.into_iter().map(Ok)))
    }
}

/// Cuts a response into the chunks a streaming provider would send.
pub(crate) fn response_chunks(response: &ModelResponse) -> Vec<StreamChunk> {
    let mut chunks = Vec::new();
    let mut rest = response.content.as_str();
    while !rest.is_empty() {
        // one word and the whitespace before it per chunk
        let start = rest.len() - rest.trim_start().len();
        let end = rest[start..]
            .find(char::is_whitespace)
            .map_or(rest.len(), |i| start + i);
        chunks.push(StreamChunk::Text {
            text: rest[..end].to_owned(),
        });
        rest = &rest[end..];
    }
    for (index, call) in response.tool_calls.iter().enumerate() {
        let arguments = call.arguments.to_string();
        let mut mid = arguments.len() / 2;
        while !arguments.is_char_boundary(mid) {
            mid -= 1;
        }
        chunks.push(StreamChunk::ToolCall {
            index,
            id: Some(call.id.clone()),
            name: Some(call.name.clone()),
            arguments: String::new(),
            provider_extra: call.provider_extra.clone(),
        });
        for part in [&arguments[..mid], &arguments[mid..]] {
            chunks.push(StreamChunk::ToolCall {
                index,
                id: None,
                name: None,
                arguments: part.to_owned(),
                provider_extra: None,
            });
        }
    }
    if response.usage != Usage::default() {
        chunks.push(StreamChunk::Usage(response.usage));
    }
    if let Some(model) = &response.model {
        chunks.push(StreamChunk::Model {
            model: model.clone(),
        });
    }
    chunks.push(StreamChunk::Finish {
        reason: response.finish_reason.clone(),
    });
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FinishReason, ToolCall, collect_stream};
    use serde_json::json;

    #[tokio::test]
    async fn streamed_script_folds_to_the_scripted_response() {
        let response = ModelResponse {
            content: "  héllo  wide world ".into(),
            tool_calls: vec![
                ToolCall::new("a", "f", json!({"city": "Zürich"})),
                ToolCall::new("b", "g", json!({})),
            ],
            finish_reason: FinishReason::ToolCalls,
            usage: Usage {
                input_tokens: 5,
                output_tokens: 7,
                cached_tokens: 1,
            },
            model: None,
        };
        let model = ScriptedModel::new(vec![response.clone()]);
        let folded = collect_stream(model.stream(ModelRequest::default()))
            .await
            .unwrap();
        assert_eq!(folded, response);
        assert_eq!(model.remaining(), 0);
    }
}
