//! What the HTTP adapters share: the TLS-configured client, one attempt of a call, the mapping
//! of error answers to [`ModelError`], and the driver that turns an SSE body into chunks.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use rustls_platform_verifier::BuilderVerifierExt;

use super::sse::{SseEvent, SseParser};
use super::{ApiKey, ChunkStream, ModelError, StreamChunk};

/// Who is being called: names the culprit in errors.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub(crate) provider: &'static str,
    pub(crate) model: String,
    pub(crate) url: String,
}

/// An HTTP client with rustls over the `ring` provider and the platform's certificate
/// verifier. The provider is handed to this client only; no process-wide default is set.
pub(crate) fn build_client(provider: &'static str) -> Result<reqwest::Client, ModelError> {
    let config_error = |message: String| ModelError::Config {
        provider: provider.to_owned(),
        message,
    };
    // rustls 0.23.48 deprecates its `ring` provider for lacking post-quantum key exchange;
    // it stays, as the one crypto crate that builds without cmake (aws-lc-rs needs it), and
    // a newer rustls in a user's lock file must not warn on every build of theirs.
    #[allow(deprecated)]
    let provider = rustls::crypto::ring::default_provider();
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .and_then(|builder| builder.with_platform_verifier())
        .map_err(|e| config_error(format!("tls set-up failed: {e}")))?
        .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        // A redirect is not followed: the key in a header of our own (`x-api-key`) and the
        // prompt would go wherever it points, and a POST turned into a GET would fail in
        // ways that do not say why. It is a configuration error instead (`status_error`).
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| config_error(format!("http client set-up failed: {e}")))
}

/// Sends one request; a non-2xx answer becomes the matching [`ModelError`].
pub(crate) async fn send_once(
    request: reqwest::RequestBuilder,
    target: &Target,
    key: Option<&ApiKey>,
) -> Result<reqwest::Response, ModelError> {
    let response = request
        .send()
        .await
        .map_err(|e| transport_error(e, target))?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let retry_after = super::retry_after::from_headers(response.headers());
    let body = response.text().await.unwrap_or_default();
    Err(status_error(
        target,
        status.as_u16(),
        retry_after,
        &body,
        key,
    ))
}

pub(crate) fn transport_error(error: reqwest::Error, target: &Target) -> ModelError {
    // A request that could not be built (a header value a key or a setting made invalid)
    // fails the same way every time: no connection was tried, and none is retried. Its
    // text is not shown, as it may quote the value.
    if error.is_builder() {
        return ModelError::Config {
            provider: target.provider.to_owned(),
            message: format!(
                "the request for model {} could not be built: a header (the API key, an \
                 extra header) holds a character HTTP does not allow",
                target.model
            ),
        };
    }
    // A body that broke off part way (a reset, a proxy that cut it) is a decode error to
    // reqwest: it is a failed connection, tried again. A reply that does not parse is
    // reported where it is parsed.
    ModelError::Connection {
        provider: target.provider.to_owned(),
        model: target.model.clone(),
        url: target.url.clone(),
        source: Box::new(error.without_url()),
    }
}

pub(crate) fn timeout_error(target: &Target, timeout: Duration) -> ModelError {
    ModelError::Timeout {
        provider: target.provider.to_owned(),
        model: target.model.clone(),
        timeout,
    }
}

pub(crate) fn decode_error(target: &Target, message: impl Into<String>) -> ModelError {
    ModelError::Decode {
        provider: target.provider.to_owned(),
        model: target.model.clone(),
        message: message.into(),
    }
}

/// The provider's error type and message from an error body, in OpenAI's
/// `{"error":{"message","type","code"}}` or Anthropic's
/// `{"type":"error","error":{"type","message"}}` shape; the raw text otherwise.
pub(crate) fn error_details(body: &str) -> (String, String) {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let error = parsed.as_ref().and_then(|v| v.get("error"));
    match error {
        Some(serde_json::Value::Object(e)) => {
            let message = e
                .get("message")
                .and_then(|m| m.as_str())
                .unwrap_or_default()
                .to_owned();
            let kind = e
                .get("code")
                .and_then(|c| c.as_str())
                .or_else(|| e.get("type").and_then(|t| t.as_str()))
                .unwrap_or_default()
                .to_owned();
            (kind, message)
        }
        Some(serde_json::Value::String(message)) => (String::new(), message.clone()),
        _ => {
            let text: String = body.trim().chars().take(500).collect();
            (String::new(), text)
        }
    }
}

/// The error a stream reports in an error event after the 200: the prompt overflowing the
/// context is [`ModelError::ContextTooLong`], as it is in a 400; anything else is a
/// [`ModelError::StreamError`] of that kind.
pub(crate) fn stream_error(target: &Target, kind: String, message: String) -> ModelError {
    if is_context_overflow(&kind, &message) {
        return ModelError::ContextTooLong {
            provider: target.provider.to_owned(),
            model: target.model.clone(),
            message,
        };
    }
    ModelError::StreamError {
        provider: target.provider.to_owned(),
        model: target.model.clone(),
        kind,
        message,
    }
}

fn is_context_overflow(kind: &str, message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    kind == "context_length_exceeded"
        || kind == "exceed_context_size_error"
        || message.contains("context length")
        || message.contains("context window")
        || message.contains("context limit")
        || message.contains("prompt is too long")
        || message.contains("exceeds the available context")
        || message.contains("maximum context")
}

/// Maps a non-2xx answer to a typed error.
pub(crate) fn status_error(
    target: &Target,
    status: u16,
    retry_after: Option<Duration>,
    body: &str,
    key: Option<&ApiKey>,
) -> ModelError {
    // Scrubbed before `error_details` cuts a long body: a key across the cut would leave
    // its first part behind.
    let body = match key {
        Some(key) => key.scrub(body),
        None => body.to_owned(),
    };
    let (kind, message) = error_details(&body);
    // And after: a JSON body may have quoted it escaped (`\/`), which the message decodes.
    let message = match key {
        Some(key) => key.scrub(&message),
        None => message,
    };
    let provider = target.provider.to_owned();
    let model = target.model.clone();
    match status {
        300..=399 => ModelError::Config {
            provider,
            message: format!(
                "the server answered {status} for model {model}, a redirect, which is not \
                 followed (the key and the prompt would go where it points): set the base url \
                 to the endpoint it points to (https rather than http, say)"
            ),
        },
        401 | 403 => ModelError::Authentication {
            provider,
            model,
            status,
            message,
        },
        429 if kind == "insufficient_quota" => ModelError::InvalidRequest {
            provider,
            model,
            status,
            message,
        },
        429 => ModelError::RateLimited {
            provider,
            model,
            retry_after,
            message,
        },
        // Both official SDKs retry these: the server gave up waiting for the request (408),
        // or a conflicting request held a lock (409).
        408 | 409 => ModelError::InvalidRequest {
            provider,
            model,
            status,
            message,
        },
        400..=499 if is_context_overflow(&kind, &message) => ModelError::ContextTooLong {
            provider,
            model,
            message,
        },
        400..=499 => ModelError::InvalidRequest {
            provider,
            model,
            status,
            message,
        },
        _ => ModelError::Server {
            provider,
            model,
            status,
            retry_after,
            message,
        },
    }
}

/// The error an error object gives when it arrives in a 2xx body: some gateways (and, rarely,
/// Anthropic) answer 200 with `{"error": {...}}` or `{"type": "error", "error": {...}}`. It maps
/// as the status it implies would: the status in its `code` (`"code": 500`), else the one its
/// provider documents for its type (`overloaded_error` is 529), else 500 (retried).
pub(crate) fn body_error(
    target: &Target,
    error: serde_json::Value,
    key: Option<&ApiKey>,
) -> ModelError {
    let status = implied_status(&error);
    let body = serde_json::json!({ "error": error }).to_string();
    status_error(target, status, None, &body, key)
}

/// The error object of an `error` event or of a chunk's `error` field, as a typed error.
pub(crate) fn error_event(target: &Target, error: serde_json::Value) -> ModelError {
    let error = match error {
        serde_json::Value::Object(mut fields) if fields.contains_key("error") => {
            fields.remove("error").unwrap_or_default()
        }
        other => other,
    };
    // A status the event states (llama.cpp's `code: 503`, a gateway's `"500"`) makes it the
    // error of that status, retried as that status is, as the same object in a body is.
    if stated_status(&error).is_some() {
        return body_error(target, error, None);
    }
    let (kind, message) = error_details(&serde_json::json!({ "error": error }).to_string());
    stream_error(target, kind, message)
}

/// The HTTP status an error object states in its `code` (a number, or a number as text),
/// if it states one.
pub(crate) fn stated_status(error: &serde_json::Value) -> Option<u16> {
    let code = error.get("code")?;
    let numeric = code
        .as_u64()
        .or_else(|| code.as_str().and_then(|s| s.trim().parse().ok()))?;
    u16::try_from(numeric)
        .ok()
        .filter(|status| (400..=599).contains(status))
}

fn implied_status(error: &serde_json::Value) -> u16 {
    if let Some(status) = stated_status(error) {
        return status;
    }
    let named = |field: &str| error.get(field).and_then(|v| v.as_str()).unwrap_or("");
    [named("code"), named("type")]
        .into_iter()
        .find_map(|kind| {
            Some(match kind {
                "invalid_request_error" | "context_length_exceeded" => 400,
                "authentication_error" | "invalid_api_key" => 401,
                "billing_error" => 402,
                "permission_error" => 403,
                "not_found_error" => 404,
                "request_too_large" => 413,
                "rate_limit_error" | "rate_limit_exceeded" | "insufficient_quota" => 429,
                "timeout_error" => 504,
                "overloaded_error" => 529,
                _ => return None,
            })
        })
        .unwrap_or(500)
}

/// Turns one provider's SSE events into chunks.
pub(crate) trait EventDecoder: Send + 'static {
    /// Handles one event, appending what it yields. Returns `Ok(true)` once the reply is
    /// complete (its finish chunk has been appended).
    fn decode(
        &mut self,
        event: SseEvent,
        out: &mut VecDeque<Result<StreamChunk, ModelError>>,
    ) -> Result<bool, ModelError>;

    /// The body ended before the reply's end marker: appends the finish chunk and returns
    /// `true` if what came is a whole reply all the same; `false` (the default) makes the
    /// stream cut.
    fn end(&mut self, _out: &mut VecDeque<Result<StreamChunk, ModelError>>) -> bool {
        false
    }
}

struct SseDriver<B, D> {
    body: B,
    parser: SseParser,
    decoder: D,
    events: Vec<SseEvent>,
    out: VecDeque<Result<StreamChunk, ModelError>>,
    finished: bool,
    ended: bool,
    idle_timeout: Duration,
    target: Target,
    /// Taken out of the errors the body's events report: a gateway may echo the request.
    key: Option<ApiKey>,
}

impl<B, D: EventDecoder> SseDriver<B, D> {
    /// Decodes the events the parser completed into chunks, up to the end of the reply or
    /// the first error.
    fn decode_events(&mut self) {
        self.decode_events_ending(false);
    }

    /// Decodes the events read; with `cut_last`, the last of them may be cut short: if it
    /// does not parse, it is dropped rather than reported as a bad event.
    fn decode_events_ending(&mut self, cut_last: bool) {
        let mut events = std::mem::take(&mut self.events);
        let last = events.len().saturating_sub(1);
        for (at, event) in events.drain(..).enumerate() {
            match self.decoder.decode(event, &mut self.out) {
                Ok(true) => {
                    self.finished = true;
                    self.ended = true;
                    break;
                }
                Ok(false) => {}
                Err(ModelError::Decode { .. }) if cut_last && at == last => break,
                Err(error) => {
                    let mut error = error;
                    if let Some(key) = &self.key {
                        key.scrub_error(&mut error);
                    }
                    self.out.push_back(Err(error));
                    self.ended = true;
                    break;
                }
            }
        }
        self.events = events;
    }
}

/// Streams the chunks of an SSE body. Waiting longer than `idle_timeout` for the next bytes
/// fails with [`ModelError::Timeout`]; a body that ends (or breaks) before the decoder saw the
/// end of the reply fails with [`ModelError::StreamCut`].
pub(crate) fn sse_chunks<B, C, D>(
    body: B,
    decoder: D,
    idle_timeout: Duration,
    target: Target,
    key: Option<ApiKey>,
) -> ChunkStream
where
    B: Stream<Item = Result<C, reqwest::Error>> + Send + Unpin + 'static,
    C: AsRef<[u8]>,
    D: EventDecoder,
{
    let driver = SseDriver {
        body,
        parser: SseParser::new(),
        decoder,
        events: Vec::new(),
        out: VecDeque::new(),
        finished: false,
        ended: false,
        idle_timeout,
        target,
        key,
    };
    Box::pin(futures_util::stream::unfold(driver, |mut d| async move {
        loop {
            if let Some(item) = d.out.pop_front() {
                return Some((item, d));
            }
            if d.ended {
                return None;
            }
            let next = tokio::time::timeout(d.idle_timeout, d.body.next()).await;
            match next {
                Err(_) => {
                    d.ended = true;
                    let error = timeout_error(&d.target, d.idle_timeout);
                    return Some((Err(error), d));
                }
                Ok(Some(Ok(bytes))) => {
                    d.parser.push(bytes.as_ref(), &mut d.events);
                    d.decode_events();
                }
                Ok(Some(Err(error))) => {
                    d.ended = true;
                    tracing::debug!(provider = d.target.provider, error = %error, "stream broke");
                    return Some((Err(cut(&d.target)), d));
                }
                Ok(None) => {
                    // The last event may lack its blank line: it is taken all the same. One
                    // whose last line lacks its end too may be cut mid-line: taken only if
                    // it decodes, else the reply ends as cut (or whole, had it finished).
                    let partial = d.parser.has_partial_line();
                    d.parser.end(&mut d.events);
                    d.decode_events_ending(partial);
                    if !d.ended && !d.decoder.end(&mut d.out) {
                        d.out.push_back(Err(cut(&d.target)));
                    }
                    d.ended = true;
                }
            }
        }
    }))
}

fn cut(target: &Target) -> ModelError {
    ModelError::StreamCut {
        provider: target.provider.to_owned(),
        model: target.model.clone(),
    }
}

/// Reads `stream` up to its first piece of content (text, a tool call or the finish) and
/// gives it back whole, the pieces read on the way (the model's name, usage) first. An error
/// before that point, such as Anthropic's `overloaded_error` event right after a 200, is
/// returned instead, so that the retry layer can try the call again without the caller
/// seeing anything twice.
pub(crate) async fn until_content(mut stream: ChunkStream) -> Result<ChunkStream, ModelError> {
    let mut read = Vec::new();
    while let Some(item) = stream.next().await {
        let chunk = item?;
        let content = !matches!(chunk, StreamChunk::Usage(_) | StreamChunk::Model { .. });
        read.push(Ok(chunk));
        if content {
            break;
        }
    }
    Ok(Box::pin(futures_util::stream::iter(read).chain(stream)))
}

/// A stream whose only item is `error`.
pub(crate) fn failed(error: ModelError) -> ChunkStream {
    Box::pin(futures_util::stream::iter([Err(error)]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn target() -> Target {
        Target {
            provider: "openai",
            model: "m".into(),
            url: "http://x".into(),
        }
    }

    #[test]
    fn error_bodies_of_both_providers_are_read() {
        let openai =
            r#"{"error":{"message":"bad tool","type":"invalid_request_error","code":null}}"#;
        assert_eq!(
            error_details(openai),
            ("invalid_request_error".into(), "bad tool".into())
        );
        let anthropic =
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(
            error_details(anthropic),
            ("overloaded_error".into(), "Overloaded".into())
        );
    }

    #[test]
    fn statuses_map_to_typed_errors_without_leaking_the_key() {
        let key = ApiKey::new("sk-secret-123");
        let err = status_error(
            &target(),
            401,
            None,
            r#"{"error":{"message":"Incorrect API key provided: sk-secret-123"}}"#,
            Some(&key),
        );
        assert!(matches!(err, ModelError::Authentication { .. }));
        assert!(!format!("{err} {err:?}").contains("sk-secret-123"));
        let err = status_error(
            &target(),
            400,
            None,
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#,
            None,
        );
        assert!(matches!(err, ModelError::ContextTooLong { .. }));
        let err = status_error(&target(), 529, None, "overloaded", None);
        assert!(matches!(err, ModelError::Server { status: 529, .. }));
        assert!(err.is_retryable());
    }

    #[test]
    fn an_error_object_in_a_success_body_maps_as_its_status_would() {
        let error = |value| body_error(&target(), value, None);
        let overloaded = error(json!({"type": "overloaded_error", "message": "Overloaded"}));
        assert!(matches!(overloaded, ModelError::Server { status: 529, .. }));
        let crashed = error(json!({"message": "crashed", "type": "server_error", "code": 502}));
        assert!(matches!(crashed, ModelError::Server { status: 502, .. }));
        let bad = error(json!({"message": "no", "type": "invalid_request_error"}));
        assert!(matches!(
            bad,
            ModelError::InvalidRequest { status: 400, .. }
        ));
        assert!(
            error(json!("upstream down"))
                .to_string()
                .contains("upstream down")
        );
    }
}
