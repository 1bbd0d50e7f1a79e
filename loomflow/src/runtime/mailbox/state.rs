//! The mailbox's state, behind one lock: live sessions, the pending mailbox and the
//! remembered idempotency keys. Every method runs with the lock held, so each is atomic with
//! respect to every other.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::entry::{Dropped, Entry};
use super::idempotency::Remembered;
use super::queued::{Place, Queued, expired, insert_at, note_dropped, note_queues_dropped};
use super::{Delivery, MailboxConfig};

mod forget;
mod taken;

/// The outcome of registering a waiter.
pub(super) enum Registration {
    /// A payload was queued: the wait completes at once.
    Ready(Queued),
    /// The waiter is parked; `rx` receives its payload.
    Parked {
        id: u64,
        rx: oneshot::Receiver<Queued>,
    },
}

/// A waiter's place in line: the sending half of its slot.
struct Waiter {
    id: u64,
    tx: oneshot::Sender<Queued>,
}

/// One (session, name) queue of a live session. Invariants: `queue` is sorted by `order`;
/// `queue` and `waiters` are never both non-empty: a payload meets a parked waiter at once.
struct Channel {
    name: Arc<str>,
    queue: VecDeque<Queued>,
    waiters: VecDeque<Waiter>,
}

impl Channel {
    fn new(name: &str) -> Self {
        Self {
            name: Arc::from(name),
            queue: VecDeque::new(),
            waiters: VecDeque::new(),
        }
    }

    fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.waiters.is_empty()
    }
}

/// Maps keyed by session or signal name: hashed with foldhash, seeded per process, which
/// costs a fraction of SipHash; a run opens and closes its session when it is signalled.
type ByName<V> = HashMap<Arc<str>, V, foldhash::fast::RandomState>;

/// The mailbox of a session that is open (a guard) or held (a parked waiter).
struct Live {
    key: Arc<str>,
    guards: usize,
    /// Parked waiters; each holds the mailbox until it leaves the line.
    holds: usize,
    names: ByName<Channel>,
    /// A run's guard left: the last exit, whichever it is, keeps the leftovers as pending.
    keep: bool,
}

impl Live {
    fn unused(&self) -> bool {
        self.guards == 0 && self.holds == 0
    }
}

/// The pending mailbox of one session.
struct Pending {
    /// Last push or pop; never older than the newest entry's send time, so a session
    /// untouched for a TTL holds only expired entries.
    touched: Instant,
    /// Key in [`State::lru`].
    tick: u64,
    names: ByName<VecDeque<Queued>>,
}

/// Everything the mailbox knows.
#[derive(Default)]
pub(super) struct State {
    live: ByName<Live>,
    pending: ByName<Pending>,
    /// Pending sessions by last use, least recent first.
    lru: BTreeMap<u64, Arc<str>>,
    tick: u64,
    /// Source of places in send order and of waiter ids; starts at 1 so that 0 sorts first.
    next_id: u64,
    pub(super) remembered: Remembered,
    /// Stored signals dropped or discarded since the mailbox last reported them.
    dropped: Vec<Dropped>,
    taken: taken::TakenHere,
}

/// Pops the oldest payload of a live session's channel, or parks waiter `id` there.
fn register_live(live: &mut Live, name: &str, id: u64) -> (Arc<str>, Arc<str>, Registration) {
    let session_key = Arc::clone(&live.key);
    if let Some(channel) = live.names.get_mut(name) {
        let name_key = Arc::clone(&channel.name);
        if let Some(queued) = channel.queue.pop_front() {
            if channel.is_idle() {
                live.names.remove(name);
            }
            return (session_key, name_key, Registration::Ready(queued));
        }
        let (tx, rx) = oneshot::channel();
        channel.waiters.push_back(Waiter { id, tx });
        live.holds += 1;
        return (session_key, name_key, Registration::Parked { id, rx });
    }
    let mut channel = Channel::new(name);
    let name_key = Arc::clone(&channel.name);
    let (tx, rx) = oneshot::channel();
    channel.waiters.push_back(Waiter { id, tx });
    live.names.insert(Arc::clone(&name_key), channel);
    live.holds += 1;
    (session_key, name_key, Registration::Parked { id, rx })
}

impl State {
    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// The stored signals dropped or discarded since the last call.
    pub(super) fn take_dropped(&mut self) -> Vec<Dropped> {
        std::mem::take(&mut self.dropped)
    }

    /// Delivers `entry`: to the oldest parked waiter, else into the queue at `place`; to the
    /// pending mailbox when the session is not live.
    pub(super) fn deliver(
        &mut self,
        config: &MailboxConfig,
        session: &str,
        name: &str,
        mut entry: Entry,
        place: Place,
    ) -> Delivery {
        let order = match place {
            Place::Back => self.next_id(),
            Place::Return(order) => order,
            Place::Front => 0,
        };
        entry.order = (order > 0).then_some(order);
        let queued = Queued { order, entry };
        let Some(live) = self.live.get_mut(session) else {
            // Not a new signal: a payload a receiver gives back (see `push_pending`).
            let given_back = !matches!(place, Place::Back);
            let arrival = (place, given_back);
            let kept = self.push_pending(config, session, name, queued, arrival, Instant::now());
            return match kept {
                true => Delivery::Pending,
                false => Delivery::Dropped,
            };
        };
        let Some(channel) = live.names.get_mut(name) else {
            let mut channel = Channel::new(name);
            channel.queue.push_back(queued);
            live.names.insert(Arc::clone(&channel.name), channel);
            return Delivery::Queued;
        };
        let mut queued = queued;
        while let Some(waiter) = channel.waiters.pop_front() {
            live.holds -= 1;
            // Sent under the lock: a waiter leaving the line (drop, timeout) takes the lock
            // first, so it finds itself still in line or this payload in its slot. A send
            // fails only for a receiver gone without leaving the line (`Wait` never is);
            // the payload then goes to the next waiter.
            match waiter.tx.send(queued) {
                Ok(()) => {
                    if channel.is_idle() {
                        live.names.remove(name);
                    }
                    if live.unused() {
                        self.retire(config, session, true);
                    }
                    return Delivery::Woke;
                }
                Err(back) => queued = back,
            }
        }
        insert_at(&mut channel.queue, queued, place);
        Delivery::Queued
    }

    /// Pops the oldest payload, or parks a waiter. A session that is not live is served from
    /// the pending mailbox, or made live (held by the waiter) so that the waiter can park.
    pub(super) fn register(
        &mut self,
        config: &MailboxConfig,
        session: &str,
        name: &str,
    ) -> (Arc<str>, Arc<str>, Registration) {
        let id = self.next_id();
        if let Some(live) = self.live.get_mut(session) {
            return register_live(live, name, id);
        }
        let now = Instant::now();
        if let Some((session_key, name_key, queued)) = self.pop_pending(config, session, name, now)
        {
            return (session_key, name_key, Registration::Ready(queued));
        }
        register_live(self.make_live(config, session, None, now), name, id)
    }

    /// Takes waiter `id` out of line. Returns the payload already in its slot when it had
    /// left the line by being handed one; `None` when it was still parked.
    pub(super) fn leave(
        &mut self,
        config: &MailboxConfig,
        session: &str,
        name: &str,
        id: u64,
        rx: &mut oneshot::Receiver<Queued>,
    ) -> Option<Queued> {
        if let Some(live) = self.live.get_mut(session)
            && let Some(channel) = live.names.get_mut(name)
            && let Some(at) = channel.waiters.iter().position(|w| w.id == id)
        {
            channel.waiters.remove(at);
            live.holds -= 1;
            if channel.is_idle() {
                live.names.remove(name);
            }
            if live.unused() {
                self.retire(config, session, true);
            }
            return None;
        }
        rx.try_recv().ok()
    }

    /// Pops the oldest payload without waiting.
    pub(super) fn poll(
        &mut self,
        config: &MailboxConfig,
        session: &str,
        name: &str,
    ) -> Option<Entry> {
        let Some(live) = self.live.get_mut(session) else {
            return self
                .pop_pending(config, session, name, Instant::now())
                .map(|(_, _, queued)| queued.entry);
        };
        let channel = live.names.get_mut(name)?;
        let queued = channel.queue.pop_front();
        if channel.is_idle() {
            live.names.remove(name);
        }
        queued.map(|queued| queued.entry)
    }

    /// Opens the session for a guard, picking up its pending signals.
    pub(super) fn open(&mut self, config: &MailboxConfig, session: &Arc<str>) {
        match self.live.get_mut(&**session) {
            Some(live) => live.guards += 1,
            // Nothing pending anywhere (the usual open): nothing to take or expire, no clock.
            None if self.pending.is_empty() => {
                let live = Live {
                    key: Arc::clone(session),
                    guards: 1,
                    holds: 0,
                    names: ByName::default(),
                    keep: false,
                };
                self.live.insert(Arc::clone(session), live);
            }
            None => {
                self.make_live(config, session, Some(session), Instant::now())
                    .guards += 1;
            }
        }
    }

    /// Closes one guard; the last exit (no waiter holding on) discards the leftovers, or
    /// keeps them as pending once a guard that keeps them (a run's) has left.
    pub(super) fn close(&mut self, config: &MailboxConfig, session: &str, keep_leftovers: bool) {
        if let Some(live) = self.live.get_mut(session) {
            live.guards = live.guards.saturating_sub(1);
            live.keep |= keep_leftovers;
            if live.unused() {
                let keep = live.keep;
                self.retire(config, session, keep);
            }
        }
    }

    /// Parked waiters on (session, name).
    pub(super) fn waiting(&self, session: &str, name: &str) -> usize {
        self.live
            .get(session)
            .and_then(|live| live.names.get(name))
            .map_or(0, |channel| channel.waiters.len())
    }

    /// Payloads queued on (session, name), live or pending and not expired.
    pub(super) fn queued(&self, config: &MailboxConfig, session: &str, name: &str) -> usize {
        if let Some(live) = self.live.get(session) {
            return live
                .names
                .get(name)
                .map_or(0, |channel| channel.queue.len());
        }
        // The clock is read only for a queue to count (most sessions have none).
        let queue = self.pending.get(session).and_then(|p| p.names.get(name));
        queue.map_or(0, |queue| {
            let now = Instant::now();
            let live = |q: &&Queued| !expired(&q.entry, config.pending_signal_ttl, now);
            queue.iter().filter(live).count()
        })
    }

    /// The sessions that are open or held by a parked waiter.
    pub(super) fn live_sessions(&self) -> impl Iterator<Item = &str> {
        self.live.keys().map(|key| &**key)
    }

    /// Whether a guard holds the session open.
    pub(super) fn is_open(&self, session: &str) -> bool {
        self.live.get(session).is_some_and(|live| live.guards > 0)
    }

    /// Whether `session` is live (a guard or a parked waiter holds it, and signals may be
    /// queued there) or the pending mailbox holds signals of it, expired or not.
    pub(super) fn is_live_or_pending(&self, session: &str) -> bool {
        (!self.live.is_empty() && self.live.contains_key(session))
            || (!self.pending.is_empty() && self.pending.contains_key(session))
    }

    /// Sessions with unexpired signals in the pending mailbox.
    pub(super) fn pending_sessions(&mut self, config: &MailboxConfig) -> usize {
        self.sweep(config, Instant::now());
        self.pending.len()
    }

    /// Removes a live session that no guard and no waiter holds. When the last holder was a
    /// waiter (`to_pending`), queued payloads go back to the pending mailbox; when it was a
    /// guard, they are discarded with the mailbox.
    fn retire(&mut self, config: &MailboxConfig, session: &str, to_pending: bool) {
        let Some((key, live)) = self.live.remove_entry(session) else {
            return;
        };
        // Most sessions close with nothing queued (a run nobody signalled).
        if live.names.is_empty() {
            return;
        }
        let mut leftovers = live
            .names
            .into_values()
            .filter(|c| !c.queue.is_empty())
            .peekable();
        if leftovers.peek().is_none() {
            return;
        }
        if !to_pending {
            let mut dropped = 0;
            for channel in leftovers {
                let entries = channel.queue.iter().map(|q| &q.entry);
                dropped += note_dropped(&mut self.dropped, (&key, &channel.name), entries);
            }
            if dropped > 0 {
                tracing::debug!(
                    session,
                    dropped,
                    "session closed: undelivered signals discarded"
                );
            }
            return;
        }
        let now = Instant::now();
        for channel in leftovers.collect::<Vec<_>>() {
            // Last first: each goes before those of its place (given back, it has none).
            for queued in channel.queue.into_iter().rev() {
                let arrival = (Place::Return(queued.order), false);
                self.push_pending(config, session, &channel.name, queued, arrival, now);
            }
        }
    }

    /// Makes a session live, moving its unexpired pending signals into it.
    /// Makes `session` live, keyed by `shared` when the caller already holds its name.
    fn make_live(
        &mut self,
        config: &MailboxConfig,
        session: &str,
        shared: Option<&Arc<str>>,
        now: Instant,
    ) -> &mut Live {
        self.sweep(config, now);
        let (key, pending) = match self.pending.remove_entry(session) {
            Some((key, pending)) => {
                self.lru.remove(&pending.tick);
                (key, Some(pending))
            }
            None => (shared.map_or_else(|| Arc::from(session), Arc::clone), None),
        };
        let ttl = config.pending_signal_ttl;
        let mut names = ByName::default();
        for (name, queue) in pending.into_iter().flat_map(|p| p.names) {
            let (queue, gone): (VecDeque<Queued>, VecDeque<Queued>) = queue
                .into_iter()
                .partition(|q| !expired(&q.entry, ttl, now));
            let gone = note_dropped(
                &mut self.dropped,
                (&key, &name),
                gone.iter().map(|q| &q.entry),
            );
            if gone > 0 {
                tracing::debug!(
                    session,
                    name = &*name,
                    dropped = gone,
                    "pending signals expired"
                );
            }
            if !queue.is_empty() {
                let waiters = VecDeque::new();
                let channel = Channel {
                    name: Arc::clone(&name),
                    queue,
                    waiters,
                };
                names.insert(name, channel);
            }
        }
        let live = Live {
            key: Arc::clone(&key),
            guards: 0,
            holds: 0,
            names,
            keep: false,
        };
        self.live.entry(key).or_insert(live)
    }

    fn push_pending(
        &mut self,
        config: &MailboxConfig,
        session: &str,
        name: &str,
        queued: Queued,
        (place, given_back): (Place, bool),
        now: Instant,
    ) -> bool {
        self.sweep(config, now);
        // A payload a receiver gives back (it was not the type asked for, or the receive was
        // dropped) is kept whatever the bound on sessions: its receiver may have been the
        // session's only holder, and the payload was this process's to deliver. Its TTL
        // still counts, as it does wherever it waits. A closed session's leftovers are
        // pending signals as any other.
        if config.max_pending_signal_sessions == Some(0) && !given_back {
            let (session, name) = (Arc::from(session), Arc::from(name));
            note_dropped(&mut self.dropped, (&session, &name), [&queued.entry]);
            tracing::debug!(%session, %name, "pending mailbox disabled: signal dropped");
            return false;
        }
        if expired(&queued.entry, config.pending_signal_ttl, now) {
            // Loaded after a restart, or left by a session that held it past the TTL: aged
            // from when it was sent.
            let (session, name) = (Arc::from(session), Arc::from(name));
            note_dropped(&mut self.dropped, (&session, &name), [&queued.entry]);
            tracing::debug!(%session, %name, "pending signal expired on arrival");
            return false;
        }
        if !self.pending.contains_key(session) {
            if let Some(max) = config.max_pending_signal_sessions.filter(|_| !given_back) {
                while self.pending.len() >= max {
                    let Some((_, victim)) = self.lru.pop_first() else {
                        break;
                    };
                    if let Some(evicted) = self.pending.remove(&victim) {
                        let dropped =
                            note_queues_dropped(&mut self.dropped, &victim, &evicted.names);
                        tracing::debug!(
                            session = &*victim,
                            dropped,
                            "pending mailbox full: least recently used session dropped"
                        );
                    }
                }
            }
            let pending = Pending {
                touched: now,
                tick: 0,
                names: ByName::default(),
            };
            self.pending.insert(Arc::from(session), pending);
        }
        let Some(pending) = self.pending.get_mut(session) else {
            return false;
        };
        let queue = match pending.names.get_mut(name) {
            Some(queue) => queue,
            None => pending.names.entry(Arc::from(name)).or_default(),
        };
        insert_at(queue, queued, place);
        self.touch(session, now);
        true
    }

    /// Pops the oldest unexpired pending payload of (session, name).
    fn pop_pending(
        &mut self,
        config: &MailboxConfig,
        session: &str,
        name: &str,
        now: Instant,
    ) -> Option<(Arc<str>, Arc<str>, Queued)> {
        self.sweep(config, now);
        let (session_key, pending) = self.pending.get_key_value(session)?;
        let session_key = Arc::clone(session_key);
        let name_key = Arc::clone(pending.names.get_key_value(name)?.0);
        let pending = self.pending.get_mut(session)?;
        let queue = pending.names.get_mut(name)?;
        let mut found = None;
        while let Some(queued) = queue.pop_front() {
            if !expired(&queued.entry, config.pending_signal_ttl, now) {
                found = Some(queued);
                break;
            }
            note_dropped(
                &mut self.dropped,
                (&session_key, &name_key),
                [&queued.entry],
            );
            tracing::debug!(session, name, "pending signal expired");
        }
        if queue.is_empty() {
            pending.names.remove(name);
        }
        if pending.names.is_empty() {
            let tick = pending.tick;
            self.pending.remove(session);
            self.lru.remove(&tick);
        } else if found.is_some() {
            self.touch(session, now);
        }
        found.map(|queued| (session_key, name_key, queued))
    }

    /// Marks a pending session as most recently used.
    fn touch(&mut self, session: &str, now: Instant) {
        let Some(pending) = self.pending.get_mut(session) else {
            return;
        };
        let key = self
            .lru
            .remove(&pending.tick)
            .unwrap_or_else(|| Arc::from(session));
        self.tick += 1;
        pending.tick = self.tick;
        pending.touched = now;
        self.lru.insert(self.tick, key);
    }

    /// Drops pending sessions untouched for a whole TTL, least recently used first.
    fn sweep(&mut self, config: &MailboxConfig, now: Instant) {
        let Some(ttl) = config.pending_signal_ttl else {
            return;
        };
        while let Some((&tick, session)) = self.lru.first_key_value() {
            let stale = self
                .pending
                .get(session)
                .is_none_or(|p| now.saturating_duration_since(p.touched) >= ttl);
            if !stale {
                break;
            }
            if let Some(session) = self.lru.remove(&tick)
                && let Some(gone) = self.pending.remove(&session)
            {
                let dropped = note_queues_dropped(&mut self.dropped, &session, &gone.names);
                tracing::debug!(session = &*session, dropped, "pending signals expired");
            }
        }
    }
}

impl super::Mailbox {
    /// The sessions open here (a guard, a run) or held by a parked waiter: their queued
    /// signals are live, whatever their age.
    pub(crate) fn live_sessions(&self) -> Vec<String> {
        let state = crate::sync::lock(&self.inner.state);
        state.live_sessions().map(str::to_owned).collect()
    }
}
