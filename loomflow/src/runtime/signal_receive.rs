//! Receiving signals outside any run: [`Runtime::wait_for_signal`] and
//! [`Runtime::poll_signal`], over the mailbox and, on a durable runtime, the store.

use std::time::Duration;

use serde::de::DeserializeOwned;

use super::mailbox::{Entry, Scope, SignalError, Taken, Taking};
use super::signals::decode;
use super::store::{AuditEntry, AuditKind};
use super::{Runtime, RuntimeError};
type Result<T, E = RuntimeError> = std::result::Result<T, E>;

impl Runtime {
    /// Waits for the signal `name` of `session` and returns the oldest payload, typed.
    ///
    /// With a `timeout`, gives up with [`SignalError::Timeout`] when it passes; a payload
    /// that arrives afterwards stays queued. The timeout is measured on Tokio's clock, as a
    /// `tokio::time::timeout` around the call would be (`tokio::time::pause` moves it), not
    /// on the runtime's [`Clock`](crate::runtime::Clock): it bounds how long the caller
    /// waits, where a node's timed wait sets a durable deadline. A wait on a session that is not open holds its
    /// mailbox while it waits. On a durable runtime, a payload the store kept for the
    /// session's run after this process dropped it from memory (the pending TTL or bound)
    /// is received too, in its turn.
    ///
    /// Cancelling the wait (dropping it in a `select!`, or a `tokio::time::timeout` around
    /// it) loses and reorders no payload. On a durable runtime the payload's row is consumed
    /// before the wait returns; a wait dropped meanwhile puts the payload back at the head of
    /// its queue, its consuming still under way, and the next receiver in this process (a
    /// wait, or a node's) gets it once that ends. Should the process die before, a payload
    /// whose row was consumed is not delivered after the restart.
    ///
    /// Inside a node, wait with [`Context::wait_for_signal`](crate::Context::wait_for_signal)
    /// instead: it journals what it received, so that the node running again gets the same
    /// payload, and [`Runtime::cancel`] wakes it. This wait knows nothing of the run.
    ///
    /// # Errors
    ///
    /// [`SignalError::Timeout`]; [`SignalError::Payload`] when the payload is not a `T` (it
    /// is put back at the head of its queue); a bad name; a store failure.
    pub async fn wait_for_signal<T: DeserializeOwned>(
        &self,
        session: &str,
        name: &str,
        timeout: Option<Duration>,
    ) -> Result<T> {
        let deadline = timeout.map(crate::runtime::clock::instant_after);
        let waiting = self.wait_for_signal_until(session, name, deadline, timeout);
        let (Some(deadline), Some(timeout)) = (deadline, timeout) else {
            return waiting.await;
        };
        // The store's work before the wait (loading what it keeps, consuming a row) counts
        // toward the timeout too: cancelled at it, as a timeout around the call would be.
        match tokio::time::timeout_at(deadline, waiting).await {
            Ok(received) => received,
            Err(_) => Err(SignalError::Timeout {
                session: session.to_owned(),
                name: name.to_owned(),
                timeout,
            }
            .into()),
        }
    }

    /// [`wait_for_signal`](Self::wait_for_signal)'s wait, its mailbox wait ending at
    /// `deadline`.
    async fn wait_for_signal_until<T: DeserializeOwned>(
        &self,
        session: &str,
        name: &str,
        deadline: Option<tokio::time::Instant>,
        timeout: Option<Duration>,
    ) -> Result<T> {
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(tokio::time::Instant::now()));
            let entry = (self.receive_oldest(session, name, left).await)
                .map_err(|error| SignalError::timed_out_after(error, timeout))?;
            let value = match decode::<T>(session, name, entry.payload.clone()) {
                Ok(value) => value,
                Err(_)
                    if entry.taking.is_none()
                        && self.dropped_elsewhere(session, name, &entry).await =>
                {
                    continue;
                }
                Err(error) => {
                    self.give_back(session, name, entry, Scope::User);
                    return Err(error.into());
                }
            };
            let seq = entry.seq;
            // Consumed durably before it is handed over: it is not delivered again after a
            // restart, nor to another process that had it in its mailbox too. Cancelling
            // this wait meanwhile puts the payload back (see `handover`).
            if self
                .take_handed_over(session, name, entry, Scope::User)
                .await?
            {
                return Ok(value);
            }
            tracing::debug!(%session, %name, ?seq, "signal was consumed elsewhere; waiting for the next");
        }
    }

    /// Takes the oldest pending payload of signal `name` of `session` out of its queue and
    /// returns it, whatever its type, or `None` when none is pending: an operator's way past a
    /// payload no wait can read (a wait that cannot read its payload leaves it at the head of
    /// its queue, and a run whose node let that error out fails on it again at every
    /// `recover`). Drop it, send the corrected one, then carry the run on.
    ///
    /// The payload is consumed as a receive consumes it, durably before this returns, and
    /// given to nobody. The audit log says who dropped it (`by`): a `decision` entry whose
    /// subject is the signal's name, its detail the payload and its `seq` (no actor when `by`
    /// is blank), besides the
    /// `signal_received` entry of its consuming. The command line's `loomflow drop-signal`
    /// calls this.
    ///
    /// # Errors
    ///
    /// A bad signal name; a store failure (a payload not yet consumed then stays pending).
    ///
    /// # Examples
    ///
    /// ```
    /// use loomflow::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
    /// let runtime = Runtime::in_memory();
    /// runtime.signal("order-7", "approval", json!("yes")).await?; // not a `Decision`
    /// let dropped = runtime.drop_signal("order-7", "approval", "ops@example.com").await?;
    /// assert_eq!(dropped, Some(json!("yes")));
    /// assert_eq!(runtime.drop_signal("order-7", "approval", "ops@example.com").await?, None);
    /// # Ok(()) }
    /// ```
    pub async fn drop_signal(
        &self,
        session: &str,
        name: &str,
        by: &str,
    ) -> Result<Option<serde_json::Value>> {
        loop {
            let Some(entry) = self.receive_kept(session, name, Scope::User).await? else {
                return Ok(None);
            };
            let (payload, seq) = (entry.payload.clone(), entry.seq);
            if !self
                .take_handed_over(session, name, entry, Scope::User)
                .await?
            {
                continue; // consumed elsewhere first: the next one is the oldest
            }
            let detail = serde_json::json!({ "dropped": true, "seq": seq, "payload": payload });
            let by = Some(by).filter(|by| !by.trim().is_empty());
            let entry = AuditEntry::new(session, AuditKind::Decision, name, detail).actor(by);
            self.store().append_audit(vec![entry]).await?;
            return Ok(Some(payload));
        }
    }

    /// Whether `entry`'s row was consumed by another process (see
    /// [`stored_no_longer`](Self::stored_no_longer)).
    async fn dropped_elsewhere(&self, session: &str, name: &str, entry: &Entry) -> bool {
        match entry.seq {
            Some(seq) => self.stored_no_longer(session, name, seq).await,
            None => false,
        }
    }

    /// Takes the oldest payload of signal `name` if there is one; never blocks.
    ///
    /// On a durable runtime the payload is taken out of the store in the background. What
    /// the store keeps (after a restart) and what other processes send come in in the
    /// background too, which the first poll on a Tokio runtime starts: a poll does not wait
    /// for them, and a later one sees them (the async calls wait for them). Because it cannot wait for the store, it cannot
    /// learn that another process on the same store consumed the payload first: where
    /// several processes receive one signal, use [`wait_for_signal`](Self::wait_for_signal),
    /// which gives each stored payload to exactly one of them.
    ///
    /// A payload whose row another receiver in this process was consuming when it was
    /// cancelled (a node's wait in a `select!`, say) is not returned before the store has
    /// said whether that receiver took it: until then the poll returns `None`, and the
    /// payload keeps its place at the head of its queue. The store is asked in the
    /// background, on the Tokio runtime the poll is called from; polled from outside one,
    /// the payload waits for an async receive to ask.
    ///
    /// # Errors
    ///
    /// As for [`wait_for_signal`](Self::wait_for_signal), without the timeout.
    pub fn poll_signal<T: DeserializeOwned>(&self, session: &str, name: &str) -> Result<Option<T>> {
        // What the store keeps, and what other processes store, come in in the background:
        // a process that only polls sees them too, from a later poll.
        self.watch_for_signals();
        self.open_for_live_run(session);
        loop {
            let Some(mut entry) = self.mailbox().poll_taking(session, name, Scope::User)? else {
                return Ok(None);
            };
            // A receiver dropped while it consumed the payload's row (see `handover`).
            let consumed = match entry.taking.as_ref().map(Taking::ended_as) {
                None => false,
                Some(Some(Taken::Consumed)) => true,
                Some(Some(Taken::Elsewhere)) => continue,
                Some(Some(Taken::Failed(_))) => {
                    entry.taking = None;
                    false
                }
                Some(Some(Taken::Unknown(_))) => {
                    self.settle_taking(session, &mut entry);
                    self.give_back(session, name, entry, Scope::User);
                    return Ok(None);
                }
                Some(None) => {
                    self.give_back(session, name, entry, Scope::User);
                    return Ok(None);
                }
            };
            let (value, seq) = self.accept(session, name, entry, Scope::User)?;
            if seq.is_none() {
                self.audit_unstored_receipt(session, name);
            } else if !consumed {
                self.forget_consumed_signal(session, seq);
            }
            return Ok(Some(value));
        }
    }
}
