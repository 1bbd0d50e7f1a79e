//! Arguments rewritten, guided by the schema, into the form the tool's decoder takes.

use serde_json::{Number, Value};

use super::bounds::{Depth, Steps};
use super::sizes::{integer_range, integral};
use super::validate::{fits, required_names, resolve, same_value};

/// Rewrites arguments that [`validate`](super::validate) accepts into the form serde
/// decodes: a `null` given for a property that is not required, and whose schema does not
/// accept `null`, is removed (strict mode sends it for a property left out), and an integral float (`3.0`) where the schema asks for an
/// integer becomes that integer, when it is within the range of its `format`.
///
/// Follows `properties`, `additionalProperties`, `items` (a list of them too),
/// `prefixItems`, `additionalItems`, local `$ref`s,
/// `allOf`, and the first `anyOf`/`oneOf` branch the rewritten value fits.
pub(crate) fn normalize_arguments(schema: &Value, arguments: &mut Value) {
    normalize(
        schema,
        schema,
        arguments,
        Depth::default(),
        &Steps::default(),
    );
}

/// Rewrites `value` for `schema` (a part of `root`), `depth` levels down, within what is
/// left of `steps`: a schema that would take too long stops the rewriting (the check that
/// follows refuses it).
fn normalize(root: &Value, schema: &Value, value: &mut Value, depth: Depth, steps: &Steps) {
    if depth.too_deep() || !steps.take() {
        return;
    }
    let Value::Object(map) = schema else { return };
    if let Some(Value::String(reference)) = map.get("$ref")
        && let Some(target) = resolve(root, reference)
    {
        normalize(root, target, value, depth.hop(), steps);
    }
    if asks_for_integer(map.get("type"))
        && let Value::Number(number) = value
        && let Some(integer) = as_integer(number, map.get("format").and_then(Value::as_str))
    {
        *value = Value::Number(integer);
    }
    // A number the schema's `enum` or `const` holds by value (`3.0` for `3`) becomes the
    // schema's own.
    if let Value::Number(_) = value {
        let options = match (map.get("const"), map.get("enum")) {
            (Some(constant), _) => std::slice::from_ref(constant),
            (None, Some(Value::Array(options))) => options.as_slice(),
            _ => &[],
        };
        if let Some(option) = options
            .iter()
            .find(|o| o.is_number() && same_value(o, value))
        {
            *value = option.clone();
        }
    }
    match value {
        Value::Object(object) => {
            let properties = map.get("properties").and_then(Value::as_object);
            let required = required_names(map);
            // A `null` the property's own schema accepts is a value (often "clear it"),
            // which a tool's decoder, or an MCP server, must be given as it was sent.
            object.retain(|name, field| {
                let property = properties.and_then(|p| p.get(name));
                !(field.is_null()
                    && property
                        .is_some_and(|p| !fits(root, p, &Value::Null, (steps, depth.down())))
                    && !required.contains(&name.as_str()))
            });
            for (name, field) in object.iter_mut() {
                match properties.and_then(|p| p.get(name)) {
                    Some(property) => normalize(root, property, field, depth.down(), steps),
                    None => {
                        if let Some(extra) = map.get("additionalProperties") {
                            normalize(root, extra, field, depth.down(), steps);
                        }
                    }
                }
            }
        }
        Value::Array(items) => {
            // As the check reads them: `items` as a list is draft-07's `prefixItems`.
            let (prefix, rest) = match (map.get("prefixItems"), map.get("items")) {
                (Some(Value::Array(prefix)), rest) => (prefix.as_slice(), rest),
                (_, Some(Value::Array(prefix))) => (prefix.as_slice(), map.get("additionalItems")),
                (_, rest) => (&[][..], rest),
            };
            for (index, item) in items.iter_mut().enumerate() {
                match (prefix.get(index), rest) {
                    (Some(item_schema), _) | (None, Some(item_schema)) => {
                        normalize(root, item_schema, item, depth.down(), steps);
                    }
                    (None, None) => {}
                }
            }
        }
        _ => {}
    }
    if let Some(Value::Array(all)) = map.get("allOf") {
        for branch in all {
            normalize(root, branch, value, depth.hop(), steps);
        }
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = map.get(key) {
            for branch in branches {
                let mut candidate = value.clone();
                normalize(root, branch, &mut candidate, depth.hop(), steps);
                if fits(root, branch, &candidate, (steps, depth.hop())) {
                    *value = candidate;
                    break;
                }
            }
        }
    }
}

/// `"integer"` is a type allowed and `"number"` is not (a float is then never meant).
fn asks_for_integer(ty: Option<&Value>) -> bool {
    let has = |name: &str| match ty {
        Some(Value::String(ty)) => ty == name,
        Some(Value::Array(types)) => types.iter().any(|t| t == name),
        _ => false,
    };
    has("integer") && !has("number")
}

/// An integral float as an integer, when it fits in `format`'s range (or in an `i64`/`u64`
/// without one); `None` for an integer already, or a float that stays a float.
fn as_integer(number: &Number, format: Option<&str>) -> Option<Number> {
    if !number.is_f64() {
        return None;
    }
    let integer = integral(number)?;
    let (low, high) = format
        .and_then(integer_range)
        .unwrap_or((i64::MIN.into(), u64::MAX.into()));
    if !(low..=high).contains(&integer) {
        return None;
    }
    match i64::try_from(integer) {
        Ok(n) => Some(n.into()),
        Err(_) => u64::try_from(integer).ok().map(Number::from),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn integral_floats_become_integers_and_optional_nulls_are_dropped() {
        let schema = json!({
            "type": "object",
            "properties": {
                "a": { "type": "integer", "format": "int64" },
                "ratio": { "type": "number" },
                "retries": { "type": "integer", "format": "uint8", "default": 0 },
                "inner": { "anyOf": [{ "$ref": "#/$defs/Inner" }, { "type": "null" }] }
            },
            "required": ["a"],
            "$defs": { "Inner": { "type": "object", "properties": {
                "n": { "type": ["integer", "null"], "format": "uint32" },
                "tag": { "type": "string" }
            } } }
        });
        let mut arguments = json!({
            "a": 3.0, "ratio": 2.0, "retries": null, "inner": { "n": 7.0, "tag": null }
        });
        normalize_arguments(&schema, &mut arguments);
        assert_eq!(
            arguments,
            json!({ "a": 3, "ratio": 2.0, "inner": { "n": 7 } })
        );
        assert!(arguments["a"].is_i64());

        // A `null` the property accepts is a value, kept: here, "unassign".
        let schema = json!({
            "type": "object",
            "properties": {
                "issue": { "type": "integer" },
                "assignee": { "type": ["string", "null"] },
                "label": { "type": "string" }
            },
            "required": ["issue"]
        });
        let mut arguments = json!({ "issue": 5, "assignee": null, "label": null });
        normalize_arguments(&schema, &mut arguments);
        assert_eq!(arguments, json!({ "issue": 5, "assignee": null }));

        // Out of the format's range: left as it is, for the validator to report.
        let schema = json!({ "properties": { "a": { "type": "integer", "format": "int64" } } });
        let mut arguments = json!({ "a": 1e20 });
        normalize_arguments(&schema, &mut arguments);
        assert!(arguments["a"].is_f64());
    }
}
