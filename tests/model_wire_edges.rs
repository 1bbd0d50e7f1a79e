//! Both HTTP adapters at the edges of their wire formats: error objects in 200 bodies,
//! explicit nulls, odd `retry-after` values, refusals and truncated replies, against a local
//! server speaking each provider's format.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/fixtures.rs"]
mod fixtures;
#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/models.rs"]
mod models;

use std::time::{Duration, Instant};

use fixtures::*;
use loomflow::model::{
    FinishReason, Message, Model, ModelError, ModelRequest, OutputSchema, ToolCall, collect_stream,
};
use mock_server::{MockServer, Reply};
use models::{anthropic, hi, openai};
use serde_json::json;

fn anthropic_ok() -> Reply {
    Reply::json(
        200,
        anthropic_message(json!([{"type": "text", "text": "ok"}]), "end_turn", 3, 1),
    )
}

fn openai_ok() -> Reply {
    Reply::json(
        200,
        openai_completion(json!({"role": "assistant", "content": "ok"}), "stop", 1, 1),
    )
}

#[tokio::test]
async fn a_200_with_an_anthropic_error_body_is_an_error() {
    let overloaded =
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    let invalid = json!({"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: too large"}});
    let server = MockServer::start(vec![
        Reply::json(200, overloaded),
        anthropic_ok(),
        Reply::json(200, invalid),
    ])
    .await;
    let model = anthropic(&server);
    // overloaded is transient: retried like a 529
    assert_eq!(model.complete(hi()).await.unwrap().content, "ok");
    assert_eq!(server.requests().len(), 2);
    let err = model.complete(hi()).await.unwrap_err();
    assert!(
        matches!(err, ModelError::InvalidRequest { status: 400, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("max_tokens: too large"), "{err}");
    assert_eq!(
        server.requests().len(),
        3,
        "an invalid request is not retried"
    );
}

#[tokio::test]
async fn a_200_with_an_openai_error_body_carries_the_providers_message() {
    let crashed = || {
        Reply::json(
            200,
            json!({"error": {"message": "upstream model crashed", "type": "server_error", "code": 502}}),
        )
    };
    let server = MockServer::start(vec![crashed(), crashed(), crashed(), openai_ok()]).await;
    let err = openai(&server).complete(hi()).await.unwrap_err();
    assert!(
        matches!(err, ModelError::Server { status: 502, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("upstream model crashed"), "{err}");
    assert_eq!(server.requests().len(), 3, "retried up to max_attempts");
}

#[tokio::test]
async fn explicit_nulls_from_gateways_read_as_empty() {
    let stream = openai_sse(&[
        openai_chunk(
            json!({"role": "assistant", "content": "Hel", "tool_calls": null}),
            None,
        ),
        openai_chunk(json!({"content": "lo", "tool_calls": null}), None),
        openai_chunk(json!({"content": null, "tool_calls": null}), Some("stop")),
        json!({"choices": null, "usage": {"prompt_tokens": 3, "completion_tokens": 2}}),
    ]);
    let plain = openai_completion(
        json!({"role": "assistant", "content": "Hello", "tool_calls": null, "function_call": null}),
        "stop",
        3,
        2,
    );
    let server = MockServer::start(vec![Reply::json(200, plain), Reply::sse(&stream, 64)]).await;
    let model = openai(&server);
    let plain = model.complete(hi()).await.unwrap();
    let streamed = collect_stream(model.stream(hi())).await.unwrap();
    assert_eq!(plain.content, "Hello");
    assert!(plain.tool_calls.is_empty());
    assert_eq!(streamed, plain);
}

#[tokio::test]
async fn retry_after_on_a_server_error_is_honoured_within_the_cap() {
    let overloaded = || {
        Reply::json(
            529,
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        )
    };
    let server = MockServer::start(vec![
        overloaded().with_header("retry-after", "1"),
        anthropic_ok(),
        overloaded().with_header("retry-after", "3600"),
    ])
    .await;
    let model = anthropic(&server);
    let started = Instant::now();
    assert_eq!(model.complete(hi()).await.unwrap().content, "ok");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "waited {:?}",
        started.elapsed()
    );
    // longer than the policy's max_retry_after (60 s): fails at once, as a 429 does
    let err = model.complete(hi()).await.unwrap_err();
    assert!(
        matches!(err, ModelError::Server { status: 529, .. }),
        "{err:?}"
    );
    assert_eq!(err.retry_after(), Some(Duration::from_secs(3600)));
    assert_eq!(server.requests().len(), 3);

    let server = MockServer::start(vec![
        Reply::json(
            503,
            json!({"error": {"message": "busy", "type": "server_error"}}),
        )
        .with_header("retry-after-ms", "700"),
        openai_ok(),
    ])
    .await;
    let started = Instant::now();
    assert_eq!(openai(&server).complete(hi()).await.unwrap().content, "ok");
    assert!(
        started.elapsed() >= Duration::from_millis(700),
        "waited {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn retry_after_as_an_http_date_is_read() {
    let limited = || {
        Reply::json(
            429,
            json!({"error": {"message": "slow down", "type": "requests"}}),
        )
        .with_header("retry-after", "Fri, 01 Jan 2100 00:00:00 GMT")
    };
    let server = MockServer::start(vec![limited(), limited(), limited()]).await;
    let err = openai(&server).complete(hi()).await.unwrap_err();
    assert!(matches!(err, ModelError::RateLimited { .. }), "{err:?}");
    // a date decades away is far past the policy's cap: no retry, no backoff guess
    assert!(
        err.retry_after() >= Some(Duration::from_secs(60)),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn request_timeout_and_conflict_are_retried() {
    let server = MockServer::start(vec![
        Reply::json(
            408,
            json!({"error": {"message": "request timed out", "type": "timeout"}}),
        ),
        Reply::json(
            409,
            json!({"error": {"message": "lock held", "type": "conflict"}}),
        ),
        openai_ok(),
    ])
    .await;
    assert_eq!(openai(&server).complete(hi()).await.unwrap().content, "ok");
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn an_openai_refusal_ends_as_content_filter_with_its_text() {
    let refusal = "I can't help with that.";
    let stream = openai_sse(&[
        openai_chunk(
            json!({"role": "assistant", "content": null, "refusal": "I can't "}),
            None,
        ),
        openai_chunk(json!({"refusal": "help with that."}), Some("stop")),
    ]);
    let server = MockServer::start(vec![
        Reply::json(
            200,
            openai_completion(
                json!({"role": "assistant", "content": null, "refusal": refusal}),
                "stop",
                10,
                9,
            ),
        ),
        Reply::sse(&stream, 16),
    ])
    .await;
    let model = openai(&server);
    let plain = model.complete(hi()).await.unwrap();
    assert_eq!(plain.content, refusal);
    assert_eq!(plain.finish_reason, FinishReason::ContentFilter);
    let streamed = collect_stream(model.stream(hi())).await.unwrap();
    assert_eq!(streamed.content, refusal);
    assert_eq!(streamed.finish_reason, FinishReason::ContentFilter);
}

#[tokio::test]
async fn a_tool_call_cut_by_the_token_limit_reports_length() {
    let cut = || {
        json!({"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Par"}}]})
    };
    let stream = openai_sse(&[
        openai_chunk(
            json!({"role": "assistant", "content": "Checking.", "tool_calls": [
            {"index": 0, "id": "call_1", "type": "function", "function": {"name": "weather", "arguments": ""}}]}),
            None,
        ),
        openai_chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\": \"Par"}}]}),
            Some("length"),
        ),
    ]);
    let server = MockServer::start(vec![
        Reply::json(200, openai_completion(cut(), "length", 10, 16)),
        Reply::sse(&stream, 32),
    ])
    .await;
    let model = openai(&server);
    for response in [
        model.complete(hi()).await.unwrap(),
        collect_stream(model.stream(hi())).await.unwrap(),
    ] {
        assert_eq!(response.finish_reason, FinishReason::Length);
        assert_eq!(response.content, "Checking.");
        assert!(response.tool_calls.is_empty(), "{:?}", response.tool_calls);
    }
}

/// A call the token limit cut before its first argument is dropped too, not run with an
/// empty object; a whole call before it is kept. OpenAI whole and streamed, and Anthropic
/// whole (whose last `tool_use` block may be unfinished, its input what had been written)
/// and streamed.
#[tokio::test]
async fn a_tool_call_cut_before_its_arguments_is_dropped() {
    let calls = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}},
        {"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": ""}}]});
    let stream = openai_sse(&[
        openai_chunk(
            json!({"role": "assistant", "tool_calls": [
            {"index": 0, "id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}}]}),
            None,
        ),
        openai_chunk(
            json!({"tool_calls": [
            {"index": 1, "id": "call_2", "type": "function", "function": {"name": "weather", "arguments": ""}}]}),
            Some("length"),
        ),
    ]);
    let blocks = json!([
        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
        {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {"city": "Par"}}]);
    let mut events = vec![anthropic_start(10)];
    events.extend(anthropic_tool_block(
        0,
        "toolu_1",
        "weather",
        &["{\"city\": \"Oslo\"}"],
    ));
    events.extend(anthropic_tool_block(1, "toolu_2", "weather", &[]));
    events.extend(anthropic_end("max_tokens", 16));
    let server = MockServer::start(vec![
        Reply::json(200, openai_completion(calls, "length", 10, 16)),
        Reply::sse(&stream, 32),
        Reply::json(200, anthropic_message(blocks, "max_tokens", 10, 16)),
        Reply::sse(&anthropic_sse(&events), 32),
    ])
    .await;
    let (openai, anthropic) = (openai(&server), anthropic(&server));
    for response in [
        openai.complete(hi()).await.unwrap(),
        collect_stream(openai.stream(hi())).await.unwrap(),
        anthropic.complete(hi()).await.unwrap(),
        collect_stream(anthropic.stream(hi())).await.unwrap(),
    ] {
        assert_eq!(response.finish_reason, FinishReason::Length);
        let kept: Vec<_> = response.tool_calls.iter().map(|c| &c.arguments).collect();
        assert_eq!(
            kept,
            [&json!({"city": "Oslo"})],
            "{:?}",
            response.tool_calls
        );
    }
}

#[tokio::test]
async fn an_empty_assistant_turn_sends_no_empty_text_block_to_anthropic() {
    let server = MockServer::start(vec![anthropic_ok()]).await;
    let request = ModelRequest::new(vec![
        Message::user("Hi"),
        Message::assistant(""), // Anthropic may answer end_turn with no content
        Message::user("Hello?"),
        Message::assistant_tool_calls(vec![ToolCall::new("t1", "f", json!({}))]),
        Message::tool_result("t1", "done"),
    ]);
    anthropic(&server).complete(request).await.unwrap();
    let messages = server.requests()[0].body["messages"].clone();
    assert_eq!(
        messages,
        json!([
            {"role": "user", "content": [
                {"type": "text", "text": "Hi"}, {"type": "text", "text": "Hello?"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "done"}]},
        ])
    );
}

#[tokio::test]
async fn parallel_tool_calls_streamed_without_an_index_stay_apart() {
    // Gemini's OpenAI-compatible endpoint: no `index`, one call per chunk, the name repeated
    let sse = openai_sse(&[
        openai_chunk(
            json!({"role": "assistant", "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":"}}]}),
            None,
        ),
        openai_chunk(
            json!({"tool_calls": [
            {"type": "function", "function": {"name": "weather", "arguments": "\"Oslo\"}"}}]}),
            None,
        ),
        openai_chunk(
            json!({"tool_calls": [
            {"id": "call_b", "type": "function", "function": {"name": "time", "arguments": "{\"tz\":\"CET\"}"}}]}),
            None,
        ),
        openai_chunk(json!({}), Some("tool_calls")),
    ]);
    let server = MockServer::start(vec![Reply::sse(&sse, 4096)]).await;
    let response = collect_stream(openai(&server).stream(hi())).await.unwrap();
    assert_eq!(
        response.tool_calls,
        vec![
            ToolCall::new("call_a", "weather", json!({"city": "Oslo"})),
            ToolCall::new("call_b", "time", json!({"tz": "CET"})),
        ]
    );
}

#[tokio::test]
async fn anthropic_structured_output_streams_as_it_completes_when_text_comes_with_it() {
    let schema = OutputSchema::new(
        "answer",
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
    );
    let mut events = vec![anthropic_start(10)];
    events.extend(anthropic_text_block(0, &["Here is ", "the answer:"]));
    events.extend(anthropic_tool_block(
        1,
        "toolu_1",
        "answer",
        &["{\"n\":", " 4}"],
    ));
    events.extend(anthropic_text_block(2, &["Done."]));
    events.extend(anthropic_end("tool_use", 9));
    let plain = anthropic_message(
        json!([
            {"type": "text", "text": "Here is the answer:"},
            {"type": "tool_use", "id": "toolu_1", "name": "answer", "input": {"n": 4}},
            {"type": "text", "text": "Done."}
        ]),
        "tool_use",
        10,
        9,
    );
    // and a model that answers in text, without the tool
    let mut text_only = vec![anthropic_start(10)];
    text_only.extend(anthropic_text_block(0, &["{\"n\":", " 5}"]));
    text_only.extend(anthropic_end("end_turn", 4));
    let server = MockServer::start(vec![
        Reply::json(200, plain),
        Reply::sse(&anthropic_sse(&events), 4096),
        Reply::sse(&anthropic_sse(&text_only), 4096),
    ])
    .await;
    let model = anthropic(&server);
    let request = hi().output_schema(schema);
    let complete = model.complete(request.clone()).await.unwrap();
    let streamed = collect_stream(model.stream(request.clone())).await.unwrap();
    assert_eq!(complete.content, "{\"n\":4}");
    assert_eq!(streamed, complete);
    let text_answer = collect_stream(model.stream(request)).await.unwrap();
    assert_eq!(text_answer.content, "{\"n\": 5}", "text as it came");
}

#[tokio::test]
async fn a_stream_error_before_any_content_is_retried() {
    let overloaded = anthropic_sse(&[
        anthropic_start(3),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ]);
    let mut after_text = vec![anthropic_start(3)];
    after_text.extend(anthropic_text_block(0, &["so far"]));
    after_text.push(
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    );
    let server = MockServer::start(vec![
        Reply::sse(&overloaded, 4096),
        Reply::sse(&anthropic_text_stream(3), 4096),
        Reply::sse(&anthropic_sse(&after_text), 4096),
    ])
    .await;
    let model = anthropic(&server);
    let response = collect_stream(model.stream(hi())).await.unwrap();
    assert!(!response.content.is_empty());
    assert_eq!(server.requests().len(), 2);
    // once text has reached the caller, the error is theirs: no retry, no repeated text
    let err = collect_stream(model.stream(hi())).await.unwrap_err();
    assert!(matches!(err, ModelError::StreamError { .. }), "{err:?}");
    assert_eq!(server.requests().len(), 3);
}

/// A tool call whose arguments are not JSON keeps them as text, whole or streamed: the tool
/// host answers it with an error the model reads, rather than the reply failing the run.
/// Sent back in the transcript, they go as an empty object (the call's result says why):
/// a compatible server may parse the history's arguments, and Anthropic takes an object.
#[tokio::test]
async fn arguments_that_are_not_json_are_kept_as_text() {
    let sse = openai_sse(&[openai_chunk(
        json!({"tool_calls": [
            {"index": 0, "id": "c", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]}),
        Some("tool_calls"),
    )]);
    let whole = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]});
    let server = MockServer::start(vec![
        Reply::sse(&sse, 4096),
        Reply::json(200, openai_completion(whole, "tool_calls", 1, 1)),
        openai_ok(),
        anthropic_ok(),
    ])
    .await;
    let model = openai(&server);
    for response in [
        collect_stream(model.stream(hi())).await.unwrap(),
        model.complete(hi()).await.unwrap(),
    ] {
        assert_eq!(response.tool_calls[0].arguments, json!("{not json"));
    }
    let history = ModelRequest::new(vec![
        Message::user("Hi"),
        Message::assistant_tool_calls(vec![ToolCall::new("c", "f", json!("{not json"))]),
        Message::tool_error("c", "arguments are not JSON"),
    ]);
    model.complete(history.clone()).await.unwrap();
    anthropic(&server).complete(history).await.unwrap();
    let requests = server.requests();
    let sent = &requests[2].body["messages"][1]["tool_calls"][0]["function"]["arguments"];
    assert_eq!(sent, "{}");
    let input = &requests[3].body["messages"][1]["content"][0]["input"];
    assert_eq!(input, &json!({}));
}

#[tokio::test]
async fn a_rate_limit_error_shows_the_providers_message() {
    let limited = || {
        Reply::json(
            429,
            json!({"error": {"message": "Rate limit reached for gpt-test on tokens per min", "type": "tokens"}}),
        )
        .with_header("retry-after", "3600")
    };
    let server = MockServer::start(vec![limited()]).await;
    let err = openai(&server).complete(hi()).await.unwrap_err();
    assert!(
        err.to_string()
            .ends_with(": Rate limit reached for gpt-test on tokens per min"),
        "{err}"
    );
}

/// A server that closes right after its last event, without the blank line that ends it,
/// or (OpenAI-compatible) without `[DONE]` once the finish reason came, sent a whole reply;
/// one that ends before its finish is still cut.
#[tokio::test]
async fn a_stream_that_ends_without_its_last_blank_line_or_done_is_whole() {
    let content = openai_chunk(json!({"role": "assistant", "content": "Hi"}), None);
    let finish = openai_chunk(json!({}), Some("stop"));
    let openai_bodies = [
        format!("data: {content}\n\ndata: {finish}\n\ndata: [DONE]"),
        format!("data: {content}\n\ndata: {finish}\n\ndata: [DONE]\n"),
        format!("data: {content}\n\ndata: {finish}\n\n"),
        format!("data: {content}\n\ndata: {finish}"),
    ];
    let replies = openai_bodies.iter().map(|body| Reply::sse(body, 7));
    let server = MockServer::start(replies.collect()).await;
    for body in &openai_bodies {
        let response = collect_stream(openai(&server).stream(hi())).await;
        let response = response.unwrap_or_else(|e| panic!("{body:?}: {e}"));
        assert_eq!(
            (response.content.as_str(), &response.finish_reason),
            ("Hi", &FinishReason::Stop),
            "{body:?}"
        );
    }
    let mut events = vec![anthropic_start(3)];
    events.extend(anthropic_text_block(0, &["Hi"]));
    events.extend(anthropic_end("end_turn", 1));
    let without_blank_line = anthropic_sse(&events).trim_end().to_owned();
    let server = MockServer::start(vec![Reply::sse(&without_blank_line, 7)]).await;
    let response = collect_stream(anthropic(&server).stream(hi()))
        .await
        .unwrap();
    assert_eq!(response.content, "Hi");
    // Text, and then nothing: not a whole reply.
    let server = MockServer::start(vec![Reply::sse(&format!("data: {content}\n\n"), 7)]).await;
    let err = collect_stream(openai(&server).stream(hi()))
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::StreamCut { .. }), "{err:?}");
}
