//! `#[tool]`: descriptions, schemas (plain and strict, valid 2020-12), argument forms,
//! injected context, return values and attributes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use loomflow::prelude::*;
use loomflow::tool::{ToolError, ToolSpec};
use serde_json::Value;

/// Get the weather for a city.
///
/// Second paragraph, for people only.
#[tool(param(city = "The city, e.g. Lyon", days = "How many days ahead"))]
async fn weather(city: String, days: Option<u8>) -> String {
    format!("sunny in {city} for {} days", days.unwrap_or(1))
}

/// Add two numbers.
#[tool]
fn add(a: i64, b: i64) -> i64 {
    a + b
}

/// Which way to sort.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Order {
    /// Smallest first.
    Ascending,
    /// Largest first.
    Descending,
}

/// A search query.
#[derive(Deserialize, JsonSchema)]
struct Query {
    /// Words to look for.
    text: String,
    /// At most this many hits.
    limit: Option<u32>,
    /// The sort order.
    order: Order,
    /// Filters, each a nested object.
    filters: Vec<Filter>,
}

/// One filter.
#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)] // read by the model, not the body
struct Filter {
    /// Field name.
    field: String,
    /// Wanted value.
    value: Option<String>,
}

/// Search the archive.
#[tool(name = "archive_search", destructive)]
async fn search(query: Query, ctx: &ToolContext) -> Result<Vec<String>, String> {
    if query.text.is_empty() {
        return Err("empty query".into());
    }
    let order = match query.order {
        Order::Ascending => "asc",
        Order::Descending => "desc",
    };
    Ok(vec![format!(
        "{} {} {:?} {} for {}",
        query.text,
        order,
        query.limit,
        query.filters.len(),
        ctx.call_id
    )])
}

#[tool(description = "Delete everything.", approval)]
fn wipe(ctx: &ToolContext) {
    let _ = ctx;
}

fn spec(tool: &impl Tool) -> &ToolSpec {
    tool.spec()
}

fn ctx() -> ToolContext {
    ToolContext::new("s", Some("u".into()), "call-7")
}

fn assert_valid_2020_12(schema: &Value) {
    let meta = jsonschema::draft202012::meta::validate(schema);
    assert!(
        meta.is_ok(),
        "not a valid 2020-12 schema: {meta:?}\n{schema:#}"
    );
    // And it compiles as a schema a real validator accepts.
    jsonschema::draft202012::new(schema).expect("schema compiles");
}

#[test]
fn description_is_the_first_doc_paragraph_or_the_attribute() {
    assert_eq!(spec(&weather).description, "Get the weather for a city.");
    assert_eq!(spec(&wipe).description, "Delete everything.");
    assert_eq!(spec(&weather).name, "weather");
    assert_eq!(spec(&search).name, "archive_search");
}

#[test]
fn flags_follow_the_attributes() {
    assert!(spec(&wipe).requires_approval && !spec(&wipe).destructive);
    assert!(spec(&search).destructive && !spec(&search).requires_approval);
    assert!(!spec(&add).requires_approval && !spec(&add).destructive);
}

#[test]
fn plain_parameters_become_properties_with_descriptions() {
    let schema = &spec(&weather).parameters;
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["properties"]["city"]["type"], "string");
    assert_eq!(
        schema["properties"]["city"]["description"],
        "The city, e.g. Lyon"
    );
    assert_eq!(
        schema["properties"]["days"]["description"],
        "How many days ahead"
    );
    assert_eq!(schema["required"], json!(["city"]));
    assert!(schema.get("title").is_none() && schema.get("$schema").is_none());
}

/// Top results.
#[tool(param(count = "# of results to return"))]
fn top(count: u32) -> u32 {
    count
}

/// A parameter's description that starts with `#` is its description, whole: not a title
/// (which schemars makes of a doc comment's heading), with the description dropped.
#[test]
fn a_description_starting_with_a_hash_stays_the_description() {
    let schema = &spec(&top).parameters;
    assert_eq!(
        schema["properties"]["count"]["description"],
        "# of results to return"
    );
    assert!(
        schema["properties"]["count"].get("title").is_none(),
        "{schema}"
    );
}

#[test]
fn a_single_struct_argument_is_the_arguments_object() {
    let schema = &spec(&search).parameters;
    assert_eq!(
        schema["properties"]["text"]["description"],
        "Words to look for."
    );
    assert_eq!(
        schema["properties"]["limit"]["description"],
        "At most this many hits."
    );
    let required: Vec<&str> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(required.contains(&"text") && !required.contains(&"limit"));
}

#[test]
fn context_parameters_are_not_in_the_schema() {
    let schema = &spec(&wipe).parameters;
    assert_eq!(schema["properties"], json!({}));
    assert!(spec(&search).parameters["properties"].get("ctx").is_none());
}

#[test]
fn every_schema_is_valid_2020_12_in_both_forms() {
    for tool_spec in [spec(&weather), spec(&add), spec(&search), spec(&wipe)] {
        assert_valid_2020_12(&tool_spec.parameters);
        assert_valid_2020_12(&tool_spec.strict_parameters());
    }
}

/// OpenAI's strict mode refuses a `$ref` with other keywords beside it.
fn assert_no_ref_siblings(schema: &Value, at: &str) {
    match schema {
        Value::Object(map) => {
            assert!(
                !map.contains_key("$ref") || map.len() == 1,
                "{at}: {schema}"
            );
            for (key, value) in map {
                assert_no_ref_siblings(value, &format!("{at}.{key}"));
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                assert_no_ref_siblings(item, &format!("{at}[{i}]"));
            }
        }
        _ => {}
    }
}

#[test]
fn strict_form_requires_everything_and_forbids_extras_recursively() {
    let strict = spec(&search).strict_parameters();
    assert_eq!(strict["additionalProperties"], false);
    // serde_json keeps object keys sorted.
    assert_eq!(
        strict["required"],
        json!(["filters", "limit", "order", "text"])
    );
    assert_eq!(
        strict["properties"]["limit"]["type"],
        json!(["integer", "null"])
    );
    // Nested objects (through $defs) are strict too.
    let filter = strict["$defs"]["Filter"].clone();
    assert_eq!(filter["additionalProperties"], false);
    assert_eq!(filter["required"], json!(["field", "value"]));
    assert_eq!(
        filter["properties"]["value"]["type"],
        json!(["string", "null"])
    );
    // Documented enums (`oneOf` in the plain form) use `anyOf`, which strict mode accepts.
    assert!(
        spec(&search).parameters["$defs"]["Order"]
            .get("oneOf")
            .is_some()
    );
    assert!(!strict.to_string().contains("oneOf"));
    assert_eq!(strict["$defs"]["Order"]["anyOf"][0]["const"], "ascending");
    // The plain form refuses unknown arguments at the root only (as the generated
    // arguments struct does); nested objects are untouched.
    assert_eq!(spec(&search).parameters["additionalProperties"], false);
    assert!(
        spec(&search).parameters["$defs"]["Filter"]
            .get("additionalProperties")
            .is_none()
    );
    assert_eq!(spec(&search).definition_strict().parameters, strict);
    // No `$ref` has keywords beside it, which strict mode refuses: the documented `order`
    // takes its enum in place, its description kept.
    assert!(
        spec(&search).parameters["properties"]["order"]
            .get("$ref")
            .is_some()
    );
    assert_no_ref_siblings(&strict, "strict");
    assert_eq!(
        strict["properties"]["order"]["description"],
        "The sort order."
    );
    assert_eq!(
        strict["properties"]["order"]["anyOf"][0]["const"],
        "ascending"
    );

    // A strict schema accepts a call with nulls and refuses extras.
    let validator = jsonschema::draft202012::new(&strict).unwrap();
    let call = json!({ "text": "x", "limit": null, "order": "ascending", "filters": [{ "field": "a", "value": null }] });
    assert!(validator.is_valid(&call));
    let extra =
        json!({ "text": "x", "limit": null, "order": "ascending", "filters": [], "more": 1 });
    assert!(!validator.is_valid(&extra));
}

#[tokio::test]
async fn async_and_sync_tools_run_and_serialize_their_results() {
    let out = weather
        .call(json!({ "city": "Lyon", "days": 3 }), &ctx())
        .await
        .unwrap();
    assert_eq!(out, json!("sunny in Lyon for 3 days"));
    let out = add.call(json!({ "a": 2, "b": 40 }), &ctx()).await.unwrap();
    assert_eq!(out, json!(42));
    let out = wipe.call(json!({}), &ctx()).await.unwrap();
    assert_eq!(out, Value::Null);
}

#[tokio::test]
async fn struct_argument_and_context_reach_the_body() {
    let args = json!({ "text": "cats", "order": "descending", "filters": [{ "field": "a" }] });
    let out = search.call(args, &ctx()).await.unwrap();
    assert_eq!(out, json!(["cats desc None 1 for call-7"]));
}

#[tokio::test]
async fn an_err_becomes_a_failed_call() {
    let args = json!({ "text": "", "order": "ascending", "filters": [] });
    let error = search.call(args, &ctx()).await.unwrap_err();
    assert!(
        matches!(&error, ToolError::Failed { tool, message } if tool == "archive_search" && message == "empty query"),
        "{error:?}"
    );
}

#[tokio::test]
async fn bad_arguments_called_directly_are_invalid_arguments() {
    let error = add.call(json!({ "a": 1 }), &ctx()).await.unwrap_err();
    assert!(
        matches!(&error, ToolError::InvalidArguments { message, .. } if message.contains("`b`")),
        "{error:?}"
    );
}

#[test]
fn the_body_stays_callable() {
    assert_eq!(add::call(1, 2), 3);
    wipe::call(&ctx());
}

#[test]
fn the_spec_is_built_once() {
    assert!(std::ptr::eq(spec(&weather), spec(&weather)));
}

/// An API's own page type, which happens to be called `Result`.
mod api {
    #[derive(serde::Serialize)]
    pub(crate) struct Result<T> {
        pub(crate) items: Vec<T>,
    }
}

/// Searches the catalogue.
#[tool]
fn catalogue(query: String) -> api::Result<String> {
    api::Result { items: vec![query] }
}

/// A user type named `Result` is a plain value, serialized as it is: the tool is fallible
/// by its type, not by its spelling.
#[tokio::test]
async fn a_user_type_named_result_is_a_plain_value() {
    let out = catalogue
        .call(json!({ "query": "lamp" }), &ctx())
        .await
        .unwrap();
    assert_eq!(out, json!({ "items": ["lamp"] }));
}

/// Books a table.
#[tool]
async fn book(guests: u32) -> Result<String, ToolError> {
    if guests == 0 {
        return Err(ToolError::InvalidArguments {
            tool: "book".into(),
            message: "field `guests`: at least one guest".into(),
        });
    }
    Ok(format!("table for {guests}"))
}

/// What a tool's own `Result` is called here.
type Booked<T> = Result<T, ToolError>;

/// Cancels a booking.
#[tool]
fn cancel(booking: String) -> Booked<()> {
    Err(ToolError::Denied {
        tool: "cancel".into(),
        reason: format!("booking {booking} is already served"),
    })
}

/// A tool that fails with a `ToolError` of its own fails with that error, its variant kept
/// (an alias of the `Result` too): it reached the model as `Failed`, its text wrapped again,
/// before its fix.
#[tokio::test]
async fn a_tools_own_tool_error_keeps_its_variant() {
    let error = book.call(json!({ "guests": 0 }), &ctx()).await.unwrap_err();
    assert!(
        matches!(&error, ToolError::InvalidArguments { tool, message }
            if tool == "book" && message == "field `guests`: at least one guest"),
        "{error:?}"
    );
    let out = book.call(json!({ "guests": 2 }), &ctx()).await.unwrap();
    assert_eq!(out, json!("table for 2"));
    let error = cancel
        .call(json!({ "booking": "b-7" }), &ctx())
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ToolError::Denied { reason, .. } if reason == "booking b-7 is already served"),
        "{error:?}"
    );
}

/// Multiply two numbers.
#[tool]
fn multiply(a: i64, b: i64) -> i64 {
    // Inner attributes at the top of a body, which syn hands the macro with the fn's own
    // attributes: they go back inside the body, where rustc takes them.
    #![allow(clippy::let_and_return)]
    let product = a * b;
    product
}

#[derive(Clone, Default, Serialize, Deserialize)]
struct Tally {
    n: u32,
}

/// Counts one more.
#[node]
async fn count_one(tally: &mut Tally) {
    #![allow(clippy::needless_return)]
    tally.n += 1;
    return;
}

/// A tool and a node whose bodies start with inner attributes compile (they did not: the
/// attributes were put in front of the generated items) and work as written.
#[tokio::test]
async fn inner_attributes_stay_in_the_body() {
    assert_eq!(multiply::call(6, 7), 42);
    assert_eq!(spec(&multiply).description, "Multiply two numbers.");
    let graph = Graph::new("tally")
        .node(count_one)
        .edge(START, "count_one")
        .edge("count_one", END)
        .compile()
        .unwrap();
    let done = graph
        .invoke(&Runtime::in_memory(), "t", Tally::default())
        .await
        .unwrap();
    assert_eq!(done.completed().unwrap().n, 1);
}

/// Find pages.
#[tool]
fn find(
    /// Words to look for.
    #[serde(rename = "q")]
    query: String,
    #[serde(default)] limit: u32,
) -> String {
    format!("{query}:{limit}")
}

/// A parameter's `#[serde(..)]` attributes and doc comment go on its field of the
/// arguments: renamed and defaulted as written, and described (they did not compile).
#[tokio::test]
async fn a_parameters_serde_attributes_and_doc_shape_its_argument() {
    let schema = &spec(&find).parameters;
    assert_eq!(schema["required"], json!(["q"]), "{schema}");
    assert_eq!(
        schema["properties"]["q"]["description"],
        "Words to look for."
    );
    assert!(schema["properties"].get("query").is_none(), "{schema}");
    let out = find.call(json!({ "q": "rust" }), &ctx()).await.unwrap();
    assert_eq!(out, json!("rust:0"));
    let out = find
        .call(json!({ "q": "rust", "limit": 3 }), &ctx())
        .await
        .unwrap();
    assert_eq!(out, json!("rust:3"));
    assert_eq!(find::call("direct".into(), 2), "direct:2");
}
