//! Stored signals a receiver in this process read from the store itself, rather than from
//! the mailbox.
//!
//! Two paths bring a stored signal into the mailbox after its row is in the store: the send
//! that stored it, when it queues its own copy, and a refresh that read it. A receiver that
//! finds nothing queued reads the store, and may take the row between the two: the copy
//! queued afterwards would be stale, and a [`Runtime::poll_signal`](crate::Runtime), which
//! cannot ask the store whether the row is still there, would hand the payload out again.

use std::collections::{BTreeSet, VecDeque};

use super::super::Mailbox;
use super::super::queued::Queued;
use super::State;

/// How many such signals are remembered: a copy comes within moments of its row, so only
/// the most recent matter.
const REMEMBERED: usize = 4_096;

/// The sequence numbers of the stored signals receivers here read from the store, newest
/// [`REMEMBERED`] of them.
#[derive(Debug, Default)]
pub(super) struct TakenHere(BTreeSet<u64>);

impl State {
    /// Whether the stored signal `seq` is queued on (session, name), live or pending, or a
    /// receiver here read it from the store: either way a copy of it is not queued again.
    pub(in crate::runtime::mailbox) fn holds_seq(
        &self,
        session: &str,
        name: &str,
        seq: u64,
    ) -> bool {
        if self.taken.0.contains(&seq) {
            return true;
        }
        let has = |queue: &VecDeque<Queued>| queue.iter().any(|q| q.entry.seq == Some(seq));
        if let Some(live) = self.live.get(session) {
            return live.names.get(name).is_some_and(|c| has(&c.queue));
        }
        self.pending
            .get(session)
            .and_then(|pending| pending.names.get(name))
            .is_some_and(has)
    }

    /// Notes that a receiver read the stored signal `seq` of (session, name) from the store,
    /// and removes a copy of it queued meanwhile.
    fn read_from_store(&mut self, session: &str, name: &str, seq: u64) {
        self.taken.0.insert(seq);
        if self.taken.0.len() > REMEMBERED {
            self.taken.0.pop_first();
        }
        let copy = |queued: &Queued| queued.entry.seq == Some(seq);
        if let Some(live) = self.live.get_mut(session)
            && let Some(channel) = live.names.get_mut(name)
        {
            channel.queue.retain(|queued| !copy(queued));
            if channel.is_idle() {
                live.names.remove(name);
            }
        }
        if let Some(pending) = self.pending.get_mut(session)
            && let Some(queue) = pending.names.get_mut(name)
        {
            queue.retain(|queued| !copy(queued));
            if queue.is_empty() {
                pending.names.remove(name);
            }
            if pending.names.is_empty() {
                let tick = pending.tick;
                self.pending.remove(session);
                self.lru.remove(&tick);
            }
        }
    }
}

impl Mailbox {
    /// Notes that a receiver in this process read the stored signal `seq` of (session,
    /// name) from the store, not from the mailbox: a copy of it queued before is removed,
    /// and one brought later (by the send that stored it, or by a refresh) is not queued.
    /// Should the receiver not take it, it gives the payload back, queued again.
    pub(crate) fn read_from_store(&self, session: &str, name: &str, seq: u64) {
        self.inner.lock().read_from_store(session, name, seq);
    }
}
