//! Everything the memory store keeps of one thread, under one key: its run's row, its
//! checkpoints and its journal. A write under a claim fences the row and files the
//! checkpoint (or the journal entry) beside it, so a step costs one lookup of the thread
//! rather than one per map.

use std::collections::HashMap;

use serde_json::Value;

use super::kept::Kept;
use super::retention::prune;
use super::run_row::RunRow;
#[cfg(doc)]
use crate::runtime::store::Checkpoint;
use crate::runtime::store::JournalKey;

/// How many rows a thread's list has room for at its first checkpoint.
const FIRST_ROOM: usize = 8;

/// How many unused rows a finished run's list may keep: fewer are not worth the copy that
/// gives them back (a row is 56 bytes).
const SPARE_KEPT: usize = FIRST_ROOM / 2;

#[derive(Debug, Default)]
pub(super) struct ThreadSlot {
    /// The run's row. A thread that was never claimed nor submitted (checkpoints written
    /// outside a claim, through the `Store` API) has the default row, which names no state:
    /// it is not a run, and nothing lists or claims it.
    pub(super) row: RunRow,
    /// Its checkpoints, oldest first.
    pub(super) kept: Vec<Kept>,
    /// What the steps of its runs journaled, until a run of the thread completes or is
    /// cancelled (see [`Checkpoint::ends_run`]): a long-lived process would otherwise keep
    /// every model answer and tool result of every run twice, beside the checkpoints.
    pub(super) journal: HashMap<JournalKey, Value, foldhash::fast::RandomState>,
    /// How many rows the list holds before the next prune, past the retention's own bound
    /// (half as many again): a prune that kept more than that (what runs need) sets it, so
    /// that the rows it had to keep do not make every step prune again.
    pub(super) prune_past: usize,
}

impl ThreadSlot {
    /// Journals `value` under `key`, unless something is there already (the first write
    /// wins, as in the durable stores).
    /// Journals `value` under `key` unless the key has a value already (the first wins);
    /// says whether it was new.
    pub(super) fn journal(&mut self, key: JournalKey, value: Value) -> bool {
        match self.journal.entry(key) {
            std::collections::hash_map::Entry::Vacant(vacant) => {
                vacant.insert(value);
                true
            }
            std::collections::hash_map::Entry::Occupied(_) => false,
        }
    }

    /// Forgets the journal, for a thread whose run ended for good; its room goes back to
    /// the allocator. What the steps of its interrupted checkpoints journaled before they
    /// suspended stays: a fork of one replays it (a `ctx.step` is not done twice).
    pub(super) fn forget_journal(&mut self) {
        if self.journal.is_empty() {
            return;
        }
        let suspended: Vec<(u64, &str, u64)> =
            self.kept.iter().filter_map(Kept::suspended_in).collect();
        if suspended.is_empty() {
            self.journal = HashMap::default();
            return;
        }
        self.journal.retain(|key, _| {
            let step = (key.run, key.namespace.as_str(), key.step);
            suspended.contains(&step)
        });
    }

    /// Gives the room the list kept for more rows back to the allocator, for a thread whose
    /// run finished (it writes nothing more until it runs again): when there are at least
    /// [`SPARE_KEPT`] unused rows. A short run's few spare rows stay, which spares every
    /// such run a copy of its list.
    pub(super) fn settle(&mut self) {
        if self.kept.capacity() - self.kept.len() >= SPARE_KEPT {
            self.kept.shrink_to_fit();
        }
    }

    /// Keeps `checkpoint`, pruned to `retention` a batch at a time (past half as many
    /// again), so that a step costs no scan.
    #[inline(always)]
    pub(super) fn keep(&mut self, checkpoint: Kept, retention: Option<usize>) {
        if self.kept.capacity() == 0 {
            // Room for a short run's rows at once (its input, its steps, a suspension and
            // the steps after its resume), where the list would otherwise grow twice.
            self.kept.reserve_exact(FIRST_ROOM);
        }
        self.kept.push(checkpoint);
        if let Some(limit) = retention
            && self.kept.len() > (limit + limit / 2 + 1).max(self.prune_past)
        {
            prune(&mut self.kept, limit);
            self.prune_past = self.kept.len() + limit / 2 + 1;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::super::MemoryStore;
    use crate::runtime::store::{Checkpoint, Claim, RunFilter, RunStatus, Store, Submitted};

    fn input_checkpoint() -> Checkpoint {
        Checkpoint::new("t", 1, "", 0, RunStatus::Running, json!({"state": 1}))
    }

    /// A run of one row gives back the room for seven more; a run of five keeps its three.
    #[test]
    fn a_finished_list_gives_back_its_room_only_past_a_few_spare_rows() {
        let filled = |rows: u64| {
            let mut slot = super::ThreadSlot::default();
            for id in 1..=rows {
                slot.keep(super::Kept::new(input_checkpoint(), id), None);
            }
            slot.settle();
            slot.kept.capacity()
        };
        assert_eq!(filled(1), 1);
        assert_eq!(filled(5), super::FIRST_ROOM);
    }

    #[tokio::test]
    async fn a_thread_with_checkpoints_only_is_no_run_until_claimed() {
        let store = MemoryStore::new();
        store.put_checkpoint(input_checkpoint()).await.unwrap();
        assert_eq!(store.get_run("t").await.unwrap(), None);
        assert!(
            store
                .list_runs(&RunFilter::default())
                .await
                .unwrap()
                .is_empty()
        );

        let claimed = store.claim("t", "me", 2_000, 1_000).await.unwrap();
        assert!(matches!(claimed, Claim::Claimed));
        let cp = input_checkpoint();
        store.put_checkpoint_claimed(cp, "me", 2_000).await.unwrap();
        let run = store.get_run("t").await.unwrap().unwrap();
        assert_eq!(run.created_at_ms, 1_000, "created when first claimed");
        assert_eq!(store.list_checkpoints("t").await.unwrap().len(), 2);
    }

    #[tokio::test]
    async fn a_submit_keeps_the_threads_checkpoints() {
        let store = MemoryStore::new();
        store.put_checkpoint(input_checkpoint()).await.unwrap();
        let submitted = store.submit_run("t", "g", json!(1), 5).await.unwrap();
        assert!(matches!(submitted, Submitted::Queued));
        assert_eq!(store.list_checkpoints("t").await.unwrap().len(), 1);
        assert_eq!(store.get_run("t").await.unwrap().unwrap().created_at_ms, 5);
    }
}
