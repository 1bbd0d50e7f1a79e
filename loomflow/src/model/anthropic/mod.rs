//! The Anthropic Messages adapter (`POST {base}/v1/messages`), for Anthropic and any server
//! that speaks the same API (llama.cpp does).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use super::endpoint::{self, Endpoint};
use super::retry::with_retry;
use super::stream_reply::{self, StreamReply};
use super::transport::{self, Target};
use super::{
    ApiKey, BoxFuture, ChunkStream, Model, ModelError, ModelRequest, ModelResponse, RetryPolicy,
};

mod request;
mod response;
mod stream;

/// Anthropic's API address; the default base URL (without `/v1`).
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";

/// The host whose base URLs count as Anthropic's own: only they get `ANTHROPIC_API_KEY`.
const ANTHROPIC_HOST: &str = "api.anthropic.com";

/// The environment variable the key is read from when none is given.
pub const ANTHROPIC_API_KEY_ENV: &str = "ANTHROPIC_API_KEY";

/// The `anthropic-version` header sent.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// A model behind the Anthropic Messages API.
///
/// Clones share one HTTP client (rustls with the `ring` provider). Non-streamed and streamed
/// replies (`message_start` … `message_stop`), tool calls (parallel ones too), usage (cache
/// reads count as cached input), retries and a per-request timeout. An output schema becomes
/// a forced tool whose input is returned as the reply's text, so the response looks like any
/// structured reply; streamed, that text comes whole at the end, written as the complete call
/// writes it. A server that ignores `"stream": true` and sends the whole message as JSON is
/// read as a complete call's reply, and [`Model::stream`] hands it back in one piece.
///
/// # Examples
///
/// ```no_run
/// use loomflow::model::{AnthropicModel, Message, Model, ModelRequest};
///
/// # #[allow(dead_code)]
/// # async fn run() -> Result<(), loomflow::model::ModelError> {
/// let model = AnthropicModel::new("claude-sonnet-4-5")?; // key from ANTHROPIC_API_KEY
/// let reply = model.complete(ModelRequest::new(vec![Message::user("Hi!")])).await?;
/// println!("{}", reply.content);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct AnthropicModel {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: reqwest::Client,
    /// `anthropic`, or `anthropic-compatible` for another server.
    provider: &'static str,
    name: String,
    model: String,
    url: Endpoint,
    key: Option<ApiKey>,
    retry: RetryPolicy,
    timeout: Duration,
    default_max_tokens: u32,
}

const PROVIDER: &str = "anthropic";

/// Builds an [`AnthropicModel`].
#[derive(Debug)]
#[must_use]
pub struct AnthropicModelBuilder {
    model: String,
    /// Shown without its credentials or its query's values, in `Debug` too.
    base_url: Option<Endpoint>,
    key: Option<ApiKey>,
    retry: RetryPolicy,
    timeout: Duration,
    default_max_tokens: u32,
}

impl AnthropicModelBuilder {
    /// Sends requests to this base URL (without `/v1`), e.g. `http://127.0.0.1:8080`.
    /// The default is [`ANTHROPIC_BASE_URL`]. A query it has stays after the request's
    /// path. A URL that ends in `/v1/messages` already is taken as the endpoint itself.
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = Some(Endpoint::new(url.into()));
        self
    }

    /// Uses this key. Without one, a base URL on exactly `https://api.anthropic.com` (default port,
    /// no user name) gets the `ANTHROPIC_API_KEY` environment variable and other base URLs get no
    /// key: the variable's key is never sent elsewhere, not even to a look-alike host.
    pub fn api_key(mut self, key: impl Into<ApiKey>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets the retry policy (default: [`RetryPolicy::default`]).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Sets the per-request timeout (default 120 s). When streaming it bounds the wait for
    /// the answer's headers and then for each next piece of the body.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The `max_tokens` sent when a request sets none (the API requires one; default 4096).
    pub fn default_max_tokens(mut self, max_tokens: u32) -> Self {
        self.default_max_tokens = max_tokens;
        self
    }

    /// Builds the adapter.
    ///
    /// # Errors
    ///
    /// [`ModelError::MissingApiKey`] for api.anthropic.com without a key (other base URLs may
    /// go without one); [`ModelError::Config`] for a base URL that is not `http(s)://…` or a
    /// TLS set-up failure.
    pub fn build(self) -> Result<AnthropicModel, ModelError> {
        let base = (self.base_url.map(Endpoint::into_full))
            .unwrap_or_else(|| ANTHROPIC_BASE_URL.to_owned());
        let official = endpoint::is_official_host(&base, ANTHROPIC_HOST);
        // Another server (a proxy, a gateway) is named as such: its errors, prices and rate
        // limits are its own, not Anthropic's.
        let provider = if official {
            PROVIDER
        } else {
            "anthropic-compatible"
        };
        endpoint::check_base_url(&base, provider)?;
        // The environment's key is for Anthropic: it is never sent to another server.
        let key = self.key.or_else(|| {
            official
                .then(|| ApiKey::from_env(ANTHROPIC_API_KEY_ENV))
                .flatten()
        });
        if official && key.is_none() {
            return Err(ModelError::MissingApiKey {
                provider: PROVIDER.to_owned(),
                env: ANTHROPIC_API_KEY_ENV.to_owned(),
            });
        }
        Ok(AnthropicModel {
            inner: Arc::new(Inner {
                client: transport::build_client(provider)?,
                provider,
                name: format!("{provider}:{}", self.model),
                model: self.model,
                url: Endpoint::new(crate::model::endpoint::under(&base, "v1/messages")),
                key,
                retry: self.retry,
                timeout: self.timeout,
                default_max_tokens: self.default_max_tokens,
            }),
        })
    }
}

impl AnthropicModel {
    /// A builder for `model` (e.g. `claude-sonnet-4-5`).
    pub fn builder(model: impl Into<String>) -> AnthropicModelBuilder {
        AnthropicModelBuilder {
            model: model.into(),
            base_url: None,
            key: None,
            retry: RetryPolicy::default(),
            timeout: Duration::from_secs(120),
            default_max_tokens: 4096,
        }
    }

    /// `model` on api.anthropic.com, with the key from `ANTHROPIC_API_KEY`.
    ///
    /// # Errors
    ///
    /// As [`AnthropicModelBuilder::build`].
    pub fn new(model: impl Into<String>) -> Result<Self, ModelError> {
        Self::builder(model).build()
    }

    /// The model name requests use unless they name another.
    pub fn model(&self) -> &str {
        &self.inner.model
    }
}

impl Inner {
    fn target(&self, request: &ModelRequest) -> Target {
        Target {
            provider: self.provider,
            model: request.model.clone().unwrap_or_else(|| self.model.clone()),
            url: self.url.shown().to_owned(),
        }
    }

    fn post(&self, body: &[u8]) -> reqwest::RequestBuilder {
        let builder = self
            .client
            .post(self.url.full())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("anthropic-version", ANTHROPIC_VERSION)
            .body(body.to_vec());
        match &self.key {
            Some(key) => match reqwest::header::HeaderValue::from_str(key.expose()) {
                Ok(mut value) => {
                    // keeps the key out of any Debug output of the request
                    value.set_sensitive(true);
                    builder.header("x-api-key", value)
                }
                Err(_) => builder.header("x-api-key", key.expose()),
            },
            None => builder,
        }
    }

    fn encode(
        &self,
        request: &ModelRequest,
        target: &Target,
        stream: bool,
    ) -> Result<Vec<u8>, ModelError> {
        let body = request::body(request, &target.model, stream, self.default_max_tokens);
        serde_json::to_vec(&body)
            .map_err(|e| transport::decode_error(target, format!("cannot encode request: {e}")))
    }

    async fn complete(&self, request: ModelRequest) -> Result<ModelResponse, ModelError> {
        let target = self.target(&request);
        let body = self.encode(&request, &target, false)?;
        let output_tool = request.output_schema.as_ref().map(|s| s.name.as_str());
        // The reply is read inside the retry: an error object in a 200 is retried as its
        // status would be.
        with_retry(&self.retry, self.provider, &target.model, || async {
            let call = async {
                let response =
                    transport::send_once(self.post(&body), &target, self.key.as_ref()).await?;
                response
                    .bytes()
                    .await
                    .map_err(|e| transport::transport_error(e, &target))
            };
            let bytes = tokio::time::timeout(self.timeout, call)
                .await
                .map_err(|_| transport::timeout_error(&target, self.timeout))??;
            response::parse(&bytes, &target, output_tool, self.key.as_ref())
        })
        .await
    }

    async fn open_stream(
        self: Arc<Self>,
        request: ModelRequest,
    ) -> Result<ChunkStream, ModelError> {
        let target = self.target(&request);
        let body = self.encode(&request, &target, true)?;
        let output_tool = request.output_schema.map(|s| s.name);
        // Retried up to the first content, so an error event before it is retried too.
        with_retry(&self.retry, self.provider, &target.model, || async {
            let call = stream_reply::send_for_events(self.post(&body), &target, self.key.as_ref());
            let reply = tokio::time::timeout(self.timeout, call)
                .await
                .map_err(|_| transport::timeout_error(&target, self.timeout))??;
            let chunks = match reply {
                StreamReply::Events(events) => transport::sse_chunks(
                    events,
                    stream::Decoder::new(target.clone(), output_tool.clone()),
                    self.timeout,
                    target.clone(),
                    self.key.clone(),
                ),
                StreamReply::Whole(whole) => stream_reply::whole_reply(response::parse(
                    whole.as_ref(),
                    &target,
                    output_tool.as_deref(),
                    self.key.as_ref(),
                )?),
            };
            transport::until_content(chunks).await
        })
        .await
    }
}

impl Model for AnthropicModel {
    fn name(&self) -> &str {
        &self.inner.name
    }

    // No span of its own: a run's `chat {model}` span covers the call (see `telemetry`).
    fn complete(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        Box::pin(self.inner.complete(request))
    }

    fn stream(&self, request: ModelRequest) -> ChunkStream {
        let open = self.inner.clone().open_stream(request);
        Box::pin(
            futures_util::stream::once(open).flat_map(|opened| match opened {
                Ok(stream) => stream,
                Err(error) => transport::failed(error),
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_that_only_look_like_anthropics_get_no_key_from_the_environment() {
        for lookalike in [
            "https://api.anthropic.com.evil.example",
            "https://api.anthropic.com@evil.example",
            "https://api.anthropic.community",
        ] {
            let model = AnthropicModel::builder("claude-x")
                .base_url(lookalike)
                .build()
                .unwrap_or_else(|e| panic!("{lookalike}: {e}"));
            assert!(model.inner.key.is_none(), "{lookalike} would get the key");
        }
    }
}
