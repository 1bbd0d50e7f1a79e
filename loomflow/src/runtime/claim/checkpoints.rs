//! A run's checkpoints written under its claim: each fenced by the claim's lease, which
//! the write extends; the memory store's made in line. And the thread deleted under it.

use std::sync::atomic::Ordering;

use futures_util::future::Either;

use super::RunClaim;
use crate::runtime::clock::now_ms;
use crate::runtime::store::{AuditEntry, Checkpoint, DeletedThread, StoreError};

impl RunClaim {
    /// Saves a checkpoint under the claim.
    ///
    /// Not an `async fn`: the checkpoint goes straight into the store's call instead of
    /// being moved into this future first (a step writes one; the memory store's write is
    /// made as its future is).
    ///
    /// A checkpoint whose `thread` is empty is the claimed thread's: the executor leaves it
    /// empty for the memory store, which files it without a copy of the name.
    pub(crate) fn put_checkpoint(
        &self,
        checkpoint: Checkpoint,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send + '_ {
        self.put_checkpoint_until(checkpoint, self.next_expiry())
    }

    /// Saves a fresh run's first checkpoint, written as soon as the run is claimed: under
    /// the lease the claim just took, which it does not extend (no clock is read).
    pub(crate) fn put_start_checkpoint(
        &self,
        checkpoint: Checkpoint,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send + '_ {
        let until = self.inner.until_ms.load(Ordering::Acquire);
        self.put_checkpoint_until(checkpoint, until)
    }

    /// [`put_checkpoint`](Self::put_checkpoint), extending the lease to `until`.
    fn put_checkpoint_until(
        &self,
        checkpoint: Checkpoint,
        until: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send + '_ {
        let (thread, owner) = (&self.inner.thread, &self.inner.owner);
        if let Some(memory) = self.inner.store.as_memory() {
            // Written now, and not from a closure, which would take the checkpoint first.
            let written = match self.is_lost() {
                true => Err(self.lost_error()),
                false => {
                    let thread = (thread, self.inner.place);
                    memory.put_checkpoint_claimed_now(thread, checkpoint, owner, until)
                }
            };
            return Either::Left(std::future::ready(self.settle(until, written)));
        }
        let checkpoint = self.named(checkpoint);
        let owner = self.owner_text();
        let write = (self.inner.store).put_checkpoint_claimed(checkpoint, owner, until);
        Either::Right(self.fenced(until, write))
    }

    /// `checkpoint`, as a store other than the memory store takes it: naming the claimed
    /// thread if it names none, as its audit entries do ([`Self::entries_named`]).
    fn named(&self, mut checkpoint: Checkpoint) -> Checkpoint {
        if checkpoint.thread.is_empty() {
            checkpoint.thread = String::from(&*self.inner.thread);
        }
        self.entries_named(&mut checkpoint.audit);
        checkpoint
    }

    /// A run's audit `entries` as a store other than the memory store takes them: those
    /// that name no thread name the claimed one, those that say no time happen now, and
    /// their details are built as values. The memory store files them as they are, under
    /// the claim's name for the thread, at the time of its write.
    pub(crate) fn entries_named(&self, entries: &mut [AuditEntry]) {
        // One clock read, if any entry needs one.
        let mut now = None;
        for entry in entries.iter_mut() {
            if entry.thread.is_empty() {
                entry.thread = String::from(&*self.inner.thread);
            }
            if entry.at_ms == 0 {
                entry.at_ms = *now.get_or_insert_with(now_ms);
            }
            entry.build_detail();
        }
    }

    /// Saves an execution's last checkpoint and releases the claim in the same write (an
    /// empty `thread` names the claimed one, as for [`put_checkpoint`](Self::put_checkpoint)).
    ///
    /// Nothing may be written under the claim afterwards.
    ///
    /// Not an `async fn`, as for [`put_checkpoint`](Self::put_checkpoint): the memory
    /// store's write is made at once, and another store's call takes the checkpoint.
    pub(crate) fn put_last_checkpoint(
        &self,
        checkpoint: Checkpoint,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send + '_ {
        if self.is_lost() {
            return Either::Left(std::future::ready(Err(self.lost_error())));
        }
        self.inner.releasing.store(true, Ordering::Release);
        let (store, owner) = (&self.inner.store, &self.inner.owner);
        if let Some(memory) = store.as_memory() {
            let thread = (&self.inner.thread, self.inner.place);
            let written = memory.put_checkpoint_and_release_now(thread, checkpoint, owner);
            return Either::Left(std::future::ready(self.released(written)));
        }
        let write = store.put_checkpoint_and_release(self.named(checkpoint), self.owner_text());
        Either::Right(async move { self.released(write.await) })
    }

    /// Notes what a write that releases the claim did to it.
    fn released(&self, written: Result<u64, StoreError>) -> Result<u64, StoreError> {
        match &written {
            Ok(_) => {
                self.inner.released.store(true, Ordering::Release);
            }
            Err(StoreError::LeaseLost { .. }) => self.lose(),
            Err(_) => {}
        }
        written
    }

    /// Deletes everything the thread keeps (see
    /// [`Store::delete_thread`](crate::runtime::Store::delete_thread)); the claim ends with
    /// the run's row.
    pub(crate) async fn delete_thread(&self) -> Result<DeletedThread, StoreError> {
        let thread = &self.inner.thread;
        let deleted = self
            .inner
            .store
            .delete_thread(thread, self.owner_text())
            .await;
        if deleted.is_ok() {
            self.inner.released.store(true, Ordering::Release);
        }
        deleted
    }
}
