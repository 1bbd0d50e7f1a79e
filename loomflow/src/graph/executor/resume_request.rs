//! Resume requests: a value for an interrupted run, sent without the graph's code
//! ([`Runtime::request_resume`], `loomflow resume`) and applied by the run's next execution.
//!
//! The execution consumes the request under the run's claim and journals it in the same
//! write, under a key of the interrupted checkpoint it answers. An execution that dies
//! before the resumed step's checkpoint leaves the request in the journal, where the next
//! execution of the run finds it; one that took the run over from it cannot consume the
//! request a second time (the write is fenced). A request sent after another was taken at
//! the same checkpoint (the first one's value was refused, say) is journaled next to it,
//! and the newest applies.

use serde_json::Value;

use super::Result;
use crate::runtime::claim::RunClaim;
use crate::runtime::mailbox::Scope;
use crate::runtime::store::runs::RESUME_SIGNAL;
use crate::runtime::{JournalKey, ResumeRequest, Runtime};

/// The interrupted checkpoint a request answers.
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

/// The resume request for `thread`'s top-level run, interrupted at `at`, and whether it is
/// fresh: the newest one queued here, consumed and journaled now (fresh), or else the
/// newest one an earlier execution journaled at that checkpoint. `None` when there is
/// neither.
pub(super) async fn resume_request(
    runtime: &Runtime,
    claim: &RunClaim,
    thread: &str,
    at: &Answering,
) -> Result<Option<(ResumeRequest, bool)>> {
    let mut journaled = None;
    let mut taken = 0;
    while let Some(value) = runtime.store().get_journal(&at.key(thread, taken)).await? {
        journaled = Some(value);
        taken += 1;
    }
    while let Some(entry) = runtime
        .receive_now(thread, RESUME_SIGNAL, Scope::Framework)
        .await?
    {
        if decoded(thread, entry.payload.clone()).is_none() {
            // Nothing could apply it: consumed, and not journaled.
            runtime.forget_consumed_signal(thread, entry.seq);
            continue;
        }
        let key = at.key(thread, taken);
        let took = match entry.seq {
            Some(seq) => {
                claim
                    .take_signal(thread, seq, (key, entry.payload.clone()))
                    .await
            }
            None => claim
                .put_journal_audited(key, entry.payload.clone(), Vec::new())
                .await
                .map(|()| true),
        };
        match took {
            Ok(true) => return Ok(decoded(thread, entry.payload).map(|r| (r, true))),
            Ok(false) => continue, // another execution consumed it
            Err(error) => {
                runtime.give_back(thread, RESUME_SIGNAL, entry, Scope::Framework);
                return Err(error.into());
            }
        }
    }
    Ok(journaled
        .and_then(|value| decoded(thread, value))
        .map(|request| (request, false)))
}

/// `payload` as a request; `None`, logged, when it is not one.
fn decoded(thread: &str, payload: Value) -> Option<ResumeRequest> {
    serde_json::from_value(payload)
        .inspect_err(|error| {
            tracing::warn!(%thread, %error, "a resume request did not decode; dropped");
        })
        .ok()
}
