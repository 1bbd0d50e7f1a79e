//! What a stream request gets back: a body of events, or, from a server that does not stream
//! (some compatible gateways and proxies ignore `"stream": true`), the reply whole.

use futures_util::Stream;

use super::transport::{self, Target};
use super::{ApiKey, ChunkStream, ModelError, ModelResponse, StreamChunk};

/// The body of a 2xx answer to a stream request.
pub(crate) enum StreamReply<E, W> {
    /// Server-sent events, to decode as they come.
    Events(E),
    /// A JSON reply sent whole, read already: decode it as a complete call's.
    Whole(W),
}

/// Sends a stream request once and hands back the reply's body. A 2xx that comes as JSON
/// rather than events is read whole: an error object in it (a gateway that failed after
/// choosing its status) is the error [`transport::body_error`] makes of it, exactly as for a
/// complete call, so that it is retried the same way; any other is the reply, whole.
pub(crate) async fn send_for_events(
    request: reqwest::RequestBuilder,
    target: &Target,
    key: Option<&ApiKey>,
) -> Result<
    StreamReply<
        impl Stream<Item = Result<impl AsRef<[u8]>, reqwest::Error>> + Send + Unpin + 'static,
        impl AsRef<[u8]>,
    >,
    ModelError,
> {
    let response = transport::send_once(request, target, key).await?;
    let is_json = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.contains("json"));
    if !is_json {
        return Ok(StreamReply::Events(Box::pin(response.bytes_stream())));
    }
    let bytes = response
        .bytes()
        .await
        .map_err(|e| transport::transport_error(e, target))?;
    if let Ok(serde_json::Value::Object(mut reply)) = serde_json::from_slice(&bytes)
        && let Some(error) = reply.remove("error").filter(|e| !e.is_null())
    {
        return Err(transport::body_error(target, error, key));
    }
    Ok(StreamReply::Whole(bytes))
}

/// The chunks a stream of `response` would have carried: its text in one piece, each tool
/// call in one, then its usage, its model and its finish.
pub(crate) fn whole_reply(response: ModelResponse) -> ChunkStream {
    let ModelResponse {
        content,
        tool_calls,
        finish_reason,
        usage,
        model,
    } = response;
    let mut chunks = Vec::with_capacity(tool_calls.len() + 4);
    if !content.is_empty() {
        chunks.push(StreamChunk::Text { text: content });
    }
    for (index, call) in tool_calls.into_iter().enumerate() {
        chunks.push(StreamChunk::ToolCall {
            index,
            id: Some(call.id),
            name: Some(call.name),
            arguments: call.arguments.to_string(),
            provider_extra: call.provider_extra,
        });
    }
    chunks.push(StreamChunk::Usage(usage));
    if let Some(model) = model {
        chunks.push(StreamChunk::Model { model });
    }
    chunks.push(StreamChunk::Finish {
        reason: finish_reason,
    });
    Box::pin(futures_util::stream::iter(chunks.into_iter().map(Ok)))
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;
    use serde_json::json;

    use super::*;
    use crate::model::{FinishReason, ToolCall, Usage, collect_stream};

    /// A reply sent whole folds back to itself, tool calls and all.
    #[tokio::test]
    async fn a_whole_reply_folds_back_to_itself() {
        let response = ModelResponse {
            content: "two calls".into(),
            tool_calls: vec![
                ToolCall::new("c1", "add", json!({"a": 1})),
                ToolCall::new("c2", "sub", json!({"b": [2, 3]})),
            ],
            finish_reason: FinishReason::ToolCalls,
            usage: Usage {
                input_tokens: 5,
                output_tokens: 7,
                cached_tokens: 1,
            },
            model: Some("m-2026".into()),
        };
        let folded = collect_stream(whole_reply(response.clone())).await.unwrap();
        assert_eq!(folded, response);
    }

    /// An empty reply carries no text chunk: only what it has.
    #[tokio::test]
    async fn an_empty_reply_is_only_its_finish_and_usage() {
        let chunks: Vec<_> = whole_reply(ModelResponse::text(""))
            .map(Result::unwrap)
            .collect()
            .await;
        assert!(matches!(
            chunks[..],
            [StreamChunk::Usage(_), StreamChunk::Finish { .. }]
        ));
    }
}
