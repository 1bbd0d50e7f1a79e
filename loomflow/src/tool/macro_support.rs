//! What `#[tool]`'s generated code calls. Not public API: reached through
//! `loomflow::__private`.

use std::fmt::Display;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::ToolError;
use super::schema::{normalize_arguments, schema_for};

/// The schema of the generated arguments struct.
pub fn tool_arguments_schema<A: schemars::JsonSchema>() -> Value {
    let mut schema = schema_for::<A>();
    // Its struct takes the fields no parameter names only through a flattened parameter
    // (then serde does not deny them): the schema refuses them, unless that parameter says
    // what they may be (a flattened map).
    if let Some(map) = schema.as_object_mut() {
        close_unless_open(map);
    }
    schema
}

/// Gives an object schema `additionalProperties: false`, unless it already says what extra
/// fields may be, or its fields come from branches or a reference (which a root-level
/// `false` would wrongly refuse).
fn close_unless_open(map: &mut serde_json::Map<String, Value>) {
    let open = [
        "additionalProperties",
        "patternProperties",
        "unevaluatedProperties",
        "allOf",
        "anyOf",
        "oneOf",
        "$ref",
    ]
    .iter()
    .any(|key| map.contains_key(*key));
    if !open {
        map.insert("additionalProperties".to_owned(), Value::Bool(false));
    }
}

/// The schema of a single argument's type when it is an object with named fields (then the
/// model's arguments are that type itself), or `None`.
///
/// Like the arguments struct the macro generates, it refuses fields it does not name: the
/// root object gets `additionalProperties: false`, unless the type already says what extra
/// fields may be (a `#[serde(flatten)]` map makes schemars write `additionalProperties`) or
/// its fields come from `allOf`/`anyOf`/`oneOf`/`$ref` (a flattened enum), which a
/// root-level `false` would wrongly refuse.
pub fn whole_argument_schema<T: schemars::JsonSchema>() -> Option<Value> {
    let mut schema = schema_for::<T>();
    let map = schema.as_object_mut()?;
    let is_struct = map.get("type").and_then(Value::as_str) == Some("object")
        && map
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(|p| !p.is_empty());
    if !is_struct {
        return None;
    }
    close_unless_open(map);
    Some(schema)
}

/// Drops a top-level `null` for a parameter that has a default of its own which is not
/// `null` (`#[serde(default = "five")] days: Option<u8>`) and is not required: the
/// parameter left out (OpenAI's strict mode sends every property), so that its default
/// applies rather than `None`.
fn drop_nulls_with_defaults(schema: &Value, arguments: &mut Value) {
    let (Some(properties), Value::Object(fields)) = (schema.get("properties"), arguments) else {
        return;
    };
    let required = |name: &str| {
        (schema.get("required").and_then(Value::as_array))
            .is_some_and(|names| names.iter().any(|n| n.as_str() == Some(name)))
    };
    fields.retain(|name, value| {
        let defaulted = (properties.get(name))
            .and_then(|property| property.get("default"))
            .is_some_and(|default| !default.is_null());
        !(value.is_null() && defaulted && !required(name))
    });
}

/// Deserializes the model's arguments (already checked against `schema` by the host),
/// after normalizing them: `null` for an optional field is dropped (a parameter's too when
/// it has a default of its own) and an integral float for an integer field becomes an
/// integer. A top-level field the schema refuses
/// (`additionalProperties: false`) is refused here too, so that a tool called directly,
/// not through the host, refuses it as well: serde alone would ignore it in a user's
/// whole-struct argument type.
///
/// # Errors
///
/// [`ToolError::InvalidArguments`] naming an unexpected field (``unexpected field `x` ``), or
/// with serde's message, prefixed with the path of the field it is about
/// (``field `xs[2]`: ...``).
pub fn parse_tool_arguments<A: DeserializeOwned>(
    tool: &str,
    schema: &Value,
    arguments: Value,
) -> Result<A, ToolError> {
    let mut arguments = match arguments {
        Value::Null => Value::Object(serde_json::Map::new()),
        other => other,
    };
    normalize_arguments(schema, &mut arguments);
    drop_nulls_with_defaults(schema, &mut arguments);
    if let Some(field) = unexpected_field(schema, &arguments) {
        return Err(ToolError::InvalidArguments {
            tool: tool.to_owned(),
            message: format!("unexpected field `{field}`"),
        });
    }
    serde_path_to_error::deserialize(arguments).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        let message = if path.is_empty() || path == "." {
            inner.to_string()
        } else {
            format!("field `{path}`: {inner}")
        };
        ToolError::InvalidArguments {
            tool: tool.to_owned(),
            message,
        }
    })
}

/// The first top-level field of `arguments` that `schema` does not name, when its
/// `additionalProperties` is `false`.
fn unexpected_field<'a>(schema: &Value, arguments: &'a Value) -> Option<&'a str> {
    if schema.get("additionalProperties") != Some(&Value::Bool(false)) {
        return None;
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    arguments
        .as_object()?
        .keys()
        .find(|key| !properties.is_some_and(|p| p.contains_key(*key)))
        .map(String::as_str)
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

/// The text a fallible tool's `Err` is reported with: its `Display`. A trait of its own so
/// that a `Result` whose error is not `Display` is refused with a message that says why,
/// the same whether the return type is spelled `Result<..>` or is an alias of it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is the error type of a #[tool]'s `Result`, and must implement `Display`",
    label = "an `Err` is reported to the model as its `Display` text",
    note = "implement `Display` for `{Self}`, or map the error to a `String`"
)]
pub trait ToolErrorText {
    /// The error's text.
    fn tool_error_text(&self) -> String;
}

impl<E: Display + ?Sized> ToolErrorText for E {
    fn tool_error_text(&self) -> String {
        self.to_string()
    }
}

/// Runs a sync tool's body (its arguments decoded, its result converted) on tokio's blocking
/// pool and waits for it; the wait is what the host's timeout ends.
///
/// # Errors
///
/// The body's own error; [`ToolError::Panicked`] naming the tool when the body panicked;
/// [`ToolError::Failed`] when the runtime shut down before the body ran.
pub async fn run_blocking_tool<F>(tool: &str, body: F) -> Result<Value, ToolError>
where
    F: FnOnce() -> Result<Value, ToolError> + Send + 'static,
{
    match tokio::task::spawn_blocking(body).await {
        Ok(result) => result,
        Err(error) => Err(match error.try_into_panic() {
            Ok(panic) => ToolError::Panicked {
                tool: tool.to_owned(),
                message: crate::sync::panic_message(&*panic),
            },
            Err(_) => ToolError::Failed {
                tool: tool.to_owned(),
                message: "the runtime shut down before the tool ran".to_owned(),
            },
        }),
    }
}

/// How a return value becomes a result is chosen by its type (autoderef specialisation):
/// a `Result` whose error is a [`ToolError`] keeps that error as it is, through
/// [`ToolErrorOutputKind`]; any other `Result`, spelled out or under another name (an
/// alias), is fallible, through [`FallibleOutputKind`]; anything else is a plain value,
/// through [`PlainOutputKind`]. The generated code calls
/// `(&&&OutputOf(&output)).tool_output_kind().convert(output, tool)`, with the three traits
/// in scope: method lookup tries each kind one dereference later than the one before. The
/// kind is picked whatever `T` and `E` are, and [`FallibleOutput::convert`] then requires
/// `T: Serialize` and `E: Display`: were the bounds on the kind, a `Result` with a
/// non-`Display` error would fall through to the plain kind and its `Err` would reach the
/// model as a success.
#[derive(Debug)]
pub struct FallibleOutput;

/// See [`FallibleOutput`]: a value serialized as it is.
#[derive(Debug)]
pub struct PlainOutput;

/// See [`FallibleOutput`]: an `Err` that is a [`ToolError`] already.
#[derive(Debug)]
pub struct ToolErrorOutput;

/// A tool's return value, borrowed, for its kind to be picked (see [`FallibleOutput`]).
#[derive(Debug)]
pub struct OutputOf<'a, T: ?Sized>(pub &'a T);

/// Picks [`ToolErrorOutput`] for a `Result<T, ToolError>`.
pub trait ToolErrorOutputKind {
    /// The conversion to use.
    fn tool_output_kind(&self) -> ToolErrorOutput {
        ToolErrorOutput
    }
}

impl<T> ToolErrorOutputKind for &&OutputOf<'_, Result<T, ToolError>> {}

/// Picks [`FallibleOutput`] for any other `Result`.
pub trait FallibleOutputKind {
    /// The conversion to use.
    fn tool_output_kind(&self) -> FallibleOutput {
        FallibleOutput
    }
}

impl<T, E> FallibleOutputKind for &OutputOf<'_, Result<T, E>> {}

/// Picks [`PlainOutput`] for any other value.
pub trait PlainOutputKind {
    /// The conversion to use.
    fn tool_output_kind(&self) -> PlainOutput {
        PlainOutput
    }
}

impl<T: ?Sized> PlainOutputKind for OutputOf<'_, T> {}

impl ToolErrorOutput {
    /// `Ok` is serialized, `Err` is the tool's own [`ToolError`], its variant kept (an
    /// `InvalidArguments` stays one).
    ///
    /// # Errors
    ///
    /// The tool's error; [`ToolError::Failed`] for an `Ok` that does not serialize.
    pub fn convert<T: Serialize>(
        self,
        output: Result<T, ToolError>,
        tool: &str,
    ) -> Result<Value, ToolError> {
        plain_tool_output(tool, &output?)
    }
}

impl FallibleOutput {
    /// `Ok` is serialized, `Err` is a failed call with the error's `Display` text.
    ///
    /// # Errors
    ///
    /// [`ToolError::Failed`] for an `Err`, or an `Ok` that does not serialize.
    pub fn convert<T: Serialize, E: ToolErrorText>(
        self,
        output: Result<T, E>,
        tool: &str,
    ) -> Result<Value, ToolError> {
        match output {
            Ok(value) => plain_tool_output(tool, &value),
            Err(error) => Err(ToolError::Failed {
                tool: tool.to_owned(),
                message: error.tool_error_text(),
            }),
        }
    }
}

impl PlainOutput {
    /// The value, serialized.
    ///
    /// # Errors
    ///
    /// As [`plain_tool_output`].
    pub fn convert<T: Serialize>(self, output: T, tool: &str) -> Result<Value, ToolError> {
        plain_tool_output(tool, &output)
    }
}
