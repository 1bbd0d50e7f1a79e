//! Replies in each provider's documented wire format.
#![allow(dead_code)]

use serde_json::{Value, json};

/// `data: {json}\n\n` for each chunk, then `data: [DONE]`.
pub(crate) fn openai_sse(chunks: &[Value]) -> String {
    let mut out = String::from(": keep-alive comment\n\n");
    for chunk in chunks {
        out.push_str("data: ");
        out.push_str(&chunk.to_string());
        out.push_str("\n\n");
    }
    out.push_str("data: [DONE]\n\n");
    out
}

pub(crate) fn openai_chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({
        "id": "chatcmpl-123", "object": "chat.completion.chunk", "created": 1_700_000_000,
        "model": "gpt-test", "system_fingerprint": "fp_1",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]
    })
}

pub(crate) fn openai_usage_chunk(prompt: u64, completion: u64, cached: u64) -> Value {
    json!({
        "id": "chatcmpl-123", "object": "chat.completion.chunk", "created": 1_700_000_000,
        "model": "gpt-test", "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion,
                  "prompt_tokens_details": {"cached_tokens": cached}}
    })
}

pub(crate) fn openai_completion(
    message: Value,
    finish: &str,
    prompt: u64,
    completion: u64,
) -> Value {
    json!({
        "id": "chatcmpl-123", "object": "chat.completion", "created": 1_700_000_000,
        "model": "gpt-test",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion,
                  "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                  "completion_tokens_details": {"reasoning_tokens": 0}}
    })
}

/// A streamed text reply of `tokens` word tokens, with usage.
pub(crate) fn openai_text_stream(tokens: usize) -> String {
    let mut chunks = vec![openai_chunk(
        json!({"role": "assistant", "content": ""}),
        None,
    )];
    for i in 0..tokens {
        chunks.push(openai_chunk(json!({"content": format!(" word{i}")}), None));
    }
    chunks.push(openai_chunk(json!({}), Some("stop")));
    chunks.push(openai_usage_chunk(12, tokens as u64, 0));
    openai_sse(&chunks)
}

/// `event: NAME\ndata: {json}\n\n` for each event.
pub(crate) fn anthropic_sse(events: &[Value]) -> String {
    let mut out = String::new();
    for event in events {
        let name = event["type"].as_str().unwrap_or("unknown");
        out.push_str(&format!("event: {name}\ndata: {event}\n\n"));
    }
    out
}

pub(crate) fn anthropic_start(input_tokens: u64) -> Value {
    json!({"type": "message_start", "message": {
        "id": "msg_01", "type": "message", "role": "assistant", "content": [],
        "model": "claude-test", "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": input_tokens, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": 0, "output_tokens": 1}}})
}

pub(crate) fn anthropic_text_block(index: usize, pieces: &[&str]) -> Vec<Value> {
    let mut events = vec![json!({"type": "content_block_start", "index": index,
        "content_block": {"type": "text", "text": ""}})];
    for piece in pieces {
        events.push(json!({"type": "content_block_delta", "index": index,
            "delta": {"type": "text_delta", "text": piece}}));
    }
    events.push(json!({"type": "content_block_stop", "index": index}));
    events
}

pub(crate) fn anthropic_tool_block(
    index: usize,
    id: &str,
    name: &str,
    json_pieces: &[&str],
) -> Vec<Value> {
    let mut events = vec![json!({"type": "content_block_start", "index": index,
        "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})];
    for piece in json_pieces {
        events.push(json!({"type": "content_block_delta", "index": index,
            "delta": {"type": "input_json_delta", "partial_json": piece}}));
    }
    events.push(json!({"type": "content_block_stop", "index": index}));
    events
}

pub(crate) fn anthropic_end(stop_reason: &str, output_tokens: u64) -> Vec<Value> {
    vec![
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null},
               "usage": {"output_tokens": output_tokens}}),
        json!({"type": "message_stop"}),
    ]
}

pub(crate) fn anthropic_message(
    content: Value,
    stop_reason: &str,
    input: u64,
    output: u64,
) -> Value {
    json!({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-test",
        "content": content, "stop_reason": stop_reason, "stop_sequence": null,
        "usage": {"input_tokens": input, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": 0, "output_tokens": output}
    })
}

/// A streamed text reply of `tokens` word tokens.
pub(crate) fn anthropic_text_stream(tokens: usize) -> String {
    let words: Vec<String> = (0..tokens).map(|i| format!(" word{i}")).collect();
    let refs: Vec<&str> = words.iter().map(String::as_str).collect();
    let mut events = vec![anthropic_start(12), json!({"type": "ping"})];
    events.extend(anthropic_text_block(0, &refs));
    events.extend(anthropic_end("end_turn", tokens as u64));
    anthropic_sse(&events)
}
