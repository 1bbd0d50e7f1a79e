//! What a node's wait does with a signal it received: types the payload, consumes it under
//! the run's claim and journals it ([`accept`]), or hands back the one journaled before
//! ([`replayed`]).

use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::Context;
use crate::graph::RunError;
use crate::runtime::handover::Held;
use crate::runtime::mailbox::{Entry, Scope, Taken, Taking};
use crate::runtime::signals::decode;
use crate::runtime::store::audit::signal_received;
use crate::runtime::{JournalKey, StoreError};

type Result<T, E = RunError> = std::result::Result<T, E>;

/// The payload journaled under `key`, as a `T`. When it is not one, the number goes back to
/// the name's receives, as it did when the payload came afresh and did not decode (see
/// [`accept`]): a node that catches the error and receives again takes the same numbers
/// each time it runs.
pub(super) fn replayed<T: DeserializeOwned>(
    ctx: &Context,
    name: &str,
    key: &JournalKey,
    recorded: serde_json::Value,
) -> Result<T> {
    decode(ctx.thread(), name, recorded).map_err(|error| {
        ctx.give_back(&format!("signal:{name}"), key);
        error.into()
    })
}

/// Types a received payload and consumes it under the run's claim, journaling it; gives it
/// back on failure. `None` when another consumer had already taken it from the store: the
/// payload is not this node's, and the caller looks for the next one.
pub(super) async fn accept<T: DeserializeOwned>(
    ctx: &Context,
    name: &str,
    received: Entry,
    key: &JournalKey,
    scope: Scope,
) -> Result<Option<T>> {
    let runtime = ctx.runtime();
    let session = ctx.thread();
    let value = match decode::<T>(session, name, received.payload.clone()) {
        Ok(value) => value,
        Err(error) => {
            // A copy whose row another process took (an operator dropped the payload no wait
            // could read, say) is not this node's to fail on: the next payload is.
            if received.taking.is_none()
                && let Some(seq) = received.seq
                && runtime.stored_no_longer(session, name, seq).await
            {
                return Ok(None);
            }
            runtime.give_back(session, name, received, scope);
            // Nothing is journaled under the number: the node's next receive of the name
            // takes it, as it does when the node runs again and the payload it takes then
            // is journaled.
            ctx.give_back(&format!("signal:{name}"), key);
            return Err(error.into());
        }
    };
    let mut received = received;
    let journal = (key.clone(), received.payload.clone());
    // Another receiver was consuming the row when it was dropped (see `runtime::handover`):
    // how that ended decides. A row that a waiter outside the run consumed is journaled
    // here; one that a node's wait may have consumed is consumed afresh.
    let taken = match received.taking.clone() {
        Some(mut taking) => {
            let held = Held::new(runtime, (session, name), scope, received);
            let taken = taking.outcome().await;
            received = held.keep().ok_or(RunError::Internal {
                problem: "a held signal went missing",
            })?;
            received.taking = None;
            Some(taken)
        }
        None => None,
    };
    let consumed = match (&taken, received.seq) {
        (Some(Taken::Elsewhere), _) => Ok(false),
        (Some(Taken::Consumed), _) => {
            // The row is gone: the journal entry is all that keeps the payload. It is written
            // in a task of its own, which a wait dropped meanwhile cannot cut short; the
            // entry goes back saying how the write ended (journaled: the payload is the
            // dropped wait's; failed: it is the next receiver's).
            let (outcome, taking) = Taking::start(Taken::Consumed);
            ctx.control().journaling.push(taking.clone());
            let claim = ctx.claim().clone();
            let store = Arc::clone(runtime.store());
            let write = async move {
                let (key, payload) = journal;
                let written = claim
                    .put_journal_audited(key.clone(), payload.clone(), Vec::new())
                    .await;
                // A write whose connection broke at its commit may have committed all the
                // same: the journal says. Taken for not written, it would be this node's
                // when the step runs again, and the next receiver's too.
                let written = match written {
                    Err(error) => match store.get_journal(&key).await {
                        Ok(Some(journaled)) if journaled == payload => Ok(()),
                        _ => Err(error),
                    },
                    written => written,
                };
                let taken = match &written {
                    Ok(()) => Taken::Elsewhere,
                    Err(_) => Taken::Consumed,
                };
                let _ = outcome.send(Some(taken));
                written
            };
            received.taking = Some(taking);
            let held = Held::new(runtime, (session, name), scope, received);
            let written = match tokio::runtime::Handle::try_current() {
                Ok(tokio) => (tokio.spawn(write).await).unwrap_or_else(|error| {
                    Err(StoreError::Write {
                        thread: session.to_owned(),
                        message: format!("journaling signal {name}: {error}"),
                    })
                }),
                Err(_) => write.await,
            };
            received = held.keep().ok_or(RunError::Internal {
                problem: "a held signal went missing",
            })?;
            // Should the write have failed, the entry goes back saying its row is consumed.
            received.taking = Some(Taking::ended(Taken::Consumed));
            written.map(|()| true)
        }
        (_, Some(seq)) => {
            // A wait dropped while the store consumes the row (a node's `select!`, a
            // timeout around the wait) leaves the entry at the head of its queue, saying that
            // only the store knows whether the row is still there: the next receiver
            // consumes the row afresh, or finds that this write committed all the same and
            // looks for the next payload. A failed write leaves it so too: a write whose
            // connection broke may have committed.
            let dropped = "a node's wait was dropped while consuming it".to_owned();
            received.taking = Some(Taking::ended(Taken::Unknown(dropped)));
            let held = Held::new(runtime, (session, name), scope, received);
            let taken = ctx.claim().take_signal(session, seq, journal).await;
            received = held.keep().ok_or(RunError::Internal {
                problem: "a held signal went missing",
            })?;
            received.taking = match &taken {
                Ok(_) => None,
                Err(error) => Some(Taking::ended(Taken::Unknown(error.to_string()))),
            };
            taken
        }
        // Delivered by the in-memory mailbox: no store took it, so the receipt is audited
        // here, with the journal entry.
        (_, None) => {
            let received = signal_received(session, name, 0, ctx.run_number());
            ctx.claim()
                .put_journal_audited(journal.0, journal.1, vec![received])
                .await
                .map(|()| true)
        }
    };
    match consumed {
        Ok(true) => Ok(Some(value)),
        Ok(false) => {
            tracing::debug!(%session, %name, seq = ?received.seq, "signal was consumed elsewhere; looking for the next");
            Ok(None)
        }
        Err(error) => {
            runtime.give_back(session, name, received, scope);
            // As for a payload that does not decode: a node that catches the error and
            // receives again takes the same number, and finds the payload there should the
            // write have committed after all (a receive looks at the journal first). Not
            // once the run is another execution's: what it journals there is its own.
            if !matches!(error, StoreError::LeaseLost { .. }) {
                ctx.give_back(&format!("signal:{name}"), key);
            }
            Err(error.into())
        }
    }
}
