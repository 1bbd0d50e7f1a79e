//! Resume requests: values for an interrupted run, sent without the graph's code
//! ([`Runtime::request_resume`], `loomflow resume`) and applied by the run's next execution.
//!
//! The execution takes every request queued for the run, each under the run's claim and
//! journaled in the same write, under a key of the interrupted checkpoint they answer, and
//! applies them together: one per interrupt, the newest for each. An execution that stops
//! before the resumed step's checkpoint (killed, or let go) leaves them in the journal,
//! where the next execution of the run finds them (see [`RunClaim::hold_request`]); one
//! that took the run over from it cannot take a request a second time (the write is
//! fenced). Requests the run refused are followed in the journal by a mark (`null`) that
//! spends them.

use serde_json::Value;

use super::Result;
use crate::runtime::claim::RunClaim;
use crate::runtime::mailbox::Scope;
use crate::runtime::store::audit::signal_received;
use crate::runtime::store::runs::RESUME_SIGNAL;
use crate::runtime::{JournalKey, ResumeRequest, Runtime};

/// The interrupted checkpoint the requests answer.
pub(super) struct Answering {
    pub(super) id: u64,
    pub(super) run: u64,
    pub(super) step: u64,
}

impl Answering {
    /// Where the `nth` request taken at this checkpoint is journaled: under no node (no
    /// node has an empty name), so that no step of a node shares the key.
    fn key(&self, thread: &str, nth: u32) -> JournalKey {
        let name = format!("{RESUME_SIGNAL} at checkpoint {}", self.id);
        JournalKey::new(thread, self.run, "", self.step, "", name, nth)
    }
}

/// The requests for `thread`'s top-level run, interrupted at `at`, oldest first, and
/// whether any was taken now: those journaled at that checkpoint since the last refusal,
/// then those queued here, taken and journaled now. Empty when there are none. While there
/// are, `claim` holds them (see [`RunClaim::hold_request`]).
pub(super) async fn resume_requests(
    runtime: &Runtime,
    claim: &RunClaim,
    thread: &str,
    at: &Answering,
) -> Result<(Vec<ResumeRequest>, bool)> {
    let mut requests = Vec::new();
    let mut taken = 0;
    while let Some(value) = runtime.store().get_journal(&at.key(thread, taken)).await? {
        taken += 1;
        match value {
            Value::Null => requests.clear(), // refused: spent
            value => requests.extend(decoded(thread, value)),
        }
    }
    let mut fresh = false;
    // Kept in the store too: a request the mailbox let go of (it waited past the pending
    // TTL, a process restarted) is still the run's.
    while let Some(entry) = runtime
        .receive_kept(thread, RESUME_SIGNAL, Scope::Framework)
        .await?
    {
        let Some(request) = decoded(thread, entry.payload.clone()) else {
            // Nothing could apply it: consumed, and not journaled.
            discard(runtime, thread, entry.seq).await?;
            continue;
        };
        if request.checkpoint.is_some_and(|id| id != at.id) {
            // Sent for a question the run has moved past (it asked again, or this is a
            // later run): it answers nothing here. Consumed, and not journaled.
            tracing::info!(%thread, "a resume request made for an earlier question was dropped");
            discard(runtime, thread, entry.seq).await?;
            continue;
        }
        let key = at.key(thread, taken);
        let took = match entry.seq {
            Some(seq) => {
                claim
                    .take_signal(thread, seq, (key, entry.payload.clone()))
                    .await
            }
            // Delivered by the in-memory mailbox: no store took it, so the receipt is
            // audited here, with the journal entry, as a store's take audits it.
            None => {
                let received = signal_received(thread, RESUME_SIGNAL, 0, at.run);
                claim
                    .put_journal_audited(key, entry.payload.clone(), vec![received])
                    .await
                    .map(|()| true)
            }
        };
        match took {
            Ok(true) => {
                taken += 1;
                fresh = true;
                requests.push(request);
            }
            Ok(false) => {} // another execution took it
            Err(error) => {
                runtime.give_back(thread, RESUME_SIGNAL, entry, Scope::Framework);
                if !requests.is_empty() {
                    claim.hold_request(at.key(thread, taken));
                }
                return Err(error.into());
            }
        }
    }
    if !requests.is_empty() {
        claim.hold_request(at.key(thread, taken));
    }
    Ok((requests, fresh))
}

/// Takes out a request no run can apply. Off the store before the next is read, which may
/// come from the store: a removal left for later (the store refusing writes meanwhile)
/// would hand the same request back, again and again.
async fn discard(runtime: &Runtime, thread: &str, seq: Option<u64>) -> Result<()> {
    match seq {
        Some(seq) => Ok(runtime.store().discard_signal(thread, seq).await?),
        None => Ok(()),
    }
}

/// `payload` as a request; `None`, logged, when it is not one.
fn decoded(thread: &str, payload: Value) -> Option<ResumeRequest> {
    serde_json::from_value(payload)
        .inspect_err(|error| {
            tracing::warn!(%thread, %error, "a resume request did not decode; dropped");
        })
        .ok()
}
