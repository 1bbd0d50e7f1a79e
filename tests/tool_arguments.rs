//! A model's arguments for a `#[tool]`, through the host: every error names the field, the
//! schema and the decoder agree (integral floats, integer ranges, lengths), the strict
//! form's `null`s are accepted, unknown fields are refused (with a whole-struct argument
//! too, unless the struct takes extra fields), and a `Result` alias is fallible.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::collections::BTreeMap;
use std::net::IpAddr;

use loomflow::model::ToolCall;
use loomflow::prelude::*;
use loomflow::tool::{DispatchContext, ToolContext, ToolOutcome};
use serde_json::Value;

/// Add two numbers.
#[tool]
fn add(a: i64, b: i64) -> i64 {
    a + b
}

/// Count.
#[tool]
fn count(n: u32) -> u32 {
    n
}

/// Big.
#[tool]
fn big(n: u64) -> u64 {
    n
}

/// One letter.
#[tool]
fn letter(c: char) -> String {
    c.to_string()
}

/// Three bytes.
#[tool]
fn triple(xs: [u8; 3]) -> u32 {
    xs.iter().map(|&x| u32::from(x)).sum()
}

/// A host to ping.
#[derive(Deserialize, JsonSchema)]
struct Host {
    addr: IpAddr,
}

/// Ping hosts.
#[tool(param(hosts = "The hosts"))]
fn ping(hosts: Vec<Host>) -> Vec<String> {
    hosts.iter().map(|host| host.addr.to_string()).collect()
}

/// The weather.
#[tool(param(city = "The city"))]
fn weather(city: String, days: Option<u8>) -> String {
    format!("{city}:{days:?}")
}

#[derive(Deserialize, JsonSchema)]
struct Retry {
    /// Attempts, 0 by default.
    #[serde(default)]
    retries: u8,
    /// What to retry.
    name: String,
}

/// Retry something.
#[tool]
fn retry(args: Retry) -> String {
    format!("{}:{}", args.name, args.retries)
}

/// A label with any extra fields the model wants to add.
#[derive(Deserialize, JsonSchema)]
struct Label {
    /// The label's name.
    name: String,
    /// Anything else.
    #[serde(flatten)]
    extra: BTreeMap<String, String>,
}

/// Label something.
#[tool]
fn label(args: Label) -> String {
    format!("{}:{}", args.name, args.extra.len())
}

/// A project's own alias for results.
type ToolResult<T> = Result<T, String>;

/// Fails through an alias of `Result`.
#[tool]
fn aliased(fail: bool) -> ToolResult<String> {
    if fail {
        Err("disk full".into())
    } else {
        Ok("fine".into())
    }
}

/// An order line, filed in the schema under a name with a space.
#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "Order Line")]
struct OrderLine {
    quantity: u32,
}

/// Order lines.
#[tool]
fn order(lines: Vec<OrderLine>) -> u32 {
    lines.iter().map(|line| line.quantity).sum()
}

fn host() -> ToolHost {
    ToolHost::new()
        .with(order)
        .with(add)
        .with(count)
        .with(big)
        .with(letter)
        .with(triple)
        .with(ping)
        .with(weather)
        .with(retry)
        .with(aliased)
        .with(label)
        .with(tag_path)
}

async fn run(name: &str, arguments: Value) -> ToolOutcome {
    host()
        .dispatch(
            &[ToolCall::new("c1", name, arguments)],
            DispatchContext::new("s"),
        )
        .await
        .unwrap()
        .remove(0)
}

async fn error(name: &str, arguments: Value) -> String {
    let outcome = run(name, arguments).await;
    assert!(outcome.is_error, "{name} succeeded: {}", outcome.content);
    outcome.content
}

#[tokio::test]
async fn an_integral_float_for_an_integer_is_that_integer() {
    let outcome = run("add", json!({ "a": 3.0, "b": 1 })).await;
    assert!(!outcome.is_error, "{}", outcome.content);
    assert_eq!(outcome.content, "4");
    assert_eq!(
        run("big", json!({ "n": 1e19 })).await.content,
        "10000000000000000000"
    );
}

#[tokio::test]
async fn an_integer_out_of_its_range_names_the_field_and_the_range() {
    let message = error("add", json!({ "a": 1e20, "b": 1 })).await;
    assert!(
        message.contains(
            "field `a`: expected an integer from -9223372036854775808 to 9223372036854775807"
        ),
        "{message}"
    );
    let message = error("count", json!({ "n": 5_000_000_000u64 })).await;
    assert!(
        message.contains("field `n`: expected an integer from 0 to 4294967295"),
        "{message}"
    );
    let message = error("big", json!({ "n": 1e20 })).await;
    assert!(
        message.contains("field `n`: expected an integer from 0 to"),
        "{message}"
    );
    let message = error("big", json!({ "n": -1 })).await;
    assert!(message.contains("field `n`"), "{message}");
}

#[tokio::test]
async fn a_wrong_length_names_the_field() {
    let message = error("letter", json!({ "c": "ab" })).await;
    assert!(
        message.contains("field `c`: expected at most 1 character, got 2"),
        "{message}"
    );
    let message = error("triple", json!({ "xs": [1, 2] })).await;
    assert!(
        message.contains("field `xs`: expected at least 3 items, got 2"),
        "{message}"
    );
    assert_eq!(
        run("triple", json!({ "xs": [1, 2, 3.0] })).await.content,
        "6"
    );
}

#[tokio::test]
async fn a_decoding_error_names_the_path_to_the_field() {
    let arguments = json!({ "hosts": [{ "addr": "10.0.0.1" }, { "addr": "not an address" }] });
    let message = error("ping", arguments).await;
    assert!(message.contains("field `hosts[1].addr`: "), "{message}");
}

#[tokio::test]
async fn null_for_an_optional_field_is_the_field_left_out() {
    // What a model in OpenAI's strict mode sends: every field, the optional ones as null.
    let spec = host().get("retry").unwrap().spec().clone();
    assert_eq!(
        spec.strict_parameters()["required"],
        json!(["name", "retries"])
    );
    let outcome = run("retry", json!({ "name": "upload", "retries": null })).await;
    assert!(!outcome.is_error, "{}", outcome.content);
    assert_eq!(outcome.content, "upload:0");
    let outcome = run("weather", json!({ "city": "Lyon", "days": null })).await;
    assert_eq!(outcome.content, "Lyon:None");
    // A required field still may not be null.
    let message = error("retry", json!({ "name": null })).await;
    assert!(message.contains("field `name`"), "{message}");
}

#[tokio::test]
async fn a_misspelled_argument_is_refused_by_name() {
    let spec = host().get("weather").unwrap().spec().clone();
    assert_eq!(spec.parameters["additionalProperties"], json!(false));
    let message = error("weather", json!({ "city": "Lyon", "dayz": 3 })).await;
    assert!(message.contains("unexpected field `dayz`"), "{message}");
}

#[tokio::test]
async fn an_err_through_an_alias_of_result_is_a_failed_call() {
    let message = error("aliased", json!({ "fail": true })).await;
    assert!(
        message.contains("tool aliased failed: disk full"),
        "{message}"
    );
    assert_eq!(
        run("aliased", json!({ "fail": false })).await.content,
        "fine"
    );
}

/// A single struct argument is the arguments object; like the plain form, it refuses a field
/// the struct does not have, through the host and when called directly.
#[tokio::test]
async fn a_whole_struct_argument_refuses_an_unknown_field_by_name() {
    let spec = host().get("retry").unwrap().spec().clone();
    assert_eq!(spec.parameters["additionalProperties"], json!(false));
    let message = error("retry", json!({ "name": "upload", "bogus": 1 })).await;
    assert!(message.contains("unexpected field `bogus`"), "{message}");
    let direct = retry
        .call(
            json!({ "name": "upload", "bogus": 1 }),
            &ToolContext::new("s", None, "c1"),
        )
        .await
        .unwrap_err();
    assert!(
        direct.to_string().contains("unexpected field `bogus`"),
        "{direct}"
    );
    let outcome = run("retry", json!({ "name": "upload" })).await;
    assert_eq!(outcome.content, "upload:0");
}

/// A struct that takes extra fields (a `#[serde(flatten)]` map) still gets them.
#[tokio::test]
async fn a_whole_struct_with_a_flattened_map_accepts_extra_fields() {
    let spec = host().get("label").unwrap().spec().clone();
    assert_ne!(spec.parameters["additionalProperties"], json!(false));
    let outcome = run("label", json!({ "name": "bug", "color": "red" })).await;
    assert!(!outcome.is_error, "{}", outcome.content);
    assert_eq!(outcome.content, "bug:1");
}

/// A tool written by hand, which echoes the arguments it was given.
struct Echoing(loomflow::tool::ToolSpec);

impl loomflow::tool::Tool for Echoing {
    fn spec(&self) -> &loomflow::tool::ToolSpec {
        &self.0
    }

    fn call<'a>(
        &'a self,
        arguments: Value,
        _: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, loomflow::tool::ToolError>> {
        Box::pin(async move { Ok(arguments) })
    }
}

/// A hand-written tool is handed its arguments as a `#[tool]`'s are decoded: a `null` for an
/// optional integer is left out, and `3.0` for an integer is `3`.
#[tokio::test]
async fn a_hand_written_tool_gets_its_arguments_as_serde_decodes_them() {
    let spec = loomflow::tool::ToolSpec::new(
        "page",
        "Pages through results.",
        json!({
            "type": "object",
            "properties": {
                "limit": { "type": "integer" },
                "offset": { "type": "integer" },
            },
        }),
    );
    let host = ToolHost::new().with(Echoing(spec));
    let call = ToolCall::new("c1", "page", json!({ "limit": null, "offset": 3.0 }));
    let outcome = host
        .dispatch(&[call], DispatchContext::new("s"))
        .await
        .unwrap()
        .remove(0);
    assert!(!outcome.is_error, "{}", outcome.content);
    assert_eq!(outcome.content, r#"{"offset":3}"#);
}

/// A type filed under a name schemars percent-encodes in its `$ref` (`Order%20Line`) is
/// checked and its arguments accepted as any other's: the reference was not found, so the
/// items were neither checked nor given the lenient forms (an integral float).
#[tokio::test]
async fn a_type_whose_reference_is_percent_encoded_is_checked() {
    let outcome = run(
        "order",
        json!({ "lines": [{ "quantity": 2.0 }, { "quantity": 1 }] }),
    )
    .await;
    assert!(!outcome.is_error, "{}", outcome.content);
    assert_eq!(outcome.content, "3");
    let refused = error("order", json!({ "lines": [{ "quantity": "two" }] })).await;
    assert!(refused.contains("lines[0].quantity"), "{refused}");
}

/// Tag a path with labels.
#[tool]
fn tag_path(path: String, #[serde(flatten)] labels: BTreeMap<String, String>) -> String {
    format!("{path}:{labels:?}")
}

/// A parameter that takes the fields no other one names (`#[serde(flatten)]` on a map)
/// receives them, and the schema says what they may be. Before, the arguments refused every
/// field they did not name (`unexpected field`), so the map was always empty.
#[tokio::test]
async fn a_flattened_map_parameter_takes_the_other_fields() {
    let out = run("tag_path", json!({"path": "a", "color": "red"})).await;
    assert_eq!(out.content, r#"a:{"color": "red"}"#, "{out:?}");
    let refused = error("tag_path", json!({"path": "a", "size": 3})).await;
    assert!(refused.contains("size"), "{refused}");
    let tool = host().get("tag_path").unwrap();
    let schema = &tool.spec().parameters;
    assert_eq!(
        schema["additionalProperties"],
        json!({"type": "string"}),
        "{schema}"
    );
}

/// Paging, taken flat.
#[derive(Deserialize, JsonSchema)]
struct Paging {
    limit: Option<u32>,
}

/// Search, paged.
#[tool]
fn paged_search(q: String, #[serde(flatten)] page: Paging) -> String {
    format!("{q}:{:?}", page.limit)
}

/// Rename a field to the word `flatten`: not a flattened parameter.
#[tool]
fn flatten_named(#[serde(rename = "flatten")] value: u32) -> u32 {
    value
}

/// A flattened struct parameter still refuses the fields nobody names (a typo is not
/// silently dropped), and a parameter renamed `flatten` is not taken for a flattened one.
#[tokio::test]
async fn a_flattened_struct_parameter_refuses_unknown_fields() {
    let host = ToolHost::new().with(paged_search).with(flatten_named);
    let call = |name: &str, args: Value| ToolCall::new("c", name, args);
    let outcome = |call: ToolCall| {
        let host = &host;
        async move {
            let context = DispatchContext::new("s");
            host.dispatch(&[call], context).await.unwrap().remove(0)
        }
    };
    let out = outcome(call("paged_search", json!({"q": "x", "limit": 5}))).await;
    assert_eq!(out.content, "x:Some(5)", "{out:?}");
    let out = outcome(call("paged_search", json!({"q": "x", "limt": 5}))).await;
    assert!(out.is_error && out.content.contains("limt"), "{out:?}");
    let out = outcome(call("flatten_named", json!({"flatten": 1, "other": 2}))).await;
    assert!(out.is_error && out.content.contains("other"), "{out:?}");
}

fn five() -> Option<u8> {
    Some(5)
}

/// A forecast.
#[tool]
fn forecast(city: String, #[serde(default = "five")] days: Option<u8>) -> String {
    format!("{city}:{days:?}")
}

/// `null` for an optional parameter that has a default of its own is the parameter left out:
/// its default applies, as OpenAI's strict mode sends every property. Before, the body got
/// `None`.
#[tokio::test]
async fn a_null_for_a_parameter_with_a_default_takes_the_default() {
    let host = ToolHost::new().with(forecast);
    for args in [
        json!({"city": "Lyon", "days": null}),
        json!({"city": "Lyon"}),
    ] {
        let call = ToolCall::new("c", "forecast", args);
        let context = DispatchContext::new("s");
        let out = host.dispatch(&[call], context).await.unwrap().remove(0);
        assert_eq!(out.content, "Lyon:Some(5)", "{out:?}");
    }
    let out = run("weather", json!({ "city": "Lyon", "days": null })).await;
    assert_eq!(out.content, "Lyon:None", "no default: null is None");
}
