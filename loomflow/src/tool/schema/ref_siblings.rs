//! `$ref`s with keywords beside them, which OpenAI's strict mode refuses ("$ref cannot have
//! keywords {'description'}"): schemars writes one for every documented field whose type is
//! a struct or an enum (`{"$ref": "#/$defs/Verdict", "description": "…"}`).

use serde_json::Value;

/// Replaces each `$ref` that has other keywords beside it by the definition it points to,
/// with those keywords over it: the field's description stays. A definition that is being
/// put in place already (a recursive type) keeps its `$ref`, without the keywords beside it;
/// so does one the schema does not hold (another document's) and one to the whole schema
/// (`#`). The root keeps its `$ref`, only losing the keywords beside it (a documented
/// newtype's description; its `$defs` stay): a root `$ref` is how schemars writes a newtype,
/// and an agent reads an output schema whose root is not an object from a wrapper.
pub(super) fn unravel(schema: &mut Value) {
    let original = schema.clone();
    let mut inlining = Vec::new();
    if let Value::Object(map) = schema {
        if map.contains_key("$ref") {
            map.retain(|key, _| matches!(key.as_str(), "$ref" | "$defs" | "definitions"));
        }
        for value in map.values_mut() {
            walk(value, &original, &mut inlining);
        }
    }
}

/// What a schema holds for the document as a whole, not for the value it describes: not
/// copied where a definition is put in place.
const DOCUMENT_KEYWORDS: [&str; 5] = ["$defs", "definitions", "$schema", "$id", "title"];

fn walk(schema: &mut Value, root: &Value, inlining: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            let reference = map.get("$ref").and_then(Value::as_str).map(str::to_owned);
            if let Some(reference) = reference.filter(|_| map.len() > 1) {
                let found = super::validate::resolve(root, &reference)
                    .filter(|_| reference != "#" && !inlining.contains(&reference));
                match found {
                    Some(Value::Object(def)) => {
                        map.remove("$ref");
                        for (key, value) in def {
                            if !DOCUMENT_KEYWORDS.contains(&key.as_str()) {
                                map.entry(key.clone()).or_insert_with(|| value.clone());
                            }
                        }
                        // Walked again whole: a definition that is itself a `$ref` (a
                        // newtype's) now has the keywords beside it.
                        inlining.push(reference);
                        walk(schema, root, inlining);
                        inlining.pop();
                        return;
                    }
                    _ => map.retain(|key, _| key == "$ref"),
                }
            }
            for value in map.values_mut() {
                walk(value, root, inlining);
            }
        }
        Value::Array(items) => {
            for item in items {
                walk(item, root, inlining);
            }
        }
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
    fn a_newtypes_reference_and_an_encoded_name_are_followed_and_the_root_is_kept() {
        let mut schema = json!({
            "$ref": "#/$defs/Wrapped",
            "$defs": {
                "Wrapped": {
                    "type": "object",
                    "properties": {
                        "line": { "$ref": "#/$defs/Order%20Line", "description": "The line." },
                        "id": { "$ref": "#/$defs/Id", "description": "Its id." }
                    }
                },
                "Order Line": { "type": "string" },
                "Id": { "$ref": "#/$defs/Raw" },
                "Raw": { "type": "integer" }
            }
        });
        unravel(&mut schema);
        assert_eq!(schema["$ref"], "#/$defs/Wrapped", "the root as it was");
        let mut documented = json!({
            "$ref": "#/$defs/Raw", "description": "A newtype.", "$defs": { "Raw": { "type": "integer" } }
        });
        unravel(&mut documented);
        assert_eq!(
            documented,
            json!({ "$ref": "#/$defs/Raw", "$defs": { "Raw": { "type": "integer" } } })
        );
        let wrapped = &schema["$defs"]["Wrapped"]["properties"];
        assert_eq!(
            wrapped["line"],
            json!({ "type": "string", "description": "The line." })
        );
        assert_eq!(
            wrapped["id"],
            json!({ "type": "integer", "description": "Its id." })
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
                        "far": { "$ref": "https://example.com/x", "description": "Elsewhere." },
                        "top": { "$ref": "#", "description": "The whole." }
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
        assert_eq!(node["top"], json!({ "$ref": "#" }));
    }
}
