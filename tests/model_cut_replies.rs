//! Replies that break off, and errors that quote the key: both adapters against a local
//! server speaking the real wire format.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/fixtures.rs"]
mod fixtures;
#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/models.rs"]
mod models;

use std::time::Duration;

use futures_util::StreamExt;

use fixtures::*;
use loomflow::model::{Model, ModelError, OpenAiModel};
use mock_server::{MockServer, Reply};
use models::{anthropic, fast_retries, hi, openai};
use serde_json::json;

/// A reply whose body breaks off part way (a reset, a proxy that cut it) is a failed
/// connection, tried again, not a reply that does not decode: the retry gets the whole
/// reply. Before, the call failed at once with `Decode`.
#[tokio::test]
async fn a_body_cut_part_way_is_tried_again() {
    let whole = openai_completion(json!({"role": "assistant", "content": "Hi"}), "stop", 3, 1);
    let server = MockServer::start(vec![
        Reply::JsonCut {
            body: whole.to_string(),
        },
        Reply::json(200, whole),
    ])
    .await;
    let reply = openai(&server).complete(hi()).await.unwrap();
    assert_eq!(reply.content, "Hi");
    assert_eq!(server.requests().len(), 2);

    let message = anthropic_message(json!([{"type": "text", "text": "Hi"}]), "end_turn", 3, 1);
    let server = MockServer::start(vec![
        Reply::JsonCut {
            body: message.to_string(),
        },
        Reply::json(200, message),
    ])
    .await;
    let reply = anthropic(&server).complete(hi()).await.unwrap();
    assert_eq!(reply.content, "Hi");
    assert_eq!(server.requests().len(), 2);
}

/// A long error body that quotes the key is cut for the message after the key is taken out:
/// no part of a key across the cut is left.
#[tokio::test]
async fn a_key_across_the_cut_of_a_long_error_is_not_shown() {
    const KEY: &str = "sk-live-0123456789abcdefghij";
    let body = format!("{}{KEY}{}", "x".repeat(490), "y".repeat(100));
    let server = MockServer::start(vec![Reply::Json {
        status: 401,
        headers: Vec::new(),
        body,
    }])
    .await;
    let model = OpenAiModel::builder("gpt-test")
        .base_url(format!("{}/v1", server.url()))
        .api_key(KEY)
        .retry(fast_retries())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let error = model.complete(hi()).await.unwrap_err();
    assert!(
        matches!(error, ModelError::Authentication { .. }),
        "{error:?}"
    );
    let shown = format!("{error} {error:?}");
    assert!(!shown.contains(&KEY[..6]), "{shown}");
}

/// A key an error's JSON quotes escaped (`\/`) is taken out of the message it decodes to.
#[tokio::test]
async fn a_key_an_error_quotes_escaped_is_not_shown() {
    const KEY: &str = "sk-live/0123456789abcdef";
    let body = r#"{"error": {"message": "Incorrect API key: sk-live\/0123456789abcdef", "type": "invalid_request_error"}}"#;
    let server = MockServer::start(vec![Reply::Json {
        status: 401,
        headers: Vec::new(),
        body: body.to_owned(),
    }])
    .await;
    let model = OpenAiModel::builder("gpt-test")
        .base_url(format!("{}/v1", server.url()))
        .api_key(KEY)
        .retry(fast_retries())
        .build()
        .unwrap();
    let error = model.complete(hi()).await.unwrap_err();
    let shown = format!("{error} {error:?}");
    assert!(!shown.contains("0123456789abcdef"), "{shown}");
    assert!(shown.contains("Incorrect API key"), "{shown}");
}

/// An error event inside a stream that quotes the key (a gateway echoing the request) is
/// reported without it, as the same error in a body is. Before, the stream's error showed it.
#[tokio::test]
async fn a_key_a_stream_error_event_quotes_is_not_shown() {
    let quoting = |key: &str| format!("upstream refused the request with key {key}");
    let openai_events = openai_sse(&[
        openai_chunk(json!({"role": "assistant", "content": "Hel"}), None),
        json!({"error": {"message": quoting("sk-test"), "type": "invalid_request_error"}}),
    ]);
    let mut anthropic_events = vec![anthropic_start(10)];
    anthropic_events.extend(anthropic_text_block(0, &["Hel"]));
    anthropic_events.push(json!({"type": "error",
        "error": {"type": "invalid_request_error", "message": quoting("sk-ant-test")}}));
    let server = MockServer::start(vec![
        Reply::sse(&openai_events, 64),
        Reply::sse(&anthropic_sse(&anthropic_events), 64),
    ])
    .await;
    for key in ["sk-test", "sk-ant-test"] {
        let mut stream = match key {
            "sk-test" => openai(&server).stream(hi()),
            _ => anthropic(&server).stream(hi()),
        };
        let mut error = None;
        while let Some(item) = stream.next().await {
            if let Err(e) = item {
                error = Some(e);
            }
        }
        let error = error.expect("the stream reports its error event");
        assert!(matches!(error, ModelError::StreamError { .. }), "{error:?}");
        let shown = format!("{error} {error:?}");
        assert!(!shown.contains(key), "{shown}");
        assert!(
            shown.contains("upstream refused the request with key <redacted>"),
            "{shown}"
        );
    }
}
