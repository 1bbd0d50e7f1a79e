//! [`AgentError`]: what goes wrong building an agent or finishing its run.

use std::time::Duration;

/// Why an agent could not be built or a run could not finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// `build()` found problems; every one is listed.
    #[error("agent {agent} is misconfigured: {}", problems.join("; "))]
    Invalid {
        /// The agent's name.
        agent: String,
        /// Every problem found.
        problems: Vec<String>,
    },
    /// The run took longer than the agent's wall-clock timeout.
    #[error("agent {agent} timed out after {seconds} s on session {session}")]
    Timeout {
        /// The agent.
        agent: String,
        /// The session.
        session: String,
        /// The timeout.
        seconds: f64,
    },
    /// The task running a streamed run stopped before it finished (it panicked or was
    /// aborted).
    #[error("the streamed run of agent {agent} on session {session} stopped before it finished")]
    Cancelled {
        /// The agent.
        agent: String,
        /// The session.
        session: String,
    },
    /// The model's answer kept failing the output schema.
    #[error("agent {agent}: output failed its schema after {attempts} attempts: {problem}")]
    OutputSchema {
        /// The agent.
        agent: String,
        /// How many answers were tried.
        attempts: u32,
        /// The last validation error.
        problem: String,
    },
    /// A model turn would ask for an answer by an output schema named as one of the tools
    /// it offers: the model's calls of that tool would be read as the answer. Caught when
    /// the turn is asked for, for a schema or a tool that `build()` did not see (a run's own
    /// [`output`](super::AgentRun::output), a tool added since, a session's tool set).
    #[error(
        "agent {agent}: output schema {schema:?} has the name of one of the run's tools: \
         name one or the other otherwise"
    )]
    OutputNamedAsTool {
        /// The agent.
        agent: String,
        /// The schema's (and the tool's) name.
        schema: String,
    },
    /// A run was asked for on a session whose last run is suspended.
    #[error(
        "session {session} is suspended ({pending}): carry it on with `resume`, without a new \
         prompt, once what it waits for is answered (an approval decided may wait only for that)"
    )]
    SessionSuspended {
        /// The session.
        session: String,
        /// What it waits for.
        pending: String,
    },
    /// A run was asked for on a session whose last run stopped part way (its stream
    /// dropped, its timeout passed, its process died) and waits to be carried on.
    #[error(
        "session {session} has a run that stopped part way (a dropped stream, a timeout, a \
         crash): carry it on with `resume` without a prompt, or cancel it, before a new prompt"
    )]
    SessionUnfinished {
        /// The session.
        session: String,
    },
    /// A guardrail blocked the prompt, a tool result or the answer, and the agent fails
    /// runs on a block ([`OnBlock::Fail`](super::OnBlock::Fail)).
    #[error("agent {agent}: guardrail {guardrail} blocked the {stage}: {reason}")]
    Guardrail {
        /// The agent.
        agent: String,
        /// The guardrail that blocked.
        guardrail: String,
        /// What it was checking.
        stage: super::GuardStage,
        /// Its reason.
        reason: String,
    },
    /// A run cannot carry on from the checkpoint it was given.
    #[error(
        "agent {agent}: cannot carry session {session} on from checkpoint {checkpoint}: {problem}"
    )]
    Checkpoint {
        /// The agent.
        agent: String,
        /// The session.
        session: String,
        /// The checkpoint's id.
        checkpoint: u64,
        /// Why not.
        problem: String,
    },
    /// An agent configuration file was refused ([`Agent::from_config`](super::Agent::from_config)):
    /// every problem, with its line and column.
    #[error(transparent)]
    Config(#[from] super::ConfigError),
    /// The agent's [`RateLimiter`](super::RateLimiter), in
    /// [`RateLimitMode::Fail`](super::RateLimitMode::Fail), refused a model call that would
    /// have had to wait (for the limiter's buckets, or for a pause after the provider's 429).
    #[error(
        "agent {agent} is rate limited on model {model}{}: retry after {} s",
        for_user(.user),
        .retry_after.as_secs_f64()
    )]
    RateLimited {
        /// The agent.
        agent: String,
        /// The model.
        model: String,
        /// The run's user, if it has one.
        user: Option<String>,
        /// How long until the call would be allowed.
        retry_after: Duration,
    },
    /// A team's coordinator (a router's classifier, a supervisor) stopped before it gave
    /// the decision its team waits for: a guardrail blocked it, a budget or its turn limit
    /// stopped it, its reply was cut or filtered. The team cannot route on what it said.
    #[error("agent {agent} stopped ({reason}) before it decided what its team does next")]
    Undecided {
        /// The coordinating agent.
        agent: String,
        /// Why it stopped.
        reason: super::StopReason,
    },
    /// A team's coordinator (a router's classifier, a supervisor) named none of its team's
    /// members: an empty reply, or a name the team does not have.
    #[error("agent {agent} named none of its team ({}): it replied {reply:?}", members.join(", "))]
    NoSuchMember {
        /// The coordinating agent.
        agent: String,
        /// What it replied.
        reply: String,
        /// The members it could have named.
        members: Vec<String>,
    },
    /// A team's coordinator (a router's classifier, a supervisor) named more than one of
    /// its team's members: the team cannot tell which it meant.
    #[error("agent {agent} named several of its team ({}): it replied {reply:?}", named.join(", "))]
    AmbiguousMember {
        /// The coordinating agent.
        agent: String,
        /// What it replied.
        reply: String,
        /// The members it named.
        named: Vec<String>,
    },
    /// A [`Supervisor`](crate::architecture::Supervisor) delegated as many times as its
    /// [`max_rounds`](crate::architecture::Supervisor::max_rounds) allows and asked to
    /// delegate once more: the run fails rather than go on.
    #[error("supervisor {agent} asked to delegate past its max_rounds ({max_rounds})")]
    MaxRounds {
        /// The supervising agent.
        agent: String,
        /// The limit it reached.
        max_rounds: u64,
    },
}

fn for_user(user: &Option<String>) -> String {
    user.as_ref()
        .map(|user| format!(" for user {user}"))
        .unwrap_or_default()
}
