//! Handing a stored signal over to a waiter outside any run, so that cancelling the waiter
//! loses nothing.
//!
//! The mailbox gives the waiter the payload, then the signal's row is consumed in the store,
//! and only then does the waiter return the payload. A waiter dropped in between (by a
//! `timeout` or a `select!`) must not take the payload with it: the store's write may
//! commit all the same. So the row is consumed in a task of its own, and whichever of the
//! waiter and the task finds the other gone puts the payload back at the head of its queue,
//! for the next waiter here:
//! - as a payload no store keeps any more, when the row was consumed;
//! - as it was, still stored, when consuming it failed;
//! - nowhere, when another consumer had taken the row first.
//!
//! A consuming that fails also puts the payload back for a waiter still there, which gets
//! the error.

use tokio::sync::oneshot;

use super::mailbox::{Entry, Scope};
use super::store::StoreError;
use super::{Runtime, RuntimeError};

type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// A payload taken from the mailbox, and where it goes back to.
struct Handed {
    runtime: Runtime,
    session: String,
    name: String,
    scope: Scope,
    entry: Entry,
}

impl Handed {
    /// Puts the payload back, if it should be, for the outcome `taken` of consuming its row.
    fn settle(mut self, taken: &Result<bool, StoreError>) {
        match taken {
            Ok(true) => self.entry.seq = None,
            Ok(false) => return,
            Err(_) => {}
        }
        let Self {
            runtime,
            session,
            name,
            scope,
            entry,
        } = self;
        runtime.give_back(&session, &name, entry, scope);
    }
}

/// What the task consuming the row sends the waiter.
type Outcome = (Result<bool, StoreError>, Handed);

/// The waiter's end: dropped before it has the outcome, it settles the payload itself if
/// the task has finished, or leaves it to the task.
struct Waiting(Option<oneshot::Receiver<Outcome>>);

impl Drop for Waiting {
    fn drop(&mut self) {
        let Some(mut rx) = self.0.take() else { return };
        // Closed first: the task either sent already (and it is read here) or cannot send
        // any more (and settles the payload itself).
        rx.close();
        if let Ok((taken, handed)) = rx.try_recv() {
            handed.settle(&taken);
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
        entry: Entry,
        scope: Scope,
    ) -> Result<bool> {
        let Some(seq) = entry.seq else {
            return Ok(true);
        };
        let handed = Handed {
            runtime: self.clone(),
            session: session.to_owned(),
            name: name.to_owned(),
            scope,
            entry,
        };
        let Ok(tokio) = tokio::runtime::Handle::try_current() else {
            // No runtime to consume the row in a task of its own: here, then.
            let taken = self.store().try_take_signal(session, seq).await;
            return Self::settled(taken, handed);
        };
        let (tx, rx) = oneshot::channel::<Outcome>();
        tokio.spawn(async move {
            let taken = {
                let Handed {
                    runtime, session, ..
                } = &handed;
                runtime.store().try_take_signal(session, seq).await
            };
            if let Err((taken, handed)) = tx.send((taken, handed)) {
                handed.settle(&taken);
            }
        });
        let mut waiting = Waiting(Some(rx));
        let outcome = match waiting.0.as_mut() {
            Some(rx) => rx.await,
            None => return Ok(false),
        };
        waiting.0 = None;
        match outcome {
            Ok((taken, handed)) => Self::settled(taken, handed),
            // The task ended without a word (the tokio runtime is shutting down): the row's
            // fate is unknown, and the payload went with the task.
            Err(_) => Err(StoreError::Write {
                thread: session.to_owned(),
                message: format!("consuming signal {name} was cut short"),
            }
            .into()),
        }
    }

    /// The waiter's answer for the outcome `taken` of consuming `handed`'s row: the payload
    /// goes back when consuming it failed.
    fn settled(taken: Result<bool, StoreError>, handed: Handed) -> Result<bool> {
        match taken {
            Ok(taken) => Ok(taken),
            Err(error) => {
                let failed = Err(error);
                handed.settle(&failed);
                failed.map_err(Into::into)
            }
        }
    }
}
