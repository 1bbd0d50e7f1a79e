//! `$ref`s with keywords beside them, which OpenAI's strict mode refuses ("$ref cannot have
//! keywords {'description'}"): schemars writes one for every documented field whose type is
//! a struct or an enum (`{"$ref": "#/$defs/Verdict", "description": "…"}`).

use serde_json::{Map, Value};

/// Replaces each `$ref` that has other keywords beside it by the definition it points to,
/// with those keywords over it: the field's description stays. A definition that is being
/// put in place already (a recursive type) keeps its `$ref`, without the keywords beside it;
/// so does one that is not in the schema's own `$defs` (or `definitions`).
pub(super) fn unravel(schema: &mut Value) {
    let defs = definitions(schema);
    let mut inlining = Vec::new();
    walk(schema, &defs, &mut inlining);
}

/// The schema's local definitions, as they are before any is put in place.
fn definitions(schema: &Value) -> Map<String, Value> {
    let mut defs = Map::new();
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(found)) = schema.get(key) {
            for (name, def) in found {
                defs.insert(format!("#/{key}/{}", escaped(name)), def.clone());
            }
        }
    }
    defs
}

/// `name` as a JSON pointer's segment.
fn escaped(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

fn walk(schema: &mut Value, defs: &Map<String, Value>, inlining: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            let reference = map.get("$ref").and_then(Value::as_str).map(str::to_owned);
            if let Some(reference) = reference.filter(|_| map.len() > 1) {
                match defs
                    .get(&reference)
                    .filter(|_| !inlining.contains(&reference))
                {
                    Some(Value::Object(def)) => {
                        map.remove("$ref");
                        for (key, value) in def {
                            map.entry(key.clone()).or_insert_with(|| value.clone());
                        }
                        inlining.push(reference);
                        map.values_mut().for_each(|v| walk(v, defs, inlining));
                        inlining.pop();
                        return;
                    }
                    _ => map.retain(|key, _| key == "$ref"),
                }
            }
            map.values_mut().for_each(|v| walk(v, defs, inlining));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| walk(v, defs, inlining)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_documented_reference_takes_its_definition_in_place() {
        let mut schema = json!({
            "type": "object",
            "properties": {
                "verdict": { "$ref": "#/$defs/Verdict", "description": "Overall verdict." },
                "again": { "$ref": "#/$defs/Verdict" }
            },
            "$defs": { "Verdict": { "type": "string", "enum": ["pass", "fail"] } }
        });
        unravel(&mut schema);
        assert_eq!(
            schema["properties"]["verdict"],
            json!({ "type": "string", "enum": ["pass", "fail"], "description": "Overall verdict." })
        );
        assert_eq!(
            schema["properties"]["again"],
            json!({ "$ref": "#/$defs/Verdict" })
        );
    }

    #[test]
    fn a_recursive_or_unknown_reference_keeps_only_its_ref() {
        let mut schema = json!({
            "type": "object",
            "properties": { "head": { "$ref": "#/$defs/Node" } },
            "$defs": {
                "Node": {
                    "type": "object",
                    "properties": {
                        "next": { "$ref": "#/$defs/Node", "description": "The next one." },
                        "far": { "$ref": "https://example.com/x", "description": "Elsewhere." }
                    }
                }
            }
        });
        unravel(&mut schema);
        let node = &schema["$defs"]["Node"]["properties"];
        // Put in place once, inside the definition: its own reference to itself stays one.
        assert_eq!(node["next"]["type"], "object");
        assert_eq!(
            node["next"]["properties"]["next"],
            json!({ "$ref": "#/$defs/Node" })
        );
        assert_eq!(node["far"], json!({ "$ref": "https://example.com/x" }));
    }
}
