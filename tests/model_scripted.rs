//! `ScriptedModel` and `EchoModel`: the in-process fakes used by tests and examples.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use futures_util::StreamExt;
use loomflow::model::{
    EchoModel, FinishReason, Message, Model, ModelError, ModelRequest, ModelResponse,
    ScriptedModel, StreamChunk, ToolCall, Usage, collect_stream, resolve,
};
use serde_json::json;

fn script() -> Vec<ModelResponse> {
    vec![
        ModelResponse::tool_calls(vec![
            ToolCall::new("c1", "weather", json!({"city": "Paris"})),
            ToolCall::new("c2", "weather", json!({"city": "Oslo"})),
        ])
        .with_usage(Usage {
            input_tokens: 10,
            output_tokens: 5,
            cached_tokens: 0,
        }),
        ModelResponse::text("Paris is sunny; Oslo is cold."),
    ]
}

#[tokio::test]
async fn scripted_model_replays_tool_calls_then_text_and_records_requests() {
    let model: Arc<dyn Model> = Arc::new(ScriptedModel::new(script()));
    let first = model
        .complete(ModelRequest::new(vec![Message::user("Weather?")]))
        .await
        .unwrap();
    assert_eq!(first.finish_reason, FinishReason::ToolCalls);
    assert_eq!(first.tool_calls.len(), 2);
    let second = model
        .complete(ModelRequest::new(vec![
            Message::user("Weather?"),
            first.message(),
            Message::tool_result("c1", "sunny"),
            Message::tool_result("c2", "cold"),
        ]))
        .await
        .unwrap();
    assert_eq!(second.content, "Paris is sunny; Oslo is cold.");
    let err = model.complete(ModelRequest::default()).await.unwrap_err();
    assert!(matches!(err, ModelError::ScriptExhausted { len: 2 }));
    assert_eq!(
        err.to_string(),
        "scripted model ran out of responses: its script had 2"
    );
    // and through the top-level error type
    let err: loomflow::Error = err.into();
    assert!(err.to_string().contains("its script had 2"));
}

#[tokio::test]
async fn scripted_streams_fold_to_the_scripted_responses() {
    let model = ScriptedModel::new(script());
    for expected in script() {
        let folded = collect_stream(model.stream(ModelRequest::default()))
            .await
            .unwrap();
        assert_eq!(folded, expected);
    }
    let mut stream = model.stream(ModelRequest::default());
    assert!(matches!(
        stream.next().await,
        Some(Err(ModelError::ScriptExhausted { len: 2 }))
    ));
    assert!(stream.next().await.is_none());
    assert_eq!(model.requests().len(), 3);
}

#[tokio::test]
async fn echo_model_repeats_the_last_user_message_in_word_chunks() {
    let model = resolve("echo").unwrap();
    let request = ModelRequest::new(vec![
        Message::system("ignored"),
        Message::user("first"),
        Message::assistant("reply"),
        Message::user("say this back"),
    ]);
    assert_eq!(
        model.complete(request.clone()).await.unwrap().content,
        "say this back"
    );
    let chunks: Vec<StreamChunk> = model.stream(request).map(Result::unwrap).collect().await;
    let texts: Vec<&str> = chunks
        .iter()
        .filter_map(|c| match c {
            StreamChunk::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["say", " this", " back"]);
    assert_eq!(EchoModel::new().name(), "echo");
}

#[test]
fn responses_and_messages_survive_a_json_round_trip() {
    let responses = script();
    let text = serde_json::to_string(&responses).unwrap();
    let back: Vec<ModelResponse> = serde_json::from_str(&text).unwrap();
    assert_eq!(back, responses);
    let chunk = StreamChunk::ToolCall {
        index: 0,
        id: Some("c".into()),
        name: None,
        arguments: "{".into(),
        provider_extra: Some(json!({"google": {"thought_signature": "c2ln"}})),
    };
    let back: StreamChunk = serde_json::from_str(&serde_json::to_string(&chunk).unwrap()).unwrap();
    assert_eq!(back, chunk);
}
