//! Running an agent: [`AgentRun`] (configure, then await) and [`RunResult`].

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context as TaskContext, Poll};

use futures_core::Stream;
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::carry_on::{continue_from, failed_at, unfinished_at};
use super::result::{RunResult, finish};
use super::{Agent, AgentError, AgentEvent, AgentState, observe};
use crate::graph::RunOutcome;
use crate::model::OutputSchema;
use crate::runtime::RunStatus;
use crate::tool::Tool;
use crate::{Error, Result};
use std::sync::Arc;

/// How many events an agent's stream holds for a reader that is behind, unless the run
/// says otherwise ([`AgentRun::stream_capacity`]).
pub const DEFAULT_STREAM_CAPACITY: usize = 64;

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
    /// That schema before it was made strict.
    pub(super) output_fields: Option<serde_json::Value>,
    /// Tools for this run only.
    extra_tools: Vec<Arc<dyn Tool>>,
    /// How many events a stream of the run holds.
    stream_capacity: usize,
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

    /// The user the run acts for (per-user budgets, rate limits and permissions use it).
    /// Without it, a run on a session acts for the user of the session's last run.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Overrides the agent's `max_turns` for this run, up to the agent's own limit (the
    /// agent's graph is compiled with a recursion limit for it). Zero is refused with
    /// [`AgentError::Invalid`] when the run starts.
    pub fn max_turns(mut self, max_turns: u32) -> Self {
        self.max_turns = Some(max_turns);
        self
    }

    /// Gives this run a tool of its own, on top of the agent's (it wins a name clash). The
    /// tool lives as long as this call: a run that suspends and is carried on later has it
    /// again only when given it again ([`AgentResume::tool`]).
    pub fn tool(mut self, tool: impl Tool) -> Self {
        self.extra_tools.push(Arc::new(tool));
        self
    }

    async fn initial_state(&self, session: &str) -> Result<AgentState> {
        if self.max_turns == Some(0) {
            // As the builder refuses it: every run would stop before its first model call.
            return Err(AgentError::Invalid {
                agent: self.agent.core.name.clone(),
                problems: vec!["the run's max_turns must be at least 1".to_owned()],
            }
            .into());
        }
        let runtime = &self.agent.runtime;
        let previous = runtime.store().latest_checkpoint(session, "").await?;
        let mut state = match previous {
            None => AgentState::new(&self.prompt),
            // Suspended there, unless its run failed since (a failed step writes no
            // checkpoint): a prompt moves on from it, as from any failed run.
            Some(cp)
                if cp.status == RunStatus::Interrupted
                    && !failed_at(runtime, session, &cp).await? =>
            {
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
            // Stopped part way, and not failed: carried on, not started over.
            Some(cp)
                if cp.status == RunStatus::Running
                    && unfinished_at(runtime, session, &cp).await? =>
            {
                return Err(AgentError::SessionUnfinished {
                    session: session.to_owned(),
                }
                .into());
            }
            Some(cp) => continue_from(self.agent, session, &cp, &self.prompt).await?,
        };
        if self.user.is_some() {
            state.user.clone_from(&self.user);
        }
        state.max_turns = self.max_turns.map(|n| n.min(self.agent.core.max_turns));
        state.output_schema.clone_from(&self.output);
        state.output_fields.clone_from(&self.output_fields);
        Ok(state)
    }

    /// How many events a [stream](Self::stream) holds for a reader that is behind
    /// (default [`DEFAULT_STREAM_CAPACITY`]); when they wait unread, the run waits too.
    pub fn stream_capacity(mut self, events: usize) -> Self {
        self.stream_capacity = events.max(1);
        self
    }

    /// Runs in the background and streams the run's [`AgentEvent`]s: nodes starting and
    /// finishing, model chunks, tool calls and results, permission and guardrail decisions,
    /// then [`AgentEvent::Done`] or [`AgentEvent::Failed`]. [`AgentStream::outcome`] gives
    /// its result.
    ///
    /// Dropping the stream stops the run where it is, as a crash would: its newest checkpoint
    /// stays, a [`Worker`](crate::Worker) or a `recover` carries it on, and until then the
    /// session takes no new prompt; [`Runtime::cancel`](crate::Runtime::cancel) ends it for
    /// good.
    ///
    /// The stream is bounded ([`stream_capacity`](Self::stream_capacity)): when the reader
    /// falls behind, the run waits before its next step and before each model chunk, so
    /// events never pile up in memory.
    ///
    /// The rules of [`Agent::run`](crate::agent::Agent::run) hold: it waits for the
    /// session's turn (runs on one session take turns), and the agent's timeout ends the run
    /// with a `Failed` event and, from [`AgentStream::outcome`], [`AgentError::Timeout`].
    ///
    /// # Errors
    ///
    /// A suspended session, or a store failure while reading the session.
    pub async fn stream(self) -> Result<AgentStream> {
        let session = self.session.clone().unwrap_or_else(generated_session);
        // The timeout covers the whole run: waiting for the session's turn too.
        let deadline = self.agent.deadline();
        let (turn, state) = self
            .agent
            .by_deadline(&session, deadline, async {
                let turn = self.agent.turn(&session).await;
                Ok((turn, self.initial_state(&session).await?))
            })
            .await?;
        let lent = self.agent.core.tools.lend(&session, &self.extra_tools);
        let agent = self.agent.clone();
        let stream_session = session.clone();
        let capacity = self.stream_capacity;
        let (events, receiver) = mpsc::channel(capacity);
        let span = observe::agent_span(agent.name(), agent.core.model.name(), &session);
        let task = tokio::spawn(observe::in_agent_span(span, async move {
            let _turn = turn;
            let _lent = lent;
            let mut run = agent
                .graph
                .run(&agent.runtime, session.clone(), state)
                .stream_bounded(capacity);
            // Whether the graph's stream ended with `Done`: a run that suspends ends with
            // its interrupts, one refused before it ran with nothing, and a failed one is
            // ended below with the agent's own error.
            let mut ended = false;
            let forward = async {
                while let Some(event) = run.next().await {
                    if let Some(event) = AgentEvent::from_event(&event) {
                        if matches!(event, AgentEvent::Failed { .. }) {
                            // The graph's failure names the agent's loop node; the stream
                            // ends with the agent's own error, as `outcome` gives it.
                            break;
                        }
                        ended = matches!(event, AgentEvent::Done);
                        // Waits while the reader is behind. A closed receiver means the
                        // caller dropped the stream; the task is aborted with it.
                        let _ = events.send(event).await;
                        if ended {
                            // The last event: what the run's task does after it (letting
                            // its claim go) is not under the deadline, which would call a
                            // run already over timed out.
                            break;
                        }
                    }
                }
                Ok(())
            };
            if let Err(error) = agent.by_deadline(&session, deadline, forward).await {
                drop(run); // stops the run where it is, as a crash would
                let message = crate::ErrorChain(&error).to_string();
                let _ = events.send(AgentEvent::Failed { message }).await;
                return Err(error);
            }
            let result = match run.outcome().await {
                Ok(outcome) => finish(&agent, session, outcome).await,
                Err(error) => Err(error.into()),
            };
            if !ended {
                // The stream still ends with what became of the run.
                let last = match &result {
                    Ok(_) => AgentEvent::Done,
                    Err(error) => {
                        let message = crate::ErrorChain(error).to_string();
                        AgentEvent::Failed { message }
                    }
                };
                let _ = events.send(last).await;
            }
            result
        }));
        Ok(AgentStream {
            receiver,
            task,
            agent: self.agent.name().to_owned(),
            session: stream_session,
        })
    }
}

/// A run of a session being carried on; `.await` it. See [`Agent::resume`].
#[must_use = "a resume does nothing until it is awaited"]
pub struct AgentResume<'a> {
    agent: &'a Agent,
    session: String,
    prompt: Option<String>,
    checkpoint: Option<u64>,
    user: Option<String>,
    extra_tools: Vec<Arc<dyn Tool>>,
}

impl std::fmt::Debug for AgentResume<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentResume")
            .field("agent", &self.agent.name())
            .field("session", &self.session)
            .field("prompt", &self.prompt)
            .field("checkpoint", &self.checkpoint)
            .finish_non_exhaustive()
    }
}

impl AgentResume<'_> {
    /// Carries the conversation on with a new user message, as a new run of the session
    /// (with fresh turn and token counts, as [`Agent::run`] has): from the session's last
    /// run, or from the checkpoint given to [`from_checkpoint`](Self::from_checkpoint). The
    /// run it continues must be between turns and over: a suspended one (waiting for an
    /// approval) or one stopped part way (a dropped stream, a timeout) is carried on without
    /// a prompt first ([`AgentError::SessionUnfinished`] says so).
    pub fn prompt(mut self, prompt: impl Into<String>) -> Self {
        self.prompt = Some(prompt.into());
        self
    }

    /// Carries on from checkpoint `id` of the session (see [`Agent::list_checkpoints`])
    /// instead of the newest: time travel. The runs after it stay in the session's history;
    /// a new run starts from the checkpoint, at its step, and what was journaled after it is
    /// done again; where the run suspended (an approval asked), what the suspended step had
    /// journaled is replayed, as [`Runtime::fork`](crate::runtime::Runtime::fork) does.
    pub fn from_checkpoint(mut self, id: u64) -> Self {
        self.checkpoint = Some(id);
        self
    }

    /// The user a run with a new [`prompt`](Self::prompt) acts for (default: the user of the
    /// conversation it continues); a run carried on without a prompt keeps its own.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Gives the run a tool of its own for this call (see [`AgentRun::tool`]).
    pub fn tool(mut self, tool: impl Tool) -> Self {
        self.extra_tools.push(Arc::new(tool));
        self
    }

    async fn outcome(self) -> Result<RunOutcome<AgentState>> {
        let agent = self.agent;
        let session = self.session.as_str();
        let runtime = &agent.runtime;
        let checkpoint = match self.checkpoint {
            None => None,
            Some(id) => {
                let cp = runtime
                    .store()
                    .get_checkpoint(session, id)
                    .await?
                    .ok_or_else(|| crate::runtime::RuntimeError::UnknownCheckpoint {
                        thread: session.to_owned(),
                        checkpoint: id,
                    })?;
                if !cp.namespace.is_empty() {
                    return Err(AgentError::Checkpoint {
                        agent: agent.core.name.clone(),
                        session: session.to_owned(),
                        checkpoint: id,
                        problem: format!("it belongs to the subgraph {}", cp.namespace),
                    }
                    .into());
                }
                Some(cp)
            }
        };
        match (checkpoint, self.prompt) {
            (None, None) => Ok(agent.graph.recover(runtime, session).await?),
            (Some(cp), None) => {
                runtime.fork(session, cp.id, session).await?;
                Ok(agent.graph.recover(runtime, session).await?)
            }
            (None, Some(prompt)) => {
                let mut new_run = agent.run(prompt).session(session);
                new_run.user = self.user;
                let state = new_run.initial_state(session).await?;
                Ok(agent.graph.run(runtime, session.to_owned(), state).await?)
            }
            (Some(cp), Some(prompt)) => {
                if cp.status == RunStatus::Interrupted {
                    return Err(AgentError::Checkpoint {
                        agent: agent.core.name.clone(),
                        session: session.to_owned(),
                        checkpoint: cp.id,
                        problem: "its run is suspended there; carry it on without a prompt"
                            .to_owned(),
                    }
                    .into());
                }
                let mut state = continue_from(agent, session, &cp, &prompt).await?;
                if self.user.is_some() {
                    state.user = self.user;
                }
                Ok(agent.graph.run(runtime, session.to_owned(), state).await?)
            }
        }
    }
}

impl<'a> IntoFuture for AgentResume<'a> {
    type Output = Result<RunResult>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<RunResult>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        let span = observe::agent_span(
            self.agent.name(),
            self.agent.core.model.name(),
            &self.session,
        );
        Box::pin(observe::in_agent_span(span, async move {
            let agent = self.agent;
            let session = self.session.clone();
            // The timeout covers the whole call: waiting for the session's turn too.
            let deadline = agent.deadline();
            let run = async {
                let _turn = agent.turn(&session).await;
                let _lent = agent.core.tools.lend(&session, &self.extra_tools);
                let outcome = self.outcome().await?;
                finish(agent, session.clone(), outcome).await
            };
            agent.by_deadline(&session, deadline, run).await
        }))
    }
}

/// The events of an agent run as they happen; see [`AgentRun::stream`].
///
/// The stream ends after the run's [`AgentEvent::Done`] or [`AgentEvent::Failed`]; then
/// [`outcome`](AgentStream::outcome) gives the result. Dropping it stops the run where it
/// is, as a crash would (see [`AgentRun::stream`]): it is not cancelled.
pub struct AgentStream {
    receiver: mpsc::Receiver<AgentEvent>,
    task: JoinHandle<Result<RunResult>>,
    /// The agent and the session, for an error that names them.
    agent: String,
    session: String,
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
            Err(_) => Err(AgentError::Cancelled {
                agent: std::mem::take(&mut self.agent),
                session: std::mem::take(&mut self.session),
            }
            .into()),
        }
    }
}

impl Stream for AgentStream {
    type Item = AgentEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<AgentEvent>> {
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
        let span = observe::agent_span(self.agent.name(), self.agent.core.model.name(), &session);
        Box::pin(observe::in_agent_span(span, async move {
            let agent = self.agent;
            // The timeout covers the whole call: waiting for the session's turn too.
            let deadline = agent.deadline();
            let run = async {
                let _turn = agent.turn(&session).await;
                let _lent = agent.core.tools.lend(&session, &self.extra_tools);
                let state = self.initial_state(&session).await?;
                let run = agent.graph.run(&agent.runtime, session.clone(), state);
                finish(agent, session.clone(), run.await?).await
            };
            agent.by_deadline(&session, deadline, run).await
        }))
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
            output_fields: None,
            extra_tools: Vec::new(),
            stream_capacity: DEFAULT_STREAM_CAPACITY,
        }
    }

    /// Carries a suspended or crashed run of `session` on: after a tool approval was
    /// decided, after the signal it waits for was sent, or after a restart. `.await` it as
    /// it is, or first give it a new prompt ([`AgentResume::prompt`]), a checkpoint to
    /// carry on from ([`AgentResume::from_checkpoint`]), or tools ([`AgentResume::tool`]).
    ///
    /// Like [`CompiledGraph::recover`](crate::CompiledGraph::recover), which it uses, it
    /// claims the session's run first: while another process carries the run on it fails
    /// with [`RunError::Busy`](crate::graph::RunError::Busy) (as
    /// [`Error::Run`]) instead of running it a second time.
    pub fn resume(&self, session: impl Into<String>) -> AgentResume<'_> {
        AgentResume {
            agent: self,
            session: session.into(),
            prompt: None,
            checkpoint: None,
            user: None,
            extra_tools: Vec::new(),
        }
    }

    /// When a call made now must be over, by the agent's timeout.
    fn deadline(&self) -> Option<tokio::time::Instant> {
        self.timeout.map(crate::runtime::clock::instant_after)
    }

    /// `work`, ended with [`AgentError::Timeout`] when it is not done by `deadline`.
    async fn by_deadline<T>(
        &self,
        session: &str,
        deadline: Option<tokio::time::Instant>,
        work: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let Some(deadline) = deadline else {
            return work.await;
        };
        tokio::time::timeout_at(deadline, work)
            .await
            .map_err(|_| self.timed_out(session))?
    }

    /// The error of a call of this agent on `session` that ran out of time.
    fn timed_out(&self, session: &str) -> Error {
        AgentError::Timeout {
            agent: self.core.name.clone(),
            session: session.to_owned(),
            seconds: self.timeout.unwrap_or_default().as_secs_f64(),
        }
        .into()
    }
}
