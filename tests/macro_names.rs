//! The names `#[node]`, `#[tool]` and `#[agent]` derive from a fn or a struct: a raw
//! identifier's `r#` is dropped, and an agent's default name is its struct's name in snake
//! case, an acronym as one word. And `#[agent]` reads a whole-number temperature. A node or
//! tool may take a name the generated code binds for itself (`output`, `state`, `ctx`,
//! `parameters`, `whole`): this file compiles.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use loomflow::prelude::*;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Count {
    n: u32,
}

/// You repeat what you are told.
#[agent(model = "echo")]
struct HTTPHelper;

/// A node whose name is a Rust keyword, written as a raw identifier.
#[node]
async fn r#match(count: &mut Count) {
    count.n += 1;
}

/// A tool whose name is a Rust keyword, written as a raw identifier.
#[tool]
fn r#type(n: u32) -> u32 {
    n
}

/// Named as the generated `run` once named its own result.
#[node]
async fn output(count: &mut Count) {
    count.n += 10;
}

/// Named as the generated `run` once named its parameters: no node in this module compiled
/// beside it (the nodes here name their own parameter `count`, as one of the user's own
/// bindings must not take a static's name).
#[tool]
fn state(n: u32) -> u32 {
    n + 1
}

/// As above, for the node's context.
#[tool]
fn ctx(n: u32) -> u32 {
    n + 2
}

/// Named as a tool's setup once named its arguments' schema.
#[tool]
fn parameters(n: u32) -> u32 {
    n + 3
}

/// As above, for a whole-value argument's schema.
#[tool]
fn whole(n: u32) -> u32 {
    n + 4
}

/// Nodes and tools named as the macros' own bindings once were run as any other.
#[tokio::test]
async fn names_the_generated_code_once_bound_are_free_to_use() {
    let graph = Graph::new("g")
        .node(output)
        .node(r#match)
        .edge(START, "output")
        .edge("output", "match")
        .edge("match", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let out = graph.invoke(&runtime, "t", Count::default()).await.unwrap();
    assert_eq!(out.completed().unwrap().n, 11);
    for (tool, name) in [
        (&state as &dyn Tool, "state"),
        (&ctx, "ctx"),
        (&parameters, "parameters"),
        (&whole, "whole"),
    ] {
        assert_eq!(tool.spec().name, name);
        assert!(
            tool.spec().parameters["properties"]["n"].is_object(),
            "{name}"
        );
    }
}

/// A node named `r#match` is the node `"match"`, the name `.edge(..)` wires it by.
#[tokio::test]
async fn a_raw_identifier_node_is_named_and_wired_without_r_hash() {
    assert_eq!(Node::<Count>::name(&r#match), "match");
    let graph = Graph::new("g")
        .node(r#match)
        .edge(START, "match")
        .edge("match", END)
        .compile()
        .unwrap();
    let out = graph
        .invoke(&Runtime::in_memory(), "t", Count::default())
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(out.n, 1);
}

/// A tool named `r#type` is the tool `"type"`, the name a model calls it by.
#[test]
fn a_raw_identifier_tool_is_named_without_r_hash() {
    assert_eq!(r#type.spec().name, "type");
}

/// An agent's default name is snake case with an acronym as one word, as documented.
#[test]
fn an_agents_default_name_keeps_an_acronym_as_one_word() {
    assert_eq!(HTTPHelper::agent().unwrap().name(), "http_helper");
}

/// You answer warmly.
#[agent(model = "echo", temperature = 1)]
struct Warm;

/// A whole-number temperature is read as that number.
#[tokio::test]
async fn a_whole_number_temperature_is_a_temperature() {
    let model = std::sync::Arc::new(loomflow::model::ScriptedModel::new([
        loomflow::model::ModelResponse::text("hello"),
    ]));
    let agent = Warm::builder()
        .model(std::sync::Arc::clone(&model))
        .build()
        .unwrap();
    agent.run("hi").await.unwrap();
    assert_eq!(model.requests()[0].temperature, Some(1.0));
}

/**
 * Gets the weather for a city.
 *
 * Internal: calls the cached backend first.
 */
#[tool]
fn weather(city: String) -> String {
    city
}

/// A block doc comment's ` * ` margin is not the description's: its first paragraph is.
#[test]
fn a_block_doc_comments_star_margin_is_not_in_the_description() {
    assert_eq!(weather.spec().description, "Gets the weather for a city.");
}

/// A node whose references name their lifetime.
#[node]
async fn with_lifetimes<'a>(count: &'a mut Count, context: &'a Context) {
    assert!(!context.thread().is_empty());
    count.n += 100;
}

/// A tool whose context names its lifetime.
#[tool]
#[allow(clippy::needless_lifetimes)] // named on purpose: what the macro must take
fn lifetime_tool<'a>(context: &'a loomflow::tool::ToolContext, n: u32) -> u32 {
    let _ = context;
    n + 5
}

/// Lifetimes alone on a node's or a tool's references are taken: they change nothing the
/// macros generate. Before, both were refused as "not concrete".
#[tokio::test]
async fn lifetime_parameters_alone_are_taken() {
    let graph = Graph::new("g")
        .node(with_lifetimes)
        .edge(START, "with_lifetimes")
        .edge("with_lifetimes", END)
        .compile()
        .unwrap();
    let out = graph
        .invoke(&Runtime::in_memory(), "t", Count::default())
        .await;
    assert_eq!(out.unwrap().completed().unwrap().n, 100);
    let context = loomflow::tool::ToolContext::new("s", None, "call-1");
    let out = lifetime_tool
        .call(json!({ "n": 1 }), &context)
        .await
        .unwrap();
    assert_eq!(out, json!(6));
}

/// A tool and a node written inside a `macro_rules!`, their context types passed in as
/// `$t:ty` fragments (which reach the attribute wrapped in invisible groups): the context
/// parameters are recognised. Before its fix the tool's `&$ctx` was refused as a borrowed
/// argument, and the node's as a second parameter that is not `&Context`.
macro_rules! with_contexts {
    ($tool:ident, $node:ident, $tool_ctx:ty, $node_ctx:ty, $state:ty) => {
        /// Greets the caller's session.
        #[tool]
        fn $tool(context: &$tool_ctx, greeting: String) -> String {
            format!("{greeting} {}", context.session)
        }

        /// Counts, in the given context.
        #[node]
        async fn $node(counted: &mut $state, context: &$node_ctx) -> loomflow::Result<()> {
            let _ = context.node();
            counted.n += 1;
            Ok(())
        }
    };
}

with_contexts!(greet_session, count_in_context, ToolContext, Context, Count);

#[tokio::test]
async fn a_tool_and_a_node_from_a_macro_take_their_contexts() {
    let call_ctx = ToolContext::new("s-1", None, "call_1");
    let said = greet_session
        .call(json!({ "greeting": "hi" }), &call_ctx)
        .await
        .unwrap();
    assert_eq!(said, json!("hi s-1"));
    let graph = Graph::new("counted")
        .node(count_in_context)
        .edge(START, "count_in_context")
        .edge("count_in_context", END)
        .compile()
        .unwrap();
    let done = graph
        .invoke(&Runtime::in_memory(), "t", Count::default())
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(done.n, 1);
}

/// A tool and a node whose return types come from the macro's caller (`$ret:ty`): the
/// conversion of their output, spanned at the caller's type for its error messages, still
/// sees the binding the expansion makes.
macro_rules! returning {
    ($tool:ident, $node:ident, $ret:ty, $node_ret:ty) => {
        /// Doubles a number.
        #[tool]
        fn $tool(n: u32) -> $ret {
            Ok(n * 2)
        }

        /// Counts, returning the caller's result type.
        #[node]
        async fn $node(counted: &mut Count) -> $node_ret {
            counted.n += 1;
            Ok(())
        }
    };
}

returning!(
    double_it,
    count_it,
    Result<u32, String>,
    loomflow::Result<()>
);

#[tokio::test]
async fn a_tool_and_a_node_whose_return_type_a_macro_was_given() {
    let call_ctx = ToolContext::new("s-1", None, "call_1");
    assert_eq!(
        double_it.call(json!({ "n": 4 }), &call_ctx).await.unwrap(),
        json!(8)
    );
    let graph = Graph::new("counted-again")
        .node(count_it)
        .edge(START, "count_it")
        .edge("count_it", END)
        .compile()
        .unwrap();
    let done = graph
        .invoke(&Runtime::in_memory(), "t", Count::default())
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(done.n, 1);
}

/// A node and a tool a `macro_rules!` writes, their names the caller's and no return type
/// given (or one passed as tokens): the generated code finds its own bindings. Before, the
/// binding of the body's output took the caller's hygiene and was not found.
macro_rules! named_by_the_caller {
    ($node:ident, $tool:ident, $($ret:tt)*) => {
        /// Counts.
        #[node]
        async fn $node(counted: &mut Count) {
            counted.n += 100;
        }

        /// Halves a number.
        #[tool]
        fn $tool(n: u32) -> $($ret)* {
            n / 2
        }
    };
}

named_by_the_caller!(count_by_hundreds, halve, u32);

#[tokio::test]
async fn a_node_and_a_tool_named_by_a_macros_caller_run() {
    let graph = Graph::new("hundreds")
        .node(count_by_hundreds)
        .edge(START, "count_by_hundreds")
        .edge("count_by_hundreds", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let done = graph.invoke(&runtime, "t", Count::default()).await.unwrap();
    assert_eq!(done.completed().unwrap().n, 100);
    let host = ToolHost::new().with(halve);
    let call = loomflow::model::ToolCall::new("c", "halve", json!({ "n": 8 }));
    let context = loomflow::tool::DispatchContext::new("s");
    let out = host.dispatch(&[call], context).await.unwrap().remove(0);
    assert_eq!(out.content, "4");
}

/// The context under another name (an import renamed, an alias), and written by a
/// `macro_rules!` with its own hygiene: the node takes it all the same, and runs with it.
mod renamed_context {
    use loomflow::Context as FlowContext;
    use loomflow::prelude::*;

    type Ctx = loomflow::Context;

    #[derive(Clone, Default, Serialize, Deserialize)]
    pub(super) struct Seen {
        pub(super) names: Vec<String>,
    }

    #[node]
    pub(super) async fn renamed(seen: &mut Seen, ctx: &FlowContext) {
        seen.names.push(ctx.node().to_owned());
    }

    macro_rules! aliased_node {
        ($node:ident) => {
            #[node]
            pub(super) async fn $node(seen: &mut Seen, ctx: &Ctx) {
                seen.names.push(ctx.thread().to_owned());
            }
        };
    }

    aliased_node!(aliased);
}

#[tokio::test]
async fn a_node_takes_its_context_under_another_name() {
    use renamed_context::{Seen, aliased, renamed};
    let graph = Graph::new("renamed")
        .node(renamed)
        .node(aliased)
        .edge(START, "renamed")
        .edge("renamed", "aliased")
        .edge("aliased", END)
        .compile()
        .unwrap();
    let done = graph
        .invoke(&Runtime::in_memory(), "t-7", Seen::default())
        .await
        .unwrap();
    assert_eq!(done.completed().unwrap().names, ["renamed", "t-7"]);
}
