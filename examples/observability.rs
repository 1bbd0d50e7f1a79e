//! What an agent did, why, with what, and at what cost: a scripted support agent looks an
//! order up with one tool call, and the program prints the OpenTelemetry spans the run
//! exported (names and attributes, nested as they ran), the run's audit log and its cost.
//!
//! ```text
//! cargo run --example observability
//! ```
//!
//! The spans go through `tracing` and `tracing-opentelemetry` into the OpenTelemetry SDK, as
//! they would in a service; here an exporter prints them instead of sending them to a
//! collector. The README shows the OTLP exporter that sends the same spans to Jaeger or
//! Tempo. No API key is needed: the model is scripted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use loomflow::agent::Agent;
use loomflow::model::{ModelResponse, PriceTable, ScriptedModel, ToolCall, Usage};
use loomflow::prelude::*;
use opentelemetry::trace::{SpanId, TracerProvider as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing_subscriber::layer::SubscriberExt as _;

const HELP: &str = "\
observability: a scripted support agent looks an order up with one tool call; prints the
OpenTelemetry spans the run exported (names and attributes, nested), its audit log and its
cost. No API key needed.

Usage: cargo run --example observability [-- OPTIONS]

Options:
  -h, --help  print this help
";

/// Looks an order up in the warehouse system.
#[tool]
fn lookup_order(order: String) -> String {
    format!("order {order}: shipped on 2026-11-28, carrier DHL, tracking 00340434161094042557")
}

/// Keeps what the SDK exports, for printing once the run is over.
#[derive(Clone, Debug, Default)]
struct Collect(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Collect {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(batch);
        Ok(())
    }
}

fn usage(input_tokens: u64, output_tokens: u64) -> Usage {
    Usage {
        input_tokens,
        output_tokens,
        ..Usage::default()
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().skip(1).any(|a| a == "--help" || a == "-h") {
        print!("{HELP}");
        return Ok(());
    }
    // The usual OpenTelemetry set-up, with a printing exporter in place of OTLP.
    let exported = Collect::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exported.clone())
        .build();
    let otel = tracing_opentelemetry::layer().with_tracer(provider.tracer("observability"));
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(otel))?;

    let mut asks = ModelResponse::tool_calls(vec![ToolCall::new(
        "call_1",
        "lookup_order",
        json!({ "order": "A-17" }),
    )]);
    asks.usage = usage(412, 23);
    let mut answers = ModelResponse::text("Order A-17 shipped on 28 November with DHL.");
    answers.usage = usage(530, 19);
    let runtime = Runtime::in_memory();
    let agent = Agent::builder("You answer questions about orders. Look them up first.")
        .name("support")
        .model(ScriptedModel::new([asks, answers]).named("openai:gpt-4o"))
        .tool(lookup_order)
        .prices(PriceTable::new().model("gpt-4o", 2.50, 10.00))
        .runtime(runtime.clone())
        .build()?;
    let result = agent
        .run("Where is my order A-17?")
        .session("ticket-4711")
        .user("customer-88")
        .await?;
    provider.force_flush()?;

    println!("answer: {}\n", result.output);
    println!("spans exported (name, then attributes):");
    let spans = exported
        .0
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    print_tree(&spans);

    println!("\naudit log of ticket-4711:");
    for entry in runtime.audit("ticket-4711").await? {
        println!(
            "  #{} {} {} by {}: {}",
            entry.id,
            entry.kind,
            entry.subject,
            entry.actor.as_deref().unwrap_or("-"),
            entry.detail
        );
    }
    println!(
        "\ncost: {} input + {} output tokens = ${:.6}",
        result.usage.input_tokens,
        result.usage.output_tokens,
        result.cost_usd.unwrap_or_default()
    );
    provider.shutdown()?;
    Ok(())
}

/// Prints spans as the tree they ran in, each with its attributes.
fn print_tree(spans: &[SpanData]) {
    let mut children: HashMap<SpanId, Vec<&SpanData>> = HashMap::new();
    for span in spans {
        children.entry(span.parent_span_id).or_default().push(span);
    }
    for list in children.values_mut() {
        list.sort_by_key(|s| s.start_time);
    }
    let ids: Vec<SpanId> = spans.iter().map(|s| s.span_context.span_id()).collect();
    let roots = spans.iter().filter(|s| !ids.contains(&s.parent_span_id));
    for root in roots {
        print_span(root, &children, 1);
    }
}

fn print_span(span: &SpanData, children: &HashMap<SpanId, Vec<&SpanData>>, depth: usize) {
    let took = span
        .end_time
        .duration_since(span.start_time)
        .unwrap_or_default();
    println!(
        "{:indent$}{} ({took:.1?})",
        "",
        span.name,
        indent = depth * 2
    );
    let mut attributes: Vec<String> = span
        .attributes
        .iter()
        // Leave out what tracing-opentelemetry adds about the process itself.
        .filter(|kv| {
            let key = kv.key.as_str();
            !matches!(key, "busy_ns" | "idle_ns" | "target")
                && !key.starts_with("code.")
                && !key.starts_with("thread.")
        })
        .map(|kv| format!("{}={}", kv.key, kv.value))
        .collect();
    attributes.sort();
    for attribute in attributes {
        println!("{:indent$}  {attribute}", "", indent = depth * 2);
    }
    for child in children
        .get(&span.span_context.span_id())
        .into_iter()
        .flatten()
    {
        print_span(child, children, depth + 1);
    }
}
