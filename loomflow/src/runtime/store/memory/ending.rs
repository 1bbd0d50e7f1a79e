//! How a thread's run ends for good: finished under its claim (failed, or cancelled before
//! its first checkpoint), or deleted with everything the thread keeps.

use super::MemoryStore;
use super::threads::NO_PLACE;
use crate::runtime::clock::now_ms;
use crate::runtime::store::{DeletedThread, RunState, StoreError};

impl MemoryStore {
    /// [`Store::finish_run`](crate::runtime::Store::finish_run), made at once.
    pub(super) fn finish_now(
        &self,
        (thread, owner): (&str, &str),
        state: RunState,
        error: Option<String>,
    ) -> Result<(), StoreError> {
        let mut inner = self.lock_mut()?;
        let row = &mut inner.fenced((thread, NO_PLACE), owner, 0)?.slot.row;
        row.state = Some(state);
        row.error = error;
        row.runnable_at_ms = None;
        row.wake_at_ms = None;
        row.waiting_on.clear();
        row.input = None;
        row.cancel_requested = false;
        row.owner = None;
        row.until_ms = 0;
        row.updated_at_ms = now_ms();
        Ok(())
    }

    /// [`Store::delete_thread`](crate::runtime::Store::delete_thread), made at once: the
    /// thread's slot goes, with its row, checkpoints and journal, and so do the signals
    /// pending for its session.
    pub(super) fn delete_thread_now(
        &self,
        thread: &str,
        owner: &str,
    ) -> Result<DeletedThread, StoreError> {
        let mut inner = self.lock_mut()?;
        inner.fenced((thread, NO_PLACE), owner, 0)?;
        let slot = inner.threads.remove(thread);
        let (checkpoints, journal_entries) =
            slot.map_or((0, 0), |slot| (slot.kept.len(), slot.journal.len()));
        let before = inner.signals.len();
        inner.signals.retain(|_, signal| signal.session != thread);
        let signals = before - inner.signals.len();
        Ok(DeletedThread::new(
            checkpoints as u64,
            journal_entries as u64,
            signals as u64,
        ))
    }
}
