//! [`ModelRequest`]: what is sent to a model.

use serde::{Deserialize, Serialize};

use super::Transcript;

/// A tool the model may call: a name, a description and a JSON schema for its arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// The tool's name, as the model will call it.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// A JSON schema (an `object` schema) for the arguments.
    pub parameters: serde_json::Value,
}

impl ToolDefinition {
    /// A tool definition.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: serde_json::Value,
    ) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            parameters,
        }
    }
}

/// Whether and which tools the model must call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides (the providers' default).
    Auto,
    /// The model must not call tools.
    None,
    /// The model must call at least one tool (Anthropic: `any`).
    Required,
    /// The model must call this tool.
    Tool(String),
}

/// A JSON schema the reply must follow (structured output).
///
/// OpenAI-compatible adapters send it as `response_format` `json_schema`; the Anthropic adapter
/// forces a tool with this schema and returns its input as the reply's text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutputSchema {
    /// A name for the schema (letters, digits, `_` and `-`).
    pub name: String,
    /// The JSON schema.
    pub schema: serde_json::Value,
    /// Whether the provider must follow the schema exactly (OpenAI `strict`).
    pub strict: bool,
}

impl OutputSchema {
    /// A strict output schema.
    pub fn new(name: impl Into<String>, schema: serde_json::Value) -> Self {
        Self {
            name: name.into(),
            schema,
            strict: true,
        }
    }
}

/// A request to a model.
///
/// # Examples
///
/// ```
/// use loomflow::model::{Message, ModelRequest, ToolChoice, ToolDefinition};
///
/// let request = ModelRequest::new(vec![Message::user("Add 2 and 3.")])
///     .tools(vec![ToolDefinition::new(
///         "add",
///         "Adds two integers.",
///         serde_json::json!({
///             "type": "object",
///             "properties": { "a": { "type": "integer" }, "b": { "type": "integer" } },
///             "required": ["a", "b"]
///         }),
///     )])
///     .tool_choice(ToolChoice::Required)
///     .temperature(0.0)
///     .max_tokens(64);
/// assert_eq!(request.tools.len(), 1);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ModelRequest {
    /// Overrides the adapter's model name for this request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The conversation so far.
    pub messages: Transcript,
    /// Tools the model may call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDefinition>,
    /// Whether and which tools it must call; `None` leaves the provider's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// A schema the reply must follow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<OutputSchema>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// The most tokens to generate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Sequences that end the reply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
}

impl ModelRequest {
    /// A request with these messages and nothing else set.
    pub fn new(messages: impl Into<Transcript>) -> Self {
        Self {
            messages: messages.into(),
            ..Self::default()
        }
    }

    /// Uses this model name instead of the adapter's.
    #[must_use]
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Sets the tools the model may call.
    #[must_use]
    pub fn tools(mut self, tools: Vec<ToolDefinition>) -> Self {
        self.tools = tools;
        self
    }

    /// Sets the tool choice.
    #[must_use]
    pub fn tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = Some(choice);
        self
    }

    /// Asks for a reply that follows this schema.
    #[must_use]
    pub fn output_schema(mut self, schema: OutputSchema) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// The temperature as a provider is sent it: the number as written (`0.3`), not the
    /// `f32` widened to the `f64` next to it (`0.30000001192092896`).
    #[cfg(any(feature = "openai", feature = "anthropic"))]
    pub(crate) fn temperature_on_wire(&self) -> Option<serde_json::Value> {
        let t = self.temperature?;
        let written = t.to_string().parse::<f64>().unwrap_or(f64::from(t));
        Some(serde_json::Value::from(written))
    }

    /// Sets the sampling temperature.
    #[must_use]
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// Caps the reply's length in tokens.
    #[must_use]
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// Sets the stop sequences.
    #[must_use]
    pub fn stop(mut self, stop: Vec<String>) -> Self {
        self.stop = stop;
        self
    }
}
