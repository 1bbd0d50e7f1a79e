//! Typed output through the HTTP adapters, against a local server speaking each provider's
//! wire format: what is sent is what OpenAI and Anthropic accept (an object at the top of
//! the schema, strict where strict is asked), and a list or an enum comes back typed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/fixtures.rs"]
mod fixtures;
#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/models.rs"]
mod models;

use fixtures::{anthropic_message, openai_completion};
use loomflow::agent::Agent;
use loomflow::prelude::*;
use mock_server::{MockServer, Reply};
use serde_json::Value;

#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
struct Step {
    title: String,
    minutes: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Sentiment {
    Positive,
    Negative,
}

/// What a strict schema must be where it is an object: no property left out of `required`,
/// no others allowed. Checked at every level, as OpenAI does.
fn assert_strict(schema: &Value, at: &str) {
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        assert_eq!(schema["additionalProperties"], false, "{at}: {schema}");
        let required = schema["required"].as_array().unwrap();
        assert_eq!(required.len(), properties.len(), "{at}: {schema}");
        for (name, property) in properties {
            assert_strict(property, &format!("{at}.{name}"));
        }
    }
    if let Some(items) = schema.get("items") {
        assert_strict(items, &format!("{at}[]"));
    }
    if let Some(defs) = schema.get("$defs").and_then(Value::as_object) {
        for (name, def) in defs {
            assert_strict(def, &format!("{at}$defs.{name}"));
        }
    }
    // Nor a `$ref` with keywords beside it, anywhere below the top.
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            assert!(
                property.get("$ref").is_none() || property.as_object().unwrap().len() == 1,
                "{at}.{name}: {property}"
            );
        }
    }
}

/// A local OpenAI-compatible server whose one reply is `content`.
async fn openai_answering(content: &str) -> MockServer {
    let message = json!({"role": "assistant", "content": content});
    MockServer::start(vec![Reply::json(
        200,
        openai_completion(message, "stop", 20, 9),
    )])
    .await
}

#[tokio::test]
async fn a_list_is_asked_of_openai_in_an_object_and_comes_back_typed() {
    let content =
        r#"{"result": [{"title": "pack", "minutes": 30}, {"title": "go", "minutes": null}]}"#;
    let server = openai_answering(content).await;
    let agent = Agent::builder("You plan.")
        .model(models::openai(&server))
        .output::<Vec<Step>>()
        .build()
        .unwrap();
    let result = agent.run("Plan my move.").await.unwrap();
    assert_eq!(
        result.parsed::<Vec<Step>>().unwrap(),
        [
            Step {
                title: "pack".into(),
                minutes: Some(30)
            },
            Step {
                title: "go".into(),
                minutes: None
            },
        ]
    );
    let format = &server.requests()[0].body["response_format"]["json_schema"];
    let schema = &format["schema"];
    assert_eq!(format["strict"], true);
    assert_eq!(
        schema["type"], "object",
        "OpenAI takes only an object: {schema}"
    );
    assert_eq!(schema["properties"]["result"]["type"], "array", "{schema}");
    assert_strict(schema, "schema");
}

/// A step, by another name: schemars writes a newtype as a root `$ref` beside `$defs`.
#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
struct Only(Step);

/// A documented field of a struct type is sent without a `$ref` beside its description,
/// which OpenAI's strict mode refuses; a root `$ref` (a newtype) is sent as it is, inside
/// the `result` object its answer comes back in.
#[tokio::test]
async fn documented_references_reach_openai_in_place_and_a_newtype_in_its_wrapper() {
    #[derive(Debug, Deserialize, JsonSchema, PartialEq)]
    struct Plan {
        /// The first step.
        first: Step,
    }
    let server = openai_answering(r#"{"first": {"title": "pack", "minutes": 30}}"#).await;
    let agent = Agent::builder("You plan.")
        .model(models::openai(&server))
        .output::<Plan>()
        .build()
        .unwrap();
    let plan = agent.run("Plan.").await.unwrap().parsed::<Plan>().unwrap();
    assert_eq!(plan.first.title, "pack");
    let schema = &server.requests()[0].body["response_format"]["json_schema"]["schema"];
    let first = &schema["properties"]["first"];
    assert_eq!(first.get("$ref"), None, "{schema}");
    assert_eq!(first["description"], "The first step.");
    assert_eq!(first["type"], "object");
    assert_strict(schema, "schema");

    let server = openai_answering(r#"{"result": {"title": "go", "minutes": null}}"#).await;
    let agent = Agent::builder("You plan.")
        .model(models::openai(&server))
        .output::<Only>()
        .build()
        .unwrap();
    let only = agent.run("One.").await.unwrap().parsed::<Only>().unwrap();
    assert_eq!(
        only,
        Only(Step {
            title: "go".into(),
            minutes: None
        })
    );
    // Asked for as the answer is read: inside `result`.
    let schema = &server.requests()[0].body["response_format"]["json_schema"]["schema"];
    assert!(schema["properties"].get("result").is_some(), "{schema}");
    assert_strict(schema, "schema");
}

/// A compatible server that refuses `response_format: json_schema` (as DeepSeek does) fails
/// every typed run; told so with `structured_output(false)`, the adapter leaves the format
/// out and the agent asks for the schema in its prompt.
#[tokio::test]
async fn a_server_without_structured_output_is_asked_in_the_prompt() {
    let refused = json!({"error": {"message": "This response_format type is unavailable now",
                                   "type": "invalid_request_error", "code": "invalid_request_error"}});
    let answer = json!({"role": "assistant", "content": r#"{"title": "pack", "minutes": 30}"#});
    let server = MockServer::start(vec![
        Reply::json(400, refused),
        Reply::json(200, openai_completion(answer, "stop", 20, 9)),
    ])
    .await;
    let agent = |model| {
        Agent::builder("You plan.")
            .model(model)
            .output::<Step>()
            .build()
            .unwrap()
    };
    let native = agent(models::openai(&server));
    let error = native.run("One step.").await.unwrap_err();
    let mut chain = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        chain.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    assert!(chain.contains("unavailable"), "{chain}");
    let prompted = loomflow::model::OpenAiModel::builder("gpt-test")
        .base_url(format!("{}/v1", server.url()))
        .structured_output(false)
        .build()
        .unwrap();
    assert!(!loomflow::model::Model::supports_output_schema(&prompted));
    let result = agent(prompted).run("One step.").await.unwrap();
    assert_eq!(
        result.parsed::<Step>().unwrap(),
        Step {
            title: "pack".into(),
            minutes: Some(30)
        }
    );
    let sent = &server.requests()[1].body;
    assert_eq!(sent.get("response_format"), None, "{sent}");
    let asked =
        sent["messages"].as_array().unwrap().iter().any(|m| {
            m["role"] == "system" && m["content"].as_str().unwrap().contains("JSON Schema")
        });
    assert!(asked, "the schema is asked for in the prompt: {sent}");
}

#[tokio::test]
async fn an_enum_is_asked_of_anthropic_through_an_object_tool_input() {
    let server = MockServer::start(vec![Reply::json(
        200,
        anthropic_message(
            json!([{"type": "tool_use", "id": "toolu_01", "name": "Sentiment",
                    "input": {"result": "negative"}}]),
            "tool_use",
            20,
            8,
        ),
    )])
    .await;
    let agent = Agent::builder("You read reviews.")
        .model(models::anthropic(&server))
        .build()
        .unwrap();
    let result = agent
        .run("Cold soup, rude staff.")
        .output::<Sentiment>()
        .await
        .unwrap();
    assert_eq!(result.parsed::<Sentiment>().unwrap(), Sentiment::Negative);
    let tools = server.requests()[0].body["tools"].clone();
    let input_schema = &tools[0]["input_schema"];
    assert_eq!(
        input_schema["type"], "object",
        "Anthropic takes only an object: {input_schema}"
    );
    assert_eq!(
        input_schema["properties"]["result"]["enum"],
        json!(["positive", "negative"]),
        "{input_schema}"
    );
}

#[tokio::test]
async fn a_hand_written_schema_is_sent_strict() {
    let server = openai_answering(r#"{"city": "Lyon", "days": null}"#).await;
    #[derive(Debug, Deserialize, PartialEq)]
    struct Trip {
        city: String,
        #[serde(default)]
        days: u32,
    }
    let schema = json!({"type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"]});
    let agent = Agent::builder("You plan trips.")
        .model(models::openai(&server))
        .output_schema::<Trip>("trip", schema)
        .build()
        .unwrap();
    let result = agent.run("Where to?").await.unwrap();
    assert_eq!(
        result.parsed::<Trip>().unwrap(),
        Trip {
            city: "Lyon".into(),
            days: 0
        }
    );
    let sent = &server.requests()[0].body["response_format"]["json_schema"]["schema"];
    assert_strict(sent, "schema");
    assert_eq!(
        sent["properties"]["days"]["type"],
        json!(["integer", "null"])
    );
}

/// The tool whose call carries arguments that are not JSON.
#[loomflow::tool]
fn lookup(order: String) -> String {
    format!("order {order} shipped")
}

/// A model that sends a tool call whose arguments are not JSON (a model outside strict
/// mode, a local server) does not fail the run: the call is answered with an error the
/// model reads, and its next turn answers. Before, the reply failed as a decode error.
#[tokio::test]
async fn a_tool_call_whose_arguments_are_not_json_is_answered_with_an_error() {
    let call = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "lookup", "arguments": "{\"order\": \"A-1}"}}]});
    let answer = json!({"role": "assistant", "content": "Sorry, let me retry later."});
    let server = MockServer::start(vec![
        Reply::json(200, openai_completion(call, "tool_calls", 20, 9)),
        Reply::json(200, openai_completion(answer, "stop", 30, 9)),
    ])
    .await;
    let agent = Agent::builder("You track orders.")
        .model(models::openai(&server))
        .tool(lookup)
        .build()
        .unwrap();
    let result = agent.run("Where is A-1?").await.unwrap();
    assert_eq!(result.output, "Sorry, let me retry later.");
    let requests = server.requests();
    let told = &requests[1].body["messages"];
    let tool = told
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert!(
        tool["content"].as_str().unwrap().contains("not JSON"),
        "{tool}"
    );
}

/// A filter tree: a recursive enum, whose schema refers to itself as the top (`#`).
#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Filter {
    All(Vec<Filter>),
    Eq { field: String, value: String },
}

/// A recursive enum, asked for in an object, refers to itself where it is kept, not to the
/// object around it: the answer nests filters, not wrappers. Before, its `"$ref": "#"`
/// pointed at the wrapper, and the strict schema asked for `{"result": ...}` at each level.
#[tokio::test]
async fn a_recursive_enum_is_asked_for_with_its_references_kept() {
    let content =
        r#"{"result": {"all": [{"eq": {"field": "city", "value": "Lyon"}}, {"all": []}]}}"#;
    let server = openai_answering(content).await;
    let agent = Agent::builder("You filter.")
        .model(models::openai(&server))
        .output::<Filter>()
        .build()
        .unwrap();
    let result = agent.run("Only Lyon.").await.unwrap();
    assert_eq!(
        result.parsed::<Filter>().unwrap(),
        Filter::All(vec![
            Filter::Eq {
                field: "city".into(),
                value: "Lyon".into()
            },
            Filter::All(Vec::new()),
        ])
    );
    let schema = &server.requests()[0].body["response_format"]["json_schema"]["schema"];
    assert_eq!(schema["type"], "object", "{schema}");
    let text = schema.to_string();
    assert!(
        !text.contains(r##""$ref":"#""##),
        "a reference to the wrapper: {schema}"
    );
    let to = schema["properties"]["result"]["$ref"].as_str().unwrap();
    let name = to.strip_prefix("#/$defs/").unwrap();
    assert!(schema["$defs"][name].is_object(), "{schema}");
    assert!(text.contains(&format!(r#""$ref":"{to}""#)), "{schema}");
    assert_strict(schema, "schema");
}
