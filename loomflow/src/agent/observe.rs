//! What an agent reports: its `invoke_agent` span and a `chat` span per model call (see
//! [`crate::telemetry`]).

use tracing::{Instrument, Span};

use crate::model::{FinishReason, ModelError, ModelResponse, Transcript};
use crate::telemetry::{self, TARGET};

/// The `invoke_agent {name}` span of one call of an agent (`run`, `stream`, `resume`), with
/// the provider and model of the agent's model, as the GenAI conventions ask of it.
pub(super) fn agent_span(agent: &str, model_name: &str, session: &str) -> Span {
    let (provider, model) = provider_and_model(model_name);
    tracing::info_span!(
        target: TARGET,
        "invoke_agent",
        otel.name = %format!("invoke_agent {agent}"),
        gen_ai.operation.name = "invoke_agent",
        gen_ai.provider.name = %provider,
        gen_ai.request.model = %model,
        gen_ai.agent.name = %agent,
        gen_ai.conversation.id = %session,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// Runs `call` (a run of an agent) under its `invoke_agent` span, and marks the span failed
/// when the call fails: not when the run was cancelled or handed back (a worker shutting
/// down), which its `run` span does not count as failures either.
pub(super) async fn in_agent_span<T>(
    span: Span,
    call: impl Future<Output = crate::Result<T>>,
) -> crate::Result<T> {
    use crate::RunError::{Cancelled, Yielded};
    let result = call.instrument(span.clone()).await;
    if let Err(error) = &result
        && !matches!(error, crate::Error::Run(Cancelled { .. } | Yielded { .. }))
    {
        span.record("error.type", failure_type(error).as_str());
        span.record("otel.status_code", "ERROR");
    }
    result
}

/// Marks an agent's `invoke_agent` span failed with `error`: the failure of its run as
/// another graph's node (a team's member), as [`in_agent_span`] marks a call's.
pub(super) fn mark_run_failed(span: &Span, error: &(dyn std::error::Error + 'static)) {
    let kind = match (
        error.downcast_ref::<crate::RunError>(),
        error.downcast_ref(),
    ) {
        (Some(run), _) => run_failure_type(run),
        (None, Some(error)) => failure_type(error),
        (None, None) => telemetry::error_type(&error),
    };
    span.record("error.type", kind.as_str());
    span.record("otel.status_code", "ERROR");
}

/// The `error.type` of an agent run's failure: the variant of the error that caused it,
/// under the crate's and the run's wrappers (a model's `RateLimited` is `rate_limited`,
/// not `model`).
fn failure_type(error: &crate::Error) -> String {
    use crate::Error;
    match error {
        Error::Graph(e) => telemetry::error_type(e),
        Error::Run(e) => run_failure_type(e),
        Error::Store(e) => telemetry::error_type(e),
        Error::Model(e) => telemetry::error_type(e),
        Error::Agent(e) => telemetry::error_type(e),
        Error::Tool(e) => telemetry::error_type(e),
        Error::Memory(e) => telemetry::error_type(e),
        Error::Signal(e) => telemetry::error_type(e),
        Error::Runtime(e) => telemetry::error_type(e),
        other => telemetry::error_type(other),
    }
}

fn run_failure_type(error: &crate::RunError) -> String {
    use crate::RunError;
    let source = match error {
        RunError::NodeFailed { source, .. } | RunError::StepFailed { source, .. } => source,
        RunError::Store(e) => return telemetry::error_type(e),
        other => return telemetry::error_type(other),
    };
    if let Some(inner) = source.downcast_ref::<crate::Error>() {
        return failure_type(inner);
    }
    match source.downcast_ref::<RunError>() {
        Some(inner) => run_failure_type(inner),
        None => telemetry::error_type(source),
    }
}

/// A model's provider and model, from its name (`openai:gpt-4o`; a name without a provider
/// is both).
pub(super) fn provider_and_model(name: &str) -> (&str, &str) {
    name.split_once(':').unwrap_or((name, name))
}

/// The `chat {model}` span of one model call.
pub(super) fn chat_span(model_name: &str) -> Span {
    let (provider, model) = provider_and_model(model_name);
    tracing::info_span!(
        target: TARGET,
        "chat",
        otel.name = %format!("chat {model}"),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = %provider,
        gen_ai.request.model = %model,
        gen_ai.response.model = tracing::field::Empty,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        gen_ai.response.finish_reasons = tracing::field::Empty,
        gen_ai.input.messages = tracing::field::Empty,
        gen_ai.output.messages = tracing::field::Empty,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// Records a model call's result on its span; with `content`, the messages sent and the
/// reply too.
pub(super) fn record_chat(
    span: &Span,
    model_name: &str,
    messages: &Transcript,
    result: &Result<ModelResponse, ModelError>,
    content: bool,
) {
    if span.is_disabled() {
        return;
    }
    if content {
        let sent = serde_json::to_string(messages).unwrap_or_default();
        span.record("gen_ai.input.messages", sent.as_str());
    }
    match result {
        Ok(response) => {
            let model = response
                .model
                .as_deref()
                .unwrap_or_else(|| provider_and_model(model_name).1);
            span.record("gen_ai.response.model", model);
            let usage = &response.usage;
            span.record(
                "gen_ai.usage.input_tokens",
                telemetry::count(usage.input_tokens),
            );
            span.record(
                "gen_ai.usage.output_tokens",
                telemetry::count(usage.output_tokens),
            );
            let reason = finish_reason(&response.finish_reason);
            telemetry::record_strings(span, "gen_ai.response.finish_reasons", &[reason]);
            if content {
                let reply = serde_json::to_string(&response.message()).unwrap_or_default();
                span.record("gen_ai.output.messages", reply.as_str());
            }
        }
        Err(error) => {
            telemetry::record_failure(span, error);
        }
    }
}

/// A finish reason as the GenAI conventions name it.
fn finish_reason(reason: &FinishReason) -> &str {
    match reason {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_call",
        FinishReason::ContentFilter => "content_filter",
        FinishReason::Other(other) => other,
    }
}
