//! Running an agent: [`AgentRun`] (configure, then await) and [`RunResult`].

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context as TaskContext, Poll};

use futures_core::Stream;
use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::{Agent, AgentError, AgentState, StopReason, observe};
use crate::event::{Event, EventKind};
use crate::graph::RunError;
use crate::graph::RunOutcome;
use crate::model::{Message, OutputSchema, Usage};
use crate::runtime::{Interrupt, RunStatus};
use crate::{Error, Result};

/// What an agent run produced.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RunResult {
    /// The session the run was on (generated when none was given).
    pub session: String,
    /// The final answer (the last assistant text when the run stopped early; empty when a
    /// guardrail stopped it).
    pub output: String,
    /// Tokens used by this run, across all its resumptions.
    pub usage: Usage,
    /// What the run cost in US dollars, across all its resumptions, at the agent's
    /// [prices](crate::agent::AgentBuilder::prices); `None` when it has none.
    pub cost_usd: Option<f64>,
    /// Model turns taken.
    pub turns: u32,
    /// Whether the run stopped before an answer: a limit, a budget, or a suspension.
    pub interrupted: bool,
    /// Why: a turn limit, a budget cap, or a suspension (see `pending`).
    pub reason: Option<StopReason>,
    /// What a suspended run waits for (tool approvals, interrupts).
    pub pending: Vec<Interrupt>,
    /// The whole transcript.
    pub messages: Vec<Message>,
}

impl RunResult {
    /// The answer as a `T` (for runs with typed output: [`AgentBuilder::output`], or
    /// [`AgentRun::output`]).
    ///
    /// [`AgentBuilder::output`]: super::AgentBuilder::output
    ///
    /// # Errors
    ///
    /// The output is not JSON for a `T`.
    pub fn parsed<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_str(self.output.trim()).map_err(|e| Error::json("agent output", e))
    }

    fn from_state(session: String, state: AgentState, pending: Vec<Interrupt>) -> Self {
        let suspended = !pending.is_empty();
        // A run a guardrail stopped has no answer to give.
        let output = if matches!(state.stopped, Some(StopReason::Guardrail(_))) {
            String::new()
        } else {
            state.answer()
        };
        let reason = if suspended {
            Some(StopReason::Suspended)
        } else {
            state.stopped
        };
        Self {
            session,
            output,
            usage: state.usage,
            cost_usd: state.cost_usd,
            turns: state.turns,
            interrupted: reason.is_some(),
            reason,
            pending,
            messages: state.messages,
        }
    }
}

/// An agent run being configured; `.await` it, or [`stream`](AgentRun::stream) it.
#[must_use = "a run does nothing until it is awaited or streamed"]
pub struct AgentRun<'a> {
    agent: &'a Agent,
    prompt: String,
    session: Option<String>,
    user: Option<String>,
    max_turns: Option<u32>,
    /// This run's own output schema.
    pub(super) output: Option<OutputSchema>,
}

impl std::fmt::Debug for AgentRun<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentRun")
            .field("agent", &self.agent.name())
            .field("session", &self.session)
            .field("user", &self.user)
            .field("max_turns", &self.max_turns)
            .finish_non_exhaustive()
    }
}

fn generated_session() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("session-{nanos:x}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

impl<'a> AgentRun<'a> {
    /// Runs on this session: the conversation continues from the session's last completed
    /// run, and runs on one session take turns.
    pub fn session(mut self, session: impl Into<String>) -> Self {
        self.session = Some(session.into());
        self
    }

    /// The user the run acts for (per-user budgets and permissions use it).
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Overrides the agent's `max_turns` for this run, up to the agent's own limit (the
    /// agent's graph is compiled with a recursion limit for it).
    pub fn max_turns(mut self, max_turns: u32) -> Self {
        self.max_turns = Some(max_turns);
        self
    }

    async fn initial_state(&self, session: &str) -> Result<AgentState> {
        let runtime = &self.agent.runtime;
        let previous = runtime.store().latest_checkpoint(session, "").await?;
        let mut state = match previous {
            None => AgentState::new(&self.prompt),
            Some(cp) if cp.status == RunStatus::Interrupted => {
                return Err(AgentError::SessionSuspended {
                    session: session.to_owned(),
                    pending: cp
                        .interrupts()?
                        .iter()
                        .map(|i| i.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                }
                .into());
            }
            Some(cp) => {
                let previous: AgentState = serde_json::from_value(cp.state().clone())
                    .map_err(|e| Error::json(format!("agent state of session {session}"), e))?;
                let mut state = AgentState::new(&self.prompt);
                state.messages = previous.messages;
                state.messages.push(Message::user(&self.prompt));
                state
            }
        };
        state.user.clone_from(&self.user);
        state.max_turns = self.max_turns.map(|n| n.min(self.agent.core.max_turns));
        state.output_schema.clone_from(&self.output);
        Ok(state)
    }

    /// Runs in the background and streams the run's events: node starts and ends, model
    /// chunks and tool calls and results ([`AgentEvent`](super::AgentEvent)s, carried as
    /// `EventKind::Backend`), then `Done` or `Error`. Dropping the stream cancels the run.
    ///
    /// The rules of [`Agent::run`](crate::agent::Agent::run) hold: it waits for the session's turn (runs on one
    /// session take turns), and the agent's timeout ends the run with an `Error` event and,
    /// from [`AgentStream::outcome`], [`AgentError::Timeout`].
    ///
    /// # Errors
    ///
    /// A suspended session, or a store failure while reading the session.
    pub async fn stream(self) -> Result<AgentStream> {
        let session = self.session.clone().unwrap_or_else(generated_session);
        let turn = self.agent.turn(&session).await;
        let state = self.initial_state(&session).await?;
        let agent = self.agent.clone();
        let (events, receiver) = mpsc::unbounded_channel();
        let span = observe::agent_span(agent.name(), &session);
        let task = tokio::spawn(
            async move {
                let _turn = turn;
                let mut run = agent
                    .graph
                    .run(&agent.runtime, session.clone(), state)
                    .stream();
                let forward = async {
                    while let Some(event) = run.next().await {
                        // A closed receiver means the caller dropped the stream; the task is
                        // aborted with it.
                        let _ = events.send(event);
                    }
                };
                let timed_out = match agent.timeout {
                    None => {
                        forward.await;
                        None
                    }
                    Some(limit) => tokio::time::timeout(limit, forward)
                        .await
                        .err()
                        .map(|_| limit),
                };
                if let Some(limit) = timed_out {
                    drop(run); // cancels the run
                    let error = AgentError::Timeout {
                        agent: agent.core.name.clone(),
                        session: session.clone(),
                        seconds: limit.as_secs_f64(),
                    };
                    let _ = events.send(Event::new(
                        0,
                        None,
                        EventKind::Error {
                            message: error.to_string(),
                        },
                    ));
                    return Err(error.into());
                }
                finish(session, run.outcome().await?)
            }
            .instrument(span),
        );
        Ok(AgentStream { receiver, task })
    }
}

/// The events of an agent run as they happen; see [`AgentRun::stream`].
///
/// The stream ends after the run's `Done` or `Error` event; then
/// [`outcome`](AgentStream::outcome) gives the result. Dropping it cancels the run.
pub struct AgentStream {
    receiver: mpsc::UnboundedReceiver<Event>,
    task: JoinHandle<Result<RunResult>>,
}

impl AgentStream {
    /// Waits for the run to finish and returns its result (events not yet read are dropped).
    ///
    /// # Errors
    ///
    /// As for awaiting the run: a failed run's error, [`AgentError::Timeout`].
    pub async fn outcome(mut self) -> Result<RunResult> {
        self.receiver.close();
        match (&mut self.task).await {
            Ok(result) => result,
            Err(_) => Err(AgentError::Cancelled.into()),
        }
    }
}

impl Stream for AgentStream {
    type Item = Event;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Event>> {
        self.receiver.poll_recv(cx)
    }
}

impl Drop for AgentStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl std::fmt::Debug for AgentStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentStream")
            .field("finished", &self.task.is_finished())
            .finish_non_exhaustive()
    }
}

impl<'a> IntoFuture for AgentRun<'a> {
    type Output = Result<RunResult>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<RunResult>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        let session = self.session.clone().unwrap_or_else(generated_session);
        let span = observe::agent_span(self.agent.name(), &session);
        Box::pin(
            async move {
                let agent = self.agent;
                let _turn = agent.turn(&session).await;
                let state = self.initial_state(&session).await?;
                let run = agent.graph.run(&agent.runtime, session.clone(), state);
                let outcome = agent.with_timeout(&session, run.into_future()).await?;
                finish(session, outcome)
            }
            .instrument(span),
        )
    }
}

fn finish(session: String, outcome: RunOutcome<AgentState>) -> Result<RunResult> {
    match outcome {
        RunOutcome::Completed(state) => Ok(RunResult::from_state(session, state, Vec::new())),
        RunOutcome::Interrupted { state, interrupts } => {
            Ok(RunResult::from_state(session, state, interrupts))
        }
        RunOutcome::Failed { error, .. } => Err(error.into()),
    }
}

impl Agent {
    /// Runs the agent on a prompt. Configure with `.session(..)` and `.user(..)`, then
    /// `.await`.
    ///
    /// `max_turns` and budgets stop the run cleanly (`interrupted`, with a reason) and keep
    /// the work done so far; the wall-clock timeout is an [`AgentError::Timeout`].
    pub fn run(&self, prompt: impl Into<String>) -> AgentRun<'_> {
        AgentRun {
            agent: self,
            prompt: prompt.into(),
            session: None,
            user: None,
            max_turns: None,
            output: None,
        }
    }

    /// Carries a suspended or crashed run of `session` on: after a tool approval was
    /// decided, after the signal it waits for was sent, or after a restart.
    ///
    /// Like [`CompiledGraph::recover`](crate::CompiledGraph::recover), which it uses, it
    /// claims the session's run first: while another process carries the run on it fails
    /// with [`RunError::Busy`] (as
    /// [`Error::Run`]) instead of running it a second time.
    ///
    /// # Errors
    ///
    /// An unknown session; a busy one; a failed run's error; a timeout.
    pub async fn resume(&self, session: &str) -> Result<RunResult> {
        async {
            let _turn = self.turn(session).await;
            let run = self.graph.recover(&self.runtime, session);
            let outcome = self.with_timeout(session, run.into_future()).await?;
            finish(session.to_owned(), outcome)
        }
        .instrument(observe::agent_span(self.name(), session))
        .await
    }

    async fn with_timeout<F>(&self, session: &str, run: F) -> Result<RunOutcome<AgentState>>
    where
        F: Future<Output = Result<RunOutcome<AgentState>, RunError>>,
    {
        match self.timeout {
            None => Ok(run.await?),
            Some(limit) => Ok(tokio::time::timeout(limit, run).await.map_err(|_| {
                Error::from(AgentError::Timeout {
                    agent: self.core.name.clone(),
                    session: session.to_owned(),
                    seconds: limit.as_secs_f64(),
                })
            })??),
        }
    }
}
