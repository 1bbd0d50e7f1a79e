//! The writes every `MemoryStore` operation is made of: fencing a claim, filing a
//! checkpoint (pruned to the retention), taking a signal.

use super::super::audit::signal_received;
use super::super::{Checkpoint, StoreError};
use super::kept::Kept;
use super::retention::prune;
use super::run_row::RunRow;
use super::{Inner, ThreadName};

impl Inner {
    /// Checks that `owner` holds `thread` and extends its lease: the first half of every
    /// write under a claim.
    pub(super) fn fence(
        &mut self,
        thread: &str,
        owner: &str,
        until_ms: u64,
    ) -> Result<(), StoreError> {
        self.fenced_row(thread, owner, until_ms).map(drop)
    }

    /// [`fence`](Self::fence), handing back the run's row for the rest of the write.
    pub(super) fn fenced_row(
        &mut self,
        thread: &str,
        owner: &str,
        until_ms: u64,
    ) -> Result<&mut RunRow, StoreError> {
        match self.runs.get_mut(thread) {
            Some(row) if row.owner.as_deref() == Some(owner) => {
                row.until_ms = until_ms;
                Ok(row)
            }
            _ => Err(StoreError::LeaseLost {
                thread: thread.to_owned(),
                owner: owner.to_owned(),
            }),
        }
    }

    /// Files `checkpoint` under `thread` (its own `thread` is not read: the executor's
    /// checkpoints leave it to the claim they are written under).
    #[inline]
    pub(super) fn insert_checkpoint(
        &mut self,
        thread: impl ThreadName,
        mut checkpoint: Checkpoint,
        retention: Option<usize>,
    ) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        if !checkpoint.audit.is_empty() {
            self.audit.append(std::mem::take(&mut checkpoint.audit));
        }
        // The thread's name is filed only with its first checkpoint.
        if let Some(kept) = self.checkpoints.get_mut(thread.as_ref()) {
            kept.push(Kept::new(checkpoint, id));
            // Pruned a batch at a time (past half as many again), so that a step costs no
            // scan.
            if let Some(limit) = retention
                && kept.len() > limit + limit / 2 + 1
            {
                prune(kept, limit);
            }
        } else {
            // Room for the few rows of a short run (its input, its steps, its end) at once,
            // where pushing onto one row's room would grow the list twice.
            let mut kept = Vec::with_capacity(4);
            kept.push(Kept::new(checkpoint, id));
            self.checkpoints.insert(thread.to_key(), kept);
        }
        id
    }

    /// Removes a pending signal, auditing its receipt by `run` (0 outside one); says
    /// whether it was there.
    pub(super) fn take(&mut self, session: &str, seq: u64, run: u64) -> bool {
        if self.signals.get(&seq).is_some_and(|s| s.session == session) {
            if let Some(signal) = self.signals.remove(&seq) {
                let received = signal_received(session, &signal.name, seq, run);
                self.audit.append([received]);
            }
            true
        } else {
            false
        }
    }
}
