//! What loomflow reports through [`tracing`]: its spans, their fields, and trace links.
//!
//! Every span is at `INFO` level with target `loomflow`, so a subscriber filter such as
//! `loomflow=info` selects them all. The GenAI spans follow the OpenTelemetry semantic
//! conventions for generative AI: the `tracing` span name is the operation (`chat`), and the
//! `otel.name` field carries the full OpenTelemetry name (`chat gpt-4o`), which
//! `tracing-opentelemetry` uses as the exported span's name.
//!
//! | span (`otel.name`) | where | fields |
//! | --- | --- | --- |
//! | `invoke_agent {agent}` | an [`Agent`](crate::agent::Agent) call: `run`, `stream`, `resume`; a run of it as another graph's node (a team's member) | `gen_ai.operation.name`, `gen_ai.agent.name`, `gen_ai.conversation.id` |
//! | `chat {model}` | one model call of an agent | `gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.response.model`, `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`, `gen_ai.response.finish_reasons` (a string array when exported through OpenTelemetry with the `otel` feature on; its JSON text otherwise, `tracing-opentelemetry` without the feature included), `error.type`; with content recording on, `gen_ai.input.messages` and `gen_ai.output.messages` |
//! | `execute_tool {tool}` | one tool call of a [`ToolHost`](crate::tool::ToolHost) | `gen_ai.operation.name`, `gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.tool.type`, `error.type`; with content recording on, `gen_ai.tool.call.arguments` and `gen_ai.tool.call.result` |
//! | `run {graph}` | one execution of a run, from its claim to its end or suspension | `loomflow.graph`, `loomflow.thread`, `loomflow.run`, `loomflow.namespace`, `loomflow.resumed`, `loomflow.outcome`; an error status (`otel.status_code`) when it fails |
//! | `superstep {n}` | one superstep | `loomflow.step`, `loomflow.nodes` |
//! | `node {name}` | one node execution | `loomflow.node`, `loomflow.step` |
//! | `wait_signal {name}` | a node's `wait_for_signal` | `loomflow.thread`, `loomflow.signal`, `loomflow.outcome` (`received`, `suspended`, `timed_out`, `cancelled` or `error`) |
//! | `send_signal {name}` | [`Runtime::signal`](crate::Runtime::signal) | `loomflow.thread`, `loomflow.signal`, `loomflow.delivery`; `error.type` and an error status when the send is refused |
//! | `suspend` | writing a suspension | `loomflow.step`, `loomflow.interrupts` |
//! | `resume` | picking a run up from its checkpoint | `loomflow.step` (the superstep it carries on with, as `suspend` numbers it), `loomflow.status` |
//!
//! Spans nest as the work does: `invoke_agent` › `run` › `superstep` › `node` › `chat` or
//! `execute_tool`.
//!
//! Prompt and completion text, tool arguments and tool results are content: they are
//! recorded only when asked for ([`AgentBuilder::record_content`](crate::agent::AgentBuilder::record_content),
//! [`ToolHost::record_content`](crate::tool::ToolHost::record_content)).
//!
//! # Trace links (feature `otel`)
//!
//! A run that stops (it suspends, or its process dies) and is carried on later, perhaps by
//! another worker, starts a new trace. With the `otel` feature, each checkpoint keeps the
//! W3C `traceparent` of the execution that wrote it, and the execution that carries the run
//! on adds an OpenTelemetry link from its `run` span to that earlier one. This needs the
//! application's subscriber to include a `tracing-opentelemetry` 0.34 layer.

use tracing::Span;

/// The target of every span loomflow opens.
pub const TARGET: &str = "loomflow";

/// The W3C `traceparent` of the current span's OpenTelemetry context: `None` without the
/// `otel` feature (the current span is not looked up), or when no `tracing-opentelemetry`
/// layer records the span.
pub(crate) fn current_trace_parent() -> Option<String> {
    #[cfg(feature = "otel")]
    {
        use opentelemetry::trace::TraceContextExt as _;
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        let span = Span::current();
        if span.is_disabled() {
            return None;
        }
        let context = span.context();
        let otel = context.span();
        let ids = otel.span_context();
        if !ids.is_valid() {
            return None;
        }
        Some(format!(
            "00-{}-{}-{:02x}",
            ids.trace_id(),
            ids.span_id(),
            ids.trace_flags().to_u8()
        ))
    }
    #[cfg(not(feature = "otel"))]
    {
        None
    }
}

/// Links `span` to the span a W3C `traceparent` names (feature `otel`); does nothing when the
/// text is not one, or without the feature.
pub(crate) fn link_to(span: &Span, traceparent: &str) {
    #[cfg(feature = "otel")]
    {
        use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        let mut parts = traceparent.split('-');
        let (Some("00"), Some(trace), Some(id), Some(flags), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return;
        };
        let (Ok(trace), Ok(id), Ok(flags)) = (
            TraceId::from_hex(trace),
            SpanId::from_hex(id),
            u8::from_str_radix(flags, 16),
        ) else {
            return;
        };
        let context = SpanContext::new(
            trace,
            id,
            TraceFlags::new(flags),
            true,
            TraceState::default(),
        );
        if context.is_valid() {
            span.add_link(context);
        }
    }
    #[cfg(not(feature = "otel"))]
    {
        let _ = (span, traceparent);
    }
}

/// Records a list of strings in `span`'s `field`: where a `tracing-opentelemetry` layer
/// records the span (feature `otel`), as the string array the semantic conventions ask for;
/// for any other subscriber, as the list's JSON text (`["stop"]`), a field holding no lists.
pub(crate) fn record_strings(span: &Span, field: &'static str, values: &[&str]) {
    #[cfg(feature = "otel")]
    {
        use opentelemetry::trace::TraceContextExt as _;
        use opentelemetry::{Array, StringValue, Value};
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        if !span.is_disabled() && span.context().span().span_context().is_valid() {
            let values = values.iter().map(|v| StringValue::from(v.to_string()));
            span.set_attribute(field, Value::Array(Array::String(values.collect())));
            return;
        }
    }
    let text = serde_json::to_string(values).unwrap_or_default();
    span.record(field, text.as_str());
}

/// A count (a run's number, a step, tokens) as a span records it: an `i64`, which
/// `tracing-opentelemetry` exports as an integer attribute (a `u64` goes as its text).
pub(crate) fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Marks `span` failed with `error`: its `error.type` and an error status, as the
/// conventions say a failed operation's span is marked.
pub(crate) fn record_failure(span: &Span, error: &dyn std::fmt::Debug) {
    span.record("error.type", error_type(error).as_str());
    span.record("otel.status_code", "ERROR");
}

/// The OpenTelemetry `error.type` of an error: its type's name, in snake case
/// (`ModelError::RateLimited` is `rate_limited`), from its `Debug` form.
pub(crate) fn error_type(error: &dyn std::fmt::Debug) -> String {
    let debug = format!("{error:?}");
    let head: String = debug
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    let mut out = String::with_capacity(head.len() + 4);
    for (i, c) in head.chars().enumerate() {
        if c.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    if out.is_empty() {
        "error".to_owned()
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::error_type;

    #[derive(Debug)]
    #[allow(dead_code)] // read through `Debug`
    enum Sample {
        RateLimited { seconds: u64 },
        Timeout,
    }

    #[test]
    fn error_types_are_variant_names_in_snake_case() {
        assert_eq!(
            error_type(&Sample::RateLimited { seconds: 3 }),
            "rate_limited"
        );
        assert_eq!(error_type(&Sample::Timeout), "timeout");
        assert_eq!(error_type(&"quoted"), "error");
    }
}
