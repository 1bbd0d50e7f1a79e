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
    assert!(error.contains("refers on to itself"), "{error}");
    // Branching at every level of deep arguments: the step budget ends it.
    let schema = json!({
        "anyOf": [
            { "type": "object", "properties": { "a": { "$ref": "#" } }, "required": ["b"] },
            { "type": "object", "properties": { "a": { "$ref": "#" } } }
        ]
    });
    let mut arguments = json!(1);
    for _ in 0..40 {
        arguments = json!({ "a": arguments });
    }
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
    // A tag no variant has: every variant's tag, not the first's alone.
    assert_eq!(
        validate(&schema, &json!({ "filter": { "kind": "size" } })),
        Err(r#"field `filter.kind`: expected one of "tag", "price", got "size""#.to_owned())
    );
}

/// An `Option` of an enum: the enum's values and `null`, not "expected null" (which told a
/// model to leave the argument out).
#[test]
fn an_optional_enum_is_told_its_values() {
    let schema = json!({
        "type": "object",
        "properties": { "unit": { "anyOf": [
            { "$ref": "#/$defs/Unit" }, { "type": "null" }
        ] } },
        "$defs": { "Unit": { "type": "string", "enum": ["celsius", "fahrenheit"] } }
    });
    assert_eq!(
        validate(&schema, &json!({ "unit": "kelvin" })),
        Err(
            r#"field `unit`: expected one of "celsius", "fahrenheit", null, got "kelvin""#
                .to_owned()
        )
    );
    assert_eq!(validate(&schema, &json!({ "unit": null })), Ok(()));
    // Its variants documented: a `oneOf` of constants behind the `$ref`.
    let documented = json!({
        "type": "object",
        "properties": { "unit": { "anyOf": [
            { "$ref": "#/$defs/Unit" }, { "type": "null" }
        ] } },
        "$defs": { "Unit": { "oneOf": [
            { "type": "string", "const": "celsius", "description": "metric" },
            { "type": "string", "const": "fahrenheit", "description": "imperial" }
        ] } }
    });
    // An `Option` of an internally tagged enum: the tags, not `null`.
    let tagged = json!({
        "type": "object",
        "properties": { "shape": { "anyOf": [
            { "$ref": "#/$defs/Shape" }, { "type": "null" }
        ] } },
        "$defs": { "Shape": { "oneOf": [
            { "type": "object", "properties": {
                "kind": { "type": "string", "const": "circle" }, "r": { "type": "number" }
            }, "required": ["kind", "r"] },
            { "type": "object", "properties": {
                "kind": { "type": "string", "const": "square" }, "side": { "type": "number" }
            }, "required": ["kind", "side"] }
        ] } }
    });
    assert_eq!(
        validate(&tagged, &json!({ "shape": { "kind": "triangle" } })),
        Err(r#"field `shape.kind`: expected one of "circle", "square", got "triangle""#.to_owned())
    );
    assert_eq!(
        validate(&tagged, &json!({ "shape": "round" })),
        Err(r#"field `shape`: expected an object, got the string "round""#.to_owned())
    );
    assert_eq!(
        validate(&documented, &json!({ "unit": "kelvin" })),
        Err(
            r#"field `unit`: expected one of "celsius", "fahrenheit", null, got "kelvin""#
                .to_owned()
        )
    );
}

/// An integer written as an integral float (`3.0`) is one of an `enum`'s or a `const`'s
/// integers, as the leniency says; the rewrite makes it the schema's own. Before its fix
/// the check refused it ("expected one of 1, 2, 3, got 3.0").
#[test]
fn an_integral_float_is_one_of_an_enums_integers() {
    let schema = json!({
        "type": "object",
        "properties": {
            "priority": { "type": "integer", "enum": [1, 2, 3] },
            "level": { "enum": [1, 2] },
            "one": { "const": 1 }
        }
    });
    let mut arguments = json!({ "priority": 3.0, "level": 2.0, "one": 1.0 });
    assert_eq!(validate(&schema, &arguments), Ok(()));
    super::super::normalize_arguments(&schema, &mut arguments);
    assert_eq!(arguments, json!({ "priority": 3, "level": 2, "one": 1 }));
    assert!(validate(&schema, &json!({ "priority": 3.5 })).is_err());
}

/// A `null` that a property's schema accepts (an enum or a const holding it, a schema with
/// no type) is a value, handed over as sent; one it does not accept is the property left
/// out. Before its fix only a `type` naming null counted, and the others were dropped.
#[test]
fn a_null_the_schema_accepts_is_kept() {
    let schema = json!({
        "type": "object",
        "properties": {
            "assignee": { "enum": ["ada", "bob", null] },
            "cleared": { "const": null },
            "anything": { "description": "any value" },
            "count": { "type": "integer" }
        }
    });
    let mut arguments =
        json!({ "assignee": null, "cleared": null, "anything": null, "count": null });
    assert_eq!(validate(&schema, &arguments), Ok(()));
    super::super::normalize_arguments(&schema, &mut arguments);
    assert_eq!(
        arguments,
        json!({ "assignee": null, "cleared": null, "anything": null })
    );
}

/// A field that `patternProperties` may name is not refused as unexpected beside
/// `additionalProperties: false`; one it cannot is.
#[test]
fn a_field_a_pattern_may_name_is_not_unexpected() {
    let schema = json!({
        "type": "object",
        "patternProperties": { "^env_": { "type": "string" } },
        "additionalProperties": false
    });
    assert_eq!(validate(&schema, &json!({ "env_HOME": "/x" })), Ok(()));
    let closed = json!({ "type": "object", "properties": {}, "additionalProperties": false });
    assert!(validate(&closed, &json!({ "env_HOME": "/x" })).is_err());
}

/// An error quotes what was sent cut short: a megabyte sent for an enum does not come back
/// whole to the model, the transcript and the audit.
#[test]
fn an_error_quotes_a_long_value_cut_short() {
    let schema = json!({ "enum": ["a", "b"] });
    let long = "x".repeat(1_000_000);
    let error = validate(&schema, &json!(long)).unwrap_err();
    assert!(error.len() < 300, "{} bytes", error.len());
    assert!(error.contains("1000002 bytes"), "{error}");
}

/// A tree `levels` deep of a recursive type, its innermost `value` set to `leaf`.
fn tree(levels: usize, leaf: Value) -> Value {
    let mut node = json!({ "value": leaf, "children": [] });
    for _ in 1..levels {
        node = json!({ "value": 1, "children": [node] });
    }
    node
}

/// Arguments of a recursive type are checked however deep they nest within the bound (that
/// of JSON text), and refused past it rather than let through. Before its fix, a value some
/// 22 levels down was not checked at all.
#[test]
fn deeply_nested_arguments_are_checked_or_refused() {
    let schema = json!({
        "$ref": "#/$defs/Node",
        "$defs": { "Node": {
            "type": "object",
            "properties": {
                "value": { "type": "integer" },
                "children": { "type": "array", "items": { "$ref": "#/$defs/Node" } }
            },
            "required": ["value"]
        } }
    });
    assert_eq!(validate(&schema, &tree(30, json!(7))), Ok(()));
    let error = validate(&schema, &tree(30, json!("seven"))).unwrap_err();
    assert!(error.contains("expected an integer"), "{error}");
    assert!(error.contains("children[0]"), "{error}");
    // Each level of the tree is two of JSON: 60 are within the bound, 70 past it.
    assert_eq!(validate(&schema, &tree(60, json!(7))), Ok(()));
    let error = validate(&schema, &tree(60, json!("seven"))).unwrap_err();
    assert!(error.contains("expected an integer"), "{error}");
    let error = validate(&schema, &tree(70, json!(7))).unwrap_err();
    assert!(
        error.contains("nest deeper than the schema check follows"),
        "{error}"
    );
}

/// A schema that refers to itself without going deeper into the arguments is refused
/// after a bounded number of hops, however shallow the arguments.
#[test]
fn a_schema_that_refers_to_itself_in_place_is_refused() {
    let schema = json!({ "$ref": "#" });
    let error = validate(&schema, &json!({ "a": 1 })).unwrap_err();
    assert!(error.contains("refers on to itself"), "{error}");
    let mut arguments = json!({ "a": 1 });
    super::super::normalize_arguments(&schema, &mut arguments);
    assert_eq!(arguments, json!({ "a": 1 }));
}

/// A reference's fragment is percent-decoded before it is read as a pointer; a `%` that
/// escapes nothing stays, and `~1` is still a slash.
#[test]
fn a_reference_is_percent_decoded_before_it_is_followed() {
    assert_eq!(percent_decoded("Gr%C3%B6%C3%9Fe").as_deref(), Some("Größe"));
    assert_eq!(percent_decoded("50%").as_deref(), Some("50%"));
    assert_eq!(percent_decoded("%zz%4").as_deref(), Some("%zz%4"));
    assert_eq!(percent_decoded("%+f").as_deref(), Some("%+f"));
    assert_eq!(percent_decoded("%FF"), None, "not UTF-8");
    let root =
        json!({ "$defs": { "Order Line": { "type": "integer" }, "a/b": { "type": "string" } } });
    assert_eq!(
        resolve(&root, "#/$defs/Order%20Line"),
        Some(&json!({ "type": "integer" }))
    );
    assert_eq!(
        resolve(&root, "#/$defs/a~1b"),
        Some(&json!({ "type": "string" }))
    );
    assert_eq!(resolve(&root, "#/$defs/Missing%20Line"), None);
}

/// A tuple written as draft-07 writes it (`items` as a list, zod-to-json-schema's default
/// for an MCP server's tools), with `additionalItems` for the rest, is checked by position,
/// as `prefixItems` is: before, a list under `items` let every element through. The
/// rewrite reads it the same way.
#[test]
fn a_draft_07_tuple_is_checked_by_position() {
    let schema = json!({
        "type": "object",
        "properties": {
            "point": {
                "type": "array",
                "items": [{ "type": "string" }, { "type": "integer" }],
                "additionalItems": false
            }
        }
    });
    assert_eq!(validate(&schema, &json!({ "point": ["a", 1] })), Ok(()));
    let error = validate(&schema, &json!({ "point": [1, "a"] })).unwrap_err();
    assert!(error.contains("point[0]"), "{error}");
    let error = validate(&schema, &json!({ "point": ["a", 1, 2] })).unwrap_err();
    assert!(error.contains("point[2]"), "{error}");
    let mut arguments = json!({ "point": ["a", 2.0] });
    super::super::normalize_arguments(&schema, &mut arguments);
    assert_eq!(arguments, json!({ "point": ["a", 2] }));
}

/// Draft 4's `exclusiveMinimum: true` makes `minimum` exclusive (older MCP servers write
/// it): the bound itself is refused. Before, the flag was read as no number and ignored.
#[test]
fn a_draft_04_exclusive_flag_makes_its_bound_exclusive() {
    let schema = json!({
        "type": "object",
        "properties": {
            "share": {
                "type": "number",
                "minimum": 0, "exclusiveMinimum": true,
                "maximum": 1, "exclusiveMaximum": true
            },
            "count": { "type": "integer", "exclusiveMinimum": 0, "maximum": 10 }
        }
    });
    assert_eq!(
        validate(&schema, &json!({ "share": 0.5, "count": 10 })),
        Ok(())
    );
    for (arguments, expected) in [
        (
            json!({ "share": 0 }),
            "field `share`: expected a number > 0, got 0",
        ),
        (
            json!({ "share": 1 }),
            "field `share`: expected a number < 1, got 1",
        ),
        (
            json!({ "count": 0 }),
            "field `count`: expected a number > 0, got 0",
        ),
        (
            json!({ "count": 11 }),
            "field `count`: expected a number <= 10, got 11",
        ),
    ] {
        assert_eq!(validate(&schema, &arguments), Err(expected.to_owned()));
    }
}

/// Bounds compare integers exactly: past 2^53 a float loses the last digits, and
/// `9007199254740993` passed a `maximum` of `9007199254740992`. An integer against a
/// fractional bound, and an integral float too large for any integer `format`, are judged
/// too.
#[test]
fn bounds_and_formats_judge_large_integers_exactly() {
    let schema = json!({
        "type": "object",
        "properties": {
            "id": { "type": "integer", "maximum": 9_007_199_254_740_992_u64 },
            "low": { "type": "integer", "minimum": 0.5 },
            "big": { "type": "integer", "format": "uint64" }
        }
    });
    let fits = json!({ "id": 9_007_199_254_740_992_u64, "low": 1, "big": 1e19 });
    assert_eq!(validate(&schema, &fits), Ok(()));
    for (arguments, expected) in [
        (
            json!({ "id": 9_007_199_254_740_993_u64 }),
            "field `id`: expected a number <= 9007199254740992, got 9007199254740993",
        ),
        (
            json!({ "low": 0 }),
            "field `low`: expected a number >= 0.5, got 0",
        ),
        (
            json!({ "big": 1e40 }),
            "field `big`: expected an integer from 0 to 18446744073709551615 (uint64), \
             got 1e+40",
        ),
    ] {
        assert_eq!(validate(&schema, &arguments), Err(expected.to_owned()));
    }
}

/// A schema that hops as often as it may at every level of arguments nested as deep as
/// the check follows: the check and the rewrite before it stay within a task's stack
/// (2 MiB), in a debug build too, by bounding how many schema levels they follow in all.
#[test]
fn hops_at_every_level_stay_within_a_tasks_stack() {
    let hops = super::super::bounds::MAX_HOPS;
    let mut defs = serde_json::Map::new();
    // At each level: the `$ref` to `d0`, then one from each `d` to the next.
    for at in 0..hops - 1 {
        defs.insert(
            format!("d{at}"),
            json!({ "$ref": format!("#/$defs/d{}", at + 1) }),
        );
    }
    defs.insert(
        format!("d{}", hops - 1),
        json!({ "type": "object", "properties": { "a": { "$ref": "#/$defs/d0" } } }),
    );
    let schema = json!({ "$defs": defs, "$ref": "#/$defs/d0" });
    let mut arguments = json!({});
    for _ in 0..super::super::bounds::MAX_DEPTH {
        arguments = json!({ "a": arguments });
    }
    let error = on_a_tasks_stack(schema, arguments).unwrap_err();
    assert!(
        error.contains("the schema nests deeper than the check follows (384 levels"),
        "{error}"
    );
}

/// A recursive type's arguments nested as deep as the check follows JSON (128 levels) pass,
/// whichever way the schema reaches the type: inline at the root, or through a `$ref` (a
/// tool whose argument is the type). Each level is a property, a branch of its `anyOf` and
/// a `$ref`: three schema levels, and the root's `$ref` one more.
#[test]
fn a_recursive_type_nested_as_deep_as_json_is_checked() {
    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)] // only its schema is used
    struct Node {
        next: Option<Box<Node>>,
    }
    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Args {
        node: Node,
    }
    let chain = |levels: usize| {
        let mut value = json!({ "next": null });
        for _ in 1..levels {
            value = json!({ "next": value });
        }
        value
    };
    let node = crate::tool::schema_for::<Node>();
    let args = crate::tool::schema_for::<Args>();
    let deepest = super::super::bounds::MAX_DEPTH;
    // As a hand-written schema (an MCP server's) may put it: the type behind a root `$ref`.
    let behind_a_ref = json!({
        "$ref": "#/$defs/Node",
        "$defs": { "Node": {
            "type": "object",
            "properties": { "next": { "anyOf": [{ "$ref": "#/$defs/Node" }, { "type": "null" }] } }
        } }
    });
    let cases = [
        (behind_a_ref, chain(deepest)),
        (crate::tool::strict_schema(&node), chain(deepest)),
        (
            crate::tool::strict_schema(&args),
            json!({ "node": chain(deepest - 1) }),
        ),
        (node, chain(deepest)),
        (args, json!({ "node": chain(deepest - 1) })),
    ];
    for (schema, arguments) in cases {
        assert_eq!(on_a_tasks_stack(schema, arguments), Ok(()));
    }
}

/// The rewrite and the check of `arguments` against `schema`, on a thread with a task's
/// stack (2 MiB).
fn on_a_tasks_stack(schema: Value, mut arguments: Value) -> Result<(), String> {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            super::super::normalize_arguments(&schema, &mut arguments);
            validate(&schema, &arguments)
        })
        .unwrap()
        .join()
        .unwrap()
}
