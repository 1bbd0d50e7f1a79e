//! [`Entry`]: a signal as the mailbox holds it, and [`Dropped`]: a stored one it let go.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

/// A signal in the mailbox: its payload as it was sent, the store's sequence number when a
/// durable store keeps it, and when it was sent.
#[derive(Debug)]
pub(crate) struct Entry {
    /// The payload, exactly as sent.
    pub(crate) payload: Value,
    /// The store's sequence number, for a signal a durable store keeps.
    pub(crate) seq: Option<u64>,
    /// When it was sent: the pending TTL counts from here.
    pub(crate) sent_at: Instant,
    /// When it was sent by the sending runtime's clock, in ms since the Unix epoch: a timed
    /// wait carried on after its deadline takes only what was sent by then.
    pub(crate) sent_at_ms: u64,
    /// The consuming of its stored row, when a receiver started it and was dropped (or
    /// failed) before it ended: the next receiver learns how it ended instead of consuming
    /// the row again, or, when that is unknown, consumes it afresh (see `runtime::handover`).
    pub(crate) taking: Option<Taking>,
    /// Its place in send order, once this mailbox queued it: a payload given back returns
    /// there, behind an older one given back before it. `None` for one never queued (taken
    /// from the store), which goes back to the head of its queue.
    pub(crate) order: Option<u64>,
}

impl Entry {
    /// A signal sent just now, at `sent_at_ms` by the sender's clock, that no store keeps.
    pub(crate) fn new(payload: Value, sent_at_ms: u64) -> Self {
        Self {
            payload,
            seq: None,
            sent_at: Instant::now(),
            sent_at_ms,
            taking: None,
            order: None,
        }
    }

    /// A signal a durable store keeps under `seq`, sent at `sent_at_ms` by its sender's
    /// clock, `age` ago; `ttl` is the mailbox's pending TTL.
    pub(crate) fn stored(
        payload: Value,
        seq: u64,
        sent_at_ms: u64,
        age: Duration,
        ttl: Option<Duration>,
    ) -> Self {
        let now = Instant::now();
        // An age beyond what the monotonic clock can go back to (a signal older than the
        // machine's uptime) is clamped: to exactly the TTL when that fits, so the signal
        // still counts as expired, else to now.
        let sent_at = now
            .checked_sub(age)
            .or_else(|| {
                ttl.filter(|&ttl| age >= ttl)
                    .and_then(|ttl| now.checked_sub(ttl))
            })
            .unwrap_or(now);
        Self {
            payload,
            seq: Some(seq),
            sent_at,
            sent_at_ms,
            taking: None,
            order: None,
        }
    }
}

/// How consuming a stored row ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Taken {
    /// Consumed: the payload is the receiver's.
    Consumed,
    /// Not the receiver's: another consumer had taken the row first, or a node's wait that
    /// was dropped journaled the payload.
    Elsewhere,
    /// The store failed (its message): the row is still there.
    Failed(String),
    /// Only the store can tell whether the row is still there (why not here): a node's wait
    /// was dropped, or its write failed, while it consumed the row under its claim, or a
    /// look at the store after that failed too. The next receiver consumes it afresh.
    Unknown(String),
}

/// The consuming of an entry's stored row, under way or ended.
#[derive(Debug, Clone)]
pub(crate) struct Taking {
    outcome: tokio::sync::watch::Receiver<Option<Taken>>,
    /// What it counts as should its task end without a word (a runtime shutting down).
    unsaid: Taken,
}

impl Taking {
    /// A consuming about to start, where its outcome goes, and what it counts as should its
    /// task end without saying.
    pub(crate) fn start(unsaid: Taken) -> (tokio::sync::watch::Sender<Option<Taken>>, Self) {
        let (tx, outcome) = tokio::sync::watch::channel(None);
        (tx, Self { outcome, unsaid })
    }

    /// A consuming that ended as `taken`.
    pub(crate) fn ended(taken: Taken) -> Self {
        let (outcome, taking) = Self::start(taken.clone());
        let _ = outcome.send(Some(taken));
        taking
    }

    /// How it ended, if it has; `None` while it is under way.
    pub(crate) fn ended_as(&self) -> Option<Taken> {
        // Whether the task is gone, first: one that said, then went, said before it went, so
        // what is read next is what it said (read the other way round, a task that says and
        // goes in between would be taken for one that went without a word).
        let gone = self.outcome.has_changed().is_err();
        let said = self.outcome.borrow().clone();
        said.or_else(|| gone.then(|| self.unsaid.clone()))
    }

    /// How it ended, once it has.
    pub(crate) async fn outcome(&mut self) -> Taken {
        let Self { outcome, unsaid } = self;
        match outcome.wait_for(Option::is_some).await {
            Ok(said) => said.clone().unwrap_or_else(|| unsaid.clone()),
            Err(_) => unsaid.clone(),
        }
    }
}

/// A stored signal the mailbox dropped (a pending bound) or discarded (its session's last
/// exit): the runtime removes it from the store, so that it does not come back after a
/// restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dropped {
    pub(crate) session: Arc<str>,
    pub(crate) name: Arc<str>,
    pub(crate) seq: u64,
}
