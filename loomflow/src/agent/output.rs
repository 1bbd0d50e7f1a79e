//! Typed output: the JSON an agent's answer must be, from a Rust type or a schema, for the
//! agent or for one run; and the prompt that asks for it from models without structured
//! output.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{AgentBuilder, AgentRun};
use crate::model::{Message, ModelRequest, OutputSchema};
use crate::type_name::short_type_name;

/// Checks an answer's text; `Err` says what is wrong, for the model to fix.
pub(super) type Validator = Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// The typed output an agent must produce.
#[derive(Clone)]
pub(crate) struct OutputSpec {
    pub(super) schema: OutputSchema,
    /// The schema before it was made strict: which fields the answer may go without.
    pub(super) fields: Value,
    pub(super) validate: Validator,
}

impl OutputSpec {
    /// Output that deserializes into `T`, described to the model by `schema`; `fields` is
    /// the schema before it was made strict.
    pub(super) fn of<T: DeserializeOwned + 'static>(schema: OutputSchema, fields: Value) -> Self {
        let checked = fields.clone();
        Self {
            schema,
            fields,
            validate: Arc::new(move |text: &str| {
                let value = answer_value(&checked, text)?;
                serde_json::from_value::<T>(value)
                    .map(drop)
                    .map_err(|e| e.to_string())
            }),
        }
    }
}

/// The one property of the object a non-object answer is asked for in (see [`sent_schema`]).
const WRAPPER: &str = "result";

/// How the note that asks the model to answer again, after an answer the output schema
/// refused, begins.
const RETRY_NOTE: &str = "Your answer does not match the required output schema";

/// The note that asks the model to answer again: a user message, but not a question.
pub(super) fn retry_note(problem: &str) -> Message {
    Message::user(format!(
        "{RETRY_NOTE} ({problem}). Reply again with only JSON that matches the schema."
    ))
}

/// Whether `message` is a [`retry_note`].
pub(crate) fn is_retry_note(message: &Message) -> bool {
    message.role() == crate::model::Role::User && message.text().starts_with(RETRY_NOTE)
}

/// An answer without the Markdown code fence a model may put around its JSON (a fence that
/// opens with ```` ```json ```` and closes with ```` ``` ````, or of tildes, or longer), as
/// models asked for JSON in their prompt often do; any other answer trimmed.
pub(super) fn unfenced(text: &str) -> &str {
    let text = text.trim();
    let Some(mark) = ['`', '~'].into_iter().find(|&mark| text.starts_with(mark)) else {
        return text;
    };
    // A fence is three marks or more, and closes with as many.
    let fence = &text[..text.len() - text.trim_start_matches(mark).len()];
    if fence.len() < 3 {
        return text;
    }
    let Some(inside) = text.strip_prefix(fence).and_then(|t| t.strip_suffix(fence)) else {
        return text;
    };
    // The fence's first line names the language (`json`), or nothing.
    match inside.split_once('\n') {
        Some((info, body)) if !info.trim_start().starts_with(['{', '[', '"']) => body.trim(),
        _ => inside.trim(),
    }
}

/// Whether `schema` is an object's, which providers take at the top of a structured output.
fn is_object(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

/// The schema the model is asked to follow for `fields` (the schema as derived or given):
/// made strict (every property required, no others: OpenAI's strict mode refuses a schema
/// that is not). OpenAI and Anthropic take only an object at the top, so any other schema
/// (a list, a string, an enum) is asked for as the one property `result` of an object, and
/// the answer is read from it ([`answer_value`]).
pub(super) fn sent_schema(fields: &Value) -> Value {
    let strict = crate::tool::strict_schema(fields);
    if is_object(&strict) {
        return strict;
    }
    let mut inner = strict;
    let mut wrapper = serde_json::Map::new();
    if let Value::Object(map) = &mut inner {
        // Definitions stay at the top, where the inner schema's `#/$defs/...` point.
        for key in ["$defs", "definitions"] {
            if let Some(defs) = map.remove(key) {
                wrapper.insert(key.to_owned(), defs);
            }
        }
        map.remove("$schema");
    }
    // A recursive type refers to itself as `#`, the top, which is now the wrapper: it is
    // kept among the definitions instead, and referred to there.
    let recursive = refers_to_top(&inner)
        || ["$defs", "definitions"]
            .iter()
            .any(|key| wrapper.get(*key).is_some_and(refers_to_top));
    if recursive {
        let defs = wrapper
            .entry("$defs")
            .or_insert_with(|| serde_json::json!({}));
        let name = free_name(defs);
        let to = format!("#/$defs/{name}");
        if let Value::Object(defs) = defs {
            defs.insert(name, inner);
        }
        inner = serde_json::json!({ "$ref": to });
        for def in wrapper.values_mut() {
            point_top_at(def, &to);
        }
    }
    wrapper.insert("type".to_owned(), "object".into());
    wrapper.insert(
        "properties".to_owned(),
        serde_json::json!({ WRAPPER: inner }),
    );
    wrapper.insert("required".to_owned(), serde_json::json!([WRAPPER]));
    wrapper.insert("additionalProperties".to_owned(), false.into());
    Value::Object(wrapper)
}

/// Whether `schema` refers to the top of its document (`"$ref": "#"`) anywhere.
fn refers_to_top(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            map.get("$ref").and_then(Value::as_str) == Some("#") || map.values().any(refers_to_top)
        }
        Value::Array(items) => items.iter().any(refers_to_top),
        _ => false,
    }
}

/// Points every `"$ref": "#"` in `schema` at `to`.
fn point_top_at(schema: &mut Value, to: &str) {
    match schema {
        Value::Object(map) => {
            if map.get("$ref").and_then(Value::as_str) == Some("#") {
                map.insert("$ref".to_owned(), to.into());
            }
            map.values_mut().for_each(|v| point_top_at(v, to));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| point_top_at(v, to)),
        _ => {}
    }
}

/// A name for the wrapped schema that `defs` does not use yet.
fn free_name(defs: &Value) -> String {
    let taken = |name: &str| defs.get(name).is_some();
    (1..)
        .map(|n| match n {
            1 => "Result".to_owned(),
            n => format!("Result{n}"),
        })
        .find(|name| !taken(name))
        .unwrap_or_default()
}

/// The answer as JSON (taken out of its `result` wrapper when `fields` is not an object's,
/// see [`sent_schema`]), normalized as tool arguments are: `null` for a field that `fields`
/// does not require is dropped (a strict schema makes such a field nullable, as strict mode
/// wants every field present, but a `#[serde(default)]` field does not read `null`), and
/// an integral float for an integer field becomes an integer.
fn answer_value(fields: &Value, text: &str) -> Result<Value, String> {
    let mut value: Value =
        serde_json::from_str(text.trim()).map_err(|e| format!("the answer is not JSON: {e}"))?;
    if !is_object(fields) {
        value = match value {
            Value::Object(mut map) if map.len() == 1 && map.contains_key(WRAPPER) => {
                map.remove(WRAPPER).unwrap_or_default()
            }
            _ => {
                return Err(format!(
                    "the answer is not an object with the one property \"{WRAPPER}\""
                ));
            }
        };
    }
    crate::tool::normalize_arguments(fields, &mut value);
    Ok(value)
}

/// The answer to keep, when it is not the model's text as it is: the normalized JSON
/// ([`answer_value`], out of its wrapper), so that
/// [`RunResult::parsed`](super::RunResult::parsed) reads what was checked.
pub(super) fn settled(fields: &Value, text: &str) -> Option<String> {
    let value = answer_value(fields, text).ok()?;
    let given: Value = serde_json::from_str(text.trim()).ok()?;
    (value != given).then(|| value.to_string())
}

/// The output schema of `T`, derived with schemars and made what the model is asked to
/// follow ([`sent_schema`]), named after the type; and the schema as derived, which says
/// which fields `T` may go without.
pub(super) fn schema_of<T: JsonSchema>() -> (OutputSchema, Value) {
    let fields = crate::tool::schema_for::<T>();
    (
        OutputSchema::new(schema_name::<T>(), sent_schema(&fields)),
        fields,
    )
}

/// A schema name from a type's name: letters, digits, `_` and `-` (`Vec<Answer>` is
/// `Vec_Answer`), at most 64 of them, as providers take it.
fn schema_name<T>() -> String {
    let name: String = short_type_name::<T>()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name: String = name.trim_matches('_').chars().take(64).collect();
    if name.is_empty() {
        "output".to_owned()
    } else {
        name
    }
}

/// Checks an answer against a run's own schema (which travels in the run's state, so the
/// check is by schema, not by type).
pub(super) fn check_against(schema: &Value, text: &str) -> Result<(), String> {
    let value: Value =
        serde_json::from_str(text.trim()).map_err(|e| format!("the answer is not JSON: {e}"))?;
    validate_answer(schema, &value)
}

/// `value` checked against `schema`, its errors said of the answer: the check is the one
/// tools' arguments go through, which names its root `arguments`.
fn validate_answer(schema: &Value, value: &Value) -> Result<(), String> {
    crate::tool::validate_schema(schema, value).map_err(|error| {
        match error.strip_prefix("arguments: ") {
            Some(rest) => format!(
                "the answer: {}",
                rest.replace("the arguments nest", "it nests")
            ),
            None => error,
        }
    })
}

/// Checks the output the output guardrails rewrote against the run's schema, if it has one:
/// an answer that no longer fits fails the run with [`AgentError::OutputSchema`].
///
/// [`AgentError::OutputSchema`]: super::AgentError::OutputSchema
pub(super) fn check_rewritten(
    core: &super::AgentCore,
    state: &super::AgentState,
) -> Result<(), super::AgentError> {
    let Some(output) = &state.output else {
        return Ok(());
    };
    // The output as kept: out of its `result` wrapper, a `null` the schema does not require
    // dropped ([`settled`]). Checked as such against the schema as given, or, for the
    // agent's type, put back in its wrapper and read as the model's answer is.
    let checked = match (&state.output_schema, &state.output_fields, &core.output) {
        (Some(_), Some(fields), _) => serde_json::from_str::<Value>(output.trim())
            .map_err(|e| format!("the answer is not JSON: {e}"))
            .and_then(|value| validate_answer(fields, &value)),
        (Some(own), None, _) => check_against(&own.schema, output),
        (None, _, Some(spec)) => match serde_json::from_str::<Value>(output.trim()) {
            Ok(value) if !is_object(&spec.fields) => {
                (spec.validate)(&serde_json::json!({ WRAPPER: value }).to_string())
            }
            _ => (spec.validate)(output),
        },
        (None, _, None) => Ok(()),
    };
    checked.map_err(|problem| super::AgentError::OutputSchema {
        agent: core.name.clone(),
        attempts: state.schema_retries + 1,
        problem: format!(
            "the output guardrails rewrote the answer into one that does not fit: {problem}"
        ),
    })
}

/// Asks for `schema` in the request: natively, or for a model without structured output,
/// in a system message (the answer is checked either way).
pub(super) fn ask_for(request: ModelRequest, schema: &OutputSchema, native: bool) -> ModelRequest {
    if native {
        return request.output_schema(schema.clone());
    }
    let mut request = request;
    request.messages.push(Message::system(format!(
        "Answer with only a JSON document, no other text, that matches this JSON Schema \
         (named {}):\n{}",
        schema.name, schema.schema
    )));
    request
}

impl AgentBuilder {
    /// The answer must be JSON for a `T`: the schema is derived from `T` (with schemars,
    /// made strict), sent to the model as its structured output, and the answer is checked
    /// by deserializing it. An answer that does not fit goes back to the model with the
    /// error, up to [`max_schema_retries`](Self::max_schema_retries) times. Read it with
    /// [`RunResult::parsed`](super::RunResult::parsed).
    ///
    /// A model without structured output
    /// ([`Model::supports_output_schema`](crate::model::Model::supports_output_schema) is
    /// `false`) is asked in the prompt instead, and its answer is checked the same way.
    ///
    /// OpenAI and Anthropic take only an object at the top of a schema: a `T` that is not
    /// one (a `Vec`, an enum, a string) is asked for as the property `result` of an object,
    /// and the run's output is the value read out of it.
    ///
    /// ```
    /// use loomflow::agent::Agent;
    /// use loomflow::model::{ModelResponse, ScriptedModel};
    /// use loomflow::prelude::*;
    ///
    /// #[derive(Debug, Deserialize, JsonSchema, PartialEq)]
    /// struct Verdict {
    ///     approved: bool,
    ///     reason: String,
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
    /// let agent = Agent::builder("You review refunds.")
    ///     .model(ScriptedModel::new([ModelResponse::text(
    ///         r#"{"approved": true, "reason": "within policy"}"#,
    ///     )]))
    ///     .output::<Verdict>()
    ///     .build()?;
    /// let result = agent.run("Refund 40 EUR for order 7?").await?;
    /// let verdict: Verdict = result.parsed()?;
    /// assert!(verdict.approved);
    /// # Ok(()) }
    /// ```
    pub fn output<T: JsonSchema + DeserializeOwned + 'static>(mut self) -> Self {
        let (schema, fields) = schema_of::<T>();
        self.output = Some(OutputSpec::of::<T>(schema, fields));
        self
    }
}

impl AgentRun<'_> {
    /// This run's answer must be JSON for a `T`, whatever the agent's own output (see
    /// [`AgentBuilder::output`]). The schema is kept in the run's state, so a run resumed
    /// later still asks for it; the answer is checked against the schema. A turn that
    /// offers a tool of the schema's name fails the run with
    /// [`AgentError::OutputNamedAsTool`](super::AgentError::OutputNamedAsTool).
    pub fn output<T: JsonSchema>(mut self) -> Self {
        let (schema, fields) = schema_of::<T>();
        self.output = Some(schema);
        self.output_fields = Some(fields);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, JsonSchema)]
    #[allow(dead_code)] // only its schema is used
    struct Answer {
        city: String,
        days: Option<u32>,
    }

    #[test]
    fn a_types_schema_is_strict_and_named_after_it() {
        let (schema, _) = schema_of::<Answer>();
        assert_eq!(schema.name, "Answer");
        assert!(schema.strict);
        assert_eq!(schema.schema["additionalProperties"], false);
        assert_eq!(
            schema.schema["required"],
            serde_json::json!(["city", "days"])
        );
        assert_eq!(schema_of::<Vec<Answer>>().0.name, "Vec_Answer");
        // A long name is cut to what providers take.
        type Four<T> = Vec<Vec<Vec<Vec<T>>>>;
        type Long = Four<Four<Four<Four<Answer>>>>;
        let long = schema_of::<Long>().0.name;
        assert!(crate::tool::name::is_callable(&long), "{long}");
    }

    #[test]
    fn a_list_is_asked_for_in_an_object_and_read_out_of_it() {
        let (schema, fields) = schema_of::<Vec<Answer>>();
        let sent = &schema.schema;
        assert_eq!(sent["type"], "object", "{sent}");
        assert_eq!(sent["required"], serde_json::json!(["result"]));
        assert_eq!(sent["additionalProperties"], false);
        assert_eq!(sent["properties"]["result"]["type"], "array", "{sent}");
        // The item's definition stays at the top, where the reference points.
        let reference = sent["properties"]["result"]["items"]["$ref"]
            .as_str()
            .unwrap();
        let name = reference.strip_prefix("#/$defs/").unwrap();
        assert_eq!(sent["$defs"][name]["additionalProperties"], false, "{sent}");

        let answer = r#"{"result": [{"city": "Lyon", "days": null}]}"#;
        assert!(check_against(sent, answer).is_ok());
        let kept = settled(&fields, answer).unwrap();
        // `days` is an `Option`, whose schema accepts `null`: the null is kept, a value.
        assert_eq!(kept, r#"[{"city":"Lyon","days":null}]"#);
        let bare = answer_value(&fields, r#"[{"city": "Lyon"}]"#).unwrap_err();
        assert!(bare.contains("\"result\""), "{bare}");
    }

    #[test]
    fn answers_are_checked_against_a_schema() {
        let schema = schema_of::<Answer>().0.schema;
        assert!(check_against(&schema, r#"{"city": "Lyon", "days": null}"#).is_ok());
        let wrong = check_against(&schema, r#"{"city": 7, "days": 1}"#).unwrap_err();
        assert!(wrong.contains("city"), "{wrong}");
        // Said of the answer, not of a tool's arguments.
        let list = check_against(&schema, r#"["Lyon"]"#).unwrap_err();
        assert!(list.starts_with("the answer: expected an object"), "{list}");
        assert!(
            check_against(&schema, "Lyon")
                .unwrap_err()
                .contains("not JSON")
        );
    }

    #[test]
    fn an_answer_is_read_inside_its_code_fence() {
        for fenced in [
            "```json\n{\"a\": 1}\n```",
            "```\n{\"a\": 1}\n```",
            "  ```JSON\n{\"a\": 1}```  ",
            "```{\"a\": 1}```",
            "~~~json\n{\"a\": 1}\n~~~",
            "````json\n{\"a\": 1}\n````",
        ] {
            assert_eq!(unfenced(fenced), r#"{"a": 1}"#, "{fenced:?}");
        }
        // Not a fence around the whole answer: as it is, trimmed.
        for text in [
            " {\"a\": 1} ",
            "```json\n{}",
            "say ```{}```",
            "``{}``",
            "````json\n{}\n```",
            "~~~json\n{}\n```",
            "```",
        ] {
            assert_eq!(unfenced(text), text.trim(), "{text:?}");
        }
    }
}
