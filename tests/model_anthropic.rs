//! The Anthropic Messages adapter against a local server speaking the real wire format.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/fixtures.rs"]
mod fixtures;
#[path = "support/mock_server.rs"]
mod mock_server;

use std::time::Duration;

use fixtures::*;
use futures_util::StreamExt;
use loomflow::model::{
    AnthropicModel, FinishReason, Message, Model, ModelError, ModelRequest, OutputSchema,
    RetryPolicy, StreamChunk, ToolCall, ToolChoice, ToolDefinition, Usage, collect_stream, resolve,
};
use mock_server::{MockServer, Reply};
use serde_json::json;

const KEY: &str = "sk-ant-test-very-secret";

fn model(server: &MockServer) -> AnthropicModel {
    AnthropicModel::builder("claude-test")
        .base_url(server.url())
        .api_key(KEY)
        .retry(
            RetryPolicy::default()
                .initial_backoff(Duration::from_millis(10))
                .max_backoff(Duration::from_millis(50)),
        )
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

fn weather_tool() -> ToolDefinition {
    ToolDefinition::new(
        "weather",
        "Current weather for a city.",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    )
}

#[tokio::test]
async fn plain_reply_sends_the_documented_request() {
    let server = MockServer::start(vec![Reply::json(
        200,
        anthropic_message(
            json!([{"type": "text", "text": "Hello!"}]),
            "end_turn",
            21,
            4,
        ),
    )])
    .await;
    let request = ModelRequest::new(vec![
        Message::system("Be brief."),
        Message::user("Hi"),
        Message::assistant("Hello"),
        Message::user("Again"),
    ])
    .temperature(0.0)
    .stop(vec!["END".into()]);
    let response = model(&server).complete(request).await.unwrap();
    assert_eq!(response.content, "Hello!");
    assert_eq!(response.finish_reason, FinishReason::Stop);
    assert_eq!(
        response.usage,
        Usage {
            input_tokens: 21,
            output_tokens: 4,
            cached_tokens: 0
        }
    );

    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.header("x-api-key"), Some(KEY));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(sent.header("authorization"), None);
    assert_eq!(
        sent.body,
        json!({
            "model": "claude-test",
            "max_tokens": 4096,
            "system": "Be brief.",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]},
                {"role": "user", "content": [{"type": "text", "text": "Again"}]}
            ],
            "temperature": 0.0,
            "stop_sequences": ["END"]
        })
    );
}

/// Anthropic refuses a system text that is empty or only whitespace (400 "text content
/// blocks must be non-empty"): an agent built with blank instructions sends none.
#[tokio::test]
async fn blank_instructions_send_no_system_text() {
    let reply = || {
        Reply::json(
            200,
            anthropic_message(json!([{"type": "text", "text": "Hi"}]), "end_turn", 3, 1),
        )
    };
    let server = MockServer::start(vec![reply(), reply()]).await;
    let model = model(&server);
    let blank = ModelRequest::new(vec![Message::system(""), Message::user("Hi")]);
    model.complete(blank).await.unwrap();
    let spaced = ModelRequest::new(vec![
        Message::system(" \n "),
        Message::system("Be brief."),
        Message::user("Hi"),
    ]);
    model.complete(spaced).await.unwrap();
    let sent = server.requests();
    assert_eq!(sent[0].body.get("system"), None, "{}", sent[0].body);
    assert_eq!(sent[1].body["system"], "Be brief.");
}

#[tokio::test]
async fn streamed_reply_with_parallel_tools_folds_into_the_plain_response() {
    let mut events = vec![anthropic_start(50), json!({"type": "ping"})];
    events.extend(anthropic_text_block(0, &["Checking ", "both."]));
    events.extend(anthropic_tool_block(
        1,
        "toolu_a",
        "weather",
        &["{\"city\"", ": \"Paris\"}"],
    ));
    events.extend(anthropic_tool_block(
        2,
        "toolu_b",
        "weather",
        &["", "{\"city\": \"Oslo\"}"],
    ));
    events.extend(anthropic_end("tool_use", 61));
    let transcript = anthropic_sse(&events).replace('\n', "\r\n");
    let plain = anthropic_message(
        json!([
            {"type": "text", "text": "Checking both."},
            {"type": "tool_use", "id": "toolu_a", "name": "weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "toolu_b", "name": "weather", "input": {"city": "Oslo"}}
        ]),
        "tool_use",
        50,
        61,
    );
    let server = MockServer::start(vec![
        Reply::sse(&transcript, 9),
        Reply::json(200, plain),
        Reply::sse(&transcript, 1),
    ])
    .await;
    let model = model(&server);
    let request = ModelRequest::new(vec![Message::user("Weather in Paris and Oslo?")])
        .tools(vec![weather_tool()])
        .tool_choice(ToolChoice::Auto);

    let mut stream = model.stream(request.clone());
    let mut saw_tool_delta_with_id = false;
    let mut last = None;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        if let StreamChunk::ToolCall {
            index: 1,
            id: Some(id),
            ..
        } = &chunk
        {
            saw_tool_delta_with_id = id == "toolu_b";
        }
        last = Some(chunk);
    }
    assert!(
        saw_tool_delta_with_id,
        "tool calls are numbered among tool calls, not blocks"
    );
    assert_eq!(
        last,
        Some(StreamChunk::Finish {
            reason: FinishReason::ToolCalls
        })
    );

    let complete = model.complete(request.clone()).await.unwrap();
    assert_eq!(
        complete.tool_calls,
        vec![
            ToolCall::new("toolu_a", "weather", json!({"city": "Paris"})),
            ToolCall::new("toolu_b", "weather", json!({"city": "Oslo"})),
        ]
    );
    let folded = collect_stream(model.stream(request)).await.unwrap();
    assert_eq!(folded, complete);

    let sent = &server.requests()[0];
    assert_eq!(sent.body["stream"], true);
    assert_eq!(sent.body["tool_choice"], json!({"type": "auto"}));
    assert_eq!(
        sent.body["tools"][0]["input_schema"],
        weather_tool().parameters
    );

    // parallel results go back as one user turn of tool_result blocks
    let server2 = MockServer::start(vec![Reply::json(
        200,
        anthropic_message(json!([{"type": "text", "text": "Done."}]), "end_turn", 1, 1),
    )])
    .await;
    self::model(&server2)
        .complete(ModelRequest::new(vec![
            Message::user("Weather?"),
            complete.message(),
            Message::tool_result("toolu_a", "sunny"),
            Message::tool_error("toolu_b", "station offline"),
        ]))
        .await
        .unwrap();
    let body = &server2.requests()[0].body;
    assert_eq!(body["messages"].as_array().unwrap().len(), 3);
    assert_eq!(
        body["messages"][2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": "sunny"},
            {"type": "tool_result", "tool_use_id": "toolu_b", "content": "station offline", "is_error": true}
        ]})
    );
    assert_eq!(body["messages"][1]["content"][1]["type"], "tool_use");
}

#[tokio::test]
async fn structured_output_goes_through_a_forced_tool() {
    let schema =
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    let mut events = vec![anthropic_start(10)];
    events.extend(anthropic_tool_block(
        0,
        "toolu_o",
        "answer",
        &["{\"n\"", ": 4}"],
    ));
    events.extend(anthropic_end("tool_use", 7));
    let server = MockServer::start(vec![
        Reply::json(
            200,
            anthropic_message(
                json!([{"type": "tool_use", "id": "toolu_o", "name": "answer", "input": {"n": 4}}]),
                "tool_use",
                10,
                7,
            ),
        ),
        Reply::sse(&anthropic_sse(&events), 5),
    ])
    .await;
    let model = model(&server);
    let request = ModelRequest::new(vec![Message::user("2+2?")])
        .output_schema(OutputSchema::new("answer", schema.clone()));
    let plain = model.complete(request.clone()).await.unwrap();
    assert_eq!(plain.parse::<serde_json::Value>().unwrap(), json!({"n": 4}));
    assert!(plain.tool_calls.is_empty());
    assert_eq!(plain.finish_reason, FinishReason::Stop);
    let streamed = collect_stream(model.stream(request)).await.unwrap();
    assert_eq!(
        streamed.parse::<serde_json::Value>().unwrap(),
        json!({"n": 4})
    );
    assert_eq!(streamed.finish_reason, FinishReason::Stop);

    let sent = &server.requests()[0];
    assert_eq!(
        sent.body["tool_choice"],
        json!({"type": "tool", "name": "answer"})
    );
    assert_eq!(sent.body["tools"][0]["input_schema"], schema);
}

#[tokio::test]
async fn error_bodies_become_typed_errors() {
    let error = |kind: &str, message: &str| json!({"type": "error", "error": {"type": kind, "message": message}});
    let server = MockServer::start(vec![
        Reply::json(401, error("authentication_error", "invalid x-api-key")),
        Reply::json(
            400,
            error("invalid_request_error", "messages: roles must alternate"),
        ),
        Reply::json(
            400,
            error(
                "invalid_request_error",
                "prompt is too long: 210000 tokens > 200000 maximum",
            ),
        ),
        Reply::json(529, error("overloaded_error", "Overloaded")),
        Reply::json(
            200,
            anthropic_message(json!([{"type": "text", "text": "ok"}]), "end_turn", 1, 1),
        ),
        Reply::json(
            429,
            error(
                "rate_limit_error",
                "Number of request tokens has exceeded your rate limit",
            ),
        )
        .with_header("retry-after", "3600"),
    ])
    .await;
    let model = model(&server);
    let request = ModelRequest::new(vec![Message::user("Hi")]);

    let err = model.complete(request.clone()).await.unwrap_err();
    assert!(
        matches!(err, ModelError::Authentication { status: 401, .. }),
        "{err:?}"
    );
    assert!(!format!("{err:?}{model:?}").contains(KEY));

    let err = model.complete(request.clone()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        // A server other than api.anthropic.com is named as such, as OpenAI's are.
        "anthropic-compatible rejected the request for model claude-test (status 400): messages: roles must alternate"
    );
    let err = model.complete(request.clone()).await.unwrap_err();
    assert!(matches!(err, ModelError::ContextTooLong { .. }), "{err:?}");

    // 529 overloaded is retried
    assert_eq!(model.complete(request.clone()).await.unwrap().content, "ok");

    // a retry-after beyond the policy's limit fails at once, with the wait in the error
    let err = model.complete(request).await.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(3600)));
    assert_eq!(server.remaining(), 0);
    assert_eq!(server.requests().len(), 6);
}

#[tokio::test]
async fn stream_errors_and_cuts_are_reported() {
    let mut events = vec![anthropic_start(10)];
    events.extend(anthropic_text_block(0, &["partial"]));
    events.push(
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    );
    let errored = anthropic_sse(&events);
    let mut cut = vec![anthropic_start(10)];
    cut.extend(anthropic_text_block(0, &["partial"]));
    let server = MockServer::start(vec![
        Reply::sse(&errored, 64),
        Reply::sse_cut(&anthropic_sse(&cut), 64),
    ])
    .await;
    let model = model(&server);
    let request = ModelRequest::new(vec![Message::user("Hi")]);
    let err = collect_stream(model.stream(request.clone()))
        .await
        .unwrap_err();
    match err {
        ModelError::StreamError { kind, message, .. } => {
            assert_eq!(
                (kind.as_str(), message.as_str()),
                ("overloaded_error", "Overloaded")
            );
        }
        other => panic!("{other:?}"),
    }
    let err = collect_stream(model.stream(request)).await.unwrap_err();
    assert!(matches!(err, ModelError::StreamCut { .. }), "{err:?}");
}

#[tokio::test]
async fn anthropic_compatible_strings_resolve() {
    let server = MockServer::start(vec![Reply::json(
        200,
        anthropic_message(json!([{"type": "text", "text": "hi"}]), "end_turn", 1, 1),
    )])
    .await;
    let model = resolve(&format!("anthropic-compatible:local@{}", server.url())).unwrap();
    let response = model
        .complete(ModelRequest::new(vec![Message::user("Hi")]))
        .await
        .unwrap();
    assert_eq!(response.content, "hi");
    assert_eq!(server.requests()[0].body["model"], "local");
}

/// With an output schema, a reply the token limit ended in the output tool's call answers
/// the same streamed as complete: the text before the call (the unfinished call is dropped),
/// and `Length`. Before, the stream answered with the call's cut JSON.
#[tokio::test]
async fn an_output_cut_by_the_token_limit_streams_as_it_completes() {
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
    let mut events = vec![anthropic_start(10)];
    events.extend(anthropic_text_block(0, &["Working on it."]));
    events.extend(anthropic_tool_block(
        1,
        "toolu_1",
        "answer",
        &["{\"n\":", " 4"],
    ));
    events.extend(anthropic_end("max_tokens", 9));
    let whole = anthropic_message(
        json!([
            {"type": "text", "text": "Working on it."},
            {"type": "tool_use", "id": "toolu_1", "name": "answer", "input": {}}
        ]),
        "max_tokens",
        10,
        9,
    );
    let server = MockServer::start(vec![
        Reply::json(200, whole),
        Reply::sse(&anthropic_sse(&events), 4096),
    ])
    .await;
    let request = ModelRequest::new(vec![Message::user("Hi")])
        .output_schema(OutputSchema::new("answer", schema));
    let complete = model(&server).complete(request.clone()).await.unwrap();
    let streamed = collect_stream(model(&server).stream(request))
        .await
        .unwrap();
    assert_eq!(complete.content, "Working on it.");
    assert_eq!(complete.finish_reason, FinishReason::Length);
    assert_eq!(streamed, complete);
}

/// A gateway's error in the stream, `{"error": {…}}` with no event name, is the error it
/// states (a 504 here, tried again), not an event that does not decode.
#[tokio::test]
async fn a_gateways_error_in_the_stream_is_the_error_it_states() {
    let gateway = "data: {\"error\":{\"message\":\"upstream timeout\",\"code\":504}}\n\n";
    let server = MockServer::start(vec![
        Reply::sse(gateway, 4096),
        Reply::sse(&anthropic_text_stream(2), 4096),
    ])
    .await;
    let reply = collect_stream(model(&server).stream(ModelRequest::new(vec![Message::user("Hi")])))
        .await
        .unwrap();
    assert!(!reply.content.is_empty());
    assert_eq!(server.requests().len(), 2, "tried again");
    let server = MockServer::start(vec![Reply::sse(gateway, 4096)]).await;
    let once = AnthropicModel::builder("claude-test")
        .base_url(server.url())
        .api_key(KEY)
        .retry(RetryPolicy::none())
        .build()
        .unwrap();
    let error = collect_stream(once.stream(ModelRequest::new(vec![Message::user("Hi")])))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("upstream timeout"), "{error}");
}
