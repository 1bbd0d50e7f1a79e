//! An agent's model call through its rate limiter: take from the buckets, call, correct the
//! buckets by the actual usage, and after a provider's 429 pause the model and try again.

use std::time::Duration;

use super::RateLimitMode;
use crate::agent::react::Chunks;
use crate::agent::{AgentCore, AgentError, AgentEvent};
use crate::context::Context;
use crate::graph::RunError;
use crate::model::{Model, ModelError, ModelRequest, ModelResponse};
use crate::{Error, Result};

/// Calls `model` (the agent's, or one it uses for a chore) for a run of `user`, through the
/// agent's rate limiter if it has one. Runs inside a journaled step, so a replayed step
/// does none of this.
pub(in crate::agent) async fn call_model(
    core: &AgentCore,
    model: &dyn Model,
    request: ModelRequest,
    user: Option<&str>,
    ctx: &Context,
    chunks: Chunks,
) -> Result<ModelResponse> {
    let Some(limiter) = &core.rate_limiter else {
        return crate::agent::react::call_model(core, model, request, ctx, chunks).await;
    };
    let called = model;
    let model = called.name();
    let tokens = estimate_tokens(&request);
    let mut retries = limiter.config.retries;
    let mut request = request;
    let refused = |retry_after: Duration| AgentError::RateLimited {
        agent: core.name.clone(),
        model: model.to_owned(),
        user: user.map(str::to_owned),
        // whole milliseconds, rounded up: waiting that long is enough
        retry_after: Duration::from_millis(
            u64::try_from(retry_after.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX),
        ),
    };
    loop {
        let permit = limiter
            .acquire(model, user, tokens)
            .await
            .map_err(refused)?;
        if !permit.waited().is_zero() {
            report_wait(core, model, user, permit.waited(), ctx);
        }
        // The request is kept only while a retry may need it.
        let attempt = if retries > 0 {
            request.clone()
        } else {
            std::mem::take(&mut request)
        };
        match crate::agent::react::call_model(core, called, attempt, ctx, chunks).await {
            Ok(response) => {
                // A reply that says nothing of its usage (a server that leaves it out, a
                // scripted model) keeps its estimate: given back, it would not count at all.
                let used = response.usage.total_tokens();
                if used > 0 {
                    permit.settle(used);
                }
                return Ok(response);
            }
            Err(error) => {
                permit.settle(0);
                let Error::Model(cause @ ModelError::RateLimited { .. }) = &error else {
                    return Err(error);
                };
                let pause = cause.retry_after().unwrap_or(limiter.config.backoff);
                if pause > limiter.config.max_pause {
                    // An hourly or daily quota: this call fails, as the adapter's own retry
                    // gives up, rather than hold every run of the model that long.
                    return Err(error);
                }
                limiter.pause(model, pause);
                if limiter.config.mode == RateLimitMode::Fail {
                    // Failing fast: the caller is told how long, and nothing waits here.
                    return Err(refused(pause).into());
                }
                if retries == 0 {
                    return Err(error);
                }
                tracing::warn!(
                    agent = %core.name,
                    model,
                    pause_ms = millis(pause),
                    retries_left = retries - 1,
                    "the provider rate limited the model; its calls pause, then this one is tried again"
                );
                retries -= 1;
            }
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Says that a model call waited for the limiter: an `INFO` event and an agent event.
fn report_wait(core: &AgentCore, model: &str, user: Option<&str>, waited: Duration, ctx: &Context) {
    let waited_ms = millis(waited);
    tracing::info!(
        agent = %core.name,
        model,
        user,
        waited_ms,
        "the model call waited for the rate limiter"
    );
    AgentEvent::RateLimited {
        model: model.to_owned(),
        waited_ms,
    }
    .emit(ctx);
}

/// The tokens a request will likely use: its text at about four bytes a token, plus the
/// most it may generate (`max_tokens`) when set. The actual usage corrects it afterwards.
pub(super) fn estimate_tokens(request: &ModelRequest) -> u64 {
    let messages: usize = request
        .messages
        .iter()
        .map(|m| {
            m.text().len()
                + m.tool_calls()
                    .iter()
                    .map(|c| c.name.len() + json_len(&c.arguments))
                    .sum::<usize>()
        })
        .sum();
    let tools: usize = request
        .tools
        .iter()
        .map(|t| t.name.len() + t.description.len() + json_len(&t.parameters))
        .sum();
    let schema = request
        .output_schema
        .as_ref()
        .map_or(0, |s| json_len(&s.schema));
    let bytes = u64::try_from(messages + tools + schema).unwrap_or(u64::MAX);
    bytes.div_ceil(4) + request.max_tokens.map_or(0, u64::from)
}

fn json_len(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::Null => 0,
        serde_json::Value::String(s) => s.len(),
        other => other.to_string().len(),
    }
}

/// The error of a failed model step: a limiter's refusal ([`RateLimitMode::Fail`]) comes
/// out as the [`AgentError::RateLimited`] it is, not wrapped in the failed step.
pub(in crate::agent) fn surface(error: RunError) -> Error {
    match error {
        RunError::StepFailed { node, name, source } => match source.downcast::<Error>() {
            Ok(error) if matches!(*error, Error::Agent(AgentError::RateLimited { .. })) => *error,
            Ok(error) => RunError::StepFailed {
                node,
                name,
                source: error,
            }
            .into(),
            Err(source) => RunError::StepFailed { node, name, source }.into(),
        },
        other => other.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Message, OutputSchema, ToolCall, ToolDefinition};
    use serde_json::json;

    #[test]
    fn the_estimate_is_a_quarter_of_the_text_plus_max_tokens() {
        let request = ModelRequest::new(vec![
            Message::system("x".repeat(40)),
            Message::user("y".repeat(41)),
        ]);
        assert_eq!(estimate_tokens(&request), 21); // 81 bytes, rounded up
        assert_eq!(estimate_tokens(&request.clone().max_tokens(500)), 521);
    }

    #[test]
    fn tool_calls_tools_and_schemas_count_too() {
        let bare = ModelRequest::new(vec![Message::user("")]);
        assert_eq!(estimate_tokens(&bare), 0);
        let call = Message::assistant_tool_calls(vec![ToolCall::new(
            "c1",
            "weather",
            json!({ "city": "Oslo" }),
        )]);
        assert!(estimate_tokens(&ModelRequest::new(vec![call])) >= 5);
        let tools = bare.clone().tools(vec![ToolDefinition::new(
            "weather",
            "The weather in a city, now.",
            json!({ "type": "object" }),
        )]);
        assert!(estimate_tokens(&tools) >= 12);
        let schema = bare.output_schema(OutputSchema::new("a", json!({ "type": "object" })));
        assert!(estimate_tokens(&schema) >= 4);
    }
}
