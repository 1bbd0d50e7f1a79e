//! The ReAct loop as a graph: a `model` node and a `tools` node, with a branch on "the reply
//! asks for tools".
//!
//! ```text
//! START → model ─(tool calls)→ tools → model …
//!               ─(schema retry)→ model
//!               ─(answer, a limit, or a cut or filtered reply)→ END
//! ```
//!
//! Model replies and tool results are journaled (`ctx.step`), so a run that resumes or
//! recovers replays them instead of calling the model or the tools again.

use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::future::join_all;
use tokio::sync::Semaphore;
use tracing::Instrument;

use super::budget::Ran;
use super::guarded::{self, ToolStepOutcome};
use super::guardrail::GuardStage;
use super::observe;
use super::state::AgentState;
use super::{AgentCore, StopReason};
use crate::context::Context;
use crate::error::GraphError;
use crate::graph::{
    BoxFuture, CompiledGraph, END, Graph, Node, NodeError, NodeResult, RunError, START,
};
use crate::model::{
    FinishReason, Message, Model, ModelError, ModelRequest, ModelResponse, StreamAccumulator,
    Transcript,
};
use crate::tool::{AgentEvent, DispatchContext};
use crate::{Error, Result};

/// The loop of `core`; as another graph's node (a team's member), a run of it takes at most
/// `timeout`, as the agent's own runs do.
pub(super) fn build(
    core: &Arc<AgentCore>,
    timeout: Option<std::time::Duration>,
) -> Result<CompiledGraph<AgentState>, GraphError> {
    let mut graph = Graph::new(core.name.clone());
    if let Some(after) = timeout {
        let agent = core.name.clone();
        graph = graph.time_limit(crate::graph::TimeLimit {
            after,
            error: Arc::new(move |session: &str| {
                Error::from(super::AgentError::Timeout {
                    agent: agent.clone(),
                    session: session.to_owned(),
                    seconds: after.as_secs_f64(),
                })
                .into()
            }),
        });
    }
    // As a team's member, or any graph's node: its runs have their `invoke_agent` span too.
    let spanned = Arc::clone(core);
    graph = graph.embedded_span(crate::graph::EmbeddedSpan {
        make: Arc::new(move |session: &str| {
            super::observe::agent_span(&spanned.name, spanned.model.name(), session)
        }),
        failed: Arc::new(super::observe::mark_run_failed),
    });
    graph
        .node(ModelNode(Arc::clone(core)))
        .node(ToolsNode(Arc::clone(core)))
        .edge(START, "model")
        .branch("model", ["tools", "model", END], |state: &AgentState| {
            if state.stopped.is_some() {
                END
            } else if state
                .last_message()
                .is_some_and(|m| !m.tool_calls().is_empty())
            {
                "tools"
            } else if state.output.is_none() {
                "model" // the output failed its schema; the model was told why
            } else {
                END
            }
        })
        .branch("tools", ["model", END], |state: &AgentState| {
            if state.handoff.is_some() || state.stopped.is_some() {
                END
            } else {
                "model"
            }
        })
        .recursion_limit(core.recursion_limit())
        .compile()
}

struct ModelNode(Arc<AgentCore>);

impl Node<AgentState> for ModelNode {
    fn name(&self) -> &str {
        "model"
    }

    fn description(&self) -> Option<&str> {
        Some(self.0.model.name())
    }

    fn run<'a>(&'a self, state: &'a mut AgentState, ctx: &'a Context) -> BoxFuture<'a, NodeResult> {
        Box::pin(async move {
            state.count_running_time();
            let turn = model_turn(&self.0, state, ctx).await;
            state.count_running_time();
            turn.map_err(NodeError::from)
        })
    }
}

/// Stops the run for `reason` (a turn limit, a budget) before it had an answer. Its answer
/// so far is its output: the output guardrails check it here, inside the run, so that a
/// team that reads its member's answer reads what they passed, as `Agent::run` does.
async fn stop_before_answer(
    core: &AgentCore,
    state: &mut AgentState,
    ctx: &Context,
    reason: StopReason,
) -> Result<()> {
    state.stopped = Some(reason);
    guarded::check_answer_so_far(core, state, ctx).await
}

async fn model_turn(core: &AgentCore, state: &mut AgentState, ctx: &Context) -> Result<()> {
    // The prompt first, whatever stops the run after: what the session keeps of it (and a
    // later run sends) is what the input guardrails passed.
    super::guarded::check_input(core, state, ctx).await?;
    if state.stopped.is_some() {
        return Ok(());
    }
    // A turn whose answer could not be told apart from a tool's calls fails before a memory
    // search or a compaction's model call is paid for.
    let tools = core.tools.for_session(ctx.thread());
    core.check_output_name(state.output_schema.as_ref(), &tools)?;
    if state.turns >= state.max_turns.unwrap_or(core.max_turns) {
        return stop_before_answer(core, state, ctx, StopReason::MaxTurns).await;
    }
    if let Some(cap) = core.budget.exceeded(state) {
        return stop_before_answer(core, state, ctx, StopReason::Budget(cap)).await;
    }
    super::memory::recall(core, state, ctx).await?;
    super::window::manage(core, state, ctx).await?;
    // A compaction's summary may have spent what was left of the budget.
    if let Some(cap) = core.budget.exceeded(state) {
        return stop_before_answer(core, state, ctx, StopReason::Budget(cap)).await;
    }
    let request = core.request(
        &state.messages,
        state.recalled.as_deref(),
        state.output_schema.as_ref(),
        &tools,
    );
    let user = state.user.as_deref();
    let ran = Ran::default();
    let response: ModelResponse = ctx
        .step("model", || {
            ran.mark();
            super::rate_limit::call_model(core, &*core.model, request, user, ctx, Chunks::Emit)
        })
        .await
        .map_err(super::rate_limit::surface)?;
    state.turns += 1;
    state.usage += response.usage;
    let answered = response.model.as_deref();
    let cost = add_cost(core, core.model.name(), state, &response.usage, answered);
    if ran.happened() {
        core.budget
            .record(state.user.as_deref(), response.usage, cost);
    }
    if !response.tool_calls.is_empty() {
        // The reply is read no further: its text and calls move into the transcript.
        state.messages.push(Message::Assistant {
            content: response.content,
            tool_calls: response.tool_calls,
        });
        return Ok(());
    }
    state.messages.push(response.message());
    if let Some(stop) = unfinished(&response.finish_reason) {
        return stop_unfinished(core, state, ctx, response.content, stop).await;
    }
    // Checked, with the schema before it was made strict that tells which fields may be
    // left out; out of the code fence a model asked for JSON in its prompt may put it in.
    let answer = super::output::unfenced(&response.content);
    let checked = match (&state.output_schema, &core.output) {
        (Some(own), _) => Some(
            super::output::check_against(&own.schema, answer)
                .map(|()| state.output_fields.as_ref()),
        ),
        (None, Some(output)) => Some((output.validate)(answer).map(|()| Some(&output.fields))),
        (None, None) => None,
    };
    match checked {
        None => state.output = Some(response.content),
        Some(Ok(fields)) => {
            let settled = fields.and_then(|f| super::output::settled(f, answer));
            state.output = Some(settled.unwrap_or_else(|| answer.to_owned()));
        }
        Some(Err(problem)) if state.schema_retries < core.max_schema_retries => {
            state.schema_retries += 1;
            state.messages.push(super::output::retry_note(&problem));
        }
        Some(Err(problem)) => {
            return Err(super::AgentError::OutputSchema {
                agent: core.name.clone(),
                attempts: state.schema_retries + 1,
                problem,
            }
            .into());
        }
    }
    let rewritten = super::guarded::check_output(core, state, ctx).await?;
    if rewritten.0 {
        // What the guardrails made of a checked answer must fit the schema too; asking the
        // model again would meet the same rewrite.
        super::output::check_rewritten(core, state)?;
    }
    if state.output.is_some() {
        super::memory::extract(core, state, ctx).await?;
    }
    Ok(())
}

/// Why a final reply (one without tool calls) is not a whole answer, if it is not: the
/// token limit cut it short, or the provider filtered it.
fn unfinished(finish: &FinishReason) -> Option<StopReason> {
    match finish {
        FinishReason::Length => Some(StopReason::Truncated),
        FinishReason::ContentFilter => Some(StopReason::ContentFilter),
        _ => None,
    }
}

/// Stops the run on a reply that is not a whole answer (the transcript's last message),
/// rather than pass it off as the output or spend output-schema retries on it. The output
/// guardrails still check it first: the run's output shows it.
async fn stop_unfinished(
    core: &AgentCore,
    state: &mut AgentState,
    ctx: &Context,
    reply: String,
    stop: StopReason,
) -> Result<()> {
    state.output = Some(reply);
    super::guarded::check_output(core, state, ctx).await?;
    state.output = None;
    // a guardrail that blocked the reply has named itself the reason
    state.stopped.get_or_insert(stop);
    Ok(())
}

/// Adds what `usage` of `model` (by its name) cost to the run's `cost_usd`, at the agent's
/// prices (by that name, or else the one the provider reported, `answered`), and returns
/// it (`None` when it is not priced).
pub(super) fn add_cost(
    core: &AgentCore,
    model: &str,
    state: &mut AgentState,
    usage: &crate::model::Usage,
    answered: Option<&str>,
) -> Option<f64> {
    if core.prices.is_empty() {
        return None;
    }
    let priced = core
        .prices
        .cost_usd(model, usage)
        .or_else(|| core.prices.cost_usd(answered?, usage));
    match priced {
        Some(cost) => state.cost_usd = Some(state.cost_usd.unwrap_or(0.0) + cost),
        None => tracing::warn!(
            agent = %core.name,
            model,
            "the agent's price table has no price for the model; the call is not costed"
        ),
    }
    priced
}

/// Whether a model call's chunks reach the run's listener as they stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Chunks {
    /// Streamed to the listener, when the run has one (the agent's own turns).
    Emit,
    /// Never streamed: the answer is for the agent, not the user (memory extraction).
    Withhold,
}

/// Calls `model` (the agent's, or one it uses for a chore such as a summary) under a
/// `chat {model}` span; see [`call_model_untraced`].
pub(super) async fn call_model(
    core: &AgentCore,
    model: &dyn Model,
    request: ModelRequest,
    ctx: &Context,
    chunks: Chunks,
) -> Result<ModelResponse> {
    let name = model.name();
    let span = observe::chat_span(name);
    let sent = (core.record_content && !span.is_disabled()).then(|| request.messages.clone());
    let mut result = call_model_untraced(core, model, request, ctx, chunks)
        .instrument(span.clone())
        .await;
    if let Ok(response) = &mut result {
        // Before the step journals the reply: a resumed run reads the same ids back.
        response.name_unnamed_calls();
    }
    observe::record_chat(
        &span,
        name,
        sent.as_ref().unwrap_or(&Transcript::new()),
        &result,
        sent.is_some(),
    );
    Ok(result?)
}

/// Calls the model; streams (and surfaces the chunks as events) when someone listens.
async fn call_model_untraced(
    core: &AgentCore,
    model: &dyn Model,
    request: ModelRequest,
    ctx: &Context,
    chunks: Chunks,
) -> Result<ModelResponse, ModelError> {
    if chunks == Chunks::Withhold || !ctx.has_listener() {
        return model.complete(request).await;
    }
    let guarded_text = !core.guardrails.is_empty();
    let mut stream = model.stream(request);
    let mut accumulator = StreamAccumulator::new();
    let mut shown = false;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|error| shown_already(error, shown))?;
        // An answer is shown once its guardrails have passed it, not as it streams.
        let withheld = guarded_text && matches!(chunk, crate::model::StreamChunk::Text { .. });
        if !withheld {
            // A cancel stops the run after this step, as it would without a stream.
            let _ = ctx.event_room().await;
            if ctx.has_listener() {
                AgentEvent::ModelChunk {
                    chunk: chunk.clone(),
                }
                .emit(ctx);
                shown = true;
            }
        }
        accumulator.push(chunk);
    }
    // `openai:gpt-4o` names the provider and the model
    let name = model.name();
    let (provider, model) = name.split_once(':').unwrap_or(("model", name));
    accumulator.finish(provider, model)
}

/// A rate limit a streamed reply reports after some of it was shown is the stream's error,
/// not a call to try again: a retry would show the listener a second reply after the
/// first's beginning (the adapters retry only before any content, for the same reason).
fn shown_already(error: ModelError, shown: bool) -> ModelError {
    match error {
        ModelError::RateLimited {
            provider,
            model,
            message,
            ..
        } if shown => ModelError::StreamError {
            provider,
            model,
            kind: "rate_limited".to_owned(),
            message,
        },
        error => error,
    }
}

struct ToolsNode(Arc<AgentCore>);

impl Node<AgentState> for ToolsNode {
    fn name(&self) -> &str {
        "tools"
    }

    fn description(&self) -> Option<&str> {
        Some("runs the tool calls of the model's last reply")
    }

    fn run<'a>(&'a self, state: &'a mut AgentState, ctx: &'a Context) -> BoxFuture<'a, NodeResult> {
        Box::pin(async move {
            state.count_running_time();
            let started_ms = state.running_ms;
            let turn = tool_turn(&self.0, state, ctx).await;
            state.count_running_time();
            if self.0.budget.caps_wall_clock() {
                // Whether it suspends or finishes: a suspension loses this state.
                let this_leg_ms = state.running_ms.saturating_sub(started_ms);
                // Its store failure is handled here: the turn's own failure stands.
                let carried = ctx
                    .unnoted(super::budget::carry_leg(ctx, this_leg_ms))
                    .await;
                match (carried, &turn) {
                    (Ok(earlier), _) => {
                        state.running_ms = state.running_ms.saturating_add(earlier);
                    }
                    // The turn's own outcome (a suspension, a failure) stands: only its
                    // running time goes uncounted.
                    (Err(error), Err(_)) => {
                        tracing::warn!(%error, "could not journal the tools step's running time");
                    }
                    (Err(error), Ok(())) => return Err(NodeError::from(error)),
                }
            }
            turn.map_err(NodeError::from)
        })
    }
}

async fn tool_turn(core: &AgentCore, state: &mut AgentState, ctx: &Context) -> Result<()> {
    // The model's reply, shared rather than copied: its calls are read while results are
    // added to the transcript.
    let reply = state.messages.last_shared();
    let calls = reply.as_deref().map_or(&[][..], Message::tool_calls);
    let user = state.user.clone();
    let dispatch = DispatchContext::new(ctx.thread())
        .user(user.as_deref())
        .runtime(ctx.runtime())
        .node(ctx);
    // One journaled step per call: a call that finished before a suspension or a crash is
    // not made again.
    let names: Vec<String> = calls.iter().map(|c| ["tool:", &c.id].concat()).collect();
    let host = core.tools.for_session(ctx.thread());
    let host = &*host;
    // The host's concurrency limit across the steps: each call's tool takes a slot while it
    // runs, not while the call waits for its approval.
    let slots = Semaphore::new(host.concurrency_limit());
    let dispatch = dispatch.slots(&slots);
    let cx = guarded::guard_context(core, state, ctx);
    let verdicts = guarded::check_tool_calls(core, calls, cx, ctx).await?;
    let verdicts = &verdicts;
    // Which calls ran in this execution: a result journaled before is not streamed again.
    let ran: Vec<Ran> = calls.iter().map(|_| Ran::default()).collect();
    let ran = &ran;
    let call_step = |at: usize| {
        let (call, name) = (&calls[at], &names[at]);
        ctx.step(name, move || async move {
            // A store's failure under the call (asking its approval, taking its decision)
            // goes to the step as the store's: the run is let go rather than failed.
            let work = async {
                ran[at].mark();
                // Built only for a listener: the arguments may be large.
                if ctx.has_listener() {
                    AgentEvent::ToolCall {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        arguments: call.arguments.clone(),
                    }
                    .emit(ctx);
                }
                let rewritten = match verdicts.get(at) {
                    None | Some(Ok(None)) => None,
                    Some(Ok(Some(rewritten))) => Some(rewritten),
                    Some(Err(refusal)) => {
                        return Ok::<_, Error>(ToolStepOutcome {
                            content: refusal.clone(),
                            is_error: true,
                            blocked: None,
                        });
                    }
                };
                let outcome = host
                    .dispatch(std::slice::from_ref(rewritten.unwrap_or(call)), dispatch)
                    .await?
                    .pop()
                    .ok_or_else(|| {
                        Error::msg(format!(
                            "tool host returned no outcome for call {}",
                            call.id
                        ))
                    })?;
                let outcome = ToolStepOutcome {
                    content: outcome.content,
                    is_error: outcome.is_error,
                    blocked: None,
                };
                Ok(guarded::check_tool_result(core, &call.name, outcome, cx).await)
            };
            work.await.map_err(Error::into_step_source)
        })
    };
    // A single call (the common turn) is awaited as it is: joining one future would put
    // it in a list of its own, an allocation of its whole size.
    let results = match calls.len() {
        1 => vec![call_step(0).await],
        n => join_all((0..n).map(call_step)).await,
    };
    let mut suspended = None;
    let mut block = None;
    // The agent a handoff in this reply went to: a reply hands off once, to the first.
    let mut handed_to: Option<&str> = None;
    for ((call, result), ran) in calls.iter().zip(results).zip(ran) {
        match result {
            Ok(ToolStepOutcome {
                mut content,
                mut is_error,
                blocked,
            }) => {
                // A handoff happens when its call did: one denied, refused by a guardrail or
                // failed hands nothing off (the model reads why instead).
                if !is_error
                    && blocked.is_none()
                    && let Some(target) = core.handoff_target(&call.name)
                {
                    match handed_to {
                        None => {
                            state.handoff = Some(target.to_owned());
                            handed_to = Some(target);
                        }
                        Some(first) => {
                            content = format!(
                                "not transferred to {target}: this reply already transferred the conversation to {first}"
                            );
                            is_error = true;
                        }
                    }
                }
                block = block.or(blocked);
                if ran.happened() && ctx.has_listener() {
                    AgentEvent::ToolResult {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        content: content.clone(),
                        is_error,
                    }
                    .emit(ctx);
                }
                state.messages.push(if is_error {
                    Message::tool_error(&call.id, content)
                } else {
                    Message::tool_result(&call.id, content)
                });
            }
            Err(error @ RunError::Suspended { .. }) => suspended = Some(error),
            Err(error) => return Err(error.into()),
        }
    }
    if let Some(error) = suspended {
        return Err(error.into());
    }
    match block {
        Some((guardrail, reason)) => {
            guarded::blocked(core, state, ctx, GuardStage::ToolResult, guardrail, reason)
        }
        None => Ok(()),
    }
}
