//! The OpenAI Chat Completions adapter, for OpenAI and any compatible server (llama.cpp,
//! vLLM, Ollama, gateways) through a base URL.

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

/// OpenAI's API address; the default base URL.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// The host whose base URLs count as OpenAI's own: only they get `OPENAI_API_KEY`.
const OPENAI_HOST: &str = "api.openai.com";

/// The environment variable the key is read from when none is given.
pub const OPENAI_API_KEY_ENV: &str = "OPENAI_API_KEY";

/// A model behind the OpenAI Chat Completions API (`POST {base}/chat/completions`).
///
/// Clones share one HTTP client (rustls with the `ring` provider). Non-streamed and streamed
/// replies, tool calls (parallel ones too), structured output through `response_format`
/// `json_schema`, usage (with `stream_options.include_usage` when streaming), retries and a
/// per-request timeout.
///
/// Compatible servers are read as they really write. A failure reported after the 200, as an
/// SSE `error:` line (llama.cpp) or as an error object in place of the events (gateways), is
/// the typed error it names and is retried as its status would be; a prompt too long for the
/// context is [`ModelError::ContextTooLong`] either way. Parallel tool calls sent without an
/// `index` (Gemini) or all under `index: 0` (Ollama) are told apart by their ids. A stream that
/// says `[DONE]` before it said anything is [`ModelError::StreamCut`], not an empty reply. A
/// server that ignores `"stream": true` and sends the whole reply as JSON is read as a complete
/// call's reply, and [`Model::stream`] hands it back in one piece.
///
/// # Examples
///
/// ```no_run
/// use loomflow::model::{Message, Model, ModelRequest, OpenAiModel};
///
/// # #[allow(dead_code)]
/// # async fn run() -> Result<(), loomflow::model::ModelError> {
/// // any OpenAI-compatible server; the key is optional off api.openai.com
/// let model = OpenAiModel::builder("smollm2")
///     .base_url("http://127.0.0.1:8080/v1")
///     .build()?;
/// let reply = model.complete(ModelRequest::new(vec![Message::user("Hi!")])).await?;
/// println!("{}", reply.content);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct OpenAiModel {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: reqwest::Client,
    provider: &'static str,
    name: String,
    model: String,
    url: Endpoint,
    /// Whether the token cap goes as `max_completion_tokens` rather than `max_tokens`.
    completion_tokens: bool,
    key: Option<ApiKey>,
    retry: RetryPolicy,
    timeout: Duration,
    stream_usage: bool,
    /// Whether the server follows `response_format: json_schema`.
    structured_output: bool,
}

/// Builds an [`OpenAiModel`].
#[derive(Debug)]
#[must_use]
pub struct OpenAiModelBuilder {
    model: String,
    /// Shown without its credentials or its query's values, in `Debug` too.
    base_url: Option<Endpoint>,
    key: Option<ApiKey>,
    retry: RetryPolicy,
    timeout: Duration,
    stream_usage: bool,
    max_completion_tokens: Option<bool>,
    structured_output: Option<bool>,
}

/// DeepSeek's API, which takes `response_format` `json_object` but refuses `json_schema`.
const DEEPSEEK_HOST: &str = "api.deepseek.com";

impl OpenAiModelBuilder {
    /// Sends requests to this base URL (up to and including `/v1`), e.g.
    /// `http://127.0.0.1:8080/v1`. The default is [`OPENAI_BASE_URL`]. A query it has (a
    /// gateway's `?api-version=…`) stays after the request's path. A URL that ends in
    /// `/chat/completions` already is taken as the endpoint itself.
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = Some(Endpoint::new(url.into()));
        self
    }

    /// Uses this key. Without one, a base URL on exactly `https://api.openai.com` (default port,
    /// no user name) gets the `OPENAI_API_KEY` environment variable and other base URLs get no
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

    /// Whether a streamed request asks for the reply's token usage
    /// (`"stream_options": {"include_usage": true}`, default `true`). Some OpenAI-compatible
    /// servers refuse the field (400 or 422, "extra inputs are not permitted"), so that
    /// every streamed call fails while `complete` works: turn it off for them. Their
    /// streamed replies then report the usage they send unasked, if any.
    pub fn stream_usage(mut self, ask: bool) -> Self {
        self.stream_usage = ask;
        self
    }

    /// Whether a request's token cap ([`ModelRequest::max_tokens`]) is sent as
    /// `max_completion_tokens`, the name api.openai.com takes (its reasoning models refuse
    /// `max_tokens` with a 400), rather than `max_tokens`, the one most compatible servers
    /// know. Default: on api.openai.com only. Turn it on for a proxy or an Azure OpenAI
    /// deployment in front of OpenAI's reasoning models.
    pub fn max_completion_tokens(mut self, yes: bool) -> Self {
        self.max_completion_tokens = Some(yes);
        self
    }

    /// Whether the server follows an output schema sent as `response_format: {"type":
    /// "json_schema", …}` (default `true`, but `false` on `https://api.deepseek.com`). Some
    /// compatible servers refuse that format with a 400 (DeepSeek: "This response_format
    /// type is unavailable now"), so that every run with a typed output fails: turn it off
    /// for them, and an agent asks for the schema in its prompt instead, checking the
    /// answer the same way
    /// ([`Model::supports_output_schema`] is then `false`). A request built with an
    /// [`output_schema`](ModelRequest::output_schema) of its own is sent as it is.
    pub fn structured_output(mut self, yes: bool) -> Self {
        self.structured_output = Some(yes);
        self
    }

    /// Builds the adapter.
    ///
    /// # Errors
    ///
    /// [`ModelError::MissingApiKey`] for api.openai.com without a key (other base URLs may go
    /// without one); [`ModelError::Config`] for a base URL that is not `http(s)://…` or a TLS
    /// set-up failure.
    pub fn build(self) -> Result<OpenAiModel, ModelError> {
        let base =
            (self.base_url.map(Endpoint::into_full)).unwrap_or_else(|| OPENAI_BASE_URL.to_owned());
        let official = endpoint::is_official_host(&base, OPENAI_HOST);
        let provider = if official {
            "openai"
        } else {
            "openai-compatible"
        };
        endpoint::check_base_url(&base, provider)?;
        // The environment's key is for OpenAI: it is never sent to another server.
        let key = self.key.or_else(|| {
            official
                .then(|| ApiKey::from_env(OPENAI_API_KEY_ENV))
                .flatten()
        });
        if official && key.is_none() {
            return Err(ModelError::MissingApiKey {
                provider: provider.to_owned(),
                env: OPENAI_API_KEY_ENV.to_owned(),
            });
        }
        let url = crate::model::endpoint::under(&base, "chat/completions");
        Ok(OpenAiModel {
            inner: Arc::new(Inner {
                client: transport::build_client(provider)?,
                provider,
                name: format!("{provider}:{}", self.model),
                model: self.model,
                url: Endpoint::new(url),
                completion_tokens: self.max_completion_tokens.unwrap_or(official),
                key,
                retry: self.retry,
                timeout: self.timeout,
                stream_usage: self.stream_usage,
                structured_output: (self.structured_output)
                    .unwrap_or_else(|| !endpoint::is_official_host(&base, DEEPSEEK_HOST)),
            }),
        })
    }
}

impl OpenAiModel {
    /// A builder for `model` (e.g. `gpt-4o`).
    pub fn builder(model: impl Into<String>) -> OpenAiModelBuilder {
        OpenAiModelBuilder {
            model: model.into(),
            base_url: None,
            key: None,
            retry: RetryPolicy::default(),
            timeout: Duration::from_secs(120),
            stream_usage: true,
            max_completion_tokens: None,
            structured_output: None,
        }
    }

    /// `model` on api.openai.com, with the key from `OPENAI_API_KEY`.
    ///
    /// # Errors
    ///
    /// As [`OpenAiModelBuilder::build`].
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
            .body(body.to_vec());
        match &self.key {
            Some(key) => builder.bearer_auth(key.expose()),
            None => builder,
        }
    }

    fn encode(
        &self,
        request: &ModelRequest,
        target: &Target,
        stream: bool,
    ) -> Result<Vec<u8>, ModelError> {
        let stream = stream.then_some(request::Streamed {
            usage: self.stream_usage,
        });
        serde_json::to_vec(&request::body(
            request,
            &target.model,
            stream,
            self.completion_tokens,
        ))
        .map_err(|e| transport::decode_error(target, format!("cannot encode request: {e}")))
    }

    async fn complete(&self, request: ModelRequest) -> Result<ModelResponse, ModelError> {
        let target = self.target(&request);
        let body = self.encode(&request, &target, false)?;
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
            response::parse(&bytes, &target, self.key.as_ref())
        })
        .await
    }

    async fn open_stream(
        self: Arc<Self>,
        request: ModelRequest,
    ) -> Result<ChunkStream, ModelError> {
        let target = self.target(&request);
        let body = self.encode(&request, &target, true)?;
        // Retried up to the first content, so an error chunk before it is retried too.
        with_retry(&self.retry, self.provider, &target.model, || async {
            let call = stream_reply::send_for_events(self.post(&body), &target, self.key.as_ref());
            let reply = tokio::time::timeout(self.timeout, call)
                .await
                .map_err(|_| transport::timeout_error(&target, self.timeout))??;
            let chunks = match reply {
                StreamReply::Events(events) => transport::sse_chunks(
                    events,
                    stream::Decoder::new(target.clone()),
                    self.timeout,
                    target.clone(),
                    self.key.clone(),
                ),
                StreamReply::Whole(whole) => stream_reply::whole_reply(response::parse(
                    whole.as_ref(),
                    &target,
                    self.key.as_ref(),
                )?),
            };
            transport::until_content(chunks).await
        })
        .await
    }
}

impl Model for OpenAiModel {
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

    fn supports_output_schema(&self) -> bool {
        self.inner.structured_output
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_that_only_look_like_openais_get_no_key_from_the_environment() {
        for lookalike in [
            "https://api.openai.com.evil.example/v1",
            "https://api.openai.com@evil.example/v1",
            "https://api.openai.community/v1",
        ] {
            let model = OpenAiModel::builder("gpt-x")
                .base_url(lookalike)
                .build()
                .unwrap_or_else(|e| panic!("{lookalike}: {e}"));
            assert!(model.inner.key.is_none(), "{lookalike} would get the key");
            assert_eq!(model.inner.provider, "openai-compatible");
        }
    }

    /// DeepSeek refuses `json_schema` response formats: a model string that names its API
    /// (`openai-compatible:deepseek-chat@https://api.deepseek.com/v1`) asks in the prompt.
    #[test]
    fn deepseeks_api_is_not_asked_for_structured_output() {
        let deepseek = |url: &str| {
            OpenAiModel::builder("deepseek-chat")
                .base_url(url)
                .build()
                .unwrap_or_else(|e| panic!("{url}: {e}"))
        };
        assert!(!deepseek("https://api.deepseek.com/v1").supports_output_schema());
        assert!(!deepseek("https://api.deepseek.com").supports_output_schema());
        assert!(deepseek("http://127.0.0.1:8080/v1").supports_output_schema());
        let told = OpenAiModel::builder("deepseek-chat")
            .base_url("https://api.deepseek.com/v1")
            .structured_output(true)
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(told.supports_output_schema());
    }
}
