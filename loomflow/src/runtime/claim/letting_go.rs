//! Letting a claimed run go: released as it stands, runnable at once, or ended (failed,
//! cancelled) in the same write.

use std::sync::atomic::Ordering;

use super::RunClaim;
use crate::runtime::store::{RunState, StoreError};

impl RunClaim {
    /// Ends the run as `state` (failed, or cancelled before it wrote anything) and lets it go,
    /// in one write. Does nothing once the claim is released (the last checkpoint already
    /// said how the run ended).
    pub(crate) async fn finish(
        &self,
        state: RunState,
        error: Option<String>,
    ) -> Result<(), StoreError> {
        if self.inner.released.load(Ordering::Acquire) {
            return Ok(());
        }
        self.inner.releasing.store(true, Ordering::Release);
        let finished = self
            .inner
            .store
            .finish_run(&self.inner.thread, self.owner_text(), state, error)
            .await;
        self.let_go(finished)
    }

    /// Notes what a write that lets the run go did: released once it is written; a write
    /// that failed leaves the claim held, and dropping it lets the run go runnable (or
    /// the lease runs out), as after a crash.
    fn let_go(&self, written: Result<(), StoreError>) -> Result<(), StoreError> {
        match &written {
            Ok(()) => self.inner.released.store(true, Ordering::Release),
            Err(StoreError::LeaseLost { .. }) => self.lose(),
            Err(_) => {}
        }
        written
    }

    /// Lets the run go: another execution may claim it at once. While it holds a resume
    /// request it took and did not checkpoint past, runnable at once (as
    /// [`release_runnable`](Self::release_runnable)): the next execution applies the request
    /// again (see [`request`]).
    pub(crate) async fn release(&self) -> Result<(), StoreError> {
        if self.inner.request.held() {
            return self.release_runnable().await;
        }
        if self.inner.released.load(Ordering::Acquire) {
            return Ok(());
        }
        self.inner.releasing.store(true, Ordering::Release);
        let released = (self.inner.store)
            .release(&self.inner.thread, self.owner_text())
            .await;
        self.let_go(released)
    }

    /// Lets the run go after its execution stopped half way (handed back, a store failure):
    /// a run its row says is waiting or sleeping is runnable at once, as after a crash,
    /// since the execution may have taken what it waited for (see
    /// [`Store::release_runnable`](crate::runtime::Store::release_runnable)). A run whose
    /// failure was decided ([`failing`](Self::failing)) is recorded as failed instead, as
    /// dropping the claim does: it is not run again.
    ///
    /// An execution that holds resume requests it did not checkpoint past lets go so too:
    /// the next execution finds them in the journal. Should the release fail, it stops
    /// renewing its lease (a worker keeps its claims while it runs), so that the lease runs
    /// out and the run is claimed again, as after a crash.
    pub(crate) async fn release_runnable(&self) -> Result<(), StoreError> {
        if self.inner.released.load(Ordering::Acquire) {
            return Ok(());
        }
        if let Some(message) = self.inner.failed.get() {
            return self.finish(RunState::Failed, Some(message.clone())).await;
        }
        self.inner.releasing.store(true, Ordering::Release);
        let released = (self.inner.store)
            .release_runnable(&self.inner.thread, self.owner_text())
            .await;
        match &released {
            // It holds nothing now: the next execution applies the requests.
            Ok(()) => self.inner.request.let_go(),
            Err(_) if self.inner.request.held() => {
                self.inner.stopped.store(true, Ordering::Release);
            }
            Err(_) => {}
        }
        self.let_go(released)
    }
}
