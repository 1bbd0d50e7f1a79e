//! A thread's run row in the memory store.

use std::sync::Arc;

use serde_json::Value;

use crate::runtime::owner::OwnerId;
use crate::runtime::store::runs::{RESUME_SIGNAL, waiting_on};
use crate::runtime::store::unserialized::Unserialized;
use crate::runtime::store::{Checkpoint, Claim, RowUpdate, RunRecord, RunState, RunStatus};

/// A thread's current run, as the SQLite store's `runs` table keeps it.
#[derive(Debug, Default)]
pub(super) struct RunRow {
    pub(super) run: u64,
    /// `None` until the run's first checkpoint (or submit): claimed, never written.
    pub(super) state: Option<RunState>,
    /// The graph's name and fingerprint: shared with the compiled graph when they come
    /// from a snapshot kept as values.
    pub(super) graph: Option<Arc<str>>,
    pub(super) fingerprint: Option<Arc<str>>,
    /// The signals it waits for, besides a resume request when it is interrupted (see
    /// [`resumable`](Self::resumable)).
    pub(super) waiting_on: Vec<String>,
    pub(super) wake_at_ms: Option<u64>,
    pub(super) runnable_at_ms: Option<u64>,
    /// Who holds it: the claim's own id when that claim was taken in line, which shares
    /// its runtime's id with it.
    pub(super) owner: Option<OwnerId>,
    pub(super) until_ms: u64,
    /// How long the holder's leases last (`until_ms` less the time it was taken): a write
    /// that extends the lease to `until_ms` was made at `until_ms - lease_ms`.
    pub(super) lease_ms: u64,
    pub(super) attempts: u64,
    /// See [`RunRecord::lapses`].
    pub(super) lapses: u64,
    pub(super) cancel_requested: bool,
    pub(super) error: Option<String>,
    pub(super) input: Option<Value>,
    pub(super) created_at_ms: u64,
    pub(super) updated_at_ms: u64,
}

impl RunRow {
    pub(super) fn record(&self, thread: &str) -> Option<RunRecord> {
        Some(self.record_in(thread, self.state?))
    }

    /// The row as a submit it refuses reports it: a run an execution claimed and has not
    /// written to yet is running.
    pub(super) fn active_record(&self, thread: &str) -> RunRecord {
        self.record_in(thread, self.state.unwrap_or(RunState::Running))
    }

    fn record_in(&self, thread: &str, state: RunState) -> RunRecord {
        RunRecord {
            thread: thread.to_owned(),
            run: self.run,
            graph: self.graph.as_deref().map(str::to_owned),
            fingerprint: self.fingerprint.as_deref().map(str::to_owned),
            state,
            waiting_on: waiting_on(self.waiting_on.clone(), self.resumable()),
            wake_at_ms: self.wake_at_ms,
            lease_owner: self.owner.as_ref().map(OwnerId::to_string),
            lease_until_ms: self.until_ms,
            attempts: self.attempts,
            lapses: self.lapses,
            cancel_requested: self.cancel_requested,
            error: self.error.clone(),
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
        }
    }

    /// Takes the run for `owner` until `lease_until_ms`, unless another execution holds it
    /// at `now_ms`; a new holder counts an attempt.
    pub(super) fn claim(&mut self, owner: impl Holder, lease_until_ms: u64, now_ms: u64) -> Claim {
        match &self.owner {
            Some(holder) if !owner.holds(holder) && self.until_ms > now_ms => Claim::Busy {
                owner: holder.to_string(),
                until_ms: self.until_ms,
            },
            holder => {
                match holder {
                    Some(holder) if owner.holds(holder) => {}
                    // Its lease ran out while another held it.
                    Some(_) => (self.attempts, self.lapses) = (self.attempts + 1, self.lapses + 1),
                    None => self.attempts += 1,
                }
                self.owner = Some(owner.to_id());
                self.until_ms = lease_until_ms;
                self.lease_ms = lease_until_ms.saturating_sub(now_ms);
                self.updated_at_ms = now_ms;
                self.mark_in_flight();
                Claim::Claimed
            }
        }
    }

    /// Whether `owner` holds it. An execution that claimed in line shares its runtime's id
    /// with the row, so the common case compares a pointer and a number.
    #[inline]
    pub(super) fn held_by(&self, owner: impl Holder) -> bool {
        self.owner.as_ref().is_some_and(|held| owner.holds(held))
    }

    /// Whether it is a run that has not finished: held by an execution, or queued, running
    /// or suspended. The row of a thread with checkpoints only (a fork's) is no run.
    pub(super) fn is_unfinished(&self) -> bool {
        self.owner.is_some() || self.state.is_some_and(|state| !state.is_finished())
    }

    /// Whether no execution holds it at `now_ms`.
    pub(super) fn is_free(&self, now_ms: u64) -> bool {
        self.owner.is_none() || self.until_ms <= now_ms
    }

    /// Follows a top-level checkpoint written at `now_ms`, taking the waits the executor
    /// worked out for it (the store keeps no copy).
    pub(super) fn follow(&mut self, checkpoint: &mut Checkpoint, now_ms: u64) {
        if checkpoint.status == RunStatus::Running && checkpoint.error.is_none() {
            self.follow_step(checkpoint, now_ms);
            return;
        }
        let update = match checkpoint.waits.take() {
            // As the executor worked it out: the row keeps its signals as they are.
            Some(waits) if checkpoint.status == RunStatus::Interrupted => RowUpdate {
                state: waits.state,
                waiting_on: waits.signals,
                wake_at_ms: waits.wake_at_ms,
                graph: None,
                fingerprint: None,
                error: None,
            },
            waits => {
                let mut update = RowUpdate::state_with(checkpoint, waits.map(|w| *w));
                // Listed again when the row is read, from its state.
                update.waiting_on.retain(|signal| signal != RESUME_SIGNAL);
                update
            }
        };
        self.forget_earlier_cancel(checkpoint.run);
        self.run = checkpoint.run;
        self.runnable_at_ms = update.runnable_at_ms();
        self.state = Some(update.state);
        self.waiting_on = update.waiting_on;
        self.wake_at_ms = update.wake_at_ms;
        self.follow_names(checkpoint);
        self.error.clone_from(&checkpoint.error);
        self.input = None;
        if update.state.is_finished() {
            self.cancel_requested = false;
        }
        self.updated_at_ms = now_ms;
    }

    /// Follows a plain step's checkpoint: the run goes on.
    fn follow_step(&mut self, checkpoint: &Checkpoint, now_ms: u64) {
        self.forget_earlier_cancel(checkpoint.run);
        self.run = checkpoint.run;
        self.runnable_at_ms = Some(0);
        self.state = Some(RunState::Running);
        self.waiting_on.clear();
        self.wake_at_ms = None;
        self.follow_names(checkpoint);
        self.error = None;
        self.input = None;
        self.updated_at_ms = now_ms;
    }

    /// A request to stop the row's run is not a request to stop a later `run`, which a
    /// checkpoint of it now makes the row's. One made while the row was queued is for the
    /// run it queued, which is `run` (the row still has the number of the run before).
    fn forget_earlier_cancel(&mut self, run: u64) {
        if run != self.run && self.state != Some(RunState::Queued) {
            self.cancel_requested = false;
        }
    }

    /// Takes the graph's name and fingerprint from `checkpoint` when it says them, copying
    /// only what changed, and nothing when the checkpoint is a snapshot kept as values,
    /// whose names are shared.
    fn follow_names(&mut self, checkpoint: &Checkpoint) {
        if let Some(Unserialized(kept)) = &checkpoint.unserialized {
            follow_shared(&mut self.graph, kept.graph_name());
            follow_shared(&mut self.fingerprint, Some(kept.fingerprint()));
        } else {
            follow_name(&mut self.graph, checkpoint.graph_name(), Arc::from);
            follow_name(&mut self.fingerprint, checkpoint.fingerprint(), Arc::from);
        }
    }

    /// Whether a resume request (which comes as [`RESUME_SIGNAL`]) carries the run on: it is
    /// interrupted for a value.
    pub(super) fn resumable(&self) -> bool {
        self.state == Some(RunState::Interrupted)
    }

    /// Whether the run is suspended on the signal `name` (waiting, or interrupted: a resume
    /// request comes as a signal).
    pub(super) fn waits_for(&self, name: &str) -> bool {
        matches!(self.state, Some(RunState::Waiting | RunState::Interrupted))
            && ((self.resumable() && name == RESUME_SIGNAL)
                || self.waiting_on.iter().any(|waited| waited == name))
    }

    pub(super) fn in_graphs(&self, graphs: &[String]) -> bool {
        self.graph
            .as_deref()
            .is_some_and(|g| graphs.iter().any(|wanted| wanted == g))
    }

    /// Takes the lease for `owner`, counting an attempt.
    pub(super) fn take_lease(&mut self, owner: &str, until_ms: u64, now_ms: u64) {
        // Held still (the caller found its lease run out): a lapse.
        if self.owner.is_some() {
            self.lapses += 1;
        }
        self.owner = Some(OwnerId::from_text(Arc::from(owner)));
        self.until_ms = until_ms;
        self.lease_ms = until_ms.saturating_sub(now_ms);
        self.attempts += 1;
        self.updated_at_ms = now_ms;
        self.mark_in_flight();
    }

    /// A suspended run being carried on is runnable at once should its execution die (once
    /// its lease runs out), whatever woke it.
    pub(super) fn mark_in_flight(&mut self) {
        if matches!(
            self.state,
            Some(RunState::Waiting | RunState::Sleeping | RunState::Interrupted)
        ) {
            self.runnable_at_ms = Some(0);
        }
    }

    /// Lets the run go: a suspended run let go without a new checkpoint is runnable again
    /// only at its wake time, unless its execution stopped half way (`runnable`: see
    /// [`Store::release_runnable`](crate::runtime::Store::release_runnable)): then at once,
    /// whatever the clock of the worker that looks (0, as a claim marks it).
    pub(super) fn let_go(&mut self, runnable: bool) {
        self.owner = None;
        self.until_ms = 0;
        self.lapses = 0;
        match self.state {
            Some(RunState::Waiting | RunState::Sleeping | RunState::Interrupted) if runnable => {
                self.runnable_at_ms = Some(0);
            }
            Some(RunState::Waiting | RunState::Sleeping | RunState::Interrupted) => {
                self.runnable_at_ms = self.wake_at_ms;
            }
            _ => {}
        }
    }
}

/// The owner a write under a claim names: as text (a call through the `Store` API), or as
/// the claim's own id (a call the executor makes in line), which is kept and compared
/// without being written out.
pub(crate) trait Holder: Copy {
    /// Whether it is `held`, the owner a row keeps.
    fn holds(&self, held: &OwnerId) -> bool;
    /// The id for a row to keep.
    fn to_id(&self) -> OwnerId;
    /// The id as text, for an error to name.
    fn text(&self) -> String;
}

impl Holder for &str {
    fn holds(&self, held: &OwnerId) -> bool {
        held.is_text(self)
    }

    fn to_id(&self) -> OwnerId {
        OwnerId::from_text(Arc::from(*self))
    }

    fn text(&self) -> String {
        (*self).to_owned()
    }
}

impl Holder for &OwnerId {
    #[inline(always)]
    fn holds(&self, held: &OwnerId) -> bool {
        held.is(self)
    }

    fn to_id(&self) -> OwnerId {
        (*self).clone()
    }

    fn text(&self) -> String {
        self.to_string()
    }
}

/// Sets `kept` to the shared `name` when it says one, unless `kept` is that one already:
/// every step of a run hands over the same name, and a pointer compared costs no scan of it.
fn follow_shared(kept: &mut Option<Arc<str>>, name: Option<&Arc<str>>) {
    if let Some(name) = name
        && !kept.as_ref().is_some_and(|kept| Arc::ptr_eq(kept, name))
    {
        *kept = Some(Arc::clone(name));
    }
}

/// Sets `kept` to `name` when `name` says one that differs; `share` makes the copy.
fn follow_name<'a, N: AsRef<str> + ?Sized>(
    kept: &mut Option<Arc<str>>,
    name: Option<&'a N>,
    share: impl FnOnce(&'a N) -> Arc<str>,
) {
    if let Some(name) = name
        && kept.as_deref() != Some(name.as_ref())
    {
        *kept = Some(share(name));
    }
}
