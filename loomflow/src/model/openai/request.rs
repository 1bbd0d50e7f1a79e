//! The Chat Completions request body.

use serde_json::{Map, Value, json};

use crate::model::{Message, ModelRequest, ToolChoice};

/// How a streamed request asks for its reply.
pub(super) struct Streamed {
    /// Ask for the reply's token usage (`stream_options.include_usage`).
    pub(super) usage: bool,
}

pub(super) fn body(
    request: &ModelRequest,
    model: &str,
    stream: Option<Streamed>,
    completion_tokens: bool,
) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), model.into());
    body.insert(
        "messages".into(),
        request.messages.iter().map(message).collect(),
    );
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    }
                })
            })
            .collect();
        body.insert("tools".into(), tools);
    }
    if let Some(choice) = &request.tool_choice {
        let choice = match choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::None => json!("none"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
        };
        body.insert("tool_choice".into(), choice);
    }
    if let Some(schema) = &request.output_schema {
        body.insert(
            "response_format".into(),
            json!({
                "type": "json_schema",
                "json_schema": {
                    "name": schema.name,
                    "schema": schema.schema,
                    "strict": schema.strict,
                }
            }),
        );
    }
    if let Some(t) = request.temperature_on_wire() {
        body.insert("temperature".into(), t);
    }
    if let Some(max) = request.max_tokens {
        // api.openai.com deprecated `max_tokens` (reasoning models refuse it); compatible
        // servers mostly know only the old name.
        let field = if completion_tokens {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body.insert(field.into(), json!(max));
    }
    if !request.stop.is_empty() {
        body.insert("stop".into(), json!(request.stop));
    }
    if let Some(streamed) = stream {
        body.insert("stream".into(), Value::Bool(true));
        if streamed.usage {
            body.insert("stream_options".into(), json!({"include_usage": true}));
        }
    }
    Value::Object(body)
}

fn message(message: &Message) -> Value {
    match message {
        Message::System { content } => json!({"role": "system", "content": content}),
        Message::User { content } => json!({"role": "user", "content": content}),
        Message::Assistant {
            content,
            tool_calls,
        } => {
            let mut m = Map::new();
            m.insert("role".into(), "assistant".into());
            m.insert(
                "content".into(),
                if content.is_empty() && !tool_calls.is_empty() {
                    Value::Null
                } else {
                    content.as_str().into()
                },
            );
            if !tool_calls.is_empty() {
                let calls = tool_calls
                    .iter()
                    .map(|call| {
                        let mut wire = json!({
                            "id": call.id,
                            "type": "function",
                            "function": {
                                "name": call.name,
                                "arguments": arguments_text(&call.arguments),
                            }
                        });
                        // Sent back as it came (Gemini's thought signature).
                        if let (Some(extra), Some(fields)) =
                            (&call.provider_extra, wire.as_object_mut())
                        {
                            fields.insert("extra_content".into(), extra.clone());
                        }
                        wire
                    })
                    .collect();
                m.insert("tool_calls".into(), calls);
            }
            Value::Object(m)
        }
        // The API has no error flag for tool results: say it in the content.
        Message::Tool(result) => json!({
            "role": "tool",
            "tool_call_id": result.call_id,
            "content": if result.is_error {
                format!("error: {}", result.content)
            } else {
                result.content.clone()
            },
        }),
    }
}

/// A call's arguments as the API's `arguments` text: JSON. Arguments kept as text go back
/// as that text when it is JSON, else as `{}` (the call's result says they were not JSON),
/// since a compatible server may parse the history's arguments and refuse the request.
fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(text) if serde_json::from_str::<Value>(text).is_ok() => text.clone(),
        Value::String(_) => "{}".to_owned(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{OutputSchema, ToolCall, ToolDefinition};

    /// A temperature goes as written, not as the `f32` widened (`0.30000001192092896`).
    #[test]
    fn a_temperature_goes_as_written() {
        let request = ModelRequest::new(vec![Message::user("u")]).temperature(0.3);
        assert_eq!(
            body(&request, "gpt-x", None, false)["temperature"],
            json!(0.3)
        );
    }

    #[test]
    fn body_has_the_documented_shape() {
        let request = ModelRequest::new(vec![
            Message::system("s"),
            Message::user("u"),
            Message::assistant_tool_calls(vec![ToolCall::new("c1", "f", json!({"a": 1}))]),
            Message::tool_error("c1", "nope"),
        ])
        .tools(vec![ToolDefinition::new(
            "f",
            "does f",
            json!({"type": "object"}),
        )])
        .tool_choice(ToolChoice::Tool("f".into()))
        .output_schema(OutputSchema::new("answer", json!({"type": "object"})))
        .max_tokens(10)
        .stop(vec!["END".into()]);
        let body = body(&request, "gpt-x", Some(Streamed { usage: true }), false);
        assert_eq!(body["model"], "gpt-x");
        assert_eq!(body["messages"][2]["content"], Value::Null);
        assert_eq!(
            body["messages"][2]["tool_calls"][0]["function"]["arguments"],
            "{\"a\":1}"
        );
        assert_eq!(body["messages"][3]["tool_call_id"], "c1");
        assert_eq!(body["messages"][3]["content"], "error: nope");
        assert_eq!(body["tools"][0]["function"]["name"], "f");
        assert_eq!(body["tool_choice"]["function"]["name"], "f");
        assert_eq!(body["response_format"]["type"], "json_schema");
        assert_eq!(body["response_format"]["json_schema"]["strict"], true);
        assert_eq!(body["max_tokens"], 10);
        assert_eq!(body["stream_options"]["include_usage"], true);
        // A server that refuses the field is not sent it.
        let without = super::body(&request, "gpt-x", Some(Streamed { usage: false }), false);
        assert_eq!(without["stream"], true);
        assert!(without.get("stream_options").is_none(), "{without}");
        assert!(
            super::body(&request, "gpt-x", None, false)
                .get("stream")
                .is_none()
        );
    }
}
