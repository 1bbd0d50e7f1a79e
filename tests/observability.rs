//! Spans as an operator sees them: captured by a `tracing` subscriber (names, parents,
//! fields), and exported by the real OpenTelemetry SDK through `tracing-opentelemetry`
//! (names, attributes, parents, and the link from a resumed run to its earlier trace).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/callsites.rs"]
mod callsites;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use loomflow::agent::Agent;
use loomflow::memory::{Memory, MemoryOptions, Scope, SqliteMemory};
use loomflow::model::{ModelResponse, ScriptedModel, ToolCall, Usage};
use loomflow::prelude::*;
use opentelemetry::trace::{Status, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::DefaultGuard;
use tracing_subscriber::layer::{Context as LayerContext, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

// ---------------------------------------------------------------------------------------
// A capturing subscriber: every span's name, parent and fields.

#[derive(Clone, Debug)]
struct Captured {
    id: u64,
    name: String,
    parent: Option<u64>,
    fields: HashMap<String, String>,
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Captured>>>);

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: LayerContext<'_, S>) {
        let mut fields = HashMap::new();
        attrs.record(&mut Fields(&mut fields));
        let parent = ctx
            .span(id)
            .and_then(|span| span.parent().map(|p| p.id().into_u64()));
        self.0.lock().unwrap().push(Captured {
            id: id.into_u64(),
            name: attrs.metadata().name().to_owned(),
            parent,
            fields,
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: LayerContext<'_, S>) {
        let mut spans = self.0.lock().unwrap();
        if let Some(span) = spans.iter_mut().rev().find(|s| s.id == id.into_u64()) {
            values.record(&mut Fields(&mut span.fields));
        }
    }
}

impl Capture {
    fn install(&self) -> DefaultGuard {
        callsites::keep_callsites_enabled();
        let subscriber = tracing_subscriber::registry().with(self.clone());
        tracing::subscriber::set_default(subscriber)
    }

    fn spans(&self) -> Vec<Captured> {
        self.0.lock().unwrap().clone()
    }
}

fn named<'a>(spans: &'a [Captured], name: &str) -> Vec<&'a Captured> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn parent_of<'a>(spans: &'a [Captured], span: &Captured) -> &'a Captured {
    let parent = span.parent.expect("a parent");
    // Ids may be reused once a span closes: the parent is the latest opened before it.
    spans
        .iter()
        .rfind(|s| s.id == parent)
        .expect("the parent span was captured")
}

fn field<'a>(span: &'a Captured, name: &str) -> &'a str {
    span.fields
        .get(name)
        .unwrap_or_else(|| panic!("span {} has no field {name}: {:?}", span.name, span.fields))
}

// ---------------------------------------------------------------------------------------
// The agent the tests observe: one tool call, then an answer.

/// Looks an order up.
#[tool]
fn lookup_order(order: String) -> String {
    format!("order {order}: shipped")
}

/// Refunds an order; always fails.
#[tool]
fn refund(order: String) -> Result<String, String> {
    Err(format!("the payment provider refused order {order}"))
}

fn with_usage(mut response: ModelResponse, input: u64, output: u64) -> ModelResponse {
    response.usage = Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    };
    response
}

fn support_agent(record_content: bool) -> Agent {
    let call = ToolCall::new("call_1", "lookup_order", json!({ "order": "A-17" }));
    let model = ScriptedModel::new([
        with_usage(ModelResponse::tool_calls(vec![call]), 120, 18),
        with_usage(ModelResponse::text("Order A-17 has shipped."), 160, 9),
    ])
    .named("openai:gpt-4o");
    Agent::builder("You answer questions about orders.")
        .name("support")
        .model(model)
        .tool(lookup_order)
        .record_content(record_content)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn agent_spans_follow_the_genai_conventions_and_nest() {
    let capture = Capture::default();
    let _guard = capture.install();
    let result = support_agent(false)
        .run("Where is order A-17?")
        .session("s-1")
        .await
        .unwrap();
    assert_eq!(result.output, "Order A-17 has shipped.");
    let spans = capture.spans();

    let [agent] = named(&spans, "invoke_agent")[..] else {
        panic!("one invoke_agent span: {spans:?}");
    };
    assert_eq!(field(agent, "otel.name"), "invoke_agent support");
    assert_eq!(field(agent, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(field(agent, "gen_ai.agent.name"), "support");
    assert_eq!(field(agent, "gen_ai.conversation.id"), "s-1");
    // Required of an agent span by the GenAI conventions, as of an inference span.
    let chat = named(&spans, "chat")[0];
    for attribute in ["gen_ai.provider.name", "gen_ai.request.model"] {
        assert_eq!(
            field(agent, attribute),
            field(chat, attribute),
            "{attribute}"
        );
    }

    let [run] = named(&spans, "run")[..] else {
        panic!("one run span");
    };
    assert_eq!(parent_of(&spans, run).name, "invoke_agent");
    assert_eq!(field(run, "otel.name"), "run support");
    assert_eq!(field(run, "loomflow.thread"), "s-1");
    assert_eq!(field(run, "loomflow.run"), "1");
    assert_eq!(field(run, "loomflow.resumed"), "false");
    assert_eq!(field(run, "loomflow.outcome"), "completed");

    // model, tools, model: three supersteps, each with its node inside.
    let steps = named(&spans, "superstep");
    assert_eq!(steps.len(), 3);
    let nodes: Vec<&str> = steps.iter().map(|s| field(s, "loomflow.nodes")).collect();
    assert_eq!(nodes, ["model", "tools", "model"]);
    for step in &steps {
        assert_eq!(parent_of(&spans, step).name, "run");
    }
    for node in named(&spans, "node") {
        assert_eq!(parent_of(&spans, node).name, "superstep");
    }

    let chats = named(&spans, "chat");
    assert_eq!(chats.len(), 2);
    for chat in &chats {
        let node = parent_of(&spans, chat);
        assert_eq!(
            (node.name.as_str(), field(node, "loomflow.node")),
            ("node", "model")
        );
        assert_eq!(field(chat, "otel.name"), "chat gpt-4o");
        assert_eq!(field(chat, "gen_ai.operation.name"), "chat");
        assert_eq!(field(chat, "gen_ai.provider.name"), "openai");
        assert_eq!(field(chat, "gen_ai.request.model"), "gpt-4o");
        assert_eq!(field(chat, "gen_ai.response.model"), "gpt-4o");
        assert!(
            !chat.fields.contains_key("gen_ai.input.messages"),
            "content is opt-in"
        );
        assert!(!chat.fields.contains_key("error.type"));
    }
    assert_eq!(field(chats[0], "gen_ai.usage.input_tokens"), "120");
    assert_eq!(field(chats[0], "gen_ai.usage.output_tokens"), "18");
    assert_eq!(
        field(chats[0], "gen_ai.response.finish_reasons"),
        "[\"tool_call\"]"
    );
    assert_eq!(field(chats[1], "gen_ai.usage.input_tokens"), "160");
    assert_eq!(
        field(chats[1], "gen_ai.response.finish_reasons"),
        "[\"stop\"]"
    );

    let [tool] = named(&spans, "execute_tool")[..] else {
        panic!("one execute_tool span");
    };
    assert_eq!(field(tool, "otel.name"), "execute_tool lookup_order");
    assert_eq!(field(tool, "gen_ai.operation.name"), "execute_tool");
    assert_eq!(field(tool, "gen_ai.tool.name"), "lookup_order");
    assert_eq!(field(tool, "gen_ai.tool.call.id"), "call_1");
    assert_eq!(field(tool, "gen_ai.tool.type"), "function");
    assert!(!tool.fields.contains_key("gen_ai.tool.call.arguments"));
    let mut up = parent_of(&spans, tool);
    while up.name != "node" {
        up = parent_of(&spans, up);
    }
    assert_eq!(field(up, "loomflow.node"), "tools");
}

#[tokio::test(flavor = "current_thread")]
async fn content_is_recorded_only_when_asked_for() {
    let capture = Capture::default();
    let _guard = capture.install();
    support_agent(true)
        .run("Where is order A-17?")
        .await
        .unwrap();
    let spans = capture.spans();
    let chats = named(&spans, "chat");
    assert!(field(chats[0], "gen_ai.input.messages").contains("Where is order A-17?"));
    assert!(field(chats[1], "gen_ai.output.messages").contains("Order A-17 has shipped."));
    let tool = named(&spans, "execute_tool")[0];
    assert_eq!(
        field(tool, "gen_ai.tool.call.arguments"),
        "{\"order\":\"A-17\"}"
    );
    assert_eq!(
        field(tool, "gen_ai.tool.call.result"),
        "order A-17: shipped"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn failures_set_error_type() {
    let capture = Capture::default();
    let _guard = capture.install();
    let call = ToolCall::new("call_9", "refund", json!({ "order": "B-2" }));
    // One reply only: the second model call finds the script spent.
    let agent = Agent::builder("You refund.")
        .name("refunds")
        .model(ScriptedModel::new([ModelResponse::tool_calls(vec![call])]))
        .tool(refund)
        .build()
        .unwrap();
    assert!(agent.run("Refund B-2").await.is_err());
    let spans = capture.spans();
    let tool = named(&spans, "execute_tool")[0];
    assert_eq!(field(tool, "error.type"), "failed");
    let chats = named(&spans, "chat");
    assert_eq!(chats.len(), 2);
    assert!(!chats[0].fields.contains_key("error.type"));
    assert_eq!(field(chats[1], "error.type"), "script_exhausted");
    assert_eq!(field(named(&spans, "run")[0], "loomflow.outcome"), "failed");
}

/// Holds until the test lets it go.
static HOLD: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);
static WAITING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Wait for the warehouse.
#[tool]
async fn wait_for_warehouse() -> String {
    WAITING.store(true, std::sync::atomic::Ordering::SeqCst);
    drop(HOLD.acquire().await);
    "ready".to_owned()
}

/// An agent run cancelled part way is not a failure: its `invoke_agent` span has no error
/// status, as its `run` span has none. Before, the agent span said `ERROR`.
#[tokio::test(flavor = "current_thread")]
async fn a_cancelled_agent_run_is_not_marked_failed() {
    let capture = Capture::default();
    let _guard = capture.install();
    let runtime = Runtime::in_memory();
    let call = ToolCall::new("call_w", "wait_for_warehouse", json!({}));
    let agent = Agent::builder("You wait.")
        .name("waiter")
        .model(ScriptedModel::new([ModelResponse::tool_calls(vec![call])]))
        .tool(wait_for_warehouse)
        .runtime(runtime.clone())
        .build()
        .unwrap();
    let cancel = async {
        while !WAITING.load(std::sync::atomic::Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        runtime.cancel("w").await.unwrap();
        HOLD.add_permits(1);
    };
    let (stopped, ()) = tokio::join!(agent.run("Wait").session("w").into_future(), cancel);
    assert!(
        matches!(
            stopped,
            Err(loomflow::Error::Run(loomflow::RunError::Cancelled { .. }))
        ),
        "{stopped:?}"
    );
    let spans = capture.spans();
    let run = named(&spans, "run")[0];
    assert_eq!(field(run, "loomflow.outcome"), "cancelled");
    let agent_span = named(&spans, "invoke_agent")[0];
    assert!(
        !agent_span.fields.contains_key("otel.status_code"),
        "{agent_span:?}"
    );
    assert!(
        !agent_span.fields.contains_key("error.type"),
        "{agent_span:?}"
    );
}

/// A team's members, each another graph's node, run in `invoke_agent` spans of their own,
/// as an agent's own runs do: a GenAI backend tells which agent made which model call.
/// Before, a team's run had no `invoke_agent` span, and its `chat` spans named no agent.
#[tokio::test(flavor = "current_thread")]
async fn a_teams_members_run_in_invoke_agent_spans() {
    let capture = Capture::default();
    let _guard = capture.install();
    let member = |name: &str, reply: &str| {
        Agent::builder(format!("You are {name}."))
            .name(name)
            .model(ScriptedModel::new([ModelResponse::text(reply)]).named("openai:gpt-4o"))
            .build()
            .unwrap()
    };
    let router = loomflow::architecture::Router::new(member("classifier", "billing"))
        .worker("billing", "invoices", member("billing", "Refund issued."))
        .build()
        .unwrap();
    let runtime = Runtime::in_memory();
    let team = loomflow::architecture::TeamState::new("refund please");
    let done = router.invoke(&runtime, "team-1", team).await.unwrap();
    assert_eq!(
        done.completed().unwrap().output.as_deref(),
        Some("Refund issued.")
    );
    let spans = capture.spans();
    let agents: Vec<&str> = named(&spans, "invoke_agent")
        .iter()
        .map(|span| field(span, "gen_ai.agent.name"))
        .collect();
    assert_eq!(agents, ["classifier", "billing"], "{spans:?}");
    for agent in named(&spans, "invoke_agent") {
        assert_eq!(field(agent, "gen_ai.conversation.id"), "team-1");
        assert_eq!(field(agent, "gen_ai.request.model"), "gpt-4o");
        assert_eq!(parent_of(&spans, agent).name, "node");
    }
    // Each model call is inside its agent's span.
    for chat in named(&spans, "chat") {
        let mut up = parent_of(&spans, chat);
        while up.name != "invoke_agent" {
            up = parent_of(&spans, up);
        }
        assert_eq!(
            field(chat, "gen_ai.request.model"),
            field(up, "gen_ai.request.model")
        );
    }
}

/// A team's member that fails marks its `invoke_agent` span failed, naming the error, as
/// an agent's own failed run does.
#[tokio::test(flavor = "current_thread")]
async fn a_failed_members_invoke_agent_span_says_so() {
    let capture = Capture::default();
    let _guard = capture.install();
    let member = |name: &str, replies: Vec<ModelResponse>| {
        Agent::builder(format!("You are {name}."))
            .name(name)
            .model(ScriptedModel::new(replies).named("openai:gpt-4o"))
            .build()
            .unwrap()
    };
    let router = loomflow::architecture::Router::new(member(
        "classifier",
        vec![ModelResponse::text("billing")],
    ))
    .worker("billing", "invoices", member("billing", Vec::new()))
    .build()
    .unwrap();
    let runtime = Runtime::in_memory();
    let team = loomflow::architecture::TeamState::new("refund please");
    let outcome = router.invoke(&runtime, "team-2", team).await.unwrap();
    assert!(matches!(outcome, RunOutcome::Failed { .. }), "{outcome:?}");
    let spans = capture.spans();
    let agents = named(&spans, "invoke_agent");
    let billing = agents
        .iter()
        .find(|span| field(span, "gen_ai.agent.name") == "billing")
        .expect("billing's span");
    assert_eq!(field(billing, "otel.status_code"), "ERROR");
    assert_eq!(field(billing, "error.type"), "script_exhausted");
    let classifier = agents
        .iter()
        .find(|span| field(span, "gen_ai.agent.name") == "classifier")
        .expect("the classifier's span");
    assert!(
        !classifier.fields.contains_key("otel.status_code"),
        "{classifier:?}"
    );
}

/// Takes its time.
#[tool]
async fn take_ten_seconds() -> String {
    tokio::time::sleep(std::time::Duration::from_secs(10)).await;
    "done".to_owned()
}

/// A team's member stopped by its own timeout marks its `invoke_agent` span failed, as an
/// agent's own call that times out is.
#[tokio::test(flavor = "current_thread")]
async fn a_member_stopped_by_its_timeout_is_marked_failed() {
    let capture = Capture::default();
    let _guard = capture.install();
    let classifier = Agent::builder("You classify.")
        .name("classifier")
        .model(ScriptedModel::new([ModelResponse::text("billing")]))
        .build()
        .unwrap();
    let call = ToolCall::new("call_t", "take_ten_seconds", json!({}));
    let billing = Agent::builder("You bill.")
        .name("billing")
        .model(ScriptedModel::new([ModelResponse::tool_calls(vec![call])]))
        .tool(take_ten_seconds)
        .timeout(std::time::Duration::from_millis(100))
        .build()
        .unwrap();
    let router = loomflow::architecture::Router::new(classifier)
        .worker("billing", "invoices", billing)
        .build()
        .unwrap();
    let runtime = Runtime::in_memory();
    let team = loomflow::architecture::TeamState::new("refund please");
    let outcome = router.invoke(&runtime, "team-3", team).await.unwrap();
    assert!(matches!(outcome, RunOutcome::Failed { .. }), "{outcome:?}");
    let spans = capture.spans();
    let billing = named(&spans, "invoke_agent")
        .into_iter()
        .find(|span| field(span, "gen_ai.agent.name") == "billing")
        .expect("billing's span");
    assert_eq!(field(billing, "otel.status_code"), "ERROR");
    assert_eq!(field(billing, "error.type"), "timeout");
}

/// A node that waits for a signal, suspending the run until it comes.
#[node]
async fn await_payment(paid: &mut Option<u64>, ctx: &Context) -> loomflow::Result<()> {
    let cents: u64 = ctx.wait_for_signal("payment").or_suspend().await?;
    *paid = Some(cents);
    Ok(())
}

#[tokio::test(flavor = "current_thread")]
async fn waits_sends_suspensions_and_resumes_have_spans() {
    let capture = Capture::default();
    let _guard = capture.install();
    let graph = Graph::new("checkout")
        .node(await_payment)
        .edge(START, "await_payment")
        .edge("await_payment", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let outcome = graph.run(&runtime, "order-5", None).await.unwrap();
    assert!(matches!(outcome, RunOutcome::Interrupted { .. }));
    runtime.signal("order-5", "payment", 4_200).await.unwrap();
    let outcome = graph.recover(&runtime, "order-5").await.unwrap();
    assert!(matches!(outcome, RunOutcome::Completed(Some(4_200))));

    let spans = capture.spans();
    let waits = named(&spans, "wait_signal");
    assert_eq!(waits.len(), 2);
    assert_eq!(field(waits[0], "otel.name"), "wait_signal payment");
    assert_eq!(field(waits[0], "loomflow.outcome"), "suspended");
    assert_eq!(field(waits[1], "loomflow.outcome"), "received");
    assert_eq!(parent_of(&spans, waits[0]).name, "node");

    let [suspend] = named(&spans, "suspend")[..] else {
        panic!("one suspend span");
    };
    assert_eq!(
        field(suspend, "loomflow.interrupts"),
        "await_payment#signal:payment"
    );
    assert_eq!(parent_of(&spans, suspend).name, "run");

    let [send] = named(&spans, "send_signal")[..] else {
        panic!("one send_signal span");
    };
    assert_eq!(field(send, "otel.name"), "send_signal payment");
    assert_eq!(field(send, "loomflow.thread"), "order-5");
    assert_eq!(field(send, "loomflow.delivery"), "Pending"); // no run is live

    let runs = named(&spans, "run");
    assert_eq!(field(runs[0], "loomflow.outcome"), "interrupted");
    assert_eq!(field(runs[1], "loomflow.resumed"), "true");
    assert_eq!(field(runs[1], "loomflow.outcome"), "completed");
    let [resume] = named(&spans, "resume")[..] else {
        panic!("one resume span");
    };
    assert_eq!(parent_of(&spans, resume).id, runs[1].id);
    assert_eq!(field(resume, "loomflow.status"), "interrupted");
    // One numbering: the resume carries on with the superstep that suspended.
    assert_eq!(
        field(suspend, "loomflow.step"),
        field(resume, "loomflow.step")
    );
}

/// A wait that times out is no error on its span: the node meets it in its course, and may
/// go on (here it does).
#[tokio::test(flavor = "current_thread")]
async fn a_wait_that_times_out_says_so_on_its_span() {
    let capture = Capture::default();
    let _guard = capture.install();
    let graph: CompiledGraph<u32> = Graph::new("impatient")
        .node_fn("ask", |n: &mut u32, ctx| {
            Box::pin(async move {
                let waited = ctx
                    .wait_for_signal::<u32>("answer")
                    .timeout(std::time::Duration::from_millis(20))
                    .await;
                *n = waited.unwrap_or(7);
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
        .unwrap();
    let done = graph.invoke(&Runtime::in_memory(), "t", 0).await.unwrap();
    assert_eq!(done.completed().unwrap(), 7);
    let spans = capture.spans();
    let [wait] = named(&spans, "wait_signal")[..] else {
        panic!("one wait_signal span");
    };
    assert_eq!(field(wait, "loomflow.outcome"), "timed_out");

    // A send refused (its run ended) is marked failed on its span, not left to read as a
    // send whose delivery went unrecorded.
    let runtime = Runtime::in_memory();
    graph.invoke(&runtime, "done", 0).await.unwrap();
    let refused = runtime
        .signal_with(
            "done",
            "answer",
            1,
            loomflow::runtime::SignalOptions::default().require_live_run(),
        )
        .await;
    assert!(refused.is_err(), "{refused:?}");
    let spans = capture.spans();
    let [send] = named(&spans, "send_signal")[..] else {
        panic!("one send_signal span");
    };
    assert_eq!(field(send, "otel.status_code"), "ERROR");
    assert_eq!(field(send, "error.type"), "run_ended");
}

// ---------------------------------------------------------------------------------------
// The real OpenTelemetry SDK, through tracing-opentelemetry.

fn otel() -> (SdkTracerProvider, InMemorySpanExporter, DefaultGuard) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("loomflow-tests"));
    callsites::keep_callsites_enabled();
    let guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
    (provider, exporter, guard)
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

fn exported<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

#[tokio::test(flavor = "current_thread")]
async fn the_sdk_exports_genai_spans_with_their_attributes() {
    let (provider, exporter, guard) = otel();
    support_agent(false)
        .run("Where is order A-17?")
        .session("s-otel")
        .await
        .unwrap();
    drop(guard);
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();

    let [agent] = exported(&spans, "invoke_agent support")[..] else {
        panic!(
            "exported: {:?}",
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
    };
    assert_eq!(
        attribute(agent, "gen_ai.operation.name").as_deref(),
        Some("invoke_agent")
    );
    assert_eq!(
        attribute(agent, "gen_ai.agent.name").as_deref(),
        Some("support")
    );

    let chats = exported(&spans, "chat gpt-4o");
    assert_eq!(chats.len(), 2);
    let chat = chats[0];
    assert_eq!(
        attribute(chat, "gen_ai.provider.name").as_deref(),
        Some("openai")
    );
    assert_eq!(
        attribute(chat, "gen_ai.request.model").as_deref(),
        Some("gpt-4o")
    );
    assert_eq!(
        attribute(chat, "gen_ai.usage.input_tokens").as_deref(),
        Some("120")
    );
    assert_eq!(
        attribute(chat, "gen_ai.usage.output_tokens").as_deref(),
        Some("18")
    );
    // Counts are integers, as the conventions type them (not their text).
    let integer = |span: &SpanData, key: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.clone())
    };
    assert_eq!(
        integer(chat, "gen_ai.usage.input_tokens"),
        Some(opentelemetry::Value::I64(120))
    );
    assert_eq!(
        integer(chat, "gen_ai.usage.output_tokens"),
        Some(opentelemetry::Value::I64(18))
    );
    let [run] = exported(&spans, "run support")[..] else {
        panic!("one run span");
    };
    assert_eq!(
        integer(run, "loomflow.run"),
        Some(opentelemetry::Value::I64(1))
    );
    let superstep = exported(&spans, "superstep 2")[0];
    assert_eq!(
        integer(superstep, "loomflow.step"),
        Some(opentelemetry::Value::I64(2))
    );
    assert_eq!(chat.span_kind, opentelemetry::trace::SpanKind::Client);
    // A string array, as the semantic conventions type it, not the text of one.
    let reasons = chat
        .attributes
        .iter()
        .find(|kv| kv.key.as_str() == "gen_ai.response.finish_reasons")
        .map(|kv| kv.value.clone());
    assert_eq!(
        reasons,
        Some(opentelemetry::Value::Array(opentelemetry::Array::String(
            vec!["tool_call".into()]
        )))
    );

    let [tool] = exported(&spans, "execute_tool lookup_order")[..] else {
        panic!("one tool span");
    };
    assert_eq!(
        attribute(tool, "gen_ai.tool.name").as_deref(),
        Some("lookup_order")
    );
    assert_eq!(
        attribute(tool, "gen_ai.tool.call.id").as_deref(),
        Some("call_1")
    );
    assert_eq!(
        attribute(tool, "gen_ai.tool.type").as_deref(),
        Some("function")
    );

    // One trace, and the parents chain up to the agent.
    let trace = agent.span_context.trace_id();
    assert!(spans.iter().all(|s| s.span_context.trace_id() == trace));
    let by_id: HashMap<_, _> = spans
        .iter()
        .map(|s| (s.span_context.span_id(), s))
        .collect();
    let mut up = tool;
    let mut path = vec![up.name.to_string()];
    while let Some(parent) = by_id.get(&up.parent_span_id) {
        up = parent;
        path.push(up.name.to_string());
    }
    assert_eq!(
        path,
        [
            "execute_tool lookup_order",
            "node tools",
            "superstep 2",
            "run support",
            "invoke_agent support"
        ]
    );
}

/// Refunds an order. Needs a person's approval.
#[tool(approval)]
fn approve_refund(order: String) -> String {
    format!("refunded {order}")
}

/// An agent that asks for approval to refund C-3, then says it refunded.
fn refunds_agent(db: &loomflow_tests::TempDb) -> Agent {
    let call = ToolCall::new("call_r", "approve_refund", json!({ "order": "C-3" }));
    Agent::builder("You refund.")
        .name("refunds")
        .model(ScriptedModel::new([
            ModelResponse::tool_calls(vec![call]),
            ModelResponse::text("Refunded."),
        ]))
        .tool(approve_refund)
        .durable_approvals()
        .runtime(Runtime::sqlite(db.path()).unwrap())
        .build()
        .unwrap()
}

/// An agent's run a worker carries on after its approval has its `invoke_agent` span, with
/// the agent's name and the conversation, around the run's, as one its own API resumes.
#[tokio::test(flavor = "current_thread")]
async fn a_run_a_worker_carries_on_is_inside_its_agents_span() {
    let db = loomflow_tests::TempDb::new("otel-worker-agent");
    let agent = refunds_agent(&db);
    assert!(
        agent
            .run("Refund C-3")
            .session("r-2")
            .await
            .unwrap()
            .interrupted
    );
    let runtime = agent.runtime();
    let allow = loomflow::tool::ApprovalDecision::Allow;
    runtime
        .decide_approval_by("r-2", "call_r", allow, "ada")
        .await
        .unwrap();

    let (provider, exporter, guard) = otel();
    let worker = Worker::builder(runtime).graph(agent.graph()).build();
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    drop(guard);
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let [run] = exported(&spans, "run refunds")[..] else {
        panic!(
            "one run span: {:?}",
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
    };
    let [agent_span] = exported(&spans, "invoke_agent refunds")[..] else {
        panic!(
            "one agent span: {:?}",
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
    };
    assert_eq!(run.parent_span_id, agent_span.span_context.span_id());
    assert_eq!(
        attribute(agent_span, "gen_ai.conversation.id").as_deref(),
        Some("r-2")
    );
    assert_eq!(
        runtime.run("r-2").await.unwrap().record.state,
        loomflow::runtime::RunState::Completed
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_resumed_run_links_to_the_trace_it_suspended_in() {
    let db = loomflow_tests::TempDb::new("otel-link");
    let agent = refunds_agent(&db);

    let (provider, exporter, guard) = otel();
    let first = agent.run("Refund C-3").session("r-1").await.unwrap();
    assert!(first.interrupted);
    drop(guard);
    provider.force_flush().unwrap();
    let before = exporter.get_finished_spans().unwrap();
    let suspended = exported(&before, "run refunds")[0].span_context.clone();
    exporter.reset();

    // Later, in a new trace: a person approves, and the run is carried on.
    agent
        .runtime()
        .decide_approval_by(
            "r-1",
            "call_r",
            loomflow::tool::ApprovalDecision::Allow,
            "ada",
        )
        .await
        .unwrap();
    let (provider, exporter, guard) = otel();
    let done = agent.resume("r-1").await.unwrap();
    assert_eq!(done.output, "Refunded.");
    drop(guard);
    provider.force_flush().unwrap();
    let after = exporter.get_finished_spans().unwrap();
    let [resumed] = exported(&after, "run refunds")[..] else {
        panic!("one run span after the resume");
    };
    assert_ne!(
        resumed.span_context.trace_id(),
        suspended.trace_id(),
        "a new trace"
    );
    let links: Vec<_> = resumed
        .links
        .iter()
        .map(|l| l.span_context.clone())
        .collect();
    assert_eq!(links.len(), 1, "linked to the execution before");
    assert_eq!(links[0].trace_id(), suspended.trace_id());
    assert_eq!(links[0].span_id(), suspended.span_id());
}

/// A failed run exports with an error status, so a trace backend shows it as failed; a
/// completed one does not.
#[tokio::test(flavor = "current_thread")]
async fn a_failed_run_exports_an_error_status() {
    let graph = Graph::new("fragile")
        .node_sync("boom", |_: &mut u32| -> Result<(), String> {
            Err("the disk is full".into())
        })
        .edge(START, "boom")
        .edge("boom", END)
        .compile()
        .unwrap();
    let sound = Graph::new("sound")
        .node_sync("ok", |n: &mut u32| *n += 1)
        .edge(START, "ok")
        .edge("ok", END)
        .compile()
        .unwrap();
    let (provider, exporter, guard) = otel();
    let runtime = Runtime::in_memory();
    let failed = graph.invoke(&runtime, "f", 0).await.unwrap();
    assert!(matches!(failed, RunOutcome::Failed { .. }));
    sound.invoke(&runtime, "s", 0).await.unwrap();
    drop(guard);
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let failed = exported(&spans, "run fragile");
    assert!(
        matches!(failed[0].status, opentelemetry::trace::Status::Error { .. }),
        "{:?}",
        failed[0].status
    );
    let completed = exported(&spans, "run sound");
    assert_eq!(completed[0].status, opentelemetry::trace::Status::Unset);
}

/// A failed model call, tool call and agent run are exported with the span status `Error`
/// (not only an `error.type`), and the failed run's `invoke_agent` span names its error.
#[tokio::test(flavor = "current_thread")]
async fn failures_are_exported_with_error_status() {
    let (provider, exporter, guard) = otel();
    let call = ToolCall::new("call_9", "refund", json!({ "order": "B-2" }));
    // One reply only: the second model call finds the script spent.
    let agent = Agent::builder("You refund.")
        .name("refunds")
        .model(ScriptedModel::new([ModelResponse::tool_calls(vec![call])]).named("openai:gpt-4o"))
        .tool(refund)
        .build()
        .unwrap();
    assert!(agent.run("Refund B-2").await.is_err());
    drop(guard);
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let failed = |span: &SpanData| matches!(span.status, Status::Error { .. });
    let chats = exported(&spans, "chat gpt-4o");
    assert_eq!(chats.len(), 2);
    assert!(!failed(chats[0]), "the call that answered did not fail");
    assert!(failed(chats[1]));
    assert_eq!(
        attribute(chats[1], "error.type").as_deref(),
        Some("script_exhausted")
    );
    assert!(failed(exported(&spans, "execute_tool refund")[0]));
    let agent_span = exported(&spans, "invoke_agent refunds")[0];
    assert!(failed(agent_span));
    // The cause's variant, under the run's and the crate's wrappers.
    assert_eq!(
        attribute(agent_span, "error.type").as_deref(),
        Some("script_exhausted")
    );
}

/// The model call that extracts memories after a run has its own `chat` span, with its
/// usage, like the agent's other model calls.
#[tokio::test(flavor = "current_thread")]
async fn memory_extraction_model_call_has_a_chat_span() {
    let memory = SqliteMemory::in_memory().unwrap();
    let agent = Agent::builder("You suggest dinners.")
        .name("chef")
        .model(
            ScriptedModel::new([
                with_usage(ModelResponse::text("A curry."), 100, 10),
                with_usage(
                    ModelResponse::text(r#"["Ada is allergic to peanuts"]"#),
                    300,
                    30,
                ),
            ])
            .named("openai:gpt-4o"),
        )
        .memory(memory.clone())
        .memory_options(MemoryOptions::default().extract_after_run(true))
        .build()
        .unwrap();
    let (provider, exporter, guard) = otel();
    let result = agent
        .run("Dinner idea? I am allergic to peanuts.")
        .user("ada")
        .await
        .unwrap();
    drop(guard);
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    assert_eq!(memory.count(&Scope::user("ada")).await.unwrap(), 1);
    assert_eq!(result.usage.input_tokens, 400, "two model calls");
    let chats = exported(&spans, "chat gpt-4o");
    assert_eq!(chats.len(), 2, "one chat span per model call");
    let traced: Vec<Option<String>> = chats
        .iter()
        .map(|s| attribute(s, "gen_ai.usage.input_tokens"))
        .collect();
    assert_eq!(traced, [Some("100".to_owned()), Some("300".to_owned())]);
    let agent_span = exported(&spans, "invoke_agent chef")[0];
    assert!(
        chats
            .iter()
            .all(|c| c.span_context.trace_id() == agent_span.span_context.trace_id())
    );
}

/// With content recording off, an extraction answer that is not a JSON array (the model's
/// completion) reaches no span or event of the trace.
#[tokio::test(flavor = "current_thread")]
async fn extraction_does_not_put_completions_in_the_trace_when_content_is_off() {
    let agent = Agent::builder("You help.")
        .name("helper")
        .model(ScriptedModel::new([
            ModelResponse::text("Sure."),
            ModelResponse::text("The user's card number is 4111-SECRET-1111."),
        ]))
        .memory(SqliteMemory::in_memory().unwrap())
        .memory_options(MemoryOptions::default().extract_after_run(true))
        .record_content(false)
        .build()
        .unwrap();
    let (provider, exporter, guard) = otel();
    agent.run("Pay with my card").user("ada").await.unwrap();
    drop(guard);
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let mut warned = false;
    for span in &spans {
        for kv in &span.attributes {
            assert!(
                !kv.value.to_string().contains("SECRET"),
                "{} {}",
                span.name,
                kv.key
            );
        }
        for event in span.events.iter() {
            warned |= event.name.contains("memory extraction");
            for kv in &event.attributes {
                assert!(
                    !kv.value.to_string().contains("SECRET"),
                    "{} {}",
                    span.name,
                    kv.key
                );
            }
        }
    }
    assert!(warned, "the unusable answer is still reported");
}
