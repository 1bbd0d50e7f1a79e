//! Signals a durable store keeps: loaded into the mailbox once per runtime, and, for a
//! waiting run after the mailbox dropped them from memory (past the pending TTL, beyond the
//! pending bound), taken from the store by a node's wait, and a runtime-level one, oldest
//! first (see `Removals::awaited`).

use std::time::Duration;

use super::clock::unix_ms;
use super::mailbox::{Delivery, Entry, Scope};
use super::store::StoredSignal;
use super::{Runtime, RuntimeError};

type Result<T, E = RuntimeError> = std::result::Result<T, E>;

impl Runtime {
    /// The next payload of signal `name` of `session` for a runtime-level wait
    /// ([`Runtime::wait_for_signal`]): queued in the mailbox, or kept in the store for the
    /// session's run after the mailbox dropped it from memory, oldest first; else the next
    /// to arrive, within `timeout`.
    pub(crate) async fn receive_oldest(
        &self,
        session: &str,
        name: &str,
        timeout: Option<Duration>,
    ) -> Result<Entry> {
        match self.receive_kept(session, name, Scope::User).await? {
            Some(entry) => Ok(entry),
            None => self.receive(session, name, timeout, Scope::User).await,
        }
    }

    /// The next payload of signal `name` of `session` if one is there: queued in the
    /// mailbox, or kept in the store for the session's run after the mailbox dropped it
    /// from memory (past the pending TTL, beyond the pending bound), oldest first. Does not
    /// wait.
    pub(crate) async fn receive_kept(
        &self,
        session: &str,
        name: &str,
        scope: Scope,
    ) -> Result<Option<Entry>> {
        match self.receive_now(session, name, scope).await? {
            Some(received) => {
                self.older_stored_first(session, name, received, scope)
                    .await
            }
            None => self.receive_stored(session, name).await,
        }
    }

    /// The oldest signal `name` of `session` a durable store keeps that the mailbox no
    /// longer holds (its pending bounds dropped it from memory, sparing it in the store for
    /// the session's run): for a node's wait that found nothing queued.
    pub(crate) async fn receive_stored(&self, session: &str, name: &str) -> Result<Option<Entry>> {
        // A row a `poll_signal` here took is looked past once its removal is made, which
        // the next read waits for: twice at most, as the poll queues it at once.
        for _ in 0..3 {
            let stored = self.oldest_stored(session, name).await?;
            let Some(seq) = stored.as_ref().and_then(|entry| entry.seq) else {
                return Ok(stored);
            };
            // Any copy the send or a refresh queues is stale: the receiver has it.
            if self.mailbox().read_from_store(session, name, seq) {
                return Ok(stored);
            }
            tokio::task::yield_now().await;
        }
        Ok(None)
    }

    /// Whether the store no longer keeps the row `seq` of signal `name` of `session`: another
    /// process consumed it (a receive, an operator's
    /// [`drop_signal`](Runtime::drop_signal)) while this one held a copy in its mailbox.
    /// Asked only of a payload about to fail its receiver, which should not fail on a
    /// payload that is no longer there. A store that cannot say keeps it.
    pub(crate) async fn stored_no_longer(&self, session: &str, name: &str, seq: u64) -> bool {
        if !self.store().is_durable() {
            return false;
        }
        match self.store().oldest_signal(session, name).await {
            // Rows are taken oldest first: none left, or only newer ones, means it is gone.
            Ok(oldest) => oldest.is_none_or(|oldest| oldest.seq > seq),
            Err(_) => false,
        }
    }

    /// The oldest signal `name` of `session` a durable store keeps, read for a look: the
    /// mailbox is not told (see [`receive_stored`](Self::receive_stored)).
    async fn oldest_stored(&self, session: &str, name: &str) -> Result<Option<Entry>> {
        if !self.store().is_durable() {
            return Ok(None);
        }
        // What was received here is off the store first, so that it is not found again.
        self.removals().flush().await;
        let stored = self.store().oldest_signal(session, name).await?;
        Ok(stored.map(|signal| Entry {
            payload: signal.payload,
            seq: Some(signal.seq),
            sent_at: tokio::time::Instant::now(),
            sent_at_ms: signal.sent_at_ms,
            taking: None,
            order: None,
        }))
    }

    /// `received`, or an older signal `name` of `session` the store kept for its run when the
    /// mailbox dropped it from memory: FIFO per (session, name).
    ///
    /// `received` waits at the head of its queue while the store is read, so that a receive
    /// cancelled there loses nothing; it is then taken again, and `None` when someone else
    /// took it meanwhile and nothing is left.
    pub(crate) async fn older_stored_first(
        &self,
        session: &str,
        name: &str,
        received: Entry,
        scope: Scope,
    ) -> Result<Option<Entry>> {
        let Some(newest_spared) = self.removals().spared(session, name) else {
            return Ok(Some(received));
        };
        let seq = received.seq;
        self.give_back(session, name, received, scope);
        let stored = self.oldest_stored(session, name).await?;
        let older = |stored: u64| seq.is_some_and(|seq| stored < seq);
        match stored {
            Some(kept)
                if kept.seq.is_some_and(|seq| {
                    older(seq) && self.mailbox().read_from_store(session, name, seq)
                }) =>
            {
                Ok(Some(kept))
            }
            stored => {
                // The store keeps nothing older than the payload at the head of the queue
                // (which it may keep too), and that payload is younger than every signal
                // dropped from memory (send stamps need not follow seqs): the mailbox holds
                // the oldest again.
                if stored.is_none() || seq.is_some_and(|seq| seq > newest_spared) {
                    self.removals().none_spared(session, name, newest_spared);
                }
                Ok(self.mailbox().poll_in(session, name, scope)?)
            }
        }
    }

    /// Queues in the mailbox `signal`, which a durable store keeps (its payload is taken),
    /// aged from its stored send time by `now_ms` (the runtime's clock), so that the pending
    /// TTL does not restart. `None` when the mailbox holds it already: the process that sent
    /// it, and a look at the store, can both bring it.
    pub(super) fn queue_stored(&self, signal: &mut StoredSignal, now_ms: u64) -> Option<Delivery> {
        let age = Duration::from_millis(now_ms.saturating_sub(signal.sent_at_ms));
        self.open_for_live_run(&signal.session);
        let payload = std::mem::take(&mut signal.payload);
        let (session, name) = (&signal.session, &signal.name);
        let delivery = (self.mailbox()).signal_stored_once(
            session,
            name,
            payload,
            signal.seq,
            signal.sent_at_ms,
            age,
        )?;
        Some(self.settle_pending(session, delivery))
    }

    /// Loads signals kept by a durable store into the mailbox, once per runtime.
    pub(crate) async fn load_stored_signals(&self) -> Result<()> {
        if !self.store().is_durable() {
            return Ok(());
        }
        self.signals_loaded()
            .get_or_try_init(|| async {
                let stored = self.store().pending_signals().await?;
                let count = stored.len();
                let now = unix_ms(self.now());
                if let Some(last) = stored.last() {
                    let mut seen = self.inner.signals_seen.lock().await;
                    seen.up_to = seen.up_to.max(last.seq);
                }
                for mut signal in stored {
                    self.queue_stored(&mut signal, now);
                }
                if count > 0 {
                    tracing::info!(count, "loaded stored signals into the mailbox");
                }
                // Signals past the TTL, or beyond the pending bound, leave the store now.
                self.removals().flush().await;
                Ok::<(), RuntimeError>(())
            })
            .await
            .map(drop)
    }
}
