//! Stored signals a receiver in this process took in a way the store does not show yet.
//!
//! Two paths bring a stored signal into the mailbox after its row is in the store: the send
//! that stored it, when it queues its own copy, and a refresh that read it. A receiver that
//! finds nothing queued reads the store, and may take the row between the two: the copy
//! queued afterwards would be stale, and a [`Runtime::poll_signal`](crate::Runtime), which
//! cannot ask the store whether the row is still there, would hand the payload out again.
//!
//! The other way round, a `poll_signal` takes a payload from the mailbox and has its row
//! removed only later, in the background: a receiver reading the store meanwhile must not
//! take the row as well.

use std::collections::{BTreeSet, VecDeque};

use super::super::Mailbox;
use super::super::entry::Entry;
use super::super::queued::Queued;
use super::super::{Scope, SignalError, check_name};
use super::State;

/// How many such signals each set remembers: a copy comes, and a removal is made, within
/// moments, so only the most recent matter.
const REMEMBERED: usize = 4_096;

/// The sequence numbers of the stored signals receivers here read from the store, and of
/// those a `poll_signal` took from the mailbox, newest [`REMEMBERED`] of each.
#[derive(Debug, Default)]
pub(super) struct TakenHere {
    read: BTreeSet<u64>,
    polled: BTreeSet<u64>,
}

/// Adds `seq` to `set`, forgetting the oldest past [`REMEMBERED`].
fn remember(set: &mut BTreeSet<u64>, seq: u64) {
    set.insert(seq);
    if set.len() > REMEMBERED {
        set.pop_first();
    }
}

impl State {
    /// Whether the stored signal `seq` is queued on (session, name), live or pending, or a
    /// receiver here read it from the store: either way a copy of it is not queued again.
    pub(in crate::runtime::mailbox) fn holds_seq(
        &self,
        session: &str,
        name: &str,
        seq: u64,
    ) -> bool {
        if self.taken.read.contains(&seq) {
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

    /// Forgets that a `poll_signal` took the stored payload `seq`: it gave it back (it was
    /// not of the type asked for), and the payload is queued again.
    pub(in crate::runtime::mailbox) fn given_back(&mut self, seq: Option<u64>) {
        if let Some(seq) = seq {
            self.taken.polled.remove(&seq);
        }
    }

    /// See [`Mailbox::read_from_store`].
    fn read_from_store(&mut self, session: &str, name: &str, seq: u64) -> bool {
        if self.taken.polled.contains(&seq) {
            return false;
        }
        remember(&mut self.taken.read, seq);
        // A copy whose row a receiver was consuming when it gave the payload back says how
        // that ended: the next receiver learns it from that copy, which stays.
        let copy = |queued: &Queued| queued.entry.seq == Some(seq) && queued.entry.taking.is_none();
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
        true
    }
}

impl Mailbox {
    /// Notes that a receiver in this process read the stored signal `seq` of (session,
    /// name) from the store, not from the mailbox: a copy of it queued before is removed,
    /// and one brought later (by the send that stored it, or by a refresh) is not queued.
    /// Should the receiver not take it, it gives the payload back, queued again.
    ///
    /// `false`, changing nothing, when a `poll_signal` here took that payload already: its
    /// row is on its way out of the store, and the receiver looks for another.
    pub(crate) fn read_from_store(&self, session: &str, name: &str, seq: u64) -> bool {
        self.inner.lock().read_from_store(session, name, seq)
    }

    /// [`poll_in`](Self::poll_in) for a `poll_signal`: a stored payload it takes is noted, in
    /// the same step, as taken here (see [`read_from_store`](Self::read_from_store)).
    pub(crate) fn poll_taking(
        &self,
        session: &str,
        name: &str,
        scope: Scope,
    ) -> Result<Option<Entry>, SignalError> {
        check_name(session, name, scope)?;
        let mut state = self.inner.lock();
        let entry = state.poll(&self.inner.config, session, name);
        if let Some(seq) = entry.as_ref().and_then(|entry| entry.seq) {
            remember(&mut state.taken.polled, seq);
        }
        Ok(entry)
    }
}
