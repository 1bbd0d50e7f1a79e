//! Argument schemas: made from Rust types by schemars, rewritten for OpenAI's strict mode,
//! and checked against a model's arguments before a tool runs.

use serde_json::{Map, Value, json};

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
/// `false`; numeric `format` hints are dropped and `oneOf` becomes `anyOf`. Applies to nested objects, array items, `$defs` and `anyOf`/`oneOf`/`allOf`
/// branches.
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

fn accepts_null(schema: &Value) -> bool {
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

/// Checks `value` against `schema`; on a mismatch, says where and what was expected.
///
/// Covers what tool schemas use: `type`, `properties`, `required`, `additionalProperties`,
/// `enum`, `const`, `items`, `anyOf`/`oneOf`/`allOf`, numeric bounds, and local `$ref`s.
/// Other keywords are not checked here (the tool's own deserialization still is).
pub(crate) fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    Validator { root: schema }.check(schema, value, &mut String::new(), 0)
}

struct Validator<'s> {
    root: &'s Value,
}

const MAX_DEPTH: usize = 64;

impl Validator<'_> {
    fn check(
        &self,
        schema: &Value,
        value: &Value,
        path: &mut String,
        depth: usize,
    ) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Ok(());
        }
        let map = match schema {
            Value::Bool(true) => return Ok(()),
            Value::Bool(false) => return Err(format!("{}: no value is allowed here", at(path))),
            Value::Object(map) => map,
            _ => return Ok(()),
        };
        if let Some(Value::String(reference)) = map.get("$ref")
            && let Some(target) = self.resolve(reference)
        {
            self.check(target, value, path, depth + 1)?;
        }
        if let Some(ty) = map.get("type")
            && !type_matches(ty, value)
        {
            return Err(format!(
                "{}: expected {}, got {}",
                at(path),
                describe_type(ty),
                describe_value(value)
            ));
        }
        if let Some(Value::Array(options)) = map.get("enum")
            && !options.contains(value)
        {
            let options: Vec<String> = options.iter().map(Value::to_string).collect();
            return Err(format!(
                "{}: expected one of {}, got {value}",
                at(path),
                options.join(", ")
            ));
        }
        if let Some(expected) = map.get("const")
            && expected != value
        {
            return Err(format!("{}: expected {expected}, got {value}", at(path)));
        }
        if let Some(number) = value.as_f64() {
            if let Some(min) = map.get("minimum").and_then(Value::as_f64)
                && number < min
            {
                return Err(format!(
                    "{}: expected a number >= {min}, got {value}",
                    at(path)
                ));
            }
            if let Some(max) = map.get("maximum").and_then(Value::as_f64)
                && number > max
            {
                return Err(format!(
                    "{}: expected a number <= {max}, got {value}",
                    at(path)
                ));
            }
        }
        if let Value::Object(object) = value {
            if let Some(Value::Array(required)) = map.get("required") {
                for name in required.iter().filter_map(Value::as_str) {
                    if !object.contains_key(name) {
                        return Err(format!("missing required field `{}`", join(path, name)));
                    }
                }
            }
            let properties = map.get("properties").and_then(Value::as_object);
            for (name, field) in object {
                let len = path.len();
                push_field(path, name);
                let result = match properties.and_then(|p| p.get(name)) {
                    Some(property) => self.check(property, field, path, depth + 1),
                    None => match map.get("additionalProperties") {
                        Some(Value::Bool(false)) => Err(format!("unexpected field `{path}`")),
                        Some(extra) => self.check(extra, field, path, depth + 1),
                        None => Ok(()),
                    },
                };
                path.truncate(len);
                result?;
            }
        }
        if let (Value::Array(items), Some(item_schema)) = (value, map.get("items")) {
            for (index, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{index}]"));
                let result = self.check(item_schema, item, path, depth + 1);
                path.truncate(len);
                result?;
            }
        }
        if let Some(Value::Array(all)) = map.get("allOf") {
            for branch in all {
                self.check(branch, value, path, depth + 1)?;
            }
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(branches)) = map.get(key) {
                let mut first_error = None;
                let mut matched = false;
                for branch in branches {
                    match self.check(branch, value, path, depth + 1) {
                        Ok(()) => {
                            matched = true;
                            break;
                        }
                        Err(error) => {
                            first_error.get_or_insert(error);
                        }
                    }
                }
                if !matched {
                    return Err(
                        first_error.unwrap_or_else(|| format!("{}: no schema matched", at(path)))
                    );
                }
            }
        }
        Ok(())
    }

    fn resolve(&self, reference: &str) -> Option<&Value> {
        let pointer = reference.strip_prefix('#')?;
        self.root.pointer(pointer)
    }
}

fn at(path: &str) -> String {
    if path.is_empty() {
        "arguments".to_owned()
    } else {
        format!("field `{path}`")
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

fn push_field(path: &mut String, name: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(name);
}

fn type_matches(ty: &Value, value: &Value) -> bool {
    match ty {
        Value::String(name) => single_type_matches(name, value),
        Value::Array(names) => names
            .iter()
            .filter_map(Value::as_str)
            .any(|name| single_type_matches(name, value)),
        _ => true,
    }
}

fn single_type_matches(name: &str, value: &Value) -> bool {
    match name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => {
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => true,
    }
}

fn describe_type(ty: &Value) -> String {
    let article = |name: &str| match name {
        "object" | "array" | "integer" => format!("an {name}"),
        "null" => "null".to_owned(),
        other => format!("a {other}"),
    };
    match ty {
        Value::String(name) => article(name),
        Value::Array(names) => names
            .iter()
            .filter_map(Value::as_str)
            .map(article)
            .collect::<Vec<_>>()
            .join(" or "),
        other => other.to_string(),
    }
}

fn describe_value(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.len() <= 40 => format!("the string {s:?}"),
        Value::String(_) => "a string".to_owned(),
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_field_and_the_expectation() {
        let schema = json!({
            "type": "object",
            "properties": {
                "city": { "type": "string" },
                "dates": { "type": "array", "items": { "$ref": "#/$defs/Date" } }
            },
            "required": ["city"],
            "$defs": { "Date": { "type": "object", "properties": { "day": { "type": "integer", "minimum": 1 } }, "required": ["day"] } }
        });
        assert_eq!(validate(&schema, &json!({ "city": "Lyon" })), Ok(()));
        assert_eq!(
            validate(&schema, &json!({})),
            Err("missing required field `city`".to_owned())
        );
        assert_eq!(
            validate(&schema, &json!({ "city": 3 })),
            Err("field `city`: expected a string, got the number 3".to_owned())
        );
        assert_eq!(
            validate(
                &schema,
                &json!({ "city": "x", "dates": [{ "day": 2 }, {}] })
            ),
            Err("missing required field `dates[1].day`".to_owned())
        );
        assert_eq!(
            validate(&schema, &json!({ "city": "x", "dates": [{ "day": 0 }] })),
            Err("field `dates[0].day`: expected a number >= 1, got 0".to_owned())
        );
    }

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
