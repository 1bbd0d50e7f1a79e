//! The mailbox's state, behind one lock: live sessions, the pending mailbox and the
//! remembered idempotency keys. Every method runs with the lock held, so each is atomic with
//! respect to every other.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{Delivery, MailboxConfig};

/// Where a new payload goes in its queue.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    /// After every queued payload (a new signal).
    Back,
    /// Before every queued payload (a payload given back).
    Front,
}

/// The outcome of registering a waiter.
pub(super) enum Registration {
    /// A payload was queued: the wait completes at once.
    Ready(Value),
    /// The waiter is parked; `rx` receives its payload.
    Parked {
        id: u64,
        rx: oneshot::Receiver<Value>,
    },
}

/// A waiter's place in line: the sending half of its slot.
struct Waiter {
    id: u64,
    tx: oneshot::Sender<Value>,
}

/// One (session, name) queue of an open session.
///
/// Invariant: `queue` and `waiters` are never both non-empty, because a payload meets a
/// parked waiter as soon as both exist.
#[derive(Default)]
struct Channel {
    queue: VecDeque<Value>,
    waiters: VecDeque<Waiter>,
}

impl Channel {
    fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.waiters.is_empty()
    }
}

/// The mailbox of a session that is open (a guard) or held (a parked waiter).
struct Live {
    guards: usize,
    /// Parked waiters; each holds the mailbox until it leaves the line.
    holds: usize,
    names: HashMap<Arc<str>, Channel>,
}

impl Live {
    fn new() -> Self {
        Self {
            guards: 0,
            holds: 0,
            names: HashMap::new(),
        }
    }
}

/// A payload held for a session that is not open.
struct Stamped {
    at: Instant,
    payload: Value,
}

/// The pending mailbox of one session.
struct Pending {
    /// Last push or pop; never older than the newest entry, so a session untouched for a TTL
    /// holds only expired entries.
    touched: Instant,
    /// Key in [`State::lru`].
    tick: u64,
    names: HashMap<Arc<str>, VecDeque<Stamped>>,
}

/// Idempotency keys remembered, oldest first.
#[derive(Default)]
struct Remembered {
    keys: HashSet<Arc<str>>,
    /// Expiry order equals insertion order because every key lives equally long.
    order: VecDeque<(Option<Instant>, Arc<str>)>,
}

/// Everything the mailbox knows.
#[derive(Default)]
pub(super) struct State {
    live: HashMap<Arc<str>, Live>,
    pending: HashMap<Arc<str>, Pending>,
    /// Pending sessions by last use, least recent first.
    lru: BTreeMap<u64, Arc<str>>,
    tick: u64,
    next_waiter: u64,
    remembered: Remembered,
}

/// Returns the map's own key for `key`, or a new one.
fn shared_key<V>(map: &HashMap<Arc<str>, V>, key: &str) -> Arc<str> {
    map.get_key_value(key)
        .map_or_else(|| Arc::from(key), |(k, _)| Arc::clone(k))
}

fn expired(at: Instant, ttl: Option<Duration>, now: Instant) -> bool {
    ttl.is_some_and(|ttl| now.saturating_duration_since(at) >= ttl)
}

impl State {
    /// Delivers `payload`: to the oldest parked waiter, else into the queue at `end`; to the
    /// pending mailbox when the session is not live.
    pub(super) fn deliver(
        &mut self,
        config: &MailboxConfig,
        session: &str,
        name: &str,
        payload: Value,
        end: End,
    ) -> Delivery {
        let Some(live) = self.live.get_mut(session) else {
            return self.push_pending(config, session, name, payload, end);
        };
        let key = shared_key(&live.names, name);
        let channel = live.names.entry(key).or_default();
        let mut payload = payload;
        let mut woke = false;
        while let Some(waiter) = channel.waiters.pop_front() {
            live.holds -= 1;
            // Sent under the lock: a waiter that leaves the line (drop, timeout) takes the
            // lock first, so it either finds itself still in line or finds this payload in its
            // slot. A send only fails if the receiver vanished without leaving the line, which
            // `Wait` never does; the payload then goes to the next waiter.
            match waiter.tx.send(payload) {
                Ok(()) => {
                    woke = true;
                    payload = Value::Null;
                    break;
                }
                Err(back) => payload = back,
            }
        }
        if !woke {
            match end {
                End::Back => channel.queue.push_back(payload),
                End::Front => channel.queue.push_front(payload),
            }
        }
        self.tidy(config, session, name);
        if woke {
            Delivery::Woke
        } else {
            Delivery::Queued
        }
    }

    /// Pops the oldest payload, or parks a waiter. A session that is not live is served from
    /// the pending mailbox, or made live (held by the waiter) so that the waiter can park.
    pub(super) fn register(
        &mut self,
        config: &MailboxConfig,
        session: &str,
        name: &str,
        now: impl FnOnce() -> Instant,
    ) -> (Arc<str>, Arc<str>, Registration) {
        if !self.live.contains_key(session) {
            let now = now();
            if let Some((session_key, name_key, payload)) =
                self.pop_pending(config, session, name, now)
            {
                return (session_key, name_key, Registration::Ready(payload));
            }
            self.make_live(config, session, now);
        }
        let session_key = shared_key(&self.live, session);
        let id = self.next_waiter;
        let live = self
            .live
            .entry(Arc::clone(&session_key))
            .or_insert_with(Live::new);
        let name_key = shared_key(&live.names, name);
        let channel = live.names.entry(Arc::clone(&name_key)).or_default();
        if let Some(payload) = channel.queue.pop_front() {
            self.tidy(config, session, name);
            return (session_key, name_key, Registration::Ready(payload));
        }
        let (tx, rx) = oneshot::channel();
        channel.waiters.push_back(Waiter { id, tx });
        live.holds += 1;
        self.next_waiter += 1;
        (session_key, name_key, Registration::Parked { id, rx })
    }

    /// Takes waiter `id` out of line. Returns the payload already in its slot when it had
    /// left the line by being handed one; `None` when it was still parked.
    pub(super) fn leave(
        &mut self,
        config: &MailboxConfig,
        session: &str,
        name: &str,
        id: u64,
        rx: &mut oneshot::Receiver<Value>,
    ) -> Option<Value> {
        if let Some(channel) = self
            .live
            .get_mut(session)
            .and_then(|live| live.names.get_mut(name))
            && let Some(at) = channel.waiters.iter().position(|w| w.id == id)
        {
            channel.waiters.remove(at);
            if let Some(live) = self.live.get_mut(session) {
                live.holds -= 1;
            }
            self.tidy(config, session, name);
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
        now: impl FnOnce() -> Instant,
    ) -> Option<Value> {
        let Some(live) = self.live.get_mut(session) else {
            return self
                .pop_pending(config, session, name, now())
                .map(|(_, _, payload)| payload);
        };
        let payload = live.names.get_mut(name)?.queue.pop_front();
        self.tidy(config, session, name);
        payload
    }

    /// Opens the session for a guard, picking up its pending signals.
    pub(super) fn open(
        &mut self,
        config: &MailboxConfig,
        session: &str,
        now: impl FnOnce() -> Instant,
    ) {
        if !self.live.contains_key(session) {
            self.make_live(config, session, now());
        }
        if let Some(live) = self.live.get_mut(session) {
            live.guards += 1;
        }
    }

    /// Closes one guard; the last one out (with no waiter holding on) discards the mailbox.
    pub(super) fn close(&mut self, config: &MailboxConfig, session: &str) {
        if let Some(live) = self.live.get_mut(session) {
            live.guards = live.guards.saturating_sub(1);
        }
        self.retire_if_unused(config, session, false);
    }

    /// Whether `(session, name, key)` was already seen; remembers it if not.
    pub(super) fn seen(
        &mut self,
        config: &MailboxConfig,
        session: &str,
        name: &str,
        key: &str,
        now: Instant,
    ) -> bool {
        let remembered = &mut self.remembered;
        while let Some((Some(expiry), _)) = remembered.order.front()
            && *expiry <= now
        {
            if let Some((_, old)) = remembered.order.pop_front() {
                remembered.keys.remove(&old);
            }
        }
        // Lengths make the concatenation unambiguous whatever the parts contain.
        let joined: Arc<str> = Arc::from(format!(
            "{}:{session}{}:{name}{key}",
            session.len(),
            name.len()
        ));
        if remembered.keys.contains(&joined) {
            return true;
        }
        if let Some(max) = config.max_idempotency_keys {
            if max == 0 {
                return false;
            }
            while remembered.keys.len() >= max {
                let Some((_, old)) = remembered.order.pop_front() else {
                    break;
                };
                remembered.keys.remove(&old);
            }
        }
        let expiry = config.effective_key_ttl().map(|ttl| now + ttl);
        remembered.keys.insert(Arc::clone(&joined));
        remembered.order.push_back((expiry, joined));
        false
    }

    /// Parked waiters on (session, name).
    pub(super) fn waiting(&self, session: &str, name: &str) -> usize {
        self.live
            .get(session)
            .and_then(|live| live.names.get(name))
            .map_or(0, |channel| channel.waiters.len())
    }

    /// Payloads queued on (session, name), live or pending and not expired.
    pub(super) fn queued(
        &self,
        config: &MailboxConfig,
        session: &str,
        name: &str,
        now: Instant,
    ) -> usize {
        if let Some(live) = self.live.get(session) {
            return live
                .names
                .get(name)
                .map_or(0, |channel| channel.queue.len());
        }
        self.pending
            .get(session)
            .and_then(|pending| pending.names.get(name))
            .map_or(0, |queue| {
                queue
                    .iter()
                    .filter(|s| !expired(s.at, config.pending_signal_ttl, now))
                    .count()
            })
    }

    /// Whether a guard holds the session open.
    pub(super) fn is_open(&self, session: &str) -> bool {
        self.live.get(session).is_some_and(|live| live.guards > 0)
    }

    /// Sessions with signals in the pending mailbox (expired ones may not be swept yet).
    pub(super) fn pending_sessions(&mut self, config: &MailboxConfig, now: Instant) -> usize {
        self.sweep(config, now);
        self.pending.len()
    }

    /// Drops an idle channel, and retires the session when nothing holds it any more.
    fn tidy(&mut self, config: &MailboxConfig, session: &str, name: &str) {
        if let Some(live) = self.live.get_mut(session)
            && live.names.get(name).is_some_and(Channel::is_idle)
        {
            live.names.remove(name);
        }
        self.retire_if_unused(config, session, true);
    }

    /// Removes a live session that no guard and no waiter holds. When the last holder was a
    /// waiter (`to_pending`), queued payloads go back to the pending mailbox; when it was a
    /// guard, they are discarded with the mailbox.
    fn retire_if_unused(&mut self, config: &MailboxConfig, session: &str, to_pending: bool) {
        if !self
            .live
            .get(session)
            .is_some_and(|live| live.guards == 0 && live.holds == 0)
        {
            return;
        }
        let Some(live) = self.live.remove(session) else {
            return;
        };
        let leftovers: Vec<(Arc<str>, VecDeque<Value>)> = live
            .names
            .into_iter()
            .filter(|(_, channel)| !channel.queue.is_empty())
            .map(|(name, channel)| (name, channel.queue))
            .collect();
        if leftovers.is_empty() {
            return;
        }
        if !to_pending {
            let dropped: usize = leftovers.iter().map(|(_, queue)| queue.len()).sum();
            tracing::debug!(
                session,
                dropped,
                "session closed: undelivered signals discarded"
            );
            return;
        }
        for (name, queue) in leftovers {
            for payload in queue {
                self.push_pending(config, session, &name, payload, End::Back);
            }
        }
    }

    /// Makes a session live, moving its unexpired pending signals into it.
    fn make_live(&mut self, config: &MailboxConfig, session: &str, now: Instant) {
        self.sweep(config, now);
        let mut live = Live::new();
        let key = match self.pending.remove_entry(session) {
            Some((key, pending)) => {
                self.lru.remove(&pending.tick);
                for (name, queue) in pending.names {
                    let queue: VecDeque<Value> = queue
                        .into_iter()
                        .filter(|s| !expired(s.at, config.pending_signal_ttl, now))
                        .map(|s| s.payload)
                        .collect();
                    if !queue.is_empty() {
                        let waiters = VecDeque::new();
                        live.names.insert(name, Channel { queue, waiters });
                    }
                }
                key
            }
            None => Arc::from(session),
        };
        self.live.insert(key, live);
    }

    fn push_pending(
        &mut self,
        config: &MailboxConfig,
        session: &str,
        name: &str,
        payload: Value,
        end: End,
    ) -> Delivery {
        let now = Instant::now();
        self.sweep(config, now);
        if config.max_pending_signal_sessions == Some(0) {
            tracing::debug!(session, name, "pending mailbox disabled: signal dropped");
            return Delivery::Pending;
        }
        if !self.pending.contains_key(session) {
            if let Some(max) = config.max_pending_signal_sessions {
                while self.pending.len() >= max {
                    let Some((_, victim)) = self.lru.pop_first() else {
                        break;
                    };
                    if let Some(evicted) = self.pending.remove(&victim) {
                        let dropped: usize = evicted.names.values().map(VecDeque::len).sum();
                        tracing::debug!(
                            session = &*victim,
                            dropped,
                            "pending mailbox full: least recently used session dropped"
                        );
                    }
                }
            }
            let key: Arc<str> = Arc::from(session);
            self.pending.insert(
                key,
                Pending {
                    touched: now,
                    tick: 0,
                    names: HashMap::new(),
                },
            );
        }
        let Some(pending) = self.pending.get_mut(session) else {
            return Delivery::Pending;
        };
        let name_key = shared_key(&pending.names, name);
        let queue = pending.names.entry(name_key).or_default();
        let stamped = Stamped { at: now, payload };
        match end {
            End::Back => queue.push_back(stamped),
            End::Front => queue.push_front(stamped),
        }
        self.touch(session, now);
        Delivery::Pending
    }

    /// Pops the oldest unexpired pending payload of (session, name).
    fn pop_pending(
        &mut self,
        config: &MailboxConfig,
        session: &str,
        name: &str,
        now: Instant,
    ) -> Option<(Arc<str>, Arc<str>, Value)> {
        self.sweep(config, now);
        let pending = self.pending.get_mut(session)?;
        let name_key = Arc::clone(pending.names.get_key_value(name)?.0);
        let queue = pending.names.get_mut(name)?;
        let mut found = None;
        while let Some(stamped) = queue.pop_front() {
            if !expired(stamped.at, config.pending_signal_ttl, now) {
                found = Some(stamped.payload);
                break;
            }
        }
        if queue.is_empty() {
            pending.names.remove(name);
        }
        let session_key = shared_key(&self.pending, session);
        if self
            .pending
            .get(session)
            .is_some_and(|p| p.names.is_empty())
        {
            if let Some(gone) = self.pending.remove(session) {
                self.lru.remove(&gone.tick);
            }
        } else if found.is_some() {
            self.touch(session, now);
        }
        found.map(|payload| (session_key, name_key, payload))
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
                let dropped: usize = gone.names.values().map(VecDeque::len).sum();
                tracing::debug!(session = &*session, dropped, "pending signals expired");
            }
        }
    }
}
