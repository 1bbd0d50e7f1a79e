//! Handing a stored signal over to a waiter outside any run, so that cancelling the waiter
//! loses nothing and reorders nothing.
//!
//! The mailbox gives the waiter the payload, then the signal's row is consumed in the store,
//! and only then does the waiter return the payload. A waiter dropped in between (by a
//! `timeout` or a `select!`) must not take the payload with it: the store's write may
//! commit all the same. So the row is consumed in a task of its own, whose outcome the
//! entry carries ([`Taking`]), and a waiter dropped before the outcome puts the entry back
//! at the head of its queue at once, with the consuming still under way. Whoever receives
//! it next waits for that outcome instead of consuming the row again:
//! - consumed: the payload is the receiver's;
//! - another consumer had taken the row first: the payload is no one's here;
//! - the store failed: the row is still there, and the payload goes back to the head of
//!   its queue (the receiver gets the error).
//!
//! A node's wait consumes the row under its run's claim, journaling the payload in the same
//! write, so no other receiver can finish that write for it. A wait dropped meanwhile (or
//! whose write failed: it may have committed) puts the entry back saying only that its
//! outcome is unknown: the next receiver consumes the row afresh, and the store, which holds
//! the row at most once, tells it whether the dropped wait had taken it. A failure to ask
//! leaves it unknown still.
//!
//! A node's wait may also receive an entry whose row a cancelled waiter consumed: its
//! journal entry is then all that keeps the payload, and is written in a task of its own. A
//! wait dropped meanwhile leaves the entry marked with that write: written, the payload is
//! the dropped wait's (no one else's); failed, it is the next receiver's.

use std::sync::Arc;

use futures_util::FutureExt;

use super::mailbox::{Entry, Scope, Taken, Taking};
use super::store::StoreError;
use super::store::audit::signal_received;
use super::{Runtime, RuntimeError};

type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// An entry taken from the mailbox, put back at the head of its queue if it is dropped
/// before [`keep`](Self::keep): a receiver cancelled while it waits for the entry's
/// consuming to end leaves it to the next one.
pub(crate) struct Held<'a> {
    runtime: &'a Runtime,
    session: &'a str,
    name: &'a str,
    scope: Scope,
    entry: Option<Entry>,
}

impl<'a> Held<'a> {
    pub(crate) fn new(
        runtime: &'a Runtime,
        (session, name): (&'a str, &'a str),
        scope: Scope,
        entry: Entry,
    ) -> Self {
        Self {
            runtime,
            session,
            name,
            scope,
            entry: Some(entry),
        }
    }

    /// The entry, no longer put back.
    pub(crate) fn keep(mut self) -> Option<Entry> {
        self.entry.take()
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Some(entry) = self.entry.take() {
            (self.runtime).give_back(self.session, self.name, entry, self.scope);
        }
    }
}

impl Runtime {
    /// Audits, without waiting for the store, the receipt outside a run of a signal the
    /// mailbox alone kept (from [`poll_signal`](Self::poll_signal), which cannot wait). The
    /// memory store writes at once; another store's write goes on in a task.
    pub(crate) fn audit_unstored_receipt(&self, session: &str, name: &str) {
        let entry = signal_received(session, name, 0, 0);
        let store = Arc::clone(self.store());
        let session = session.to_owned();
        let mut write = Box::pin(async move {
            if let Err(error) = store.append_audit(vec![entry]).await {
                tracing::warn!(%session, %error, "a signal's receipt was not audited");
            }
        });
        if (&mut write).now_or_never().is_none()
            && let Ok(tokio) = tokio::runtime::Handle::try_current()
        {
            drop(tokio.spawn(write));
        }
    }

    /// Consumes out of the store the signal `entry` that the mailbox handed to a waiter on
    /// (`session`, `name`) outside any run: `true` once consumed (or when no store keeps
    /// it), `false` when another consumer took it first.
    ///
    /// # Errors
    ///
    /// A store failure; the payload is then back at the head of its queue.
    pub(crate) async fn take_handed_over(
        &self,
        session: &str,
        name: &str,
        mut entry: Entry,
        scope: Scope,
    ) -> Result<bool> {
        let Some(seq) = entry.seq else {
            // Kept by the mailbox alone (a store that keeps no signals): no row says it was
            // received, so the receipt is audited here. The payload is the waiter's whether
            // or not the entry is written.
            self.audit_unstored_receipt(session, name);
            return Ok(true);
        };
        let mut taking = match entry.taking.clone() {
            // A cancelled waiter started it: its outcome is this waiter's.
            Some(taking)
                if !matches!(
                    taking.ended_as(),
                    Some(Taken::Unknown(_) | Taken::Failed(_))
                ) =>
            {
                taking
            }
            // None started; one failed (the row is still there, and the store may be back:
            // its old error is not this waiter's); or a node's wait that gave it up cannot
            // say how it ended.
            unsure => {
                let known = unsure
                    .as_ref()
                    .is_none_or(|taking| matches!(taking.ended_as(), Some(Taken::Failed(_))));
                let (taking, take) = self.taking(session, seq, known);
                match tokio::runtime::Handle::try_current() {
                    Ok(tokio) => drop(tokio.spawn(take)),
                    // No runtime to consume the row in a task of its own: here, then.
                    Err(_) => take.await,
                }
                entry.taking = Some(taking.clone());
                taking
            }
        };
        let held = Held::new(self, (session, name), scope, entry);
        let outcome = taking.outcome().await;
        let entry = held.keep();
        let (message, unknown) = match outcome {
            Taken::Consumed => return Ok(true),
            Taken::Elsewhere => return Ok(false),
            Taken::Failed(message) => (message, false),
            Taken::Unknown(message) => (message, true),
        };
        if let Some(mut entry) = entry {
            // A row the store could not be asked about stays unknown for the next receiver.
            entry.taking = unknown.then(|| Taking::ended(Taken::Unknown(message.clone())));
            self.give_back(session, name, entry, scope);
        }
        Err(StoreError::Write {
            thread: session.to_owned(),
            message: format!("consuming signal {name}: {message}"),
        }
        .into())
    }

    /// The consuming of the row `seq` of `session` by a receiver outside any run: the
    /// future to run (in a task of its own, so that no cancelled receiver cuts it short),
    /// and how it ends. `known`: whether the row was known to be there; if not (a node's
    /// wait was dropped while it consumed it), a failure leaves that unknown still.
    fn taking(
        &self,
        session: &str,
        seq: u64,
        known: bool,
    ) -> (Taking, impl Future<Output = ()> + Send + 'static) {
        let failed = move |message: String| match known {
            true => Taken::Failed(message),
            false => Taken::Unknown(message),
        };
        let (outcome, taking) = Taking::start(failed("the consuming ended without a word".into()));
        let (runtime, session) = (self.clone(), session.to_owned());
        let take = async move {
            let taken = match runtime.store().try_take_signal(&session, seq).await {
                Ok(true) => Taken::Consumed,
                Ok(false) => Taken::Elsewhere,
                Err(error) => failed(error.to_string()),
            };
            let _ = outcome.send(Some(taken));
        };
        (taking, take)
    }

    /// Asks the store, in the background, whether the row of `entry` is still there,
    /// consuming it if so: a node's wait dropped while it consumed the row cannot say. Without
    /// a Tokio runtime to ask in, the entry stays as it is, for an async receiver to settle.
    pub(crate) fn settle_taking(&self, session: &str, entry: &mut Entry) {
        let (Some(seq), Ok(tokio)) = (entry.seq, tokio::runtime::Handle::try_current()) else {
            return;
        };
        let (taking, take) = self.taking(session, seq, false);
        drop(tokio.spawn(take));
        entry.taking = Some(taking);
    }
}
