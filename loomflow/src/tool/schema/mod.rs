//! Argument schemas: made from Rust types by schemars, rewritten for OpenAI's strict mode,
//! and checked against a model's arguments before a tool runs.

use serde_json::{Map, Value, json};

mod bounds;
mod normalize;
mod ref_siblings;
mod sizes;
mod validate;

pub(crate) use normalize::normalize_arguments;
pub(crate) use validate::validate;

/// The JSON Schema (2020-12) of `T`, as a tool's `parameters`.
///
/// The `$schema` and `title` keywords are left out (models do not need them); an object
/// schema always has `properties`.
pub fn schema_for<T: schemars::JsonSchema>() -> Value {
    let schema = schemars::generate::SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<T>();
    let mut value = schema.to_value();
    if let Value::Object(map) = &mut value {
        map.remove("$schema");
        map.remove("title");
        if map.get("type").and_then(Value::as_str) == Some("object")
            && !map.contains_key("properties")
        {
            map.insert("properties".to_owned(), Value::Object(Map::new()));
        }
    }
    value
}

/// The form OpenAI's strict mode accepts: in every object schema, every property is
/// required, the ones that were optional accept `null`, and `additionalProperties` is
/// `false`; numeric `format` hints are dropped and `oneOf` becomes `anyOf`; a `$ref` with
/// keywords beside it (a documented field of a struct or enum type) is replaced by the
/// definition it names, those keywords kept (a root `$ref`, a newtype's, stays, without
/// them). Applies to nested objects, array items,
/// `$defs` and `anyOf`/`oneOf`/`allOf` branches.
///
/// # Examples
///
/// ```
/// use loomflow::tool::strict_schema;
/// use serde_json::json;
///
/// let plain = json!({
///     "type": "object",
///     "properties": { "city": { "type": "string" }, "days": { "type": "integer" } },
///     "required": ["city"]
/// });
/// assert_eq!(strict_schema(&plain), json!({
///     "type": "object",
///     "properties": { "city": { "type": "string" }, "days": { "type": ["integer", "null"] } },
///     "required": ["city", "days"],
///     "additionalProperties": false
/// }));
/// ```
pub fn strict_schema(schema: &Value) -> Value {
    let mut schema = schema.clone();
    ref_siblings::unravel(&mut schema);
    make_strict(&mut schema);
    schema
}

fn make_strict(schema: &mut Value) {
    let Value::Object(map) = schema else { return };
    // Strict mode knows string formats only; schemars' `uint8`-style hints are dropped.
    if map.get("type").and_then(Value::as_str) != Some("string") {
        map.remove("format");
    }
    // Strict mode takes `anyOf`, not `oneOf` (schemars uses it for documented enums).
    if !map.contains_key("anyOf")
        && let Some(branches) = map.remove("oneOf")
    {
        map.insert("anyOf".to_owned(), branches);
    }
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(defs)) = map.get_mut(key) {
            defs.values_mut().for_each(make_strict);
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(branches)) = map.get_mut(key) {
            branches.iter_mut().for_each(make_strict);
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(inner @ Value::Object(_)) = map.get_mut(key) {
            make_strict(inner);
        }
    }
    if !map.get("properties").is_some_and(Value::is_object) {
        return;
    }
    let required: Vec<String> = match map.get("required") {
        Some(Value::Array(names)) => names
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    };
    let Some(Value::Object(properties)) = map.get_mut("properties") else {
        return;
    };
    let mut names = Vec::with_capacity(properties.len());
    for (name, property) in properties.iter_mut() {
        make_strict(property);
        if !required.contains(name) {
            make_nullable(property);
        }
        names.push(Value::String(name.clone()));
    }
    map.insert("required".to_owned(), Value::Array(names));
    map.insert("additionalProperties".to_owned(), Value::Bool(false));
}

fn make_nullable(schema: &mut Value) {
    if accepts_null(schema) {
        return;
    }
    if let Value::Object(map) = schema {
        map.remove("default");
        match map.get_mut("type") {
            Some(Value::String(ty)) => {
                let ty = std::mem::take(ty);
                map.insert("type".to_owned(), json!([ty, "null"]));
                if let Some(Value::Array(values)) = map.get_mut("enum") {
                    values.push(Value::Null);
                }
                return;
            }
            Some(Value::Array(types)) => {
                types.push(json!("null"));
                return;
            }
            _ => {}
        }
    }
    let inner = std::mem::take(schema);
    *schema = json!({ "anyOf": [inner, { "type": "null" }] });
}

pub(super) fn accepts_null(schema: &Value) -> bool {
    match schema {
        Value::Bool(yes) => *yes,
        Value::Object(map) => {
            let typed_null = match map.get("type") {
                Some(Value::String(ty)) => ty == "null",
                Some(Value::Array(types)) => types.iter().any(|t| t == "null"),
                _ => false,
            };
            let untyped = map.is_empty();
            let branch_null = ["anyOf", "oneOf"].iter().any(|key| {
                map.get(*key)
                    .and_then(Value::as_array)
                    .is_some_and(|branches| branches.iter().any(accepts_null))
            });
            typed_null || untyped || branch_null
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_form_reaches_nested_objects() {
        let plain = json!({
            "type": "object",
            "properties": { "inner": { "$ref": "#/$defs/Inner" } },
            "$defs": { "Inner": { "type": "object", "properties": { "x": { "type": "string", "enum": ["a"] } } } }
        });
        let strict = strict_schema(&plain);
        assert_eq!(strict["additionalProperties"], json!(false));
        assert_eq!(strict["required"], json!(["inner"]));
        assert_eq!(
            strict["properties"]["inner"]["anyOf"][1],
            json!({ "type": "null" })
        );
        let inner = &strict["$defs"]["Inner"];
        assert_eq!(inner["additionalProperties"], json!(false));
        assert_eq!(
            inner["properties"]["x"],
            json!({ "type": ["string", "null"], "enum": ["a", null] })
        );
    }
}
