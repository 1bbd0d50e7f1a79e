//! The writes every `MemoryStore` operation is made of: choosing and claiming a run, fencing
//! a claim, filing a checkpoint (pruned to the retention), taking a signal.

use std::sync::Arc;

use super::super::audit::signal_received;
use serde_json::Value;

use super::super::{
    AuditEntry, Checkpoint, ClaimedRun, JournalKey, RunState, StoreError, StoredSignal,
};
use super::audit_log::AuditLog;
use super::kept::Kept;
use super::run_row::{Holder, RunRow};
use super::slot::ThreadSlot;
use super::threads::NO_PLACE;
use super::{Inner, SharedName};
use crate::runtime::clock::now_ms;

impl Inner {
    /// The run of `graphs` a worker should claim next: free, and due by `due_ms` or sent a
    /// signal it waits for; the longest due first.
    pub(super) fn next_runnable(
        &self,
        graphs: &[String],
        now_ms: u64,
        due_ms: u64,
    ) -> Option<Arc<str>> {
        // A signalled run is runnable since its oldest awaited signal was sent.
        let signalled = |row: &RunRow, thread: &str| {
            if !matches!(row.state, Some(RunState::Waiting | RunState::Interrupted)) {
                return None;
            }
            let signals = self.signals.values();
            signals
                .filter(|s| s.session == thread && row.waits_for(&s.name))
                .map(|s| s.sent_at_ms)
                .min()
        };
        // Runnable at once (0): a queued run since it was queued, a running one whose lease
        // ran out before anything else (a queued one claimed before included: it wrote
        // nothing); a timer since it came due.
        let due = |row: &RunRow| {
            let at = row.runnable_at_ms.filter(|&at| at <= due_ms)?;
            Some(match (at, row.state) {
                (0, Some(RunState::Queued)) if row.attempts == 0 => row.updated_at_ms,
                (at, _) => at,
            })
        };
        let chosen = self
            .threads
            .iter()
            .map(|(thread, slot)| (thread, &slot.row))
            .filter(|(_, row)| row.in_graphs(graphs) && row.is_free(now_ms))
            .filter_map(|(thread, row)| {
                // The earlier of its timer and its signal, as the SQL stores take it; ties
                // (runs recovering, all runnable since 0) by when the row last changed.
                let since = match (due(row), signalled(row, thread)) {
                    (Some(due), Some(sent)) => due.min(sent),
                    (due, sent) => due.or(sent)?,
                };
                Some((since, row.updated_at_ms, thread.clone()))
            })
            .min();
        chosen.map(|(_, _, thread)| thread)
    }

    /// Claims `thread`'s row for `owner` (which the caller found runnable).
    pub(super) fn claim_row(
        &mut self,
        thread: &str,
        owner: &str,
        lease_until_ms: u64,
        now_ms: u64,
    ) -> Option<ClaimedRun> {
        let row = &mut self.threads.get_mut(thread)?.row;
        row.take_lease(owner, lease_until_ms, now_ms);
        Some(ClaimedRun {
            record: row.record(thread)?,
            input: row.input.clone(),
        })
    }

    /// Checks that `owner` holds `thread` and extends its lease: the first half of every
    /// write under a claim.
    pub(super) fn fence(
        &mut self,
        thread: &str,
        owner: impl Holder,
        until_ms: u64,
    ) -> Result<(), StoreError> {
        self.fenced((thread, NO_PLACE), owner, until_ms).map(drop)
    }

    /// [`fence`](Self::fence) for a write that records progress (a journal entry): the run's
    /// lapses start again from 0.
    pub(super) fn fence_writing(
        &mut self,
        thread: &str,
        owner: impl Holder,
        until_ms: u64,
    ) -> Result<(), StoreError> {
        let fenced = self.fenced((thread, NO_PLACE), owner, until_ms)?;
        fenced.slot.row.lapses = 0;
        Ok(())
    }

    /// [`fence`](Self::fence) of `thread`, found from its place if it is there, handing back
    /// its slot for the rest of the write, with what filing a checkpoint in it takes.
    pub(super) fn fenced(
        &mut self,
        (thread, place): (&str, usize),
        owner: impl Holder,
        until_ms: u64,
    ) -> Result<Fenced<'_>, StoreError> {
        let Self {
            threads,
            next_id,
            audit,
            ..
        } = self;
        match threads.at_mut(place, thread) {
            Some(slot) if slot.row.held_by(owner) => {
                let row = &mut slot.row;
                row.until_ms = until_ms;
                // A write under the claim changes the row as of the time its lease runs
                // from (no clock read); a write that lets go (0) stamps it itself.
                let written_at = until_ms.saturating_sub(row.lease_ms);
                row.updated_at_ms = row.updated_at_ms.max(written_at);
                Ok(Fenced {
                    slot,
                    next_id,
                    audit,
                })
            }
            _ => Err(StoreError::LeaseLost {
                thread: thread.to_owned(),
                owner: owner.text(),
            }),
        }
    }

    /// Files `checkpoint` under `thread` (its own `thread` is not read), outside any claim.
    pub(super) fn insert_checkpoint(
        &mut self,
        thread: impl SharedName,
        checkpoint: Checkpoint,
        retention: Option<usize>,
    ) -> u64 {
        // The thread's name is copied only for a thread the store does not know yet.
        let slot = self.threads.slot(thread);
        file(
            slot,
            &mut self.next_id,
            &mut self.audit,
            (checkpoint, &thread, 0),
            retention,
        )
    }

    /// Journals `value` under `key`, in its thread's slot (see [`ThreadSlot::journal`]).
    pub(super) fn journal(&mut self, key: JournalKey, value: Value) {
        let slot = self.threads.slot(key.thread.as_str());
        slot.journal(key, value);
    }

    /// What is journaled under `key`, if anything.
    pub(super) fn journaled(&self, key: &JournalKey) -> Option<&Value> {
        self.threads.get(key.thread.as_str())?.journal.get(key)
    }

    /// Removes a pending signal, auditing its receipt by `run` (0 outside one); says
    /// whether it was there.
    pub(super) fn take(&mut self, session: &str, seq: u64, run: u64) -> bool {
        let Some(signal) = self.remove_signal(session, seq) else {
            return false;
        };
        let received = signal_received(session, &signal.name, seq, run);
        self.audit.append([received]);
        true
    }

    /// Removes a pending signal of `session`, if it is there (its idempotency key, if any,
    /// stays remembered for a while: see [`SignalKeys`](super::keys::SignalKeys)).
    pub(super) fn remove_signal(&mut self, session: &str, seq: u64) -> Option<StoredSignal> {
        if self.signals.get(&seq).is_none_or(|s| s.session != session) {
            return None;
        }
        let signal = self.signals.remove(&seq)?;
        if signal.idempotency_key.is_some() {
            self.keys.released(&signal, now_ms());
        }
        Some(signal)
    }
}

impl Inner {
    /// Drops the pending signals sent before `sent_before_ms` to sessions with no unfinished
    /// run, but those of `spare` (see
    /// [`Store::prune_signals`](crate::runtime::Store::prune_signals)); their idempotency
    /// keys stay remembered for a while, as those of signals received. Returns how many.
    pub(super) fn prune_signals(&mut self, sent_before_ms: u64, spare: &[String]) -> u64 {
        let Self {
            signals,
            threads,
            keys,
            ..
        } = self;
        let before = signals.len();
        let now_ms = now_ms();
        signals.retain(|_, signal| {
            let kept = signal.sent_at_ms >= sent_before_ms
                || spare.contains(&signal.session)
                || threads
                    .get(signal.session.as_str())
                    .is_some_and(|slot| slot.row.is_unfinished());
            if !kept {
                keys.released(signal, now_ms);
            }
            kept
        });
        (before - signals.len()) as u64
    }
}

/// A thread's slot, fenced for a write under its claim.
pub(super) struct Fenced<'a> {
    pub(super) slot: &'a mut ThreadSlot,
    next_id: &'a mut u64,
    audit: &'a mut AuditLog,
}

impl Fenced<'_> {
    /// Files `thread`'s `checkpoint`, written at `now_ms`, in the slot (its own `thread` is
    /// not read: the executor's checkpoints leave it to the claim they are written under,
    /// as they leave their audit entries' thread and time).
    #[inline]
    pub(super) fn file(
        &mut self,
        (thread, now_ms): (impl SharedName, u64),
        checkpoint: Checkpoint,
        retention: Option<usize>,
    ) -> u64 {
        let at = (checkpoint, &thread, now_ms);
        file(self.slot, self.next_id, self.audit, at, retention)
    }

    /// Journals `value` under `key` in the slot, with `audit`, the entries that travel with
    /// it (those that name no thread are `thread`'s, when it is given).
    pub(super) fn journal(
        &mut self,
        (key, value): (JournalKey, Value),
        audit: Vec<AuditEntry>,
        thread: Option<&Arc<str>>,
    ) {
        // A key that has a value already keeps it, and the entries that describe it: a
        // write repeated (an acknowledgement lost) adds none again.
        if self.slot.journal(key, value) && !audit.is_empty() {
            self.audit.append_for(audit, thread, 0);
        }
    }
}

/// Files `checkpoint` of `thread`, written at `now_ms` (0: not known), in `slot` under the
/// next id, its audit entries in `audit` (those that name no thread are `thread`'s, those
/// that say no time happened at the write).
///
/// Always inlined, with the row it keeps: a step's write is this and a fence, and a call
/// here costs the spills of the checkpoint moved in.
#[inline(always)]
fn file(
    slot: &mut ThreadSlot,
    next_id: &mut u64,
    audit: &mut AuditLog,
    (mut checkpoint, thread, now_ms): (Checkpoint, &impl SharedName, u64),
    retention: Option<usize>,
) -> u64 {
    *next_id += 1;
    let id = *next_id;
    if !checkpoint.audit.is_empty() {
        let entries = std::mem::take(&mut checkpoint.audit);
        let unnamed = entries.iter().any(|entry| entry.thread.is_empty());
        let thread = unnamed.then(|| thread.to_key());
        audit.append_for(entries, thread.as_ref(), now_ms);
    }
    if checkpoint.ends_run() {
        slot.forget_journal();
    }
    slot.keep(Kept::new(checkpoint, id), retention);
    id
}
