//! [`RuntimeError`]: why a call on the [`Runtime`](super::Runtime) failed.

use super::mailbox::SignalError;
use super::store::{RunState, StoreError};

/// Why a call on the runtime (a signal, a wait, a state or checkpoint query) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A signal was refused, or a wait for one ended without a payload.
    #[error(transparent)]
    Signal(#[from] SignalError),
    /// A value could not be converted to or from JSON.
    #[error("json conversion failed for {what}")]
    Json {
        /// What was being converted (a state type, a payload).
        what: String,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
    /// Another execution (in this process or another) holds the thread's run.
    #[error("thread {thread} is busy: its run is held by {owner} until {}", crate::runtime::Utc(*until))]
    Busy {
        /// The thread.
        thread: String,
        /// The holder's owner id (process id, a random part, and an execution number).
        owner: String,
        /// When the holder's lease expires, unless it renews it.
        until: std::time::SystemTime,
    },
    /// A thread has no checkpoint with that id.
    #[error("thread {thread} has no checkpoint {checkpoint}")]
    UnknownCheckpoint {
        /// The thread.
        thread: String,
        /// The checkpoint id asked for.
        checkpoint: u64,
    },
    /// A fork was asked from a subgraph's checkpoint: its state is the child's, not the
    /// thread's. Fork from the top-level checkpoint of that moment (the one with an empty
    /// namespace), which takes the subgraph's checkpoints along.
    #[error(
        "checkpoint {checkpoint} of thread {thread} belongs to subgraph {namespace}; fork from a top-level checkpoint"
    )]
    SubgraphCheckpoint {
        /// The thread.
        thread: String,
        /// The checkpoint id asked for.
        checkpoint: u64,
        /// Its namespace.
        namespace: String,
    },
    /// No run was ever started or submitted on the thread.
    #[error("thread {thread} has no run")]
    UnknownRun {
        /// The thread.
        thread: String,
    },
    /// A resume was requested for a run that does not wait for a resume value.
    #[error("thread {thread}'s run is {state}, not interrupted: there is nothing to resume")]
    NotInterrupted {
        /// The thread.
        thread: String,
        /// Where its run stands.
        state: RunState,
    },
    /// A resume request named an interrupt that is not pending.
    #[error("interrupt {id} is not pending on thread {thread}; pending: {}", pending.join(", "))]
    UnknownInterrupt {
        /// The thread.
        thread: String,
        /// The id given.
        id: String,
        /// The ids that are pending.
        pending: Vec<String>,
    },
    /// A resume value was sent to an interrupt that waits for a signal, not for a value:
    /// send the signal instead.
    #[error(
        "interrupt {id} on thread {thread} waits for signal {signal}, not for a value: send the signal"
    )]
    WaitsForSignal {
        /// The thread.
        thread: String,
        /// The interrupt.
        id: String,
        /// The signal it waits for.
        signal: String,
    },
    /// A resume value was sent to an interrupt that sleeps until a time, not for a value.
    #[error(
        "interrupt {id} on thread {thread} sleeps until {wake_at_ms} ms since the epoch, not for a value"
    )]
    WaitsForTimer {
        /// The thread.
        thread: String,
        /// The interrupt.
        id: String,
        /// When it wakes, in milliseconds since the Unix epoch.
        wake_at_ms: u64,
    },
    /// A resume request named no interrupt while several that take a value are pending.
    #[error("thread {thread} has {} pending interrupts ({}); name the one to resume", pending.len(), pending.join(", "))]
    AmbiguousResume {
        /// The thread.
        thread: String,
        /// The ids that are pending.
        pending: Vec<String>,
    },
    /// A decision was sent for a call that does not wait for one: it never asked, or it was
    /// answered and its run carried on.
    #[error("no call {call_id} waits for a decision on session {session}")]
    NoPendingApproval {
        /// The session.
        session: String,
        /// The call.
        call_id: String,
    },
    /// A decision was sent for a call of a session whose run has ended (completed, failed or
    /// cancelled): nothing waits for it. Nothing was sent. (A failed run that a `recover`
    /// carries on asks again, and is decided then.)
    #[error(
        "no call {call_id} waits for a decision on session {session}: its run has ended ({state})"
    )]
    ApprovalRunEnded {
        /// The session.
        session: String,
        /// The call.
        call_id: String,
        /// How its run ended.
        state: crate::runtime::RunState,
    },
    /// A rejection was sent without a reason (blank): the model is told why its call was
    /// denied, and a blank reason tells it nothing. Nothing was sent.
    #[error("the rejection of call {call_id} on session {session} must say why: the model is told")]
    BlankReason {
        /// The session.
        session: String,
        /// The call.
        call_id: String,
    },
    /// A decision was sent for a call that has one already (another person, or a retry,
    /// decided first): the first decision stands.
    #[error(
        "call {call_id} on session {session} has been decided already; the first decision stands"
    )]
    AlreadyDecided {
        /// The session.
        session: String,
        /// The call.
        call_id: String,
    },
    /// A decision was dropped on arrival: the call waits in a run that is suspended, and the
    /// runtime keeps no signal for a session none of whose runs is open (its pending mailbox
    /// is off: `max_pending_signal_sessions(Some(0))`, on a store that keeps no signals).
    /// Nothing was stored; send it again once the call's run waits in this process, or keep
    /// pending signals.
    #[error(
        "the decision for call {call_id} on session {session} was dropped: no run of the session is open to take it, and pending signals are not kept"
    )]
    DecisionDropped {
        /// The session.
        session: String,
        /// The call.
        call_id: String,
    },
    /// A decision was sent for the request a call made at `decided_for_ms`, but the call
    /// that waits under that id now asked at `asked_at_ms`: its run carried on and a new call
    /// reuses the id. The decision is not sent; the new request needs a decision of its own.
    #[error(
        "call {call_id} on session {session} waits on the request asked at {asked_at_ms} ms, not the one this decision was for ({decided_for_ms} ms): it was asked again since, or the time is wrong; decide the request that waits"
    )]
    AskedAgain {
        /// The session.
        session: String,
        /// The call.
        call_id: String,
        /// When the call that waits now asked, in ms since the Unix epoch.
        asked_at_ms: u64,
        /// When the request the decision was for asked.
        decided_for_ms: u64,
    },
    /// A run was submitted, or a checkpoint forked, onto a thread whose current run has not
    /// finished (see [`Runtime::fork`](super::Runtime::fork)).
    #[error(
        "thread {thread} already has a run that is {state}; it must finish (or be cancelled) before another is submitted or forked there"
    )]
    RunActive {
        /// The thread.
        thread: String,
        /// Where its current run stands.
        state: RunState,
    },
    /// A run, a submit or a fork named an empty (or blank) thread: an id built from a value
    /// that was missing (an anonymous user's) would put every such caller's runs, and an
    /// agent's conversations, on one shared thread.
    #[error("the thread (session) name is empty (or only spaces): name the thread the run is on")]
    EmptyThread,
    /// A background worker's loop panicked (a store's method panicked outside any run): it
    /// had stopped claiming runs before it was shut down.
    #[error("the worker stopped when its loop panicked: {message}")]
    WorkerPanicked {
        /// The panic's message.
        message: String,
    },
}

impl RuntimeError {
    pub(crate) fn json(what: impl Into<String>, source: serde_json::Error) -> Self {
        Self::Json {
            what: what.into(),
            source,
        }
    }
}
