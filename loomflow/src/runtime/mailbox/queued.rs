//! A queued signal: its entry, its place in send order, and what the mailbox does with a
//! queue of them.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::entry::{Dropped, Entry};

/// An entry with its place in send order.
///
/// Places come from one counter, so a payload given back by a waiter that never took it can
/// be put back exactly where it was, even after later payloads were queued.
pub(super) struct Queued {
    pub(super) order: u64,
    pub(super) entry: Entry,
}

/// Where a payload goes in its queue.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// After every queued payload: a new signal.
    Back,
    /// Back where its place in send order puts it: a payload a waiter was handed but never
    /// took.
    Return(u64),
    /// Before every queued payload: a payload the caller took and gives back.
    Front,
}

/// Whether `entry` has waited longer than `ttl`.
pub(super) fn expired(entry: &Entry, ttl: Option<Duration>, now: Instant) -> bool {
    ttl.is_some_and(|ttl| now.saturating_duration_since(entry.sent_at) >= ttl)
}

/// Notes the stored ones among `entries`, signals `name` of `session` which the mailbox is
/// letting go undelivered.
pub(super) fn note_dropped<'a>(
    dropped: &mut Vec<Dropped>,
    (session, name): (&Arc<str>, &Arc<str>),
    entries: impl IntoIterator<Item = &'a Entry>,
) -> usize {
    let mut count = 0;
    for entry in entries {
        count += 1;
        if let Some(seq) = entry.seq {
            let (session, name) = (Arc::clone(session), Arc::clone(name));
            dropped.push(Dropped { session, name, seq });
        }
    }
    count
}

/// Notes the stored signals of `session`'s `queues`, by name, which the mailbox is letting
/// go whole.
pub(super) fn note_queues_dropped<'a>(
    dropped: &mut Vec<Dropped>,
    session: &Arc<str>,
    queues: impl IntoIterator<Item = (&'a Arc<str>, &'a VecDeque<Queued>)>,
) -> usize {
    let mut count = 0;
    for (name, queue) in queues {
        let entries = queue.iter().map(|queued| &queued.entry);
        count += note_dropped(dropped, (session, name), entries);
    }
    count
}

/// Inserts `item` at `place` in a queue sorted by place in send order.
pub(super) fn insert_at(queue: &mut VecDeque<Queued>, item: Queued, place: Place) {
    match place {
        Place::Back => queue.push_back(item),
        Place::Front => queue.push_front(item),
        Place::Return(at) => {
            let index = queue.partition_point(|queued| queued.order < at);
            queue.insert(index, item);
        }
    }
}
