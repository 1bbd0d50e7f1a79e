//! The runtime's signal channel: the mailbox, typed at the edges, and made durable by the
//! store when the store is durable.
//!
//! On a durable runtime a signal is written to the store before it reaches the mailbox, so
//! once `signal` returns `Ok` it survives a crash; the mailbox's entry carries the store's
//! sequence number and send time beside the payload, and a consumer takes the row out of the
//! store (journaling it, when the consumer is a node) as it receives the payload. After a
//! restart the stored signals are loaded back into the mailbox before the first signal
//! operation, aged from their stored send time.
//!
//! The store also forgets what the mailbox lets go undelivered: signals dropped by the
//! pending bounds (least recently used, TTL) and discarded on a session's last exit. The
//! mailbox reports them as it drops them; [`Removals`](super::removals::Removals) takes
//! them out of the store in the background (without auditing a receipt), and every async
//! signal operation waits until those reported before it are gone. Nothing delivered,
//! dropped or discarded comes back after a restart.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::Instrument;

use super::clock::unix_ms;
use super::mailbox::{Delivery, Entry, Scope, SessionGuard, SignalError, SignalOptions, WaitEntry};
use super::store::{AuditEntry, AuditKind, RunStatus, SignalPush, StoreError, StoredSignal};
use super::{Runtime, RuntimeError};
type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// `payload` as a `T`, or the error that names the signal it came with.
pub(crate) fn decode<T: DeserializeOwned>(
    session: &str,
    name: &str,
    payload: Value,
) -> Result<T, SignalError> {
    serde_path_to_error::deserialize(payload).map_err(|e| SignalError::Payload {
        session: session.to_owned(),
        name: name.to_owned(),
        expected: crate::type_name::readable::<T>(),
        message: crate::json::at_path(&e),
    })
}

impl Runtime {
    /// Sends `payload` to the signal `name` of `session`: the oldest waiter gets it, or it
    /// queues until someone waits (see the [mailbox](super::mailbox) for the rules).
    ///
    /// On a durable runtime the signal is stored first: once this returns `Ok` it survives a
    /// crash.
    ///
    /// # Errors
    ///
    /// An empty or reserved (`loomflow:…`) name, a payload over the size limit, a payload that
    /// does not serialize, or a store failure.
    ///
    /// # Examples
    ///
    /// ```
    /// use loomflow::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
    /// let runtime = Runtime::in_memory();
    /// let _open = runtime.session("sess-42");
    /// runtime.signal("sess-42", "approval", json!({ "approved": true })).await?;
    /// let got: serde_json::Value = runtime.wait_for_signal("sess-42", "approval", None).await?;
    /// assert_eq!(got["approved"], true);
    /// # Ok(()) }
    /// ```
    pub async fn signal(
        &self,
        session: &str,
        name: &str,
        payload: impl Serialize,
    ) -> Result<Delivery> {
        self.signal_with(session, name, payload, SignalOptions::default())
            .await
    }

    /// [`signal`](Self::signal) with options: an idempotency key makes a repeated send of the
    /// same (session, name, key) deliver once (it then returns [`Delivery::Duplicate`]).
    ///
    /// # Errors
    ///
    /// As for [`signal`](Self::signal).
    pub async fn signal_with(
        &self,
        session: &str,
        name: &str,
        payload: impl Serialize,
        options: SignalOptions,
    ) -> Result<Delivery> {
        let payload = serde_json::to_value(payload).map_err(|e| {
            let what = format!("payload of signal {name} for session {session}");
            RuntimeError::json(what, e)
        })?;
        self.send(session, name, payload, options, Scope::User)
            .await
    }

    /// Sends under a `send_signal {name}` span (see [`crate::telemetry`]).
    async fn send(
        &self,
        session: &str,
        name: &str,
        payload: Value,
        options: SignalOptions,
        scope: Scope,
    ) -> Result<Delivery> {
        let span = tracing::info_span!(
            target: crate::telemetry::TARGET,
            "send_signal",
            otel.name = %format!("send_signal {name}"),
            loomflow.thread = %session,
            loomflow.signal = %name,
            loomflow.delivery = tracing::field::Empty,
            error.type = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let sent = self
            .send_untraced(session, name, payload, options, scope)
            .instrument(span.clone())
            .await;
        match &sent {
            Ok(delivery) => {
                span.record("loomflow.delivery", tracing::field::debug(delivery));
            }
            // Refused (a run that ended, a reserved name, a payload too big), named by why.
            Err(RuntimeError::Signal(refused)) => crate::telemetry::record_failure(&span, refused),
            // Not kept (the store failed).
            Err(error) => crate::telemetry::record_failure(&span, error),
        }
        sent
    }

    /// How `session`'s current run ended (`completed`, `failed`, `cancelled`), if it has.
    /// The run's row says, so that a run submitted again on a thread whose last run
    /// completed counts as live before it writes; a thread with checkpoints but no row (a
    /// fork, a run from before rows were kept) is judged by its newest checkpoint.
    async fn ended_run(&self, session: &str) -> Result<Option<&'static str>> {
        if let Some(run) = self.store().get_run(session).await? {
            return Ok(run.state.is_finished().then(|| run.state.as_str()));
        }
        let latest = self.store().latest_checkpoint(session, "").await?;
        Ok(latest
            .filter(|cp| matches!(cp.status, RunStatus::Completed | RunStatus::Failed))
            .map(|cp| cp.status.as_str()))
    }

    /// Whether a signal `name` to `session` with the idempotency key `key` was sent and is
    /// still remembered, here or in a durable store.
    pub(crate) async fn key_already_sent(
        &self,
        session: &str,
        name: &str,
        key: &str,
    ) -> Result<bool> {
        if self.mailbox().remembers_key(session, name, key) {
            return Ok(true);
        }
        let store = self.store();
        Ok(store.is_durable() && store.signal_key_seen(session, name, key).await?)
    }

    /// Sends on one of loomflow's own (`loomflow:…`) names, such as an approval decision.
    pub(crate) async fn send_framework(
        &self,
        session: &str,
        name: &str,
        payload: Value,
        options: SignalOptions,
    ) -> Result<Delivery> {
        self.send(session, name, payload, options, Scope::Framework)
            .await
    }

    async fn send_untraced(
        &self,
        session: &str,
        name: &str,
        payload: Value,
        options: SignalOptions,
        scope: Scope,
    ) -> Result<Delivery> {
        // A run this process executes is live whatever its row says: a run in
        // `Durability::Exit` writes nothing before its first journal entry, and the row
        // still reads as the run before it, ended.
        if options.require_live_run
            && !self.executes_here(session)
            && let Some(status) = self.ended_run(session).await?
        {
            // A send retried after its signal was delivered (and the run carried on to its
            // end) is the duplicate it is, not a signal that came too late.
            if let Some(key) = options.idempotency_key.as_deref()
                && self.key_already_sent(session, name, key).await?
            {
                return Ok(Delivery::Duplicate);
            }
            return Err(SignalError::RunEnded {
                session: session.to_owned(),
                name: name.to_owned(),
                status,
            }
            .into());
        }
        // A run of the thread executing here queues it in its session.
        self.open_for_live_run(session);
        let mailbox = self.mailbox();
        let key = options.idempotency_key.as_deref();
        // By the runtime's clock, as timers are: a timed wait compares it with its deadline.
        let sent_at_ms = unix_ms(self.now());
        if !self.store().is_durable() {
            // The mailbox checks the name and the size itself; the audit entry is the
            // store's, as a durable store writes it with the signal.
            let mut sent = sent_entry(session, name, &payload, key, sent_at_ms);
            let delivery = mailbox.send(session, name, payload, key, scope, sent_at_ms)?;
            let delivery = self.settle_pending(session, delivery);
            if delivery != Delivery::Duplicate {
                if delivery == Delivery::Dropped {
                    sent.detail["dropped"] = Value::Bool(true);
                }
                self.store().append_audit(vec![sent]).await?;
            }
            self.wake_workers(session, name, delivery);
            return Ok(delivery);
        }
        // Checked before it is stored: a stored signal must not be refused afterwards.
        mailbox.check(session, name, Some(&payload), scope)?;
        // Its `signal_sent` audit entry holds it one level down: a payload at the store's
        // depth bound would make every read of the session's audit log fail.
        if !crate::json_depth::value_fits(&payload, 1) {
            return Err(StoreError::Refused {
                thread: session.to_owned(),
                message: format!(
                    "the payload of signal {name}: {}",
                    crate::json_depth::too_deep()
                ),
            }
            .into());
        }
        // Dropped on arrival, as in memory, its key not remembered (a retry once the session
        // is open delivers), unless a run of the session that has not finished waits for
        // it: stored, that run takes it from the store, and it is pending until then.
        let dropping = mailbox.drops_on_arrival(session);
        if dropping && !self.removals().awaited(session).await {
            if let Some(key) = key
                && self.key_already_sent(session, name, key).await?
            {
                return Ok(Delivery::Duplicate);
            }
            let mut sent = sent_entry(session, name, &payload, key, sent_at_ms);
            sent.detail["dropped"] = Value::Bool(true);
            self.store().append_audit(vec![sent]).await?;
            return Ok(Delivery::Dropped);
        }
        self.load_stored_signals().await?;
        let stored = StoredSignal {
            seq: 0,
            session: session.to_owned(),
            name: name.to_owned(),
            payload,
            idempotency_key: options.idempotency_key,
            sent_at_ms,
        };
        let payload = stored.payload.clone();
        let delivery = match self.store().push_signal(stored).await? {
            SignalPush::Duplicate => Delivery::Duplicate,
            SignalPush::Stored(seq) => {
                let mut seen = self.inner.signals_seen.lock().await;
                if seq <= seen.up_to {
                    // A refresh brought it in already: delivered as that refresh did. Not
                    // `Dropped`, which says nothing was stored: its row was (the session
                    // let go while the send was on its way).
                    let delivered = seen.delivered.remove(&seq);
                    let delivered = delivered.filter(|&d| d != Delivery::Dropped);
                    drop(seen);
                    self.settle_pending(session, delivered.unwrap_or(Delivery::Queued))
                } else if seen.stored_elsewhere_before(seq) {
                    // Another process stored signals before it, not loaded yet: a refresh
                    // brings them in first, then this one, in the order they were stored.
                    drop(seen);
                    match self.refresh_signals_telling(Some(seq)).await {
                        Ok((_, own)) => own.unwrap_or(Delivery::Queued),
                        // It is stored: the next refresh brings it in. An error would have
                        // the caller send it again, and the run receive it twice.
                        Err(error) => {
                            tracing::warn!(%session, %name, %error, "a stored signal is not loaded yet");
                            Delivery::Queued
                        }
                    }
                } else {
                    seen.sent_here.insert(seq);
                    if seen.sent_here.len() > super::seen::MAX_SENT_HERE {
                        seen.sent_here.pop_first();
                    }
                    let delivery = mailbox
                        .signal_stored_once(session, name, payload, seq, sent_at_ms, Duration::ZERO)
                        .unwrap_or(Delivery::Queued);
                    self.settle_pending(session, delivery)
                }
            }
        };
        // A new pending session may have pushed the least recently used one out.
        self.removals().flush().await;
        let delivery = match delivery {
            Delivery::Dropped if dropping => Delivery::Pending,
            delivery => delivery,
        };
        self.wake_workers(session, name, delivery);
        Ok(delivery)
    }

    /// Tells this process's workers about a signal no waiter took: the run it is for may be
    /// suspended, waiting for it.
    fn wake_workers(&self, session: &str, name: &str, delivery: Delivery) {
        if matches!(delivery, Delivery::Queued | Delivery::Pending) {
            self.wakes().wake(Some((session, name)));
        }
    }

    /// Brings into the mailbox the stored signals other processes sent since the last look:
    /// a worker calls it when the store changed, so that a waiter here receives a signal a
    /// web handler elsewhere sent. Returns the sessions they were sent to.
    pub(crate) async fn refresh_signals(&self) -> Result<Vec<String>> {
        Ok(self.refresh_signals_telling(None).await?.0)
    }

    /// [`refresh_signals`](Self::refresh_signals), telling also how the signal stored as
    /// `own` was delivered, should this refresh bring it in: a send that refreshes first
    /// (see `send_untraced`) says whether a waiter took its signal.
    async fn refresh_signals_telling(
        &self,
        own: Option<u64>,
    ) -> Result<(Vec<String>, Option<Delivery>)> {
        if !self.store().is_durable() {
            return Ok((Vec::new(), None));
        }
        self.load_stored_signals().await?;
        let mut seen = self.inner.signals_seen.lock().await;
        let stored = self.store().signals_after(seen.up_to).await?;
        // Signals are stamped by the runtime's clock (see `send_untraced`).
        let now = unix_ms(self.now());
        let mut sessions = Vec::new();
        let mut own_delivery = None;
        for mut signal in stored {
            seen.up_to = seen.up_to.max(signal.seq);
            if seen.sent_here.remove(&signal.seq) {
                continue; // its send queued it
            }
            let delivered = self.queue_stored(&mut signal, now);
            if own == Some(signal.seq) {
                own_delivery = delivered;
            }
            if let Some(delivery) = delivered {
                seen.note_delivered(signal.seq, delivery);
            }
            if delivered.is_some() {
                sessions.push(signal.session);
            }
        }
        // What this process sent up to here is either skipped above or consumed already.
        let up_to = seen.up_to;
        seen.sent_here.retain(|&seq| seq > up_to);
        drop(seen);
        self.removals().flush().await;
        Ok((sessions, own_delivery))
    }

    /// Opens a session: signals sent to it queue in its mailbox (instead of the bounded
    /// pending mailbox) until the last guard is dropped, when undelivered ones are discarded.
    ///
    /// While a run executes, the signals sent to its thread queue as in an open session.
    pub fn session(&self, session: &str) -> SessionGuard {
        self.mailbox().open_session(session)
    }

    /// [`session`](Self::session), keeping the name the caller shares.
    pub(crate) fn shared_session(&self, session: &Arc<str>) -> SessionGuard {
        self.mailbox().open_shared_session(Arc::clone(session))
    }

    /// Receives the next payload from the mailbox (framework names allowed when asked).
    pub(crate) async fn receive(
        &self,
        session: &str,
        name: &str,
        timeout: Option<Duration>,
        scope: Scope,
    ) -> Result<Entry> {
        let wait = self.start_wait(session, name, timeout, scope).await?;
        self.finish_wait(wait).await
    }

    /// Takes a place in line for the next payload; the wait is registered when this returns.
    pub(crate) async fn start_wait(
        &self,
        session: &str,
        name: &str,
        timeout: Option<Duration>,
        scope: Scope,
    ) -> Result<WaitEntry> {
        self.mailbox().check(session, name, None, scope)?;
        self.load_stored_signals().await?;
        self.watch_for_signals();
        // A run's wait: what arrives after it, before the next, queues in the session.
        self.open_for_live_run(session);
        let wait = self.mailbox().wait_in(session, name, timeout, scope);
        // Taking a session's pending signals may have found some of them expired.
        self.removals().flush().await;
        Ok(wait)
    }

    /// Waits for a registered wait's payload.
    pub(crate) async fn finish_wait(&self, wait: WaitEntry) -> Result<Entry> {
        Ok(wait.await?)
    }

    /// Takes the next payload if one is queued (framework names allowed when asked).
    ///
    /// No payload is held across a wait for the store: a receive cancelled there (a timed
    /// out `wait_for_signal`, a node's `select!`) leaves it in its place.
    pub(crate) async fn receive_now(
        &self,
        session: &str,
        name: &str,
        scope: Scope,
    ) -> Result<Option<Entry>> {
        self.mailbox().check(session, name, None, scope)?;
        self.load_stored_signals().await?;
        self.open_for_live_run(session);
        let entry = self.mailbox().poll_in(session, name, scope)?;
        if self.removals().is_idle() {
            return Ok(entry);
        }
        // Taking a session's pending signals may have found some of them expired: once the
        // store has them, an older one it keeps for the run is seen (`older_stored_first`).
        // Meanwhile the payload is back at the head of its queue.
        if let Some(entry) = entry {
            self.give_back(session, name, entry, scope);
        }
        self.removals().flush().await;
        Ok(self.mailbox().poll_in(session, name, scope)?)
    }

    /// Types a received payload; on failure puts it back at the head of its queue. On
    /// success for a runtime-level receive, removes it from the store in the background.
    pub(super) fn accept<T: DeserializeOwned>(
        &self,
        session: &str,
        name: &str,
        entry: Entry,
        scope: Scope,
    ) -> Result<(T, Option<u64>)> {
        // Cloned so that the entry goes back untouched if it is not a `T`.
        match decode::<T>(session, name, entry.payload.clone()) {
            Ok(value) => Ok((value, entry.seq)),
            Err(error) => {
                self.give_back(session, name, entry, scope);
                Err(error.into())
            }
        }
    }

    /// Puts an entry that could not be used back at the head of its queue.
    pub(crate) fn give_back(&self, session: &str, name: &str, entry: Entry, scope: Scope) {
        self.open_for_live_run(session);
        if let Err(error) = self.mailbox().requeue_front_in(session, name, entry, scope) {
            tracing::error!(%error, %session, %name, "could not put a signal back");
        }
    }

    /// Removes a signal consumed outside a node from a durable store, in the background
    /// (for callers that cannot await); the next async signal operation waits for it.
    pub(crate) fn forget_consumed_signal(&self, session: &str, seq: Option<u64>) {
        let Some(seq) = seq else { return };
        self.removals().push_received(Arc::from(session), seq);
    }
}

/// The `signal_sent` audit entry of a signal that no store writes with it (an in-memory
/// runtime's, or one dropped on arrival).
fn sent_entry(
    session: &str,
    name: &str,
    payload: &Value,
    key: Option<&str>,
    sent_at_ms: u64,
) -> AuditEntry {
    let mut detail = serde_json::json!({ "payload": payload.clone() });
    if let Some(key) = key {
        detail["idempotency_key"] = Value::from(key);
    }
    AuditEntry::new(session, AuditKind::SignalSent, name, detail)
        .at_ms(sent_at_ms)
        .actor(super::store::audit::sent_by(name, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn typed_failure_puts_the_payload_back_at_the_head() {
        let rt = Runtime::in_memory();
        let _open = rt.session("s");
        rt.signal("s", "n", "not a number").await.unwrap();
        rt.signal("s", "n", 2).await.unwrap();
        let err = rt.wait_for_signal::<u32>("s", "n", None).await.unwrap_err();
        assert!(
            err.to_string()
                .starts_with("signal n on session s is not a u32"),
            "{err}"
        );
        let first: String = rt.wait_for_signal("s", "n", None).await.unwrap();
        assert_eq!(first, "not a number");
        assert_eq!(rt.poll_signal::<u32>("s", "n").unwrap(), Some(2));
        assert_eq!(rt.poll_signal::<u32>("s", "n").unwrap(), None);
    }

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn a_stored_signal_at_the_size_limit_is_delivered_not_refused() {
        let path =
            std::env::temp_dir().join(format!("loomflow-signal-limit-{}.db", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let payload = "x".repeat(18); // 20 bytes as JSON: exactly the limit
        let rt = Runtime::builder()
            .store(crate::runtime::SqliteStore::open(&path).unwrap())
            .signals(crate::runtime::MailboxConfig::default().max_payload_bytes(20))
            .build();
        let _open = rt.session("s");
        rt.signal("s", "n", &payload).await.unwrap();
        let got: String = rt.wait_for_signal("s", "n", None).await.unwrap();
        assert_eq!(got, payload);
        assert!(
            rt.signal("s", "n", "x".repeat(19)).await.is_err(),
            "one byte over is refused"
        );
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }
}
