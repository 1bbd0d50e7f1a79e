//! The resume requests an execution took (see `graph::executor::resume_request`).
//!
//! An execution that applies resume requests took them out of the store and journaled them
//! at the interrupted checkpoint. Until it writes a checkpoint past that one, it lets go of
//! the run when it stops only as runnable at once (as a claim marks a suspended run, should
//! its execution die), for the next execution to find the requests in the journal; if the
//! store does not take that, its lease runs out instead. Letting go as it was would leave
//! the run interrupted with its requests consumed, and nothing would carry it on. A request
//! the run refused (a value the node cannot use, or one its resumed step failed with) is
//! spent: a mark journaled after it says so, and the run lets go, interrupted as it was.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde_json::Value;

use super::RunClaim;
use crate::runtime::store::{JournalKey, StoreError};

/// Where the refusal of the requests taken would be journaled, while they are held.
#[derive(Default)]
pub(super) struct TakenRequest {
    held: AtomicBool,
    /// Whether the run refused requests it took.
    refused: AtomicBool,
    /// Boxed: every claim has room for one, and few executions take requests.
    refusal: Mutex<Option<Box<JournalKey>>>,
    /// The interrupted checkpoint a resume given its values directly answers (0: none).
    answered: AtomicU64,
    /// Whether that resume failed in its resumed step.
    direct_failed: AtomicBool,
}

impl TakenRequest {
    /// Whether the execution holds requests it did not checkpoint past.
    pub(super) fn held(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }

    /// The run was let go with the requests unspent: the execution holds them no more.
    pub(super) fn let_go(&self) {
        self.held.store(false, Ordering::Release);
    }
}

impl RunClaim {
    /// The execution applies resume requests it journaled; a refusal of them is journaled
    /// under `refusal`.
    pub(crate) fn hold_request(&self, refusal: JournalKey) {
        *crate::sync::lock(&self.inner.request.refusal) = Some(Box::new(refusal));
        self.inner.request.held.store(true, Ordering::Release);
    }

    /// Whether the execution holds resume requests it did not checkpoint past.
    pub(crate) fn holds_request(&self) -> bool {
        self.inner.request.held()
    }

    /// Whether the execution refused resume requests it took ([`refuse_request`]).
    ///
    /// [`refuse_request`]: Self::refuse_request
    pub(crate) fn refused_request(&self) -> bool {
        self.inner.request.refused.load(Ordering::Acquire)
    }

    /// A checkpoint past the interrupted one is written: the requests are spent.
    pub(crate) fn request_spent(&self) {
        if self.inner.request.held() {
            self.inner.request.held.store(false, Ordering::Release);
            crate::sync::lock(&self.inner.request.refusal).take();
        }
    }

    /// The execution is a resume given its values directly, for the question asked at
    /// checkpoint `id`: the requests queued for that question are spent once it took them.
    pub(crate) fn answers_directly(&self, id: u64) {
        self.inner.request.answered.store(id, Ordering::Release);
    }

    /// The checkpoint a resume given its values directly answered, if the execution is one.
    pub(crate) fn answered_directly(&self) -> Option<u64> {
        Some(self.inner.request.answered.load(Ordering::Acquire)).filter(|&id| id > 0)
    }

    /// A resume given its values directly failed in its resumed step: the run waits for
    /// another answer, interrupted as it was.
    pub(crate) fn direct_resume_failed(&self) {
        self.inner
            .request
            .direct_failed
            .store(true, Ordering::Release);
    }

    /// Whether a resume given its values directly failed in its resumed step
    /// ([`direct_resume_failed`](Self::direct_resume_failed)).
    pub(crate) fn failed_direct_resume(&self) -> bool {
        self.inner.request.direct_failed.load(Ordering::Acquire)
    }

    /// The run refused the requests it applied: journals that they are spent, under the
    /// claim, so that no execution applies them again.
    ///
    /// # Errors
    ///
    /// A store failure, or a lost lease; the requests are then still held.
    pub(crate) async fn refuse_request(&self) -> Result<(), StoreError> {
        let refusal = crate::sync::lock(&self.inner.request.refusal).clone();
        if let Some(key) = refusal {
            self.put_journal_audited(*key, Value::Null, Vec::new())
                .await?;
            self.inner.request.refused.store(true, Ordering::Release);
        }
        self.request_spent();
        Ok(())
    }
}
