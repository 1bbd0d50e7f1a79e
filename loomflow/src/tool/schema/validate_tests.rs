//! Tests of the schema check.

use super::*;

use serde_json::json;

/// A schema that branches into itself at every level is refused within a bound number
/// of steps, not checked for an exponential time; the rewrite before it stops too.
#[test]
fn a_schema_that_branches_into_itself_is_refused_in_bounded_time() {
    let schema = json!({
        "type": "object",
        "anyOf": [{ "$ref": "#", "type": "string" }, { "$ref": "#" }]
    });
    let mut arguments = json!({});
    super::super::normalize_arguments(&schema, &mut arguments);
    let error = validate(&schema, &arguments).unwrap_err();
    assert!(error.contains("takes too long to check"), "{error}");
}

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

/// A value no branch takes is told what the branches allow: every documented variant
/// of an enum, not the first alone; for a tagged enum, what the variant its tag names
/// asks for, not the first variant's tag.
#[test]
fn a_value_no_branch_takes_is_told_what_the_branches_allow() {
    let schema = json!({
        "type": "object",
        "properties": {
            "order": { "$ref": "#/$defs/Order" },
            "filter": { "oneOf": [
                { "type": "object", "properties": {
                    "kind": { "const": "tag" }, "name": { "type": "string" }
                }, "required": ["kind", "name"] },
                { "type": "object", "properties": {
                    "kind": { "const": "price" }, "max": { "type": "number" }
                }, "required": ["kind", "max"] }
            ] }
        },
        "$defs": { "Order": { "oneOf": [
            { "const": "ascending", "description": "oldest first" },
            { "enum": ["descending"], "description": "newest first" }
        ] } }
    });
    assert_eq!(
        validate(&schema, &json!({ "order": "newest" })),
        Err(r#"field `order`: expected one of "ascending", "descending", got "newest""#.to_owned())
    );
    assert_eq!(
        validate(
            &schema,
            &json!({ "filter": { "kind": "price", "max": "ten" } })
        ),
        Err(r#"field `filter.max`: expected a number, got the string "ten""#.to_owned())
    );
    assert_eq!(
        validate(&schema, &json!({ "filter": { "kind": "price" } })),
        Err("missing required field `filter.max`".to_owned())
    );
}
