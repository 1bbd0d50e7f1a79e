//! The memory store's calls the executor makes in line (see
//! [`Store::as_memory`](crate::runtime::Store::as_memory)): a claim, a step's write, an
//! execution's last write, the read a run starts from, and a journaled step's read and
//! write, made at once rather than through a boxed future each.

use std::sync::Arc;

use super::kept::Kept;
use super::run_row::Holder;
use super::threads::NO_PLACE;
use super::{MemoryStore, SharedName};
use crate::runtime::clock::now_ms;
use serde_json::Value;

use crate::runtime::store::{AuditEntry, Checkpoint, Claim, JournalKey, RunState, StoreError};

impl MemoryStore {
    /// [`Store::claim`](crate::runtime::Store::claim), made at once; with the thread's place,
    /// for the writes under the claim to find its slot by (see [`threads`](super::threads)).
    pub(crate) fn claim_now(
        &self,
        thread: impl SharedName,
        owner: impl Holder,
        lease_until_ms: u64,
        now_ms: u64,
    ) -> Result<(Claim, usize), StoreError> {
        self.lock_mut().map(|mut inner| {
            // A thread claimed again (a resume, a recover) costs no copy of its name.
            let (place, slot) = inner.threads.place(thread);
            let row = &mut slot.row;
            if row.state.is_none() && row.owner.is_none() && row.created_at_ms == 0 {
                // Never claimed nor submitted (a new thread, or one with checkpoints only).
                row.created_at_ms = now_ms;
            }
            (row.claim(owner, lease_until_ms, now_ms), place)
        })
    }

    /// [`Store::put_checkpoint_claimed`](crate::runtime::Store::put_checkpoint_claimed) of
    /// `thread`'s `checkpoint`, made at once. The checkpoint's own `thread` is not read: the
    /// executor's leave it empty, for the claim they are written under to name.
    #[inline]
    pub(crate) fn put_checkpoint_claimed_now(
        &self,
        (thread, place): (impl SharedName, usize),
        mut checkpoint: Checkpoint,
        owner: impl Holder,
        lease_until_ms: u64,
    ) -> Result<u64, StoreError> {
        // Straight-line rather than in a closure, which would take the checkpoint first.
        let mut inner = self.lock_mut()?;
        let mut fenced = inner.fenced((thread.as_ref(), place), owner, lease_until_ms)?;
        // The claim extended its lease from the time of this write: no clock read.
        let row = &mut fenced.slot.row;
        row.lapses = 0;
        let now_ms = lease_until_ms.saturating_sub(row.lease_ms);
        if checkpoint.namespace.is_empty() {
            row.follow(&mut checkpoint, now_ms);
        }
        Ok(fenced.file((thread, now_ms), checkpoint, self.retention))
    }

    /// [`Store::put_checkpoint_and_release`](crate::runtime::Store::put_checkpoint_and_release)
    /// of `thread`'s `checkpoint`, made at once (its own `thread` is not read, as for
    /// [`put_checkpoint_claimed_now`](Self::put_checkpoint_claimed_now)).
    pub(crate) fn put_checkpoint_and_release_now(
        &self,
        (thread, place): (impl SharedName, usize),
        mut checkpoint: Checkpoint,
        owner: impl Holder,
    ) -> Result<u64, StoreError> {
        let mut inner = self.lock_mut()?;
        let mut fenced = inner.fenced((thread.as_ref(), place), owner, 0)?;
        let row = &mut fenced.slot.row;
        let now_ms = now_ms();
        if checkpoint.namespace.is_empty() {
            row.follow(&mut checkpoint, now_ms);
        }
        row.let_go(false);
        let finished = row.state.is_some_and(RunState::is_finished);
        let id = fenced.file((thread, now_ms), checkpoint, self.retention);
        if finished {
            fenced.slot.settle();
        }
        Ok(id)
    }

    /// [`Store::release`](crate::runtime::Store::release) of `thread`, or with `runnable`
    /// [`Store::release_runnable`](crate::runtime::Store::release_runnable), made at once.
    pub(super) fn release_now(
        &self,
        thread: &str,
        owner: &str,
        runnable: bool,
    ) -> Result<(), StoreError> {
        let mut inner = self.lock_mut()?;
        if let Some(slot) = inner.threads.get_mut(thread)
            && slot.row.held_by(owner)
        {
            slot.row.let_go(runnable);
            slot.row.updated_at_ms = now_ms();
        }
        Ok(())
    }

    /// Whether `thread`'s run row asks the run to stop, read at once (see
    /// `RunClaim::cancel_asked`): another runtime sharing the store may have asked.
    pub(crate) fn cancel_requested_now(&self, thread: &str) -> Result<bool, StoreError> {
        if !self.cancels_asked.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(false);
        }
        let inner = self.lock()?;
        Ok(inner
            .threads
            .get(thread)
            .is_some_and(|slot| slot.row.cancel_requested))
    }

    /// The run of the newest checkpoint of `thread` in `namespace`, if it has one: what a new
    /// run's number follows.
    pub(crate) fn latest_run(
        &self,
        thread: (&str, usize),
        namespace: &str,
    ) -> Result<Option<u64>, StoreError> {
        self.with_newest(thread, namespace, Kept::run)
    }

    /// The newest checkpoint of `thread` in `namespace`, as it was handed over: a snapshot
    /// kept as values keeps them, for the executor to read back (its body is not built).
    /// Its `thread` is left empty: the executor, which asks, knows it.
    pub(crate) fn latest_unnamed(
        &self,
        thread: (&str, usize),
        namespace: &str,
    ) -> Result<Option<Checkpoint>, StoreError> {
        self.with_newest(thread, namespace, |newest| newest.checkpoint(""))
    }

    /// `read` of the newest checkpoint of `thread` (found from its place, if it is there) in
    /// `namespace`, if it has one.
    fn with_newest<T>(
        &self,
        (thread, place): (&str, usize),
        namespace: &str,
        read: impl FnOnce(&Kept) -> T,
    ) -> Result<Option<T>, StoreError> {
        self.lock().map(|inner| {
            let kept = &inner.threads.at(place, thread)?.kept;
            kept.iter()
                .rev()
                .find(|c| c.namespace() == namespace)
                .map(read)
        })
    }

    /// [`Store::get_journal`](crate::runtime::Store::get_journal), made at once.
    pub(crate) fn get_journal_now(&self, key: &JournalKey) -> Result<Option<Value>, StoreError> {
        self.lock().map(|inner| inner.journaled(key).cloned())
    }

    /// [`Store::list_journal`](crate::runtime::Store::list_journal), made at once.
    pub(super) fn list_journal_now(
        &self,
        thread: &str,
        run: u64,
    ) -> Result<Vec<(JournalKey, Value)>, StoreError> {
        let inner = self.lock()?;
        let Some(slot) = inner.threads.get(thread) else {
            return Ok(Vec::new());
        };
        let entries = slot.journal.iter().filter(|(key, _)| key.run == run);
        Ok(entries.map(|(k, v)| (k.clone(), v.clone())).collect())
    }

    /// [`Store::put_journal_audited`](crate::runtime::Store::put_journal_audited) (with no
    /// entries, [`put_journal_claimed`](crate::runtime::Store::put_journal_claimed)), made
    /// at once: the value and the entries are filed together, under one lock.
    ///
    /// Entries that name no thread are `thread`'s, when it is given (a run's claim names it).
    pub(crate) fn put_journal_claimed_now(
        &self,
        (key, value): (JournalKey, Value),
        (audit, thread): (Vec<AuditEntry>, Option<(&Arc<str>, usize)>),
        owner: impl Holder,
        lease_until_ms: u64,
    ) -> Result<(), StoreError> {
        let mut inner = self.lock_mut()?;
        let place = thread.map_or(NO_PLACE, |(_, place)| place);
        let mut fenced = inner.fenced((&key.thread, place), owner, lease_until_ms)?;
        fenced.slot.row.lapses = 0;
        fenced.journal((key, value), audit, thread.map(|(name, _)| name));
        Ok(())
    }
}
