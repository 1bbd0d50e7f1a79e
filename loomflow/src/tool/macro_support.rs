//! What `#[tool]`'s generated code calls. Not public API: reached through
//! `loomflow::__private`.

use std::fmt::Display;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::ToolError;
use super::schema::schema_for;

/// The schema of the generated arguments struct.
pub fn tool_arguments_schema<A: schemars::JsonSchema>() -> Value {
    schema_for::<A>()
}

/// The schema of a single argument's type when it is an object with named fields (then the
/// model's arguments are that type itself), or `None`.
pub fn whole_argument_schema<T: schemars::JsonSchema>() -> Option<Value> {
    let schema = schema_for::<T>();
    let is_struct = schema.get("type").and_then(Value::as_str) == Some("object")
        && schema
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(|p| !p.is_empty());
    is_struct.then_some(schema)
}

/// Deserializes the model's arguments (already checked against the schema by the host).
///
/// # Errors
///
/// [`ToolError::InvalidArguments`] with serde's message, which names the field.
pub fn parse_tool_arguments<A: DeserializeOwned>(
    tool: &str,
    arguments: Value,
) -> Result<A, ToolError> {
    let arguments = match arguments {
        Value::Null => Value::Object(serde_json::Map::new()),
        other => other,
    };
    serde_json::from_value(arguments).map_err(|e| ToolError::InvalidArguments {
        tool: tool.to_owned(),
        message: e.to_string(),
    })
}

/// Serializes a tool's plain return value.
///
/// # Errors
///
/// [`ToolError::Failed`] when the value does not serialize.
pub fn plain_tool_output<T: Serialize + ?Sized>(
    tool: &str,
    output: &T,
) -> Result<Value, ToolError> {
    serde_json::to_value(output).map_err(|e| ToolError::Failed {
        tool: tool.to_owned(),
        message: format!("the result did not serialize: {e}"),
    })
}

/// A fallible tool's return value: `Ok` is serialized, `Err` becomes [`ToolError::Failed`]
/// with the error's `Display` text.
pub trait IntoToolResult {
    /// Converts the value.
    ///
    /// # Errors
    ///
    /// [`ToolError::Failed`] for an `Err`, or an `Ok` that does not serialize.
    fn into_tool_result(self, tool: &str) -> Result<Value, ToolError>;
}

impl<T: Serialize, E: Display> IntoToolResult for Result<T, E> {
    fn into_tool_result(self, tool: &str) -> Result<Value, ToolError> {
        match self {
            Ok(value) => plain_tool_output(tool, &value),
            Err(error) => Err(ToolError::Failed {
                tool: tool.to_owned(),
                message: error.to_string(),
            }),
        }
    }
}
