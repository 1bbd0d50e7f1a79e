//! The Messages request body.

use serde_json::{Map, Value, json};

use crate::model::{Message, ModelRequest, ToolChoice, Transcript};

pub(super) fn body(
    request: &ModelRequest,
    model: &str,
    stream: bool,
    default_max_tokens: u32,
) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), model.into());
    body.insert(
        "max_tokens".into(),
        json!(request.max_tokens.unwrap_or(default_max_tokens)),
    );
    // Blank instructions (an agent built with `""`) are left out: the API refuses a system
    // text that is empty or only whitespace, as it does a blank user turn.
    let system: Vec<&str> = request
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::System { content } if !content.trim().is_empty() => Some(content.as_str()),
            _ => None,
        })
        .collect();
    if !system.is_empty() {
        body.insert("system".into(), system.join("\n\n").into());
    }
    body.insert("messages".into(), messages(&request.messages));

    let mut tools: Vec<Value> = request
        .tools
        .iter()
        .map(|tool| {
            json!({
                "name": tool.name,
                "description": tool.description,
                "input_schema": tool.parameters,
            })
        })
        .collect();
    let mut choice = request.tool_choice.as_ref().map(|choice| match choice {
        ToolChoice::Auto => json!({"type": "auto"}),
        ToolChoice::None => json!({"type": "none"}),
        ToolChoice::Required => json!({"type": "any"}),
        ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
    });
    if let Some(schema) = &request.output_schema {
        // Structured output through a forced tool: the reply is that tool's input.
        tools.push(json!({
            "name": schema.name,
            "description": "Respond with the final answer, following this schema exactly.",
            "input_schema": schema.schema,
        }));
        // With no tools of the caller's to choose from, or none allowed, the output tool is
        // the only call the model may make: force it by name, not `any` tool.
        if request.tools.is_empty() || matches!(request.tool_choice, Some(ToolChoice::None)) {
            choice = Some(json!({"type": "tool", "name": schema.name}));
        } else if !matches!(request.tool_choice, Some(ToolChoice::Tool(_))) {
            choice = Some(json!({"type": "any"}));
        }
    }
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = choice {
        body.insert("tool_choice".into(), choice);
    }
    if let Some(t) = request.temperature_on_wire() {
        body.insert("temperature".into(), t);
    }
    if !request.stop.is_empty() {
        body.insert("stop_sequences".into(), json!(request.stop));
    }
    if stream {
        body.insert("stream".into(), Value::Bool(true));
    }
    Value::Object(body)
}

/// What an error result without content is sent as.
const BLANK_ERROR: &str = "the tool failed and said nothing more";

/// The conversation as alternating user/assistant turns: consecutive messages of one side,
/// such as the results of parallel tool calls, merge into one turn of several blocks.
fn messages(messages: &Transcript) -> Value {
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    // The last message the API is sent, but for system ones.
    let last = messages
        .iter()
        .rposition(|m| !matches!(m, Message::System { .. }));
    for (at, message) in messages.iter().enumerate() {
        let (role, blocks) = match message {
            Message::System { .. } => continue,
            // The API refuses empty (or blank) text blocks: a blank prompt (one a guardrail
            // rewrote to nothing) the conversation went on from is left out, or a session
            // that kept it would fail every later call; the assistant turns on either side
            // of it merge. The last one is sent, and refused: left out, the request would
            // end on the model's own turn, which it would carry on as a prefill.
            Message::User { content } if content.trim().is_empty() && Some(at) != last => {
                continue;
            }
            Message::User { content } => ("user", vec![text_block(content)]),
            // Anthropic itself may answer `end_turn` with no content: such a turn is left
            // out, and the user turns on either side of it merge, which keeps the roles
            // alternating.
            Message::Assistant {
                content,
                tool_calls,
            } if content.trim().is_empty() && tool_calls.is_empty() => continue,
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let mut blocks = Vec::with_capacity(tool_calls.len() + 1);
                if !content.trim().is_empty() {
                    blocks.push(text_block(content));
                }
                blocks.extend(tool_calls.iter().map(|call| {
                    let input = tool_input(&call.arguments);
                    json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input})
                }));
                ("assistant", blocks)
            }
            Message::Tool(result) => {
                let mut block = json!({
                    "type": "tool_result",
                    "tool_use_id": result.call_id,
                    "content": result.content,
                });
                if result.is_error {
                    block["is_error"] = Value::Bool(true);
                    // The API refuses an error result without content (a hook or a
                    // guardrail may blank one): the model is told that much.
                    if result.content.trim().is_empty() {
                        block["content"] = Value::from(BLANK_ERROR);
                    }
                }
                ("user", vec![block])
            }
        };
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

/// A call's arguments as a `tool_use` block's input, which the API takes as an object only:
/// arguments kept as text are read as the object they hold, or sent as `{}` (the call's
/// result says they were not JSON).
fn tool_input(arguments: &Value) -> Value {
    match arguments {
        Value::Object(_) => arguments.clone(),
        Value::String(text) => serde_json::from_str::<Value>(text)
            .ok()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({})),
        _ => json!({}),
    }
}

fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{OutputSchema, ToolCall, ToolDefinition};

    /// A blank user message sends no text block, which the API refuses: the turns around
    /// it merge.
    #[test]
    fn a_blank_user_message_is_left_out() {
        let request = ModelRequest::new(vec![
            Message::user("Hi"),
            Message::assistant("Hello."),
            Message::user(" \n"),
            Message::assistant("Still here."),
            Message::user("Good."),
        ]);
        let body = body(&request, "claude-x", false, 100);
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Hello."}, {"type": "text", "text": "Still here."}]},
                {"role": "user", "content": [{"type": "text", "text": "Good."}]},
            ])
        );
        // The last message is sent as it is: left out, the request would end on the
        // model's turn, a prefill it would carry on.
        let request = ModelRequest::new(vec![
            Message::user("Hi"),
            Message::assistant("Hello."),
            Message::user(""),
        ]);
        let last = super::body(&request, "claude-x", false, 100);
        assert_eq!(last["messages"][2]["role"], "user");
    }

    #[test]
    fn parallel_tool_results_merge_into_one_user_turn() {
        let request = ModelRequest::new(vec![
            Message::system("be brief"),
            Message::user("u"),
            Message::assistant_tool_calls(vec![
                ToolCall::new("a", "f", json!({})),
                ToolCall::new("b", "f", json!({"x": 2})),
            ]),
            Message::tool_result("a", "1"),
            Message::tool_error("b", "bad x"),
        ])
        .tools(vec![ToolDefinition::new(
            "f",
            "f",
            json!({"type": "object"}),
        )])
        .tool_choice(ToolChoice::Required);
        let body = body(&request, "claude-x", false, 100);
        assert_eq!(body["system"], "be brief");
        assert_eq!(body["max_tokens"], 100);
        let turns = body["messages"].as_array().unwrap();
        assert_eq!(turns.len(), 3);
        assert_eq!(turns[1]["content"][1]["input"], json!({"x": 2}));
        assert_eq!(turns[2]["role"], "user");
        assert_eq!(turns[2]["content"][1]["is_error"], true);
        assert_eq!(body["tools"][0]["input_schema"], json!({"type": "object"}));
        assert_eq!(body["tool_choice"], json!({"type": "any"}));
    }

    /// The API refuses an error result without content; one with content goes as it is.
    #[test]
    fn a_blank_error_result_says_the_tool_failed() {
        let request = ModelRequest::new(vec![
            Message::user("u"),
            Message::assistant_tool_calls(vec![
                ToolCall::new("a", "f", json!({})),
                ToolCall::new("b", "f", json!({})),
                ToolCall::new("c", "f", json!({})),
            ]),
            Message::tool_error("a", " "),
            Message::tool_error("b", "bad x"),
            Message::tool_result("c", ""),
        ]);
        let body = body(&request, "claude-x", false, 100);
        let results = &body["messages"][2]["content"];
        assert_eq!(results[0]["content"], BLANK_ERROR);
        assert_eq!(results[0]["is_error"], true);
        assert_eq!(results[1]["content"], "bad x");
        assert_eq!(results[2]["content"], "");
    }

    /// A temperature goes as written, not as the `f32` widened (`0.30000001192092896`).
    #[test]
    fn a_temperature_goes_as_written() {
        let request = ModelRequest::new(vec![Message::user("u")]).temperature(0.3);
        assert_eq!(
            body(&request, "claude-x", false, 100)["temperature"],
            json!(0.3)
        );
    }

    #[test]
    fn output_schema_forces_a_tool() {
        let request = ModelRequest::new(vec![Message::user("u")])
            .output_schema(OutputSchema::new("answer", json!({"type": "object"})));
        let body = body(&request, "claude-x", true, 100);
        assert_eq!(body["tools"][0]["name"], "answer");
        assert_eq!(
            body["tool_choice"],
            json!({"type": "tool", "name": "answer"})
        );
        assert_eq!(body["stream"], true);
    }
}
