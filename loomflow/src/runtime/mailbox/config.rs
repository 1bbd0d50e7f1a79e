//! [`MailboxConfig`] and [`SignalOptions`]: the mailbox's bounds and a send's options.

use std::time::Duration;

/// Bounds and limits of a [`Mailbox`](super::Mailbox).
///
/// The pending bounds hold memory in check. On a durable runtime they drop a signal from
/// the process's memory only: a signal for a session whose run has not ended stays in the
/// store, and that run takes it when it is carried on, however long it waited.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use loomflow::runtime::mailbox::MailboxConfig;
///
/// let config = MailboxConfig::default()
///     .max_pending_signal_sessions(Some(1_000))
///     .pending_signal_ttl(Some(Duration::from_secs(600)));
/// assert_eq!(config.max_payload_bytes, 1024 * 1024);
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct MailboxConfig {
    /// How many sessions that are not open may hold pending signals; when a new one would
    /// exceed it, the least recently used session's signals are dropped. `None`: no bound.
    /// Default 10,000. A payload a receiver gives back (not the type it asked for, or its
    /// receive dropped) is kept for the next receiver past this bound (`Some(0)` included),
    /// within its TTL.
    pub max_pending_signal_sessions: Option<usize>,
    /// How long a pending signal is kept for a session that is not open, counted from when
    /// it was sent (on a durable runtime, from the stored send time, also after a restart).
    /// `None`: forever. Default one hour.
    ///
    /// On a durable store, workers also drop the stored signals older than this of
    /// sessions with no unfinished run that are not open in their process (see
    /// [`Runtime::prune_signals`](crate::Runtime::prune_signals)).
    pub pending_signal_ttl: Option<Duration>,
    /// The largest payload accepted, in bytes of serialized JSON. Default 1 MiB.
    pub max_payload_bytes: usize,
    /// How long an idempotency key is remembered. The mailbox remembers keys for at least
    /// [`pending_signal_ttl`](Self::pending_signal_ttl) whatever this says, so a retried send
    /// cannot duplicate a signal still pending. `None`: forever. Default one hour.
    ///
    /// In memory only: a durable store (SQLite, PostgreSQL) remembers the keys itself, for
    /// every process on it, and neither this nor
    /// [`max_idempotency_keys`](Self::max_idempotency_keys) applies there. It remembers a
    /// key while its signal is stored, and for one hour after the signal was received or
    /// dropped.
    pub idempotency_key_ttl: Option<Duration>,
    /// How many idempotency keys are remembered at most; the oldest is forgotten first.
    /// `None`: no bound. Default 100,000. In memory only, as
    /// [`idempotency_key_ttl`](Self::idempotency_key_ttl).
    pub max_idempotency_keys: Option<usize>,
}

impl Default for MailboxConfig {
    fn default() -> Self {
        Self {
            max_pending_signal_sessions: Some(10_000),
            pending_signal_ttl: Some(Duration::from_secs(3_600)),
            max_payload_bytes: 1024 * 1024,
            idempotency_key_ttl: Some(Duration::from_secs(3_600)),
            max_idempotency_keys: Some(100_000),
        }
    }
}

impl MailboxConfig {
    /// Sets [`max_pending_signal_sessions`](Self::max_pending_signal_sessions).
    #[must_use]
    pub fn max_pending_signal_sessions(mut self, max: Option<usize>) -> Self {
        self.max_pending_signal_sessions = max;
        self
    }

    /// Sets [`pending_signal_ttl`](Self::pending_signal_ttl).
    #[must_use]
    pub fn pending_signal_ttl(mut self, ttl: Option<Duration>) -> Self {
        self.pending_signal_ttl = ttl;
        self
    }

    /// Sets [`max_payload_bytes`](Self::max_payload_bytes).
    #[must_use]
    pub fn max_payload_bytes(mut self, max: usize) -> Self {
        self.max_payload_bytes = max;
        self
    }

    /// Sets [`idempotency_key_ttl`](Self::idempotency_key_ttl).
    #[must_use]
    pub fn idempotency_key_ttl(mut self, ttl: Option<Duration>) -> Self {
        self.idempotency_key_ttl = ttl;
        self
    }

    /// Sets [`max_idempotency_keys`](Self::max_idempotency_keys).
    #[must_use]
    pub fn max_idempotency_keys(mut self, max: Option<usize>) -> Self {
        self.max_idempotency_keys = max;
        self
    }

    /// How long keys are actually remembered: the longer of the key TTL and the pending TTL.
    pub(super) fn effective_key_ttl(&self) -> Option<Duration> {
        Some(self.idempotency_key_ttl?.max(self.pending_signal_ttl?))
    }
}

/// Options of [`Mailbox::signal_with`](super::Mailbox::signal_with).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct SignalOptions {
    /// Makes repeated sends of the same (session, name, key) deliver once, while the key is
    /// remembered (see [`MailboxConfig::idempotency_key_ttl`]).
    pub idempotency_key: Option<String>,
    /// Refuses the send with [`SignalError::RunEnded`](super::SignalError::RunEnded) when the
    /// session's newest run has completed, failed or been cancelled, so that no run will
    /// ever read the signal. A session with no run yet, or a run queued (a new one
    /// submitted after one that ended included), in progress or suspended, accepts it.
    /// Checked by [`Runtime::signal_with`](crate::Runtime::signal_with) against the store,
    /// and against the runs the sending runtime executes: a run in
    /// [`Durability::Exit`](crate::Durability::Exit) writes nothing before its first
    /// journal entry, so only its own process sees it in progress over the run before it.
    /// A send whose idempotency key is still remembered is a
    /// [`Delivery::Duplicate`](super::Delivery::Duplicate) even then: a retry of a signal
    /// that was delivered before its run ended.
    ///
    /// It guards the send, not the signal's later life: one the live run does not take (its
    /// wait timed out first, or it ended on another path) stays queued for the session's
    /// next receiver, as any signal does, the thread's next run included. A payload that
    /// says what it answers (the request's id) lets that receiver tell a stale one.
    pub require_live_run: bool,
}

impl SignalOptions {
    /// Sets [`idempotency_key`](Self::idempotency_key).
    #[must_use]
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Sets [`require_live_run`](Self::require_live_run).
    #[must_use]
    pub fn require_live_run(mut self) -> Self {
        self.require_live_run = true;
        self
    }
}
