//! The signal mailbox: per-session, per-name FIFO queues of JSON payloads that code outside a
//! run uses to wake code parked inside it.
//!
//! [`Mailbox::signal`] delivers a payload; [`Mailbox::wait`] parks until one arrives (with an
//! optional timeout); [`Mailbox::poll`] takes one if present, without blocking.
//! [`Mailbox::open_session`] keeps a session's mailbox open for as long as its guards live.
//!
//! # Delivery
//!
//! - Payloads of one (session, name) form a FIFO; `wait` and `poll` take the oldest.
//! - Parked waiters of one (session, name) are served oldest first, one payload each.
//! - A payload sent before anyone waits is queued; the next `wait` returns it at once.
//! - Sessions and names are isolated from one another.
//! - A signal for a session that is not open waits in a *pending* mailbox, bounded by
//!   [`MailboxConfig::max_pending_signal_sessions`] (least recently used session dropped
//!   first) and [`MailboxConfig::pending_signal_ttl`] (counted from when each signal was
//!   sent); opening the session picks it up.
//! - Sessions are reference-counted: the mailbox, and any payload still in it, goes when the
//!   last [`SessionGuard`] drops. A `wait` on a session that is not open holds the mailbox
//!   while it is parked; when the last holder is such a waiter, payloads still queued go back
//!   to the pending mailbox instead.
//! - An idempotency key ([`SignalOptions::idempotency_key`]) makes a repeated send of the
//!   same (session, name, key) deliver once while the key is remembered.
//! - Names starting with `loomflow:` ([`RESERVED_PREFIX`]) belong to the framework (tool
//!   approvals park on `loomflow:approval:<call id>`); the public methods refuse them.
//!
//! # Hand-off, and why no payload is lost
//!
//! A payload goes *directly* into a waiter's slot (a `tokio::sync::oneshot`): the sender pops
//! the oldest waiter from the line and sends the payload while it holds the mailbox lock.
//! A waiter that stops waiting for any reason (dropped, cancelled, timed out) takes the same
//! lock and either finds itself still in line, and leaves it, or finds that it was handed a
//! payload, which is then in its slot. In the second case it takes the payload back out and,
//! still under the lock, passes it to the next waiter in line, or puts it back into the queue
//! where it was (a timed-out wait that finds a payload returns it instead of an error). Since
//! both sides decide under one lock, there is no interleaving in which a payload sits in an
//! abandoned slot or reaches two waiters.
//!
//! Every payload carries its place in send order, from one counter, so "where it was" is
//! exact: two waiters handed payloads and cancelled in either order leave the queue in send
//! order. A payload given back with [`Mailbox::requeue_front`] goes to the very head instead.
//!
//! # Durable signals
//!
//! On a durable runtime a queued entry also carries the store's sequence number and the
//! stored send time, beside the payload (which is never rewritten). The pending TTL counts
//! from the send time, also for signals loaded after a restart; and every stored signal the
//! mailbox drops (a bound) or discards (a session's last exit) is reported to the runtime,
//! which removes it from the store, so that it does not come back after a restart.
//!
//! The alternative, waking a waiter and letting it pop the queue itself, lets a concurrent
//! `poll` or a newer waiter take the payload first and needs a second hand-off of the
//! *wake-up* when the woken task is cancelled; direct hand-off needs neither.
//!
//! A parked waiter costs a small entry in a `VecDeque` plus one oneshot allocation; the
//! waiting task is the caller's, so there is no task per waiter. All state sits behind one
//! `std::sync::Mutex`, held only for map look-ups and queue operations (never across an
//! `.await`); the pending mailbox's LRU order and the idempotency memory are global, which a
//! sharded lock would complicate for little gain on a handful of cores.

mod config;
mod entry;
mod error;
mod idempotency;
mod names;
mod queued;
mod session_guard;
mod state;
mod wait;

use std::io;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::clock::now_ms;

pub use config::{MailboxConfig, SignalOptions};
pub(crate) use entry::{Dropped, Entry, Taken, Taking};
pub use error::SignalError;
pub(crate) use names::check_name;
pub use session_guard::SessionGuard;
pub use wait::Wait;
pub(crate) use wait::WaitEntry;

use queued::Place;
use state::{Registration, State};

/// The prefix of the signal names reserved for loomflow itself.
pub const RESERVED_PREFIX: &str = "loomflow:";

/// What became of a signal that was accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Delivery {
    /// Handed to the oldest parked waiter, which was woken.
    Woke,
    /// Queued in an open (or held) session's mailbox.
    Queued,
    /// Held in the pending mailbox: the session is not open. On a durable runtime whose
    /// pending mailbox keeps nothing, stored for the session's run that has not ended,
    /// which takes it from the store.
    Pending,
    /// Its idempotency key was already seen: nothing was delivered.
    Duplicate,
    /// Dropped on arrival: the session is not open and the pending mailbox keeps nothing
    /// ([`max_pending_signal_sessions(Some(0))`](MailboxConfig::max_pending_signal_sessions));
    /// on a durable runtime, the session has no run that has not ended either. Nothing is
    /// stored, and its idempotency key is not remembered, so a retry once the session is
    /// open (or its run submitted) delivers.
    Dropped,
}

/// Who may use a name: user code, or loomflow itself (reserved names allowed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    User,
    Framework,
}

/// Told of the stored signals the mailbox dropped or discarded. It runs under the mailbox's
/// lock, so it must be quick and must not use the mailbox.
pub(crate) type DropHook = Box<dyn Fn(Vec<Dropped>) + Send + Sync>;

/// Shared by every clone of a [`Mailbox`], its guards and its waits.
struct Inner {
    config: MailboxConfig,
    state: Mutex<State>,
    on_drop: Option<DropHook>,
}

impl Inner {
    fn lock(&self) -> Locked<'_> {
        // Nothing panics while holding the lock, and every operation leaves the state
        // consistent before it could, so a poisoned lock is still usable.
        let state = crate::sync::lock(&self.state);
        Locked { inner: self, state }
    }
}

/// The locked state. Unlocking reports the stored signals dropped meanwhile to the drop
/// hook, so that no operation can forget to.
struct Locked<'a> {
    inner: &'a Inner,
    state: MutexGuard<'a, State>,
}

impl Deref for Locked<'_> {
    type Target = State;

    fn deref(&self) -> &State {
        &self.state
    }
}

impl DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.state
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let dropped = self.state.take_dropped();
        if !dropped.is_empty() {
            match &self.inner.on_drop {
                Some(hook) => hook(dropped),
                None => tracing::warn!(
                    count = dropped.len(),
                    "stored signals dropped without a hook to remove them from the store"
                ),
            }
        }
    }
}

/// The signal mailbox of a runtime: named FIFO queues per session.
///
/// `Mailbox` is a handle: cloning it is cheap (an `Arc`) and every clone shares the same
/// queues. It is `Send + Sync`; use it from any thread or task.
///
/// # Examples
///
/// ```
/// use loomflow::runtime::mailbox::{Mailbox, MailboxConfig};
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mailbox = Mailbox::new(MailboxConfig::default());
/// let session = mailbox.open_session("sess-42");
///
/// // Park a waiter, then answer it from another task (a web handler, say).
/// let waiter = tokio::spawn({
///     let mailbox = mailbox.clone();
///     async move { mailbox.wait("sess-42", "approval", None).await }
/// });
/// mailbox.signal("sess-42", "approval", json!({ "action": "allow" }))?;
/// let payload = waiter.await??;
/// assert_eq!(payload["action"], "allow");
///
/// // Nothing waits now: the next signal is queued and polled.
/// mailbox.signal("sess-42", "approval", json!({ "action": "deny" }))?;
/// assert_eq!(mailbox.poll("sess-42", "approval")?, Some(json!({ "action": "deny" })));
/// drop(session);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Mailbox {
    inner: Arc<Inner>,
}

const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Mailbox>();
    assert_send_sync::<SessionGuard>();
    assert_send_sync::<Wait>();
};

impl std::fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailbox")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Default for Mailbox {
    fn default() -> Self {
        Self::new(MailboxConfig::default())
    }
}

impl Mailbox {
    /// Creates an empty mailbox.
    pub fn new(config: MailboxConfig) -> Self {
        Self::build(config, None)
    }

    /// A mailbox that reports the stored signals it drops or discards to `hook`.
    pub(crate) fn with_drop_hook(config: MailboxConfig, hook: DropHook) -> Self {
        Self::build(config, Some(hook))
    }

    fn build(config: MailboxConfig, on_drop: Option<DropHook>) -> Self {
        Self {
            inner: Arc::new(Inner {
                config,
                state: Mutex::new(State::default()),
                on_drop,
            }),
        }
    }

    /// The mailbox's configuration.
    pub fn config(&self) -> &MailboxConfig {
        &self.inner.config
    }

    /// Delivers `payload` under `name` to `session`: to the oldest waiter parked there, else
    /// to the back of the queue (the pending mailbox when the session is not open).
    ///
    /// # Errors
    ///
    /// [`SignalError::EmptyName`], [`SignalError::ReservedName`] (a `loomflow:` name) and
    /// [`SignalError::PayloadTooLarge`].
    pub fn signal(&self, session: &str, name: &str, payload: Value) -> Result<(), SignalError> {
        self.send(session, name, payload, None, Scope::User, now_ms())
            .map(|_| ())
    }

    /// Like [`signal`](Self::signal), with options; tells what became of the signal.
    ///
    /// # Errors
    ///
    /// As [`signal`](Self::signal).
    pub fn signal_with(
        &self,
        session: &str,
        name: &str,
        payload: Value,
        options: SignalOptions,
    ) -> Result<Delivery, SignalError> {
        let key = options.idempotency_key.as_deref();
        self.send(session, name, payload, key, Scope::User, now_ms())
    }

    /// Waits for the oldest payload of (session, name), at most `timeout` (`None`: forever).
    ///
    /// The waiter joins the line now; see [`Wait`]. On a session that is not open, the wait
    /// holds the session's mailbox while it is parked (see the [module docs](self)).
    ///
    /// # Errors
    ///
    /// The future resolves to [`SignalError::Timeout`] when the timeout passes, or to a
    /// refusal of the name as in [`signal`](Self::signal).
    pub fn wait(&self, session: &str, name: &str, timeout: Option<Duration>) -> Wait {
        Wait::new(self.wait_in(session, name, timeout, Scope::User))
    }

    /// Takes the oldest payload of (session, name) if there is one; never blocks.
    ///
    /// # Errors
    ///
    /// [`SignalError::EmptyName`] and [`SignalError::ReservedName`].
    pub fn poll(&self, session: &str, name: &str) -> Result<Option<Value>, SignalError> {
        let entry = self.poll_in(session, name, Scope::User)?;
        Ok(entry.map(|entry| entry.payload))
    }

    /// Puts `payload` back at the head of its queue, or hands it to the oldest parked waiter.
    ///
    /// For a payload taken from the mailbox that could not be used (it did not deserialize
    /// into the type asked for), so that it is not lost and keeps its place.
    ///
    /// # Errors
    ///
    /// [`SignalError::EmptyName`] and [`SignalError::ReservedName`].
    pub fn requeue_front(
        &self,
        session: &str,
        name: &str,
        payload: Value,
    ) -> Result<(), SignalError> {
        self.requeue_front_in(session, name, Entry::new(payload, now_ms()), Scope::User)
    }

    /// Opens `session` (or joins it if already open), picking up its pending signals.
    ///
    /// The mailbox stays open while any guard for the session lives; when the last one
    /// drops, the mailbox and its undelivered payloads are discarded (unless a parked
    /// [`wait`](Self::wait) still holds it; see the [module docs](self)).
    pub fn open_session(&self, session: &str) -> SessionGuard {
        self.open_shared_session(Arc::from(session))
    }

    /// [`open_session`](Self::open_session), for a caller that holds the session's name
    /// shared already: the mailbox keeps that name rather than a copy.
    pub(crate) fn open_shared_session(&self, session: Arc<str>) -> SessionGuard {
        self.inner.lock().open(&self.inner.config, &session);
        SessionGuard {
            inner: Arc::clone(&self.inner),
            session,
            keep_leftovers: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether a [`SessionGuard`] holds `session` open.
    pub fn is_open(&self, session: &str) -> bool {
        self.inner.lock().is_open(session)
    }

    /// Whether `session` is live, held by a guard or a parked waiter, or signals of it wait
    /// in the pending mailbox.
    pub(crate) fn is_live_or_pending(&self, session: &str) -> bool {
        // Only looks: nothing is dropped, so there is nothing to report on unlocking.
        crate::sync::lock(&self.inner.state).is_live_or_pending(session)
    }

    /// How many waiters are parked on (session, name).
    pub fn waiting(&self, session: &str, name: &str) -> usize {
        self.inner.lock().waiting(session, name)
    }

    /// How many payloads are queued for (session, name), open or pending.
    pub fn queued(&self, session: &str, name: &str) -> usize {
        self.inner.lock().queued(&self.inner.config, session, name)
    }

    /// How many sessions that are not open hold pending signals.
    pub fn pending_sessions(&self) -> usize {
        self.inner.lock().pending_sessions(&self.inner.config)
    }

    /// Checks a name (and payload size) as `signal` would, without sending anything: the
    /// durable runtime stores a signal before handing it to the mailbox.
    ///
    /// A framework signal's payload is loomflow's envelope around what its sender gave (a
    /// resume request's value, an approval's decision): the sender checks that part with
    /// [`check_size`](Self::check_size), and the envelope is not counted.
    pub(crate) fn check(
        &self,
        session: &str,
        name: &str,
        payload: Option<&Value>,
        scope: Scope,
    ) -> Result<(), SignalError> {
        check_name(session, name, scope)?;
        match payload {
            Some(payload) if scope == Scope::User => self.check_size(session, name, payload),
            _ => Ok(()),
        }
    }

    /// Checks that `payload`, given for signal `name` to `session`, is within
    /// [`MailboxConfig::max_payload_bytes`] as JSON.
    pub(crate) fn check_size(
        &self,
        session: &str,
        name: &str,
        payload: &Value,
    ) -> Result<(), SignalError> {
        let limit = self.inner.config.max_payload_bytes;
        let size = serialized_size(payload);
        if size > limit {
            return Err(SignalError::PayloadTooLarge {
                session: session.to_owned(),
                name: name.to_owned(),
                size,
                limit,
            });
        }
        Ok(())
    }

    /// [`signal_stored_once`](Self::signal_stored_once), for tests: queued even if the
    /// mailbox holds it already.
    #[cfg(test)]
    pub(crate) fn signal_stored(
        &self,
        session: &str,
        name: &str,
        payload: Value,
        seq: u64,
        sent_at_ms: u64,
        age: Duration,
    ) -> Delivery {
        self.signal_stored_once(session, name, payload, seq, sent_at_ms, age)
            .unwrap_or(Delivery::Queued)
    }

    /// Delivers a signal that a durable store has already accepted (under `seq`, sent at
    /// `sent_at_ms` by its sender's clock, `age` ago), without checking it again: a stored
    /// signal must not be refused afterwards, even by a limit lowered since. Unless the
    /// stored signal `seq` is already queued here (the process that sent it, and a refresh
    /// from the store, can both bring it): then `None`, and nothing changes.
    pub(crate) fn signal_stored_once(
        &self,
        session: &str,
        name: &str,
        payload: Value,
        seq: u64,
        sent_at_ms: u64,
        age: Duration,
    ) -> Option<Delivery> {
        let ttl = self.inner.config.pending_signal_ttl;
        let entry = Entry::stored(payload, seq, sent_at_ms, age, ttl);
        let mut state = self.inner.lock();
        if state.holds_seq(session, name, seq) {
            return None;
        }
        Some(state.deliver(&self.inner.config, session, name, entry, Place::Back))
    }

    pub(crate) fn send(
        &self,
        session: &str,
        name: &str,
        payload: Value,
        key: Option<&str>,
        scope: Scope,
        sent_at_ms: u64,
    ) -> Result<Delivery, SignalError> {
        self.check(session, name, Some(&payload), scope)?;
        let config = &self.inner.config;
        let mut state = self.inner.lock();
        if config.max_pending_signal_sessions == Some(0) && !state.is_live_or_pending(session) {
            // A retry of a send that was delivered (its run has ended since) is the
            // duplicate it is, not a signal to send again.
            if let Some(key) = key
                && state
                    .remembered
                    .remembers(session, name, key, Instant::now())
            {
                return Ok(Delivery::Duplicate);
            }
            tracing::debug!(%session, %name, "pending mailbox disabled: signal dropped");
            return Ok(Delivery::Dropped);
        }
        if let Some(key) = key
            && state
                .remembered
                .seen(config, session, name, key, Instant::now())
        {
            return Ok(Delivery::Duplicate);
        }
        let entry = Entry::new(payload, sent_at_ms);
        Ok(state.deliver(config, session, name, entry, Place::Back))
    }

    /// Whether a signal to `session` is dropped on arrival: the pending mailbox keeps
    /// nothing, and no run of the session is open here.
    pub(crate) fn drops_on_arrival(&self, session: &str) -> bool {
        self.inner.config.max_pending_signal_sessions == Some(0)
            && !self.inner.lock().is_live_or_pending(session)
    }

    /// Whether a signal `name` to `session` with the idempotency key `key` was sent here
    /// and its key is still remembered.
    pub(crate) fn remembers_key(&self, session: &str, name: &str, key: &str) -> bool {
        let mut state = self.inner.lock();
        state
            .remembered
            .remembers(session, name, key, Instant::now())
    }

    pub(crate) fn wait_in(
        &self,
        session: &str,
        name: &str,
        timeout: Option<Duration>,
        scope: Scope,
    ) -> WaitEntry {
        let inner = Arc::clone(&self.inner);
        if let Err(error) = check_name(session, name, scope) {
            return WaitEntry::failed(inner, error);
        }
        let registration = self
            .inner
            .lock()
            .register(&self.inner.config, session, name);
        match registration {
            (session, name, Registration::Ready(queued)) => {
                WaitEntry::ready(inner, session, name, queued)
            }
            (session, name, Registration::Parked { id, rx }) => {
                WaitEntry::parked(inner, session, name, id, rx, timeout)
            }
        }
    }

    pub(crate) fn poll_in(
        &self,
        session: &str,
        name: &str,
        scope: Scope,
    ) -> Result<Option<Entry>, SignalError> {
        check_name(session, name, scope)?;
        Ok(self.inner.lock().poll(&self.inner.config, session, name))
    }

    /// Puts an entry taken from the mailbox back at the head of its queue, with its store
    /// sequence number and send time: back in its place in send order, behind an older
    /// entry given back before it (two receivers that each took one and gave up, in either
    /// order); at the very head when the mailbox never queued it.
    pub(crate) fn requeue_front_in(
        &self,
        session: &str,
        name: &str,
        entry: Entry,
        scope: Scope,
    ) -> Result<(), SignalError> {
        check_name(session, name, scope)?;
        let place = entry.order.map_or(Place::Front, Place::Return);
        let mut state = self.inner.lock();
        state.given_back(entry.seq);
        state.deliver(&self.inner.config, session, name, entry, place);
        Ok(())
    }
}

/// Bytes of `value` serialized as compact JSON, counted without building the string.
fn serialized_size(value: &Value) -> usize {
    struct Count(usize);
    impl io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a `Value` to a sink that cannot fail cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

#[cfg(test)]
mod tests;
