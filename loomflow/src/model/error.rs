//! [`ModelError`]: everything a model call can fail with.

use std::time::Duration;

/// Why a model call failed.
///
/// Variants name the provider and the model. [`ModelError::is_retryable`] tells which ones the
/// retry layer tries again (connection failures, timeouts, rate limits and server errors).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The provider rejected the credentials (HTTP 401 or 403).
    #[error("{provider} rejected the credentials for model {model} (status {status}): {message}")]
    Authentication {
        /// The provider, e.g. `openai`.
        provider: String,
        /// The model asked for.
        model: String,
        /// The HTTP status.
        status: u16,
        /// The provider's message, with any key removed.
        message: String,
    },
    /// No API key was given and the environment variable for it is unset.
    #[error("no api key for {provider}: pass one explicitly or set {env}")]
    MissingApiKey {
        /// The provider.
        provider: String,
        /// The environment variable read.
        env: String,
    },
    /// The provider answered 429: too many requests.
    #[error("{provider} rate limited model {model}{}: {message}", retry_hint(.retry_after))]
    RateLimited {
        /// The provider.
        provider: String,
        /// The model asked for.
        model: String,
        /// How long the provider asked us to wait (`retry-after`), when it said.
        retry_after: Option<Duration>,
        /// The provider's message.
        message: String,
    },
    /// The prompt does not fit the model's context window.
    #[error("prompt is too long for {provider} model {model}: {message}")]
    ContextTooLong {
        /// The provider.
        provider: String,
        /// The model asked for.
        model: String,
        /// The provider's message.
        message: String,
    },
    /// The provider rejected the request (a 4xx other than 401, 403 and 429). A 408 (request
    /// timeout) or 409 (conflict) is retried, as the providers' own SDKs do.
    #[error("{provider} rejected the request for model {model} (status {status}): {message}")]
    InvalidRequest {
        /// The provider.
        provider: String,
        /// The model asked for.
        model: String,
        /// The HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// The provider failed (a 5xx, or Anthropic's 529 "overloaded").
    #[error(
        "{provider} failed serving model {model} (status {status}){}: {message}",
        retry_hint(.retry_after)
    )]
    Server {
        /// The provider.
        provider: String,
        /// The model asked for.
        model: String,
        /// The HTTP status.
        status: u16,
        /// How long the provider asked us to wait (`retry-after`), when it said.
        retry_after: Option<Duration>,
        /// The provider's message.
        message: String,
    },
    /// The provider reported an error inside a streamed reply.
    #[error("{provider} stream for model {model} reported {kind}: {message}")]
    StreamError {
        /// The provider.
        provider: String,
        /// The model asked for.
        model: String,
        /// The provider's error type, e.g. `overloaded_error`.
        kind: String,
        /// The provider's message.
        message: String,
    },
    /// A streamed reply ended before its finish event.
    #[error("{provider} stream for model {model} ended before its finish event")]
    StreamCut {
        /// The provider.
        provider: String,
        /// The model asked for.
        model: String,
    },
    /// A call, or the wait for the next streamed bytes, took longer than the timeout.
    #[error("{provider} model {model} did not answer within {timeout:?}")]
    Timeout {
        /// The provider.
        provider: String,
        /// The model asked for.
        model: String,
        /// The timeout in force.
        timeout: Duration,
    },
    /// The provider could not be reached, or the connection broke (a reply's body cut off
    /// part way included); the source says which.
    #[error("the connection to {provider} at {url} for model {model} failed")]
    Connection {
        /// The provider.
        provider: String,
        /// The model asked for.
        model: String,
        /// The address called.
        url: String,
        /// The transport error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The reply could not be decoded.
    #[error("cannot decode the reply of {provider} model {model}: {message}")]
    Decode {
        /// The provider.
        provider: String,
        /// The model asked for.
        model: String,
        /// What was wrong.
        message: String,
    },
    /// The model string names a provider whose adapter was compiled out.
    #[error("model {model} needs loomflow's cargo feature `{feature}`, which is off")]
    ProviderDisabled {
        /// The model asked for.
        model: String,
        /// The feature to turn on.
        feature: &'static str,
    },
    /// A model string matched none of the accepted forms.
    #[error("unknown model {given:?}; accepted forms: {}", .accepted.join(", "))]
    UnknownModel {
        /// The string given.
        given: String,
        /// The forms that resolve.
        accepted: Vec<String>,
    },
    /// An adapter's settings are unusable (a bad base URL, a TLS set-up failure).
    #[error("invalid {provider} configuration: {message}")]
    Config {
        /// The provider.
        provider: String,
        /// What is wrong.
        message: String,
    },
    /// A [`ScriptedModel`](crate::model::ScriptedModel) was called more often than it has
    /// responses.
    #[error("scripted model ran out of responses: its script had {len}")]
    ScriptExhausted {
        /// How many responses the script had.
        len: usize,
    },
}

fn retry_hint(retry_after: &Option<Duration>) -> String {
    match retry_after {
        Some(d) => format!(" (retry after {}s)", d.as_secs_f64()),
        None => String::new(),
    }
}

impl ModelError {
    /// Whether trying the same call again may succeed: connection failures, timeouts, rate
    /// limits, server errors, a 408 or 409, and a stream's report of an overload or a server
    /// error. (A stream is retried only while nothing of it has reached the caller.)
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Connection { .. }
            | Self::Timeout { .. }
            | Self::RateLimited { .. }
            | Self::Server { .. }
            | Self::InvalidRequest {
                status: 408 | 409, ..
            } => true,
            Self::StreamError { kind, .. } => matches!(
                kind.as_str(),
                "overloaded_error"
                    | "api_error"
                    | "rate_limit_error"
                    | "timeout_error"
                    | "server_error"
                    | "rate_limit_exceeded"
            ),
            _ => false,
        }
    }

    /// The wait the provider asked for (`retry-after`, `retry-after-ms`), when it sent one with
    /// a rate limit or a server error.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after, .. } | Self::Server { retry_after, .. } => {
                *retry_after
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_lowercase_and_name_the_model() {
        let err = ModelError::StreamCut {
            provider: "openai".into(),
            model: "gpt-4o".into(),
        };
        assert_eq!(
            err.to_string(),
            "openai stream for model gpt-4o ended before its finish event"
        );
        let err = ModelError::RateLimited {
            provider: "anthropic".into(),
            model: "claude-x".into(),
            retry_after: Some(Duration::from_secs(2)),
            message: "slow down".into(),
        };
        assert_eq!(
            err.to_string(),
            "anthropic rate limited model claude-x (retry after 2s): slow down"
        );
        assert!(err.is_retryable());
    }
}
