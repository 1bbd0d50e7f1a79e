//! Both HTTP adapters against what real servers send besides the documented format: an SSE
//! `error` event (llama.cpp), an error object in a 200 reply to a stream request, parallel
//! calls that all claim index 0 (Ollama), Anthropic's context-limit wording, bytes cut
//! anywhere in a stream, and a whole JSON reply to a stream request.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/fixtures.rs"]
mod fixtures;
#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/models.rs"]
mod models;

use fixtures::*;
use futures_util::StreamExt;
use loomflow::model::{
    AnthropicModel, FinishReason, Message, Model, ModelError, ModelRequest, OpenAiModel,
    OutputSchema, StreamChunk, ToolCall, ToolChoice, ToolDefinition, collect_stream,
};
use mock_server::{MockServer, Reply};
use models::{anthropic, hi, openai};
use serde_json::json;

// A streamed error event followed by `[DONE]` (llama.cpp) is the error it names.

#[tokio::test]
async fn a_llama_cpp_stream_error_event_is_the_error_it_names() {
    // Exactly what llama.cpp's server (handle_completions_impl, oaicompat chat) writes when
    // the task fails after the 200 went out: `server_sent_event(sink, "error", error_data)`
    // and then `data: [DONE]`.
    let body = concat!(
        "error: {\"code\":400,\"message\":\"the request exceeds the available context size, ",
        "try increasing it\",\"type\":\"exceed_context_size_error\",\"n_prompt_tokens\":5000,",
        "\"n_ctx\":4096}\n\n",
        "data: [DONE]\n\n",
    );
    let server = MockServer::start(vec![Reply::sse(body, 4096)]).await;
    let result = collect_stream(openai(&server).stream(hi())).await;
    match result {
        Err(err) => {
            assert!(
                err.to_string()
                    .contains("exceeds the available context size"),
                "the server's message is lost: {err}"
            );
            assert!(matches!(err, ModelError::ContextTooLong { .. }), "{err:?}");
        }
        Ok(response) => panic!("a failed generation reads as a successful reply: {response:?}"),
    }
}

#[tokio::test]
async fn done_without_any_finish_reason_is_not_a_complete_reply() {
    // The same without the llama.cpp quirk: a stream that says [DONE] although no chunk ever
    // carried a finish_reason (nor any content) is not a complete Chat Completions stream.
    let body = "data: [DONE]\n\n";
    let server = MockServer::start(vec![Reply::sse(body, 4096)]).await;
    let result = collect_stream(openai(&server).stream(hi())).await;
    assert!(result.is_err(), "{result:?}");
}

// Anthropic: ToolChoice::None with an output schema forces the output tool, not any tool.

#[tokio::test]
async fn anthropic_tool_choice_none_with_an_output_schema_does_not_force_a_real_tool() {
    let server = MockServer::start(vec![Reply::json(
        200,
        anthropic_message(
            json!([{"type": "tool_use", "id": "t", "name": "answer", "input": {"n": 1}}]),
            "tool_use",
            3,
            1,
        ),
    )])
    .await;
    let request = hi()
        .tools(vec![ToolDefinition::new(
            "delete_everything",
            "Deletes everything.",
            json!({"type": "object"}),
        )])
        .tool_choice(ToolChoice::None)
        .output_schema(OutputSchema::new(
            "answer",
            json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
        ));
    anthropic(&server).complete(request).await.unwrap();
    let sent = &server.requests()[0].body;
    // "none" means the model must not call the user's tools; the only call it may make is
    // the output tool, so that one is what must be forced. `{"type": "any"}` makes it call
    // *some* tool, delete_everything included.
    assert_ne!(sent["tool_choice"], json!({"type": "any"}), "{sent}");
    assert_eq!(
        sent["tool_choice"],
        json!({"type": "tool", "name": "answer"}),
        "{sent}"
    );
}

// Anthropic: "input length and `max_tokens` exceed context limit" is ContextTooLong.

#[tokio::test]
async fn anthropic_context_limit_error_is_context_too_long() {
    let server = MockServer::start(vec![Reply::json(
        400,
        json!({"type": "error", "error": {"type": "invalid_request_error",
            "message": "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease input length or `max_tokens` and try again"}}),
    )])
    .await;
    let err = anthropic(&server).complete(hi()).await.unwrap_err();
    assert!(matches!(err, ModelError::ContextTooLong { .. }), "{err:?}");
}

// An error object in a 200 reply reads the same to stream() as to complete().

#[tokio::test]
async fn a_200_error_body_to_a_stream_request_is_the_error_it_names() {
    let crashed = || {
        Reply::json(
            200,
            json!({"error": {"message": "upstream model crashed", "type": "server_error", "code": 502}}),
        )
    };
    // complete(): Server { status: 502 }, retried, and the gateway's message kept
    let server = MockServer::start(vec![
        crashed(),
        Reply::json(
            200,
            openai_completion(json!({"role": "assistant", "content": "ok"}), "stop", 1, 1),
        ),
    ])
    .await;
    assert_eq!(openai(&server).complete(hi()).await.unwrap().content, "ok");
    assert_eq!(server.requests().len(), 2);
    // stream(): the same answer to the same request
    let server = MockServer::start(vec![crashed(), Reply::sse(&openai_text_stream(2), 4096)]).await;
    let result = collect_stream(openai(&server).stream(hi())).await;
    assert!(
        result.is_ok() && server.requests().len() == 2,
        "not retried as complete() retries it: {result:?} after {} request(s)",
        server.requests().len()
    );
    let server = MockServer::start(vec![crashed(), crashed(), crashed()]).await;
    let err = collect_stream(openai(&server).stream(hi()))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("upstream model crashed"), "{err}");
}

// Parallel tool calls that all claim `index: 0` with distinct ids (Ollama) stay apart.

#[tokio::test]
async fn parallel_tool_calls_reusing_index_zero_with_new_ids_stay_apart() {
    // Ollama's /v1/chat/completions (ollama/ollama#15457): every call of a parallel batch is
    // sent whole, in a chunk of its own, with a fresh id but `index: 0`.
    let sse = openai_sse(&[
        openai_chunk(
            json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_a", "index": 0, "type": "function",
             "function": {"name": "file_write", "arguments": "{\"path\":\"hello.py\"}"}}]}),
            None,
        ),
        openai_chunk(
            json!({"tool_calls": [
            {"id": "call_b", "index": 0, "type": "function",
             "function": {"name": "file_write", "arguments": "{\"path\":\"world.py\"}"}}]}),
            None,
        ),
        openai_chunk(json!({}), Some("tool_calls")),
    ]);
    let server = MockServer::start(vec![Reply::sse(&sse, 4096)]).await;
    let response = collect_stream(openai(&server).stream(hi()))
        .await
        .unwrap_or_else(|err| panic!("the two calls were glued into one: {err}"));
    assert_eq!(
        response.tool_calls,
        vec![
            ToolCall::new("call_a", "file_write", json!({"path": "hello.py"})),
            ToolCall::new("call_b", "file_write", json!({"path": "world.py"})),
        ]
    );
}

#[tokio::test]
async fn a_fragment_whose_id_changed_continues_its_call() {
    // Some proxies stamp every chunk with a fresh id; a piece of arguments without a function
    // name is still the call its index names.
    let sse = openai_sse(&[
        openai_chunk(
            json!({"role": "assistant", "tool_calls": [
            {"id": "call_1", "index": 0, "type": "function",
             "function": {"name": "weather", "arguments": "{\"city\""}}]}),
            None,
        ),
        openai_chunk(
            json!({"tool_calls": [
            {"id": "call_2", "index": 0, "function": {"arguments": ": \"Oslo\"}"}}]}),
            None,
        ),
        openai_chunk(json!({}), Some("tool_calls")),
    ]);
    let server = MockServer::start(vec![Reply::sse(&sse, 4096)]).await;
    let response = collect_stream(openai(&server).stream(hi())).await.unwrap();
    assert_eq!(response.tool_calls.len(), 1, "{:?}", response.tool_calls);
    assert_eq!(response.tool_calls[0].name, "weather");
    assert_eq!(response.tool_calls[0].arguments, json!({"city": "Oslo"}));
    // Under the id it started with, which is the one listeners were told.
    assert_eq!(response.tool_calls[0].id, "call_1");
    let server = MockServer::start(vec![Reply::sse(&sse, 4096)]).await;
    let chunks: Vec<_> = openai(&server).stream(hi()).collect().await;
    let ids: Vec<_> = chunks
        .iter()
        .filter_map(|chunk| match chunk {
            Ok(StreamChunk::ToolCall { id, .. }) => Some(id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(ids, [Some("call_1".to_owned()), None]);
}

// Gemini's OpenAI-compatible API sends each call's thought signature in `extra_content`,
// and refuses a request whose assistant call comes back without it.

#[tokio::test]
async fn a_calls_provider_extra_is_sent_back_with_it() {
    let extra = json!({"google": {"thought_signature": "c2lnbmF0dXJl"}});
    let message = json!({"role": "assistant", "content": null, "tool_calls": [{
        "id": "call_1", "type": "function", "extra_content": extra,
        "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}]});
    let body = openai_completion(message, "tool_calls", 5, 9);
    let sse = openai_sse(&[
        openai_chunk(
            json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1",
                "type": "function", "extra_content": extra,
                "function": {"name": "weather", "arguments": "{\"city\""}}]}),
            None,
        ),
        openai_chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": ":\"Oslo\"}"}}]}),
            None,
        ),
        openai_chunk(json!({}), Some("tool_calls")),
    ]);
    let done = openai_completion(
        json!({"role": "assistant", "content": "Sunny."}),
        "stop",
        9,
        2,
    );
    let server = MockServer::start(vec![
        Reply::json(200, body),
        Reply::sse(&sse, 4096),
        Reply::json(200, done),
    ])
    .await;
    let model = openai(&server);
    let whole = model.complete(hi()).await.unwrap();
    let streamed = collect_stream(model.stream(hi())).await.unwrap();
    for reply in [&whole, &streamed] {
        assert_eq!(reply.tool_calls.len(), 1, "{reply:?}");
        assert_eq!(reply.tool_calls[0].provider_extra.as_ref(), Some(&extra));
    }
    // The next request carries the call back with its signature.
    let call = streamed.tool_calls[0].clone();
    let request = ModelRequest::new(vec![
        Message::user("Weather in Oslo?"),
        Message::assistant_tool_calls(vec![call]),
        Message::tool_result("call_1", "sunny"),
    ]);
    model.complete(request).await.unwrap();
    let sent = &server.requests()[2].body;
    assert_eq!(
        sent["messages"][1]["tool_calls"][0]["extra_content"], extra,
        "{sent}"
    );
    // A call without one is sent as before.
    let plain = ToolCall::new("call_2", "weather", json!({}));
    assert!(
        !serde_json::to_string(&plain)
            .unwrap()
            .contains("provider_extra")
    );
}

// Mistral's reasoning models (Magistral) send `content` as a list of parts, the model's
// thinking first: the text parts are the reply, whether streamed or not.

#[tokio::test]
async fn content_sent_as_a_list_of_parts_is_its_text_parts() {
    let message = json!({"role": "assistant", "content": [
        {"type": "thinking", "thinking": [{"type": "text", "text": "The user greets."}]},
        {"type": "text", "text": "Hello"},
        null,
        "a part of no known shape",
        {"type": "text", "text": " there."}
    ]});
    let body = openai_completion(message, "stop", 5, 9);
    let server = MockServer::start(vec![Reply::json(200, body)]).await;
    let response = openai(&server).complete(hi()).await.unwrap();
    assert_eq!(response.content, "Hello there.");

    let sse = openai_sse(&[
        openai_chunk(
            json!({"role": "assistant", "content": [{"type": "thinking", "thinking": [
                {"type": "text", "text": "The user greets."}]}]}),
            None,
        ),
        openai_chunk(
            json!({"content": [{"type": "text", "text": "Hello"}]}),
            None,
        ),
        openai_chunk(json!({"content": " there."}), None),
        openai_chunk(json!({"content": []}), Some("stop")),
    ]);
    let server = MockServer::start(vec![Reply::sse(&sse, 4096)]).await;
    let response = collect_stream(openai(&server).stream(hi())).await.unwrap();
    assert_eq!(response.content, "Hello there.");
    assert_eq!(response.finish_reason, FinishReason::Stop);
}

/// A server that streams a call's arguments as the object itself, as some do in replies
/// that are not streamed, gives the call those arguments (the stream failed to decode).
#[tokio::test]
async fn streamed_arguments_sent_as_an_object_are_the_calls_arguments() {
    let sse = openai_sse(&[
        openai_chunk(
            json!({"role": "assistant", "tool_calls": [{"id": "call_1", "index": 0,
                "type": "function", "function": {"name": "weather", "arguments": {"city": "Oslo"}}}]}),
            None,
        ),
        openai_chunk(json!({}), Some("tool_calls")),
    ]);
    let server = MockServer::start(vec![Reply::sse(&sse, 4096)]).await;
    let response = collect_stream(openai(&server).stream(hi())).await.unwrap();
    assert_eq!(
        response.tool_calls,
        [ToolCall::new("call_1", "weather", json!({"city": "Oslo"}))]
    );
}

/// A base URL with a query (a gateway's `api-version`) keeps it: the request's path goes
/// before it.
#[tokio::test]
async fn a_base_urls_query_stays_after_the_request_path() {
    let body = openai_completion(json!({"role": "assistant", "content": "ok"}), "stop", 1, 1);
    let server = MockServer::start(vec![Reply::json(200, body)]).await;
    let model = OpenAiModel::builder("gpt-test")
        .base_url(format!("{}/v1?api-version=2024-10-21", server.url()))
        .api_key("sk-test")
        .build()
        .unwrap();
    assert_eq!(model.complete(hi()).await.unwrap().content, "ok");
    let path = &server.requests()[0].path;
    assert_eq!(path, "/v1/chat/completions?api-version=2024-10-21");

    let body = anthropic_message(json!([{"type": "text", "text": "ok"}]), "end_turn", 1, 1);
    let server = MockServer::start(vec![Reply::json(200, body)]).await;
    let model = AnthropicModel::builder("claude-test")
        .base_url(format!("{}?key=s3cret", server.url()))
        .api_key("sk-ant-test")
        .build()
        .unwrap();
    assert_eq!(model.complete(hi()).await.unwrap().content, "ok");
    assert_eq!(server.requests()[0].path, "/v1/messages?key=s3cret");
    // A key in the query is sent, and not shown: by the adapter, its builder, or an error
    // that quotes the model string.
    assert!(!format!("{model:?}").contains("s3cret"), "{model:?}");
    let builder = AnthropicModel::builder("claude-test").base_url("https://gw?key=s3cret");
    assert!(!format!("{builder:?}").contains("s3cret"), "{builder:?}");
    let unknown = loomflow::model::resolve("nope:m@https://gw?key=s3cret").unwrap_err();
    assert!(!unknown.to_string().contains("s3cret"), "{unknown}");
}

/// A base URL pasted as the whole endpoint (`…/v1/chat/completions`, `…/v1/messages`) is
/// the endpoint: the request's path is not added to it again.
#[tokio::test]
async fn a_base_url_that_is_the_whole_endpoint_is_not_extended() {
    let body = openai_completion(json!({"role": "assistant", "content": "ok"}), "stop", 1, 1);
    let server = MockServer::start(vec![Reply::json(200, body)]).await;
    let model = OpenAiModel::builder("gpt-test")
        .base_url(format!(
            "{}/v1/chat/completions?api-version=1",
            server.url()
        ))
        .api_key("sk-test")
        .build()
        .unwrap();
    assert_eq!(model.complete(hi()).await.unwrap().content, "ok");
    assert_eq!(
        server.requests()[0].path,
        "/v1/chat/completions?api-version=1"
    );

    let body = anthropic_message(json!([{"type": "text", "text": "ok"}]), "end_turn", 1, 1);
    let server = MockServer::start(vec![Reply::json(200, body)]).await;
    let model = AnthropicModel::builder("claude-test")
        .base_url(format!("{}/v1/messages/", server.url()))
        .api_key("sk-ant-test")
        .build()
        .unwrap();
    assert_eq!(model.complete(hi()).await.unwrap().content, "ok");
    assert_eq!(server.requests()[0].path, "/v1/messages");
}

// Byte-exact streams and HTML error pages

#[tokio::test]
async fn an_openai_stream_cut_anywhere_with_crlf_comments_and_split_data_decodes_whole() {
    let chunks = [
        json!({"choices": [], "prompt_filter_results": [{"prompt_index": 0}]}),
        openai_chunk(json!({"role": "assistant", "content": ""}), None),
        openai_chunk(json!({"content": "Zürich ✓ 🌍"}), None),
        openai_chunk(
            json!({"tool_calls": [
            {"index": 0, "id": "call_a", "type": "function", "function": {"name": "weather", "arguments": ""}}]}),
            None,
        ),
        openai_chunk(
            json!({"tool_calls": [
            {"index": 1, "id": "call_b", "type": "function", "function": {"name": "time", "arguments": "{\"tz\""}}]}),
            None,
        ),
        openai_chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\": \"Zü"}}]}),
            None,
        ),
        openai_chunk(
            json!({"tool_calls": [{"index": 1, "function": {"arguments": ": \"CET\"}"}}]}),
            None,
        ),
        openai_chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "rich\"}"}}]}),
            None,
        ),
        openai_chunk(json!({}), Some("tool_calls")),
        openai_usage_chunk(11, 7, 4),
    ];
    let mut text = String::from(": keep-alive\r\n\r\n");
    for (i, chunk) in chunks.iter().enumerate() {
        if i == 2 {
            // multi-line data: the JSON split over two data lines
            let s = chunk.to_string();
            let (a, b) = s.split_at(s.find("\"choices\"").unwrap());
            text.push_str(&format!("data: {a}\r\ndata: {b}\r\n\r\n"));
        } else {
            text.push_str(&format!("data: {chunk}\r\n: comment\r\n\r\n"));
        }
    }
    text.push_str("data: [DONE]\r\n\r\n");
    let server = MockServer::start(vec![Reply::sse(&text, 1), Reply::sse(&text, 3)]).await;
    let model = openai(&server);
    for _ in 0..2 {
        let response = collect_stream(model.stream(hi())).await.unwrap();
        assert_eq!(response.content, "Zürich ✓ 🌍");
        assert_eq!(
            response.tool_calls,
            vec![
                ToolCall::new("call_a", "weather", json!({"city": "Zürich"})),
                ToolCall::new("call_b", "time", json!({"tz": "CET"})),
            ]
        );
        assert_eq!(response.finish_reason, FinishReason::ToolCalls);
        assert_eq!(response.usage.input_tokens, 11);
        assert_eq!(response.usage.output_tokens, 7);
        assert_eq!(response.usage.cached_tokens, 4);
    }
}

#[tokio::test]
async fn an_anthropic_stream_cut_anywhere_with_crlf_decodes_whole() {
    let mut events = vec![anthropic_start(10), json!({"type": "ping"})];
    events.extend(anthropic_text_block(0, &["Grüß", "e ✓"]));
    events.extend(anthropic_tool_block(
        1,
        "toolu_a",
        "weather",
        &["", "{\"city\": \"Ös", "lo\"}"],
    ));
    events.extend(anthropic_tool_block(2, "toolu_b", "time", &[]));
    events.extend(anthropic_end("tool_use", 20));
    let text = anthropic_sse(&events).replace('\n', "\r\n");
    let server = MockServer::start(vec![Reply::sse(&text, 1)]).await;
    let response = collect_stream(anthropic(&server).stream(hi()))
        .await
        .unwrap();
    assert_eq!(response.content, "Grüße ✓");
    assert_eq!(
        response.tool_calls,
        vec![
            ToolCall::new("toolu_a", "weather", json!({"city": "Öslo"})),
            ToolCall::new("toolu_b", "time", json!({})),
        ]
    );
    assert_eq!(response.usage.output_tokens, 20);
}

#[tokio::test]
async fn an_html_error_page_is_a_retried_server_error() {
    let html = Reply::Json {
        status: 502,
        headers: vec![],
        body: "<html><body><h1>502 Bad Gateway</h1></body></html>".into(),
    };
    let server = MockServer::start(vec![html.clone(), html.clone(), html]).await;
    let err = openai(&server).complete(hi()).await.unwrap_err();
    assert!(
        matches!(err, ModelError::Server { status: 502, .. }),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 3);
}

/// Doubles a number.
#[loomflow::tool]
async fn double(n: i64) -> i64 {
    n * 2
}

/// A server that sends parallel tool calls with `null` ids (some OpenAI-compatible gateways
/// do): each call gets an id of its own, so each result goes back to its own call.
#[tokio::test]
async fn tool_calls_without_ids_get_ids_of_their_own() {
    let calls = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": null, "type": "function", "function": {"name": "double", "arguments": "{\"n\": 2}"}},
        {"type": "function", "function": {"name": "double", "arguments": "{\"n\": 5}"}}]});
    let server = MockServer::start(vec![
        Reply::json(200, openai_completion(calls, "tool_calls", 10, 5)),
        Reply::json(
            200,
            openai_completion(
                json!({"role": "assistant", "content": "4 and 10."}),
                "stop",
                20,
                4,
            ),
        ),
    ])
    .await;
    let agent = loomflow::agent::Agent::builder("You double numbers.")
        .model(openai(&server))
        .tool(double)
        .build()
        .unwrap();
    assert_eq!(
        agent.run("Double 2 and 5.").await.unwrap().output,
        "4 and 10."
    );
    let second = &server.requests()[1].body["messages"];
    let messages = second.as_array().unwrap();
    let asked: Vec<&str> = messages
        .iter()
        .filter_map(|m| m["tool_calls"].as_array())
        .flatten()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    let answered: Vec<(&str, &str)> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap(),
                m["content"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(asked.len(), 2, "{second}");
    assert!(
        asked.iter().all(|id| !id.is_empty()) && asked[0] != asked[1],
        "{asked:?}"
    );
    assert_eq!(answered, [(asked[0], "4"), (asked[1], "10")], "{second}");
}

// A server that ignores `"stream": true` and answers with the whole reply as JSON (some
// compatible gateways and proxies do): stream() hands back that reply, not a cut stream.

#[tokio::test]
async fn a_whole_json_reply_to_a_stream_request_is_the_reply() {
    let call = json!({"id": "call_1", "type": "function",
                      "function": {"name": "add", "arguments": "{\"a\":1}"}});
    let message = json!({"role": "assistant", "content": "adding", "tool_calls": [call]});
    let server = MockServer::start(vec![Reply::json(
        200,
        openai_completion(message, "tool_calls", 9, 4),
    )])
    .await;
    let reply = collect_stream(openai(&server).stream(hi())).await.unwrap();
    assert_eq!(reply.content, "adding");
    assert_eq!(
        reply.tool_calls,
        [ToolCall::new("call_1", "add", json!({"a": 1}))]
    );
    assert_eq!(reply.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        (reply.usage.input_tokens, reply.usage.output_tokens),
        (9, 4)
    );
    assert_eq!(reply.model.as_deref(), Some("gpt-test"));
    assert_eq!(server.requests().len(), 1, "answered at the first request");
    assert_eq!(server.requests()[0].body["stream"], true);

    let content = json!([
        {"type": "text", "text": "adding"},
        {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1}}
    ]);
    let server = MockServer::start(vec![Reply::json(
        200,
        anthropic_message(content, "tool_use", 9, 4),
    )])
    .await;
    let reply = collect_stream(anthropic(&server).stream(hi()))
        .await
        .unwrap();
    assert_eq!(reply.content, "adding");
    assert_eq!(
        reply.tool_calls,
        [ToolCall::new("toolu_1", "add", json!({"a": 1}))]
    );
    assert_eq!(reply.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        (reply.usage.input_tokens, reply.usage.output_tokens),
        (9, 4)
    );
    assert_eq!(reply.model.as_deref(), Some("claude-test"));
    assert_eq!(server.requests()[0].body["stream"], true);
}

/// A key holding a character no header may (a newline inside it) fails the call at once as
/// a configuration error, without showing the key: no connection was tried, and none is
/// retried. Whitespace around a key (a CRLF `.env` file) is dropped and the call goes out.
#[tokio::test]
async fn a_key_no_header_can_hold_is_a_configuration_error_not_a_connection_retried() {
    let server = MockServer::start(vec![]).await;
    let model = loomflow::model::OpenAiModel::builder("gpt-test")
        .base_url(format!("{}/v1", server.url()))
        .api_key("sk-te\nst")
        .retry(models::fast_retries())
        .build()
        .unwrap();
    let err = model.complete(hi()).await.unwrap_err();
    assert!(matches!(err, ModelError::Config { .. }), "{err:?}");
    assert!(!err.is_retryable());
    assert!(!format!("{err} {err:?}").contains("sk-te"), "{err}");
    assert_eq!(server.requests().len(), 0);
}

/// Credentials in a base URL (`https://user:token@gateway/v1`, sent as basic auth) do not
/// show in a failed call's error, nor in the model's or its spec's `Debug` output.
#[tokio::test]
async fn credentials_in_a_base_url_are_not_shown() {
    // Port 1 on the loopback: nothing listens, the connection is refused.
    let spec = "openai-compatible:m@http://ada:s3cret@127.0.0.1:1/v1";
    let model = loomflow::model::OpenAiModel::builder("m")
        .base_url("http://ada:s3cret@127.0.0.1:1/v1")
        .retry(models::fast_retries().max_attempts(1))
        .build()
        .unwrap();
    let err = model.complete(hi()).await.unwrap_err();
    assert!(matches!(err, ModelError::Connection { .. }), "{err:?}");
    let shown = format!(
        "{err} {err:?} {model:?} {:?}",
        loomflow::model::ModelSpec::parse(spec).unwrap()
    );
    assert!(!shown.contains("s3cret"), "{shown}");
    assert!(shown.contains("<redacted>@127.0.0.1:1"), "{shown}");
}

/// An SSE error event that states an HTTP status (llama.cpp's `code` as a number, a
/// gateway's as a string) is the typed error of that status, retried as that status is:
/// before its fix it was a `StreamError` of a kind no retry knew, and failed at once.
#[tokio::test]
async fn a_stream_error_event_with_a_status_is_retried_as_that_status() {
    for event in [
        "error: {\"code\":503,\"message\":\"loading model\",\"type\":\"unavailable_error\"}\n\n",
        "data: {\"error\":{\"code\":\"500\",\"message\":\"upstream reset\"}}\n\n",
    ] {
        let failing = format!("{event}data: [DONE]\n\n");
        let server = MockServer::start(vec![
            Reply::sse(&failing, 4096),
            Reply::sse(&openai_text_stream(2), 4096),
        ])
        .await;
        let result = collect_stream(openai(&server).stream(hi())).await;
        assert!(
            result.is_ok() && server.requests().len() == 2,
            "{event}: not retried: {result:?} after {} request(s)",
            server.requests().len()
        );
        let server = MockServer::start(vec![Reply::sse(&failing, 4096); 3]).await;
        let err = collect_stream(openai(&server).stream(hi()))
            .await
            .unwrap_err();
        assert!(matches!(err, ModelError::Server { .. }), "{event}: {err:?}");
    }
}

/// The same error events from a server that speaks Anthropic's format (llama.cpp's
/// `/v1/messages`): the typed error of the status they state, retried as that status is,
/// with the server's message. Before its fix the decoder read such an event as one it did
/// not know (and ignored it) or as a bad event, and the call failed with `StreamCut` or
/// `Decode`, the message lost.
#[tokio::test]
async fn an_anthropic_compatible_stream_error_event_is_the_error_it_names() {
    for event in [
        "error: {\"code\":503,\"message\":\"loading model\",\"type\":\"unavailable_error\"}\n\n",
        "event: error\ndata: {\"code\":503,\"message\":\"loading model\"}\n\n",
    ] {
        let failing = format!("{}{event}", anthropic_sse(&[anthropic_start(3)]));
        let mut whole = vec![anthropic_start(3)];
        whole.extend(anthropic_text_block(0, &["Hi"]));
        whole.extend(anthropic_end("end_turn", 1));
        let server = MockServer::start(vec![
            Reply::sse(&failing, 4096),
            Reply::sse(&anthropic_sse(&whole), 4096),
        ])
        .await;
        let result = collect_stream(anthropic(&server).stream(hi())).await;
        assert!(
            result.as_ref().is_ok_and(|r| r.content == "Hi") && server.requests().len() == 2,
            "{event}: not retried: {result:?} after {} request(s)",
            server.requests().len()
        );
        let server = MockServer::start(vec![Reply::sse(&failing, 4096); 3]).await;
        let err = collect_stream(anthropic(&server).stream(hi()))
            .await
            .unwrap_err();
        assert!(matches!(err, ModelError::Server { .. }), "{event}: {err:?}");
        assert!(err.to_string().contains("loading model"), "{event}: {err}");
    }
}

/// A body that ends in the middle of an event's line was cut: `StreamCut`, which says so,
/// and a reply whose finish had come before the cut is whole. Before its fix the cut line
/// was decoded as an event and the call failed as a bad chunk (`Decode`).
#[tokio::test]
async fn a_body_cut_mid_line_is_a_cut_not_a_bad_chunk() {
    let whole = openai_text_stream(2);
    let in_a_token = whole.find("word1").unwrap() + 2;
    let finished = whole.rfind("data: [DONE]").unwrap();
    let server = MockServer::start(vec![
        Reply::sse(&whole[..in_a_token], 4096),
        Reply::sse(&whole[..finished + "data: [DO".len()], 4096),
    ])
    .await;
    let err = collect_stream(openai(&server).stream(hi()))
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::StreamCut { .. }), "{err:?}");
    let reply = collect_stream(openai(&server).stream(hi())).await.unwrap();
    assert_eq!(reply.content, " word0 word1");
}

/// A base URL no request could be sent to (a port out of range) is refused when the model
/// is built, saying what is wrong with it and not showing it (it may hold credentials):
/// before, every call failed blaming a header.
#[test]
fn a_base_url_that_is_no_url_is_refused_at_build() {
    for url in [
        "http://ada:s3cret@localhost:80800/v1",
        "https://bad host/v1",
    ] {
        let openai = loomflow::model::OpenAiModel::builder("m")
            .base_url(url)
            .build();
        let anthropic = loomflow::model::AnthropicModel::builder("m")
            .base_url(url)
            .build();
        for err in [openai.unwrap_err(), anthropic.unwrap_err()] {
            assert!(matches!(err, ModelError::Config { .. }), "{err:?}");
            assert!(err.to_string().contains("is not a URL"), "{err}");
            assert!(!err.to_string().contains("s3cret"), "{err}");
        }
    }
}

/// A redirect is not followed (the key and the prompt would go where it points, a POST
/// turned into a GET fails unexplained): it is a configuration error, not retried.
#[tokio::test]
async fn a_redirect_is_a_configuration_error_not_followed() {
    let moved = Reply::Json {
        status: 301,
        headers: vec![(
            "Location".into(),
            "https://elsewhere.example/v1/chat/completions".into(),
        )],
        body: String::new(),
    };
    let server = MockServer::start(vec![moved.clone(), moved]).await;
    let err = openai(&server).complete(hi()).await.unwrap_err();
    assert!(matches!(err, ModelError::Config { .. }), "{err:?}");
    assert!(err.to_string().contains("redirect"), "{err}");
    // Which model's settings, among the provider's: the one whose base URL moved.
    assert!(err.to_string().contains("for model gpt-test"), "{err}");
    assert_eq!(server.requests().len(), 1);
    let err = anthropic(&server).complete(hi()).await.unwrap_err();
    assert!(matches!(err, ModelError::Config { .. }), "{err:?}");
    assert!(err.to_string().contains("for model claude-test"), "{err}");
}
