//! [`ModelResponse`], streamed [`StreamChunk`]s, and [`collect_stream`] which folds the one
//! into the other.

use std::collections::BTreeMap;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use super::{ChunkStream, Message, ModelError, ToolCall};

/// Why the model stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// It finished its reply, or hit a stop sequence.
    Stop,
    /// It hit the token limit. A tool call the limit cut short is dropped from the reply.
    Length,
    /// It wants tools called.
    ToolCalls,
    /// The provider filtered or refused the reply; a refusal's text is the reply's content.
    ContentFilter,
    /// Anything else, as the provider named it.
    Other(String),
}

/// Token counts of one call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens, cached ones included.
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
    /// Prompt tokens served from the provider's cache.
    pub cached_tokens: u64,
}

impl Usage {
    /// Input plus output tokens.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// Adds as counts of tokens do: a sum past `u64::MAX` (a server's absurd report) stays
/// there rather than overflowing.
impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Self) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(other.cached_tokens);
    }
}

/// A model's complete reply.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelResponse {
    /// The reply's text; with an output schema, the JSON document.
    pub content: String,
    /// The tools it asked to call, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Why it stopped.
    pub finish_reason: FinishReason,
    /// Token counts.
    #[serde(default)]
    pub usage: Usage,
    /// The model that answered, as the provider reported it (`gpt-4o-2024-08-06` for a
    /// request to `gpt-4o`), when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl ModelResponse {
    /// Gives each tool call that came without an id (some OpenAI-compatible servers send
    /// none, or `null`), or with the id of an earlier call of the reply (a model that writes
    /// its own), one of its own, unique: what is keyed by a call's id (its result in the
    /// transcript, its approval, its journaled run) then stays apart from the other calls'.
    pub(crate) fn name_unnamed_calls(&mut self) {
        for at in 0..self.tool_calls.len() {
            let (earlier, rest) = self.tool_calls.split_at_mut(at);
            let Some(call) = rest.first_mut() else {
                break;
            };
            if call.id.trim().is_empty() || earlier.iter().any(|e| e.id == call.id) {
                call.id = unique_call_id();
            }
        }
    }

    /// A text reply that finished normally, with no usage.
    pub fn text(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            tool_calls: Vec::new(),
            finish_reason: FinishReason::Stop,
            usage: Usage::default(),
            model: None,
        }
    }

    /// A reply that calls tools.
    pub fn tool_calls(tool_calls: Vec<ToolCall>) -> Self {
        Self {
            content: String::new(),
            tool_calls,
            finish_reason: FinishReason::ToolCalls,
            usage: Usage::default(),
            model: None,
        }
    }

    /// Sets the usage.
    #[must_use]
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = usage;
        self
    }

    /// The reply as an assistant [`Message`], to append to the conversation.
    pub fn message(&self) -> Message {
        Message::Assistant {
            content: self.content.clone(),
            tool_calls: self.tool_calls.clone(),
        }
    }

    /// Deserializes the reply's text (an output-schema reply) into `T`.
    ///
    /// # Errors
    ///
    /// The serde error when the text is not a `T` in JSON.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.content)
    }
}

/// One piece of a streamed reply.
///
/// A well-formed stream ends with exactly one [`StreamChunk::Finish`]; everything before it
/// may come in any number of pieces.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamChunk {
    /// More text.
    Text {
        /// The new text.
        text: String,
    },
    /// A piece of a tool call. The first piece of a call carries its id and name (a name on
    /// a later piece is ignored); arguments arrive as fragments of a JSON text to concatenate.
    ToolCall {
        /// Which call of the reply (0, 1, …) this piece belongs to.
        index: usize,
        /// The call's id, on its first piece.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The tool's name, on its first piece.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// A fragment of the arguments' JSON text.
        #[serde(default)]
        arguments: String,
        /// What the provider sent with the call to have it sent back (see
        /// [`ToolCall::provider_extra`]), on the piece that carried it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider_extra: Option<serde_json::Value>,
    },
    /// Token counts so far; a later one replaces an earlier one.
    Usage(Usage),
    /// The model that answers, as the provider reports it (see [`ModelResponse::model`]).
    Model {
        /// Its name.
        model: String,
    },
    /// The reply is complete.
    Finish {
        /// Why the model stopped.
        reason: FinishReason,
    },
}

/// Folds [`StreamChunk`]s into the [`ModelResponse`] a complete call gives.
#[derive(Debug, Default)]
pub struct StreamAccumulator {
    content: String,
    calls: BTreeMap<usize, PartialCall>,
    usage: Usage,
    finish: Option<FinishReason>,
    model: Option<String>,
}

#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
    provider_extra: Option<serde_json::Value>,
}

impl StreamAccumulator {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one chunk.
    pub fn push(&mut self, chunk: StreamChunk) {
        match chunk {
            StreamChunk::Text { text } => self.content.push_str(&text),
            StreamChunk::ToolCall {
                index,
                id,
                name,
                arguments,
                provider_extra,
            } => {
                let call = self.calls.entry(index).or_default();
                if provider_extra.is_some() {
                    call.provider_extra = provider_extra;
                }
                // The id is the call's first piece's, as its name is.
                if let Some(id) = id.filter(|_| call.id.is_empty()) {
                    call.id = id;
                }
                // The name is whole on the call's first piece; servers that repeat it on
                // later pieces do not get it doubled.
                if let Some(name) = name.filter(|_| call.name.is_empty()) {
                    call.name = name;
                }
                call.arguments.push_str(&arguments);
            }
            StreamChunk::Usage(usage) => self.usage = usage,
            StreamChunk::Model { model } => self.model = Some(model),
            StreamChunk::Finish { reason } => self.finish = Some(reason),
        }
    }

    /// Whether a [`StreamChunk::Finish`] has been seen.
    pub fn is_finished(&self) -> bool {
        self.finish.is_some()
    }

    /// The response.
    ///
    /// # Errors
    ///
    /// [`ModelError::StreamCut`] when no finish chunk was seen, naming `provider` and
    /// `model`. A tool call whose arguments are not JSON keeps them as text (a
    /// [`Value::String`](serde_json::Value::String)), which the tool host answers with an
    /// error the model reads, unless the reply hit its token limit: then the call is
    /// dropped, and the finish reason is [`FinishReason::Length`].
    pub fn finish(self, provider: &str, model: &str) -> Result<ModelResponse, ModelError> {
        let Some(finish_reason) = self.finish else {
            return Err(ModelError::StreamCut {
                provider: provider.to_owned(),
                model: model.to_owned(),
            });
        };
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for call in self.calls.into_values() {
            let arguments = match parse_arguments(&call.arguments) {
                // Cut before its first argument: not an empty object.
                Ok(_)
                    if finish_reason == FinishReason::Length
                        && call.arguments.trim().is_empty() =>
                {
                    continue;
                }
                Ok(arguments) => arguments,
                // The token limit cut the call short: it is dropped, and the reply's
                // `Length` says why, rather than a decode error.
                Err(_) if finish_reason == FinishReason::Length => continue,
                // Kept as the text it is: the tool host answers the call with an error the
                // model reads (arguments that are not JSON), and the run goes on.
                Err(_) => serde_json::Value::String(call.arguments),
            };
            tool_calls.push(ToolCall {
                arguments,
                id: call.id,
                name: call.name,
                provider_extra: call.provider_extra,
            });
        }
        Ok(ModelResponse {
            content: self.content,
            tool_calls,
            finish_reason,
            usage: self.usage,
            model: self.model,
        })
    }
}

/// Parses a tool call's argument text; an empty text is an empty object.
pub(crate) fn parse_arguments(text: &str) -> Result<serde_json::Value, serde_json::Error> {
    if text.trim().is_empty() {
        Ok(serde_json::Value::Object(serde_json::Map::new()))
    } else {
        serde_json::from_str(text)
    }
}

/// Drains a chunk stream into the [`ModelResponse`] the complete call would give.
///
/// # Errors
///
/// The first error the stream yields; [`ModelError::StreamCut`] when it ends without a
/// finish chunk, which the adapters' streams report themselves, naming the provider and the
/// model; for other streams the error names the model the stream reported, if it did. A
/// tool call whose arguments are not JSON keeps them as text, as
/// [`StreamAccumulator::finish`] says.
///
/// # Examples
///
/// ```
/// use loomflow::model::{collect_stream, EchoModel, Message, Model, ModelRequest};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let model = EchoModel::new();
/// let stream = model.stream(ModelRequest::new(vec![Message::user("hello there")]));
/// let response = collect_stream(stream).await?;
/// assert_eq!(response.content, "hello there");
/// # Ok::<_, loomflow::model::ModelError>(())
/// # }).unwrap();
/// ```
pub async fn collect_stream(mut stream: ChunkStream) -> Result<ModelResponse, ModelError> {
    let mut acc = StreamAccumulator::new();
    while let Some(chunk) = stream.next().await {
        acc.push(chunk?);
    }
    let model = acc.model.clone();
    acc.finish(
        "an unnamed provider",
        model.as_deref().unwrap_or("(unnamed)"),
    )
}

/// A tool call id no other call has: the process, the time and a counter, hashed.
fn unique_call_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.write_u64(NEXT.fetch_add(1, Ordering::Relaxed));
    format!("call_lf{:016x}", hasher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Counts a server reported past `u64::MAX` stay there: adding them does not overflow.
    #[test]
    fn usage_adds_without_overflowing() {
        let mut usage = Usage {
            input_tokens: u64::MAX,
            output_tokens: 5,
            cached_tokens: 0,
        };
        assert_eq!(usage.total_tokens(), u64::MAX);
        usage += usage;
        assert_eq!((usage.input_tokens, usage.output_tokens), (u64::MAX, 10));
    }

    #[test]
    fn accumulator_joins_text_and_tool_call_fragments() {
        let mut acc = StreamAccumulator::new();
        for chunk in [
            StreamChunk::Text { text: "Hel".into() },
            StreamChunk::Text { text: "lo".into() },
            StreamChunk::ToolCall {
                index: 1,
                id: Some("b".into()),
                name: Some("g".into()),
                arguments: String::new(),
                provider_extra: None,
            },
            StreamChunk::ToolCall {
                index: 0,
                id: Some("a".into()),
                name: Some("f".into()),
                arguments: "{\"x\":".into(),
                provider_extra: None,
            },
            StreamChunk::ToolCall {
                index: 0,
                id: None,
                name: None,
                arguments: "1}".into(),
                provider_extra: None,
            },
            StreamChunk::Usage(Usage {
                input_tokens: 3,
                output_tokens: 1,
                cached_tokens: 0,
            }),
            StreamChunk::Finish {
                reason: FinishReason::ToolCalls,
            },
        ] {
            acc.push(chunk);
        }
        let response = acc.finish("p", "m").unwrap();
        assert_eq!(response.content, "Hello");
        assert_eq!(
            response.tool_calls,
            vec![
                ToolCall::new("a", "f", json!({"x": 1})),
                ToolCall::new("b", "g", json!({}))
            ]
        );
        assert_eq!(response.usage.total_tokens(), 4);
    }

    #[test]
    fn accumulator_without_finish_is_a_cut_stream() {
        let mut acc = StreamAccumulator::new();
        acc.push(StreamChunk::Text { text: "x".into() });
        assert!(matches!(
            acc.finish("openai", "m"),
            Err(ModelError::StreamCut { .. })
        ));
    }
}
