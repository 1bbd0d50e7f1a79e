//! A claim dropped without letting go: its execution was dropped mid-way (an aborted task).

use futures_util::FutureExt;

use super::{ClaimInner, RunClaim};
use crate::runtime::store::RunState;

impl RunClaim {
    /// Says the run failed, with `message`, before anyone hears of it (its `error` event):
    /// an execution dropped from then on, before it recorded the failure (a stream dropped
    /// at its last event), records it as it is dropped, rather than leave a failed run to be
    /// run again.
    pub(crate) fn failing(&self, message: &str) {
        let _ = self.inner.failed.set(message.to_owned());
    }
}

impl Drop for ClaimInner {
    fn drop(&mut self) {
        if *self.released.get_mut() {
            return;
        }
        // Stores queue a write when it is called (the memory store performs it), so one
        // poll is enough to send it; if it does not reach the store, the lease expires
        // instead.
        let let_go = match self.failed.take() {
            Some(message) => {
                let owner = self.owner_text();
                (self.store).finish_run(&self.thread, owner, RunState::Failed, Some(message))
            }
            // Perhaps after taking what its run waited for (a resume request it holds, say):
            // runnable at once, as after a crash.
            None => self.store.release_runnable(&self.thread, self.owner_text()),
        };
        let _ = let_go.now_or_never();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use crate::runtime::Runtime;
    use crate::runtime::store::RunState;

    /// A run whose failure was decided is recorded as failed when its execution is let go
    /// half way (a worker's shutdown that aborted it), as when its claim is dropped: not
    /// handed back runnable to be run again. Before its fix it was.
    #[tokio::test]
    async fn a_decided_failure_is_recorded_when_let_go_half_way() {
        let runtime = Runtime::in_memory();
        let thread: Arc<str> = Arc::from("t");
        let claim = runtime.claim_run(&thread, None).await.unwrap();
        claim.failing("node n failed: boom");
        claim.release_runnable().await.unwrap();
        let record = runtime.store().get_run("t").await.unwrap().unwrap();
        assert_eq!(record.state, RunState::Failed);
        assert_eq!(record.error.as_deref(), Some("node n failed: boom"));
    }
}
