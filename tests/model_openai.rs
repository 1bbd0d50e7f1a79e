//! The OpenAI Chat Completions adapter against a local server speaking the real wire format.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/fixtures.rs"]
mod fixtures;
#[path = "support/mock_server.rs"]
mod mock_server;

use std::time::{Duration, Instant};

use fixtures::*;
use futures_util::StreamExt;
use loomflow::model::{
    FinishReason, Message, Model, ModelError, ModelRequest, OpenAiModel, OutputSchema, RetryPolicy,
    StreamChunk, ToolCall, ToolChoice, ToolDefinition, collect_stream, resolve,
};
use mock_server::{MockServer, Reply};
use serde_json::json;

const KEY: &str = "sk-test-very-secret-key";

fn model(server: &MockServer) -> OpenAiModel {
    OpenAiModel::builder("gpt-test")
        .base_url(format!("{}/v1", server.url()))
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
async fn plain_reply_sends_the_documented_request_and_reads_usage() {
    let server = MockServer::start(vec![Reply::json(
        200,
        openai_completion(
            json!({"role": "assistant", "content": "Hello there!", "refusal": null}),
            "stop",
            19,
            3,
        ),
    )])
    .await;
    let request = ModelRequest::new(vec![Message::system("Be brief."), Message::user("Hi")])
        .temperature(0.5)
        .max_tokens(20)
        .stop(vec!["\n\n".into()]);
    let response = model(&server).complete(request).await.unwrap();
    assert_eq!(response.content, "Hello there!");
    assert_eq!(response.finish_reason, FinishReason::Stop);
    assert_eq!(
        (response.usage.input_tokens, response.usage.output_tokens),
        (19, 3)
    );

    let sent = &server.requests()[0];
    assert_eq!(
        (sent.method.as_str(), sent.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(
        sent.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(sent.header("content-type"), Some("application/json"));
    assert_eq!(
        sent.body,
        json!({
            "model": "gpt-test",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi"}
            ],
            "temperature": 0.5,
            "max_tokens": 20,
            "stop": ["\n\n"]
        })
    );
}

/// A proxy in front of OpenAI's reasoning models wants the cap as `max_completion_tokens`
/// (they refuse `max_tokens`): the builder says so for a base URL that is not OpenAI's.
#[tokio::test]
async fn the_token_cap_goes_under_the_name_the_builder_says() {
    let body = openai_completion(json!({"role": "assistant", "content": "ok"}), "stop", 1, 1);
    let server = MockServer::start(vec![Reply::json(200, body)]).await;
    let model = OpenAiModel::builder("o4-mini")
        .base_url(format!("{}/v1", server.url()))
        .api_key(KEY)
        .max_completion_tokens(true)
        .build()
        .unwrap();
    let request = ModelRequest::new(vec![Message::user("Hi")]).max_tokens(20);
    model.complete(request).await.unwrap();
    let sent = &server.requests()[0].body;
    assert_eq!(sent["max_completion_tokens"], 20, "{sent}");
    assert!(sent.get("max_tokens").is_none(), "{sent}");
}

#[tokio::test]
async fn streamed_reply_folds_into_the_plain_response() {
    let transcript = openai_sse(&[
        openai_chunk(json!({"role": "assistant", "content": ""}), None),
        openai_chunk(json!({"content": "Hel"}), None),
        openai_chunk(json!({"content": "lo, wörld"}), None),
        openai_chunk(json!({}), Some("stop")),
        openai_usage_chunk(19, 3, 0),
    ]);
    let plain = openai_completion(
        json!({"role": "assistant", "content": "Hello, wörld"}),
        "stop",
        19,
        3,
    );
    // 7-byte pieces cut events, lines and the multi-byte ö
    let server = MockServer::start(vec![
        Reply::sse(&transcript, 7),
        Reply::json(200, plain),
        Reply::sse(&transcript, 1),
    ])
    .await;
    let model = model(&server);
    let request = ModelRequest::new(vec![Message::user("Hi")]);

    let mut stream = model.stream(request.clone());
    let mut texts = Vec::new();
    let mut chunks = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        if let StreamChunk::Text { text } = &chunk {
            texts.push(text.clone());
        }
        chunks.push(chunk);
    }
    assert_eq!(texts, ["Hel", "lo, wörld"]);
    assert!(matches!(
        chunks.last(),
        Some(StreamChunk::Finish {
            reason: FinishReason::Stop
        })
    ));

    let complete = model.complete(request.clone()).await.unwrap();
    let folded = collect_stream(model.stream(request)).await.unwrap();
    assert_eq!(folded, complete);
    assert_eq!(folded.usage.output_tokens, 3);

    let sent = &server.requests()[0];
    assert_eq!(sent.body["stream"], true);
    assert_eq!(sent.body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn parallel_tool_calls_plain_and_streamed() {
    let message = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}},
        {"id": "call_b", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}
    ]});
    let transcript = openai_sse(&[
        openai_chunk(json!({"role": "assistant", "content": null}), None),
        openai_chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
            "function": {"name": "weather", "arguments": ""}}]}),
            None,
        ),
        openai_chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]}),
            None,
        ),
        openai_chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}),
            None,
        ),
        openai_chunk(
            json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
            "function": {"name": "weather", "arguments": ""}}]}),
            None,
        ),
        openai_chunk(
            json!({"tool_calls": [{"index": 1, "function": {"arguments": "{\"city\":\"Oslo\"}"}}]}),
            None,
        ),
        openai_chunk(json!({}), Some("tool_calls")),
        openai_usage_chunk(80, 40, 64),
    ]);
    let server = MockServer::start(vec![
        Reply::json(200, openai_completion(message, "tool_calls", 80, 40)),
        Reply::sse(&transcript, 13),
    ])
    .await;
    let model = model(&server);
    let request = ModelRequest::new(vec![Message::user("Weather in Paris and Oslo?")])
        .tools(vec![weather_tool()])
        .tool_choice(ToolChoice::Required);
    let plain = model.complete(request.clone()).await.unwrap();
    let expected = vec![
        ToolCall::new("call_a", "weather", json!({"city": "Paris"})),
        ToolCall::new("call_b", "weather", json!({"city": "Oslo"})),
    ];
    assert_eq!(plain.tool_calls, expected);
    assert_eq!(plain.finish_reason, FinishReason::ToolCalls);
    let streamed = collect_stream(model.stream(request)).await.unwrap();
    assert_eq!(streamed.tool_calls, expected);
    assert_eq!(streamed.usage.cached_tokens, 64);

    let sent = &server.requests()[0];
    assert_eq!(sent.body["tool_choice"], "required");
    assert_eq!(
        sent.body["tools"],
        json!([{"type": "function", "function": {
            "name": "weather", "description": "Current weather for a city.",
            "parameters": weather_tool().parameters}}])
    );

    // the tool results go back as `tool` messages answering each call id
    let server2 = MockServer::start(vec![Reply::json(
        200,
        openai_completion(
            json!({"role": "assistant", "content": "Sunny and cold."}),
            "stop",
            1,
            1,
        ),
    )])
    .await;
    let follow_up = ModelRequest::new(vec![
        Message::user("Weather in Paris and Oslo?"),
        plain.message(),
        Message::tool_result("call_a", "sunny"),
        Message::tool_result("call_b", "cold"),
    ]);
    self::model(&server2).complete(follow_up).await.unwrap();
    let body = &server2.requests()[0].body;
    assert_eq!(body["messages"][1]["tool_calls"][1]["id"], "call_b");
    assert_eq!(
        body["messages"][3],
        json!({"role": "tool", "tool_call_id": "call_b", "content": "cold"})
    );
}

#[tokio::test]
async fn structured_output_uses_strict_json_schema() {
    #[derive(serde::Deserialize)]
    struct Answer {
        city: String,
        celsius: i64,
    }
    let schema = json!({"type": "object", "additionalProperties": false,
        "properties": {"city": {"type": "string"}, "celsius": {"type": "integer"}},
        "required": ["city", "celsius"]});
    let server = MockServer::start(vec![Reply::json(
        200,
        openai_completion(
            json!({"role": "assistant", "content": "{\"city\":\"Paris\",\"celsius\":21}"}),
            "stop",
            30,
            9,
        ),
    )])
    .await;
    let request = ModelRequest::new(vec![Message::user("Paris?")])
        .output_schema(OutputSchema::new("weather_answer", schema.clone()));
    let response = model(&server).complete(request).await.unwrap();
    let answer: Answer = response.parse().unwrap();
    assert_eq!((answer.city.as_str(), answer.celsius), ("Paris", 21));
    assert_eq!(
        server.requests()[0].body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "weather_answer", "schema": schema, "strict": true}})
    );
}

#[tokio::test]
async fn error_bodies_become_typed_errors_without_the_key() {
    let server = MockServer::start(vec![
        Reply::json(401, json!({"error": {"message": format!("Incorrect API key provided: {KEY}."),
            "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}})),
        Reply::json(400, json!({"error": {"message": "Invalid schema for function 'weather'.",
            "type": "invalid_request_error", "param": "tools[0].function.parameters", "code": null}})),
        Reply::json(400, json!({"error": {"message": "This model's maximum context length is 128000 tokens.",
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})),
    ])
    .await;
    let model = model(&server);
    let request = ModelRequest::new(vec![Message::user("Hi")]);

    let err = model.complete(request.clone()).await.unwrap_err();
    assert!(
        matches!(err, ModelError::Authentication { status: 401, .. }),
        "{err:?}"
    );
    let shown = format!("{err} / {err:?} / {model:?}");
    assert!(!shown.contains(KEY), "{shown}");
    assert!(shown.contains("openai-compatible"), "{shown}");

    let err = model.complete(request.clone()).await.unwrap_err();
    match &err {
        ModelError::InvalidRequest {
            status, message, ..
        } => {
            assert_eq!(*status, 400);
            assert_eq!(message, "Invalid schema for function 'weather'.");
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("gpt-test"), "{err}");

    let err = model.complete(request).await.unwrap_err();
    assert!(matches!(err, ModelError::ContextTooLong { .. }), "{err:?}");
    assert_eq!(server.requests().len(), 3, "client errors are not retried");
}

#[tokio::test]
async fn rate_limit_honours_retry_after_then_succeeds() {
    let server = MockServer::start(vec![
        Reply::json(
            429,
            json!({"error": {"message": "Rate limit reached for requests",
            "type": "requests", "param": null, "code": "rate_limit_exceeded"}}),
        )
        .with_header("retry-after", "1"),
        Reply::json(
            200,
            openai_completion(json!({"role": "assistant", "content": "ok"}), "stop", 1, 1),
        ),
    ])
    .await;
    let started = Instant::now();
    let response = model(&server)
        .complete(ModelRequest::new(vec![Message::user("Hi")]))
        .await
        .unwrap();
    assert_eq!(response.content, "ok");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "waited {:?}",
        started.elapsed()
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn server_errors_are_retried_up_to_max_attempts() {
    let failure = || {
        Reply::json(
            503,
            json!({"error": {"message": "The server is overloaded", "type": "server_error"}}),
        )
    };
    let server = MockServer::start(vec![
        failure(),
        failure(),
        Reply::json(
            200,
            openai_completion(json!({"role": "assistant", "content": "ok"}), "stop", 1, 1),
        ),
        failure(),
        failure(),
        failure(),
    ])
    .await;
    let model = model(&server);
    let request = ModelRequest::new(vec![Message::user("Hi")]);
    assert_eq!(model.complete(request.clone()).await.unwrap().content, "ok");
    assert_eq!(server.requests().len(), 3);
    let err = model.complete(request).await.unwrap_err();
    assert!(
        matches!(err, ModelError::Server { status: 503, .. }),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 6, "three attempts in all");

    // a 429 on a stream is retried before any chunk is yielded
    let server = MockServer::start(vec![
        Reply::json(
            429,
            json!({"error": {"message": "slow down", "type": "requests"}}),
        )
        .with_header("retry-after", "0"),
        Reply::sse(&openai_text_stream(3), 16),
    ])
    .await;
    let folded =
        collect_stream(self::model(&server).stream(ModelRequest::new(vec![Message::user("Hi")])))
            .await
            .unwrap();
    assert_eq!(folded.content, " word0 word1 word2");
}

/// A connection that breaks after the 200 but before the reply's first content is tried
/// again, as one that broke before the 200 is: nothing reached the caller. Before its fix
/// the call failed at once with `StreamCut`.
#[tokio::test]
async fn a_stream_cut_before_any_content_is_retried() {
    let full = openai_text_stream(3);
    let cut_at = full.find("word0").unwrap();
    let cut = full[..cut_at].rfind("data:").unwrap();
    let server = MockServer::start(vec![
        Reply::sse_cut(&full[..cut], 20),
        Reply::sse(&full, 20),
    ])
    .await;
    let response =
        collect_stream(model(&server).stream(ModelRequest::new(vec![Message::user("Hi")])))
            .await
            .unwrap();
    assert_eq!(response.content, " word0 word1 word2");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_stream_cut_before_done_is_an_error() {
    let full = openai_text_stream(5);
    let cut_at = full.find("word3").unwrap();
    let server = MockServer::start(vec![Reply::sse_cut(&full[..cut_at], 20)]).await;
    let mut stream = model(&server).stream(ModelRequest::new(vec![Message::user("Hi")]));
    let mut texts = 0;
    let mut last = None;
    while let Some(item) = stream.next().await {
        match item {
            Ok(StreamChunk::Text { .. }) => texts += 1,
            Ok(_) => {}
            Err(err) => last = Some(err),
        }
    }
    assert!(texts >= 2);
    let err = last.expect("the stream ends with an error");
    assert!(matches!(err, ModelError::StreamCut { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "openai-compatible stream for model gpt-test ended before its finish event"
    );
}

/// A server that sends `"finish_reason": ""` on every chunk has not finished: a body that
/// ends after such a chunk, without `[DONE]`, was cut, not a whole reply.
#[tokio::test]
async fn an_empty_finish_reason_is_no_finish() {
    let chunks = [
        json!({"choices": [{"index": 0, "delta": {"content": "Half"}, "finish_reason": ""}]}),
        json!({"choices": [{"index": 0, "delta": {"content": " a"}, "finish_reason": ""}]}),
    ];
    let body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    let server = MockServer::start(vec![Reply::sse(&body, 4096)]).await;
    let result =
        collect_stream(model(&server).stream(ModelRequest::new(vec![Message::user("Hi")]))).await;
    assert!(
        matches!(result, Err(ModelError::StreamCut { .. })),
        "{result:?}"
    );
    // The same chunks ended by one with a reason are a whole reply.
    let mut chunks = chunks.to_vec();
    chunks.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}));
    let body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    let server = MockServer::start(vec![Reply::sse(&(body + "data: [DONE]\n\n"), 4096)]).await;
    let response =
        collect_stream(model(&server).stream(ModelRequest::new(vec![Message::user("Hi")])))
            .await
            .unwrap();
    assert_eq!(response.content, "Half a");
    assert_eq!(response.finish_reason, FinishReason::Stop);
    // Ended by `[DONE]` with no reason ever given: whole, and a stop, as `complete()` reads
    // a reply with no reason.
    let body: String = chunks[..2]
        .iter()
        .map(|c| format!("data: {c}\n\n"))
        .collect();
    let server = MockServer::start(vec![Reply::sse(&(body + "data: [DONE]\n\n"), 4096)]).await;
    let streamed =
        collect_stream(model(&server).stream(ModelRequest::new(vec![Message::user("Hi")])))
            .await
            .unwrap();
    assert_eq!(streamed.content, "Half a");
    assert_eq!(streamed.finish_reason, FinishReason::Stop);
    // The same with no reason at all (`null`, or no key).
    let body = [
        json!({"choices": [{"index": 0, "delta": {"content": "Half"}, "finish_reason": null}]}),
        json!({"choices": [{"index": 0, "delta": {"content": " a"}}]}),
    ]
    .iter()
    .map(|c| format!("data: {c}\n\n"))
    .collect::<String>();
    let server = MockServer::start(vec![Reply::sse(&(body + "data: [DONE]\n\n"), 4096)]).await;
    let unnamed =
        collect_stream(model(&server).stream(ModelRequest::new(vec![Message::user("Hi")])))
            .await
            .unwrap();
    assert_eq!(unnamed.finish_reason, FinishReason::Stop);
    let whole = json!({"id": "c", "object": "chat.completion", "model": "gpt-test", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Half a"}, "finish_reason": ""}]});
    let server = MockServer::start(vec![Reply::json(200, whole)]).await;
    let completed = model(&server)
        .complete(ModelRequest::new(vec![Message::user("Hi")]))
        .await
        .unwrap();
    assert_eq!(completed.finish_reason, streamed.finish_reason);
}

#[tokio::test]
async fn timeouts_and_refused_connections_are_typed() {
    let server = MockServer::start(vec![Reply::Hang]).await;
    let model = OpenAiModel::builder("gpt-test")
        .base_url(format!("{}/v1", server.url()))
        .retry(RetryPolicy::none())
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let err = model
        .complete(ModelRequest::new(vec![Message::user("Hi")]))
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Timeout { .. }), "{err:?}");

    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let model = OpenAiModel::builder("gpt-test")
        .base_url(format!("http://127.0.0.1:{port}/v1"))
        .retry(
            RetryPolicy::default()
                .max_attempts(2)
                .initial_backoff(Duration::from_millis(1)),
        )
        .build()
        .unwrap();
    let mut stream = model.stream(ModelRequest::new(vec![Message::user("Hi")]));
    let err = stream.next().await.unwrap().unwrap_err();
    assert!(
        matches!(&err, ModelError::Connection { model, .. } if model == "gpt-test"),
        "{err:?}"
    );
    assert!(
        err.to_string().ends_with("for model gpt-test failed"),
        "{err}"
    );
    assert!(stream.next().await.is_none());
}

#[tokio::test]
async fn model_strings_resolve_to_a_compatible_server() {
    let server = MockServer::start(vec![Reply::json(
        200,
        openai_completion(json!({"role": "assistant", "content": "hi"}), "stop", 1, 1),
    )])
    .await;
    let model = resolve(&format!(
        "openai-compatible:local-model@{}/v1",
        server.url()
    ))
    .unwrap();
    assert_eq!(model.name(), "openai-compatible:local-model");
    let response = model
        .complete(ModelRequest::new(vec![Message::user("Hi")]))
        .await
        .unwrap();
    assert_eq!(response.content, "hi");
    let sent = &server.requests()[0];
    assert_eq!(sent.body["model"], "local-model");
    assert_eq!(sent.header("authorization"), None, "no key, no header");
}

#[tokio::test]
async fn a_stalled_stream_times_out_after_its_first_chunks() {
    let start = openai_sse(&[openai_chunk(
        json!({"role": "assistant", "content": "Hi"}),
        None,
    )]);
    let start = start.trim_end_matches("data: [DONE]\n\n").to_owned();
    let server = MockServer::start(vec![
        Reply::SseThenHang {
            pieces: vec![start.into_bytes()],
        },
        Reply::json(
            429,
            json!({"error": {"message": "slow down", "type": "requests"}}),
        )
        .with_header("retry-after-ms", "30")
        .with_header("retry-after", "9"),
        Reply::json(
            200,
            openai_completion(json!({"role": "assistant", "content": "ok"}), "stop", 1, 1),
        ),
    ])
    .await;
    let model = OpenAiModel::builder("gpt-test")
        .base_url(format!("{}/v1", server.url()))
        .retry(RetryPolicy::none().max_attempts(2))
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let mut stream = model.stream(ModelRequest::new(vec![Message::user("Hi")]));
    // The first chunk names the model that answers, then the text comes.
    assert_eq!(
        stream.next().await.unwrap().unwrap(),
        StreamChunk::Model {
            model: "gpt-test".into()
        }
    );
    assert_eq!(
        stream.next().await.unwrap().unwrap(),
        StreamChunk::Text { text: "Hi".into() }
    );
    let err = stream.next().await.unwrap().unwrap_err();
    assert!(matches!(err, ModelError::Timeout { .. }), "{err:?}");
    assert!(stream.next().await.is_none());

    // retry-after-ms wins over retry-after: the retry comes well before 9 s
    let started = Instant::now();
    let response = model
        .complete(ModelRequest::new(vec![Message::user("Hi")]))
        .await
        .unwrap();
    assert_eq!(response.content, "ok");
    assert!(started.elapsed() < Duration::from_secs(5));
}
