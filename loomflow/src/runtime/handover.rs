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

use super::mailbox::{Entry, Scope, Taken, Taking};
use super::store::StoreError;
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
            return Ok(true);
        };
        let mut taking = match &entry.taking {
            // A cancelled waiter started it: its outcome is this waiter's.
            Some(taking) => taking.clone(),
            None => {
                let (outcome, taking) = Taking::start();
                let (runtime, session) = (self.clone(), session.to_owned());
                let take = async move {
                    let taken = match runtime.store().try_take_signal(&session, seq).await {
                        Ok(true) => Taken::Consumed,
                        Ok(false) => Taken::Elsewhere,
                        Err(error) => Taken::Failed(error.to_string()),
                    };
                    let _ = outcome.send(Some(taken));
                };
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
        match outcome {
            Taken::Consumed => Ok(true),
            Taken::Elsewhere => Ok(false),
            Taken::Failed(message) => {
                if let Some(mut entry) = entry {
                    entry.taking = None;
                    self.give_back(session, name, entry, scope);
                }
                Err(StoreError::Write {
                    thread: session.to_owned(),
                    message: format!("consuming signal {name}: {message}"),
                }
                .into())
            }
        }
    }
}
