//! Both HTTP adapters pointed at a local [`MockServer`], with retries fast enough for tests.
#![allow(dead_code)]

use std::time::Duration;

use loomflow::model::{AnthropicModel, Message, ModelRequest, OpenAiModel, RetryPolicy};

use super::mock_server::MockServer;

/// The default attempts, with backoffs of milliseconds.
pub(crate) fn fast_retries() -> RetryPolicy {
    RetryPolicy::default()
        .initial_backoff(Duration::from_millis(10))
        .max_backoff(Duration::from_millis(50))
}

/// `gpt-test` on `server`'s `/v1`.
pub(crate) fn openai(server: &MockServer) -> OpenAiModel {
    OpenAiModel::builder("gpt-test")
        .base_url(format!("{}/v1", server.url()))
        .api_key("sk-test")
        .retry(fast_retries())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap_or_else(|e| panic!("openai model: {e}"))
}

/// `claude-test` on `server`.
pub(crate) fn anthropic(server: &MockServer) -> AnthropicModel {
    AnthropicModel::builder("claude-test")
        .base_url(server.url())
        .api_key("sk-ant-test")
        .retry(fast_retries())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap_or_else(|e| panic!("anthropic model: {e}"))
}

/// A one-message request.
pub(crate) fn hi() -> ModelRequest {
    ModelRequest::new(vec![Message::user("Hi")])
}
