//! Conversation messages: system, user, assistant (with tool calls) and tool results.

use serde::{Deserialize, Serialize};

/// Who wrote a [`Message`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions for the model.
    System,
    /// The person (or program) talking to the model.
    User,
    /// The model.
    Assistant,
    /// The result of a tool the model called.
    Tool,
}

/// One message of a conversation.
///
/// Messages serialize as JSON tagged by `role`, so they can live in checkpointed state.
///
/// # Examples
///
/// ```
/// use loomflow::model::{Message, ToolCall};
///
/// let conversation = vec![
///     Message::system("You are terse."),
///     Message::user("What is the weather in Paris?"),
///     Message::assistant_tool_calls(vec![ToolCall::new(
///         "call_1",
///         "weather",
///         serde_json::json!({ "city": "Paris" }),
///     )]),
///     Message::tool_result("call_1", "sunny, 21 °C"),
/// ];
/// assert_eq!(conversation[1].text(), "What is the weather in Paris?");
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// Instructions for the model.
    System {
        /// The instructions.
        content: String,
    },
    /// A user turn.
    User {
        /// What the user said.
        content: String,
    },
    /// A model turn: text, tool calls, or both.
    Assistant {
        /// The text (may be empty when the turn only calls tools).
        #[serde(default)]
        content: String,
        /// The tools the model asked to call, in order.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call.
    Tool(ToolResult),
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::System {
            content: content.into(),
        }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::User {
            content: content.into(),
        }
    }

    /// An assistant message with text only.
    ///
    /// As the last message of a request it is a *prefill*: providers that support it continue
    /// the reply from this text.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::Assistant {
            content: content.into(),
            tool_calls: Vec::new(),
        }
    }

    /// An assistant message that calls tools.
    pub fn assistant_tool_calls(tool_calls: Vec<ToolCall>) -> Self {
        Self::Assistant {
            content: String::new(),
            tool_calls,
        }
    }

    /// A successful tool result for the call `call_id`.
    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self::Tool(ToolResult {
            call_id: call_id.into(),
            content: content.into(),
            is_error: false,
        })
    }

    /// A failed tool result for the call `call_id`: `content` tells the model what went wrong.
    pub fn tool_error(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self::Tool(ToolResult {
            call_id: call_id.into(),
            content: content.into(),
            is_error: true,
        })
    }

    /// Who wrote the message.
    pub fn role(&self) -> Role {
        match self {
            Self::System { .. } => Role::System,
            Self::User { .. } => Role::User,
            Self::Assistant { .. } => Role::Assistant,
            Self::Tool(_) => Role::Tool,
        }
    }

    /// The message's text (a tool result's content for [`Message::Tool`]).
    pub fn text(&self) -> &str {
        match self {
            Self::System { content } | Self::User { content } => content,
            Self::Assistant { content, .. } => content,
            Self::Tool(result) => &result.content,
        }
    }

    /// The tool calls of an assistant message; empty for the other roles.
    pub fn tool_calls(&self) -> &[ToolCall] {
        match self {
            Self::Assistant { tool_calls, .. } => tool_calls,
            _ => &[],
        }
    }
}

/// A model's request to call a tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id for the call; the tool result answers it.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, as JSON (an object for well-behaved models).
    pub arguments: serde_json::Value,
    /// What the provider sent with the call to have it sent back with it, as it came: Gemini
    /// (through its OpenAI-compatible API) sends the model's thought signature in the call's
    /// `extra_content`, and refuses a later request whose call lacks it. `None` for most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_extra: Option<serde_json::Value>,
}

impl ToolCall {
    /// A tool call.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: serde_json::Value,
    ) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments,
            provider_extra: None,
        }
    }
}

/// The outcome of a tool call, sent back to the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The [`ToolCall::id`] this answers.
    pub call_id: String,
    /// The result (or the error's description), as text.
    pub content: String,
    /// Whether the call failed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_round_trip_through_json_tagged_by_role() {
        let messages = vec![
            Message::system("s"),
            Message::user("u"),
            Message::Assistant {
                content: "a".into(),
                tool_calls: vec![ToolCall::new("c1", "f", json!({"x": 1}))],
            },
            Message::tool_error("c1", "boom"),
        ];
        let value = serde_json::to_value(&messages).unwrap();
        assert_eq!(value[0], json!({"role": "system", "content": "s"}));
        assert_eq!(
            value[3],
            json!({"role": "tool", "call_id": "c1", "content": "boom", "is_error": true})
        );
        let back: Vec<Message> = serde_json::from_value(value).unwrap();
        assert_eq!(back, messages);
    }
}
