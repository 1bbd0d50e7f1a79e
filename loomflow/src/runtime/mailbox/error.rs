//! [`SignalError`]: why a signal was refused or a wait ended without a payload.

use std::time::Duration;

/// Why a signal was refused, or why a wait ended without a payload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignalError {
    /// The signal name is empty, or only spaces.
    #[error("signal name for session {session} is empty (or only spaces)")]
    EmptyName {
        /// The session the signal was addressed to.
        session: String,
    },
    /// The session is empty (or only spaces): no run waits on a blank thread.
    #[error("signal {name} names no session (the session is empty or only spaces)")]
    EmptySession {
        /// The signal name.
        name: String,
    },
    /// The name holds a control character (a line end, a tab): no wait names it so, and a
    /// log or a table it is printed in would read otherwise than it is.
    #[error("signal name {name:?} for session {session} holds a control character")]
    ControlInName {
        /// The session the signal was addressed to.
        session: String,
        /// The name, as given.
        name: String,
    },
    /// The name starts with the framework's reserved prefix, `loomflow:`.
    #[error(
        "signal name {name} for session {session} is reserved: names starting with `loomflow:` \
         belong to loomflow"
    )]
    ReservedName {
        /// The session the signal was addressed to.
        session: String,
        /// The offending name.
        name: String,
    },
    /// The payload serializes to more bytes than the mailbox accepts.
    #[error(
        "payload of signal {name} for session {session} is {size} bytes, over the limit of \
         {limit} bytes"
    )]
    PayloadTooLarge {
        /// The session the signal was addressed to.
        session: String,
        /// The signal name.
        name: String,
        /// The payload's serialized size in bytes.
        size: usize,
        /// The configured limit ([`MailboxConfig::max_payload_bytes`](super::MailboxConfig::max_payload_bytes)).
        limit: usize,
    },
    /// The session's newest run has ended, so no run will read the signal (sent with
    /// [`SignalOptions::require_live_run`](super::SignalOptions::require_live_run)).
    #[error("signal {name} refused: the newest run of session {session} has ended ({status})")]
    RunEnded {
        /// The session.
        session: String,
        /// The signal name.
        name: String,
        /// How the run ended: `completed`, `failed` or `cancelled`.
        status: &'static str,
    },
    /// No payload arrived before the wait's timeout.
    #[error("no signal {name} arrived for session {session} within {timeout:?}")]
    Timeout {
        /// The session waited on.
        session: String,
        /// The signal name waited on.
        name: String,
        /// The timeout that passed.
        timeout: Duration,
    },
    /// A payload did not deserialize into the type the receiver asked for. The payload was
    /// put back at the head of its queue, where an operator can drop it
    /// ([`Runtime::drop_signal`](crate::Runtime::drop_signal)).
    #[error(
        "signal {name} on session {session} is not {expected}: {message} (it stays first in \
         its queue: drop it with `loomflow drop-signal` or `Runtime::drop_signal`)"
    )]
    Payload {
        /// The session.
        session: String,
        /// The signal name.
        name: String,
        /// The type asked for, as written in code, with its article (`a String`).
        expected: String,
        /// What serde said.
        message: String,
    },
    /// The waiter's slot was closed without a payload.
    ///
    /// The mailbox never does this while a waiter is parked; the variant exists so that a
    /// broken invariant surfaces as an error instead of a hang.
    #[error("mailbox closed while waiting for signal {name} on session {session}")]
    Closed {
        /// The session waited on.
        session: String,
        /// The signal name waited on.
        name: String,
    },
}

impl SignalError {
    /// `error`, where it is a wait's timeout, reporting the `timeout` the caller gave rather
    /// than what was left of it on the wait's last pass.
    pub(crate) fn timed_out_after(
        error: crate::runtime::RuntimeError,
        timeout: Option<Duration>,
    ) -> crate::runtime::RuntimeError {
        match (error, timeout) {
            (
                crate::runtime::RuntimeError::Signal(Self::Timeout { session, name, .. }),
                Some(timeout),
            ) => Self::Timeout {
                session,
                name,
                timeout,
            }
            .into(),
            (error, _) => error,
        }
    }
}
