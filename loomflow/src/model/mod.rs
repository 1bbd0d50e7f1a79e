//! Models: the [`Model`] trait, messages, requests and responses, and the adapters.
//!
//! - [`OpenAiModel`]: OpenAI Chat Completions, or any compatible server through its base URL.
//! - [`AnthropicModel`]: the Anthropic Messages API.
//! - [`ScriptedModel`] and [`EchoModel`]: in-process fakes for tests and examples.
//! - [`resolve`]: a model string such as `"gpt-4o"` or `"claude-sonnet-4-5"` to an adapter.
//!
//! Both HTTP adapters stream over server-sent events ([`sse`]), retry transient failures
//! ([`RetryPolicy`]), and fail with a typed [`ModelError`].
//!
//! # Examples
//!
//! ```
//! use loomflow::model::{Message, Model, ModelRequest, ModelResponse, ScriptedModel, ToolCall};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let model = ScriptedModel::new(vec![
//!     ModelResponse::tool_calls(vec![ToolCall::new("c1", "clock", serde_json::json!({}))]),
//!     ModelResponse::text("It is noon."),
//! ]);
//! let mut messages = vec![Message::user("What time is it?")];
//! let first = model.complete(ModelRequest::new(messages.clone())).await?;
//! assert_eq!(first.tool_calls[0].name, "clock");
//! messages.push(first.message());
//! messages.push(Message::tool_result("c1", "12:00"));
//! let second = model.complete(ModelRequest::new(messages)).await?;
//! assert_eq!(second.content, "It is noon.");
//! // the script is spent now
//! assert!(model.complete(ModelRequest::default()).await.is_err());
//! # Ok::<_, loomflow::model::ModelError>(())
//! # }).unwrap();
//! ```

use std::pin::Pin;
use std::sync::Arc;

use futures_core::Stream;

#[cfg(feature = "anthropic")]
pub mod anthropic;
mod endpoint;
mod error;
mod message;
pub(crate) use endpoint::without_credentials;
#[cfg(feature = "openai")]
pub mod openai;
mod price;
mod request;
mod resolve;
mod response;
mod retry;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod retry_after;
mod scripted;
mod secret;
pub mod sse;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod stream_reply;
pub mod transcript;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod transport;

#[cfg(feature = "anthropic")]
#[doc(inline)]
pub use anthropic::AnthropicModel;
pub use error::ModelError;
pub use message::{Message, Role, ToolCall, ToolResult};
#[cfg(feature = "openai")]
#[doc(inline)]
pub use openai::OpenAiModel;
pub use price::PriceTable;
pub use request::{ModelRequest, OutputSchema, ToolChoice, ToolDefinition};
pub use resolve::{ACCEPTED_FORMS, ModelSpec, Provider, resolve, resolve_with_key};
pub use response::{
    FinishReason, ModelResponse, StreamAccumulator, StreamChunk, Usage, collect_stream,
};
pub use retry::RetryPolicy;
pub use scripted::{EchoModel, ScriptedModel};
pub use secret::ApiKey;
pub use transcript::Transcript;

/// A boxed, `Send` future, as [`Model`] methods return.
pub use futures_util::future::BoxFuture;

/// A streamed reply: chunks, or the error that ended the stream.
pub type ChunkStream = Pin<Box<dyn Stream<Item = Result<StreamChunk, ModelError>> + Send>>;

/// A language model: a complete call and a streamed call.
///
/// The trait is object-safe (`Arc<dyn Model>`) and its futures and streams are `Send`, so a
/// model can be shared across tasks. Folding [`Model::stream`] with [`collect_stream`] gives
/// the same [`ModelResponse`] as [`Model::complete`].
///
/// # Examples
///
/// Implementing it by hand:
///
/// ```
/// use loomflow::model::{
///     BoxFuture, ChunkStream, Model, ModelError, ModelRequest, ModelResponse, StreamChunk,
///     FinishReason,
/// };
///
/// #[derive(Debug)]
/// struct Shouty;
///
/// impl Model for Shouty {
///     fn name(&self) -> &str {
///         "shouty"
///     }
///
///     fn complete(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
///         let last = request.messages.last().map(|m| m.text().to_uppercase()).unwrap_or_default();
///         Box::pin(async move { Ok(ModelResponse::text(last)) })
///     }
///
///     fn stream(&self, request: ModelRequest) -> ChunkStream {
///         let text = request.messages.last().map(|m| m.text().to_uppercase()).unwrap_or_default();
///         Box::pin(futures_util::stream::iter([
///             Ok(StreamChunk::Text { text }),
///             Ok(StreamChunk::Finish { reason: FinishReason::Stop }),
///         ]))
///     }
/// }
///
/// let model: std::sync::Arc<dyn Model> = std::sync::Arc::new(Shouty);
/// assert_eq!(model.name(), "shouty");
/// ```
pub trait Model: Send + Sync + std::fmt::Debug {
    /// A name for logs and errors, e.g. `openai:gpt-4o`.
    fn name(&self) -> &str;

    /// Sends the request and waits for the whole reply.
    ///
    /// # Errors
    ///
    /// A [`ModelError`] naming the provider and model: transport, status, decoding, or
    /// (for fakes) a spent script.
    fn complete(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>>;

    /// Sends the request and streams the reply. A failure to connect is the stream's first
    /// (and last) item; a reply cut short ends with [`ModelError::StreamCut`].
    fn stream(&self, request: ModelRequest) -> ChunkStream;

    /// Whether the model follows [`ModelRequest::output_schema`] natively (structured
    /// output). Default `true`. An agent asks a model that does not in its prompt instead,
    /// and checks the answer either way.
    fn supports_output_schema(&self) -> bool {
        true
    }
}

impl<M: Model + ?Sized> Model for Arc<M> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn complete(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        (**self).complete(request)
    }

    fn stream(&self, request: ModelRequest) -> ChunkStream {
        (**self).stream(request)
    }

    fn supports_output_schema(&self) -> bool {
        (**self).supports_output_schema()
    }
}

impl<M: Model + ?Sized> Model for Box<M> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn complete(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        (**self).complete(request)
    }

    fn stream(&self, request: ModelRequest) -> ChunkStream {
        (**self).stream(request)
    }

    fn supports_output_schema(&self) -> bool {
        (**self).supports_output_schema()
    }
}

const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    #[cfg(feature = "openai")]
    assert_send_sync::<OpenAiModel>();
    #[cfg(feature = "anthropic")]
    assert_send_sync::<AnthropicModel>();
    assert_send_sync::<ScriptedModel>();
    assert_send_sync::<EchoModel>();
    assert_send_sync::<Arc<dyn Model>>();
    assert_send_sync::<ModelError>();
};
