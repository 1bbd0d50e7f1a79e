//! [`Entry`]: a signal as the mailbox holds it, and [`Dropped`]: a stored one it let go.

use std::sync::Arc;

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
}

impl Entry {
    /// A signal sent just now that no store keeps.
    pub(crate) fn new(payload: Value) -> Self {
        Self {
            payload,
            seq: None,
            sent_at: Instant::now(),
        }
    }
}

/// A stored signal the mailbox dropped (a pending bound) or discarded (its session's last
/// exit): the runtime removes it from the store, so that it does not come back after a
/// restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dropped {
    pub(crate) session: Arc<str>,
    pub(crate) seq: u64,
}
