//! Time travel: starting a thread from a checkpoint of another (or of itself).

use std::sync::Arc;

use super::claim::RunClaim;
use super::store::{Checkpoint, JournalKey, RunState, RunStatus};
use super::{Result, Runtime, RuntimeError};

impl Runtime {
    /// Starts thread `new_thread` from checkpoint `checkpoint_id` of `thread` (time travel).
    ///
    /// The original thread is untouched. Carry on with
    /// [`CompiledGraph::recover`](crate::CompiledGraph::recover) (or `resume`, when the
    /// checkpoint was interrupted) on the new thread, which runs the source run's graph (its
    /// row names it, so a [`Worker`](crate::Worker) carries it on, and a changed graph is
    /// refused naming what changed, as on the original thread).
    ///
    /// A fork of a suspension is carried on as the original would be. It takes along the
    /// checkpoints of the subgraphs the run suspended inside, so that the fork's resume
    /// answers a subgraph's question. It takes along what the suspended step journaled
    /// before it suspended ([`Store::list_journal`](crate::runtime::Store::list_journal)):
    /// a sleep wakes and a wait times out when the original's do, and a `ctx.step` is not
    /// done twice. Not the signals the step's parked waits took once the original was
    /// carried on: the fork's parked waits take the signals sent to it. (What such a node
    /// journaled after its parked wait took the signal, a later wait's signal or a
    /// `ctx.step` included, is filed with the step all the same, and the fork's node replays
    /// it whatever signal it takes: a wait whose signal changes what the node does next
    /// should be asked with `ctx.interrupt`, whose answers file the calls after them apart.) Resume requests queued for `new_thread`
    /// ([`request_resume`](Self::request_resume)) are dropped unapplied: they were for the
    /// questions of the run the fork replaces.
    ///
    /// A fork from where a run was cancelled (the checkpoint a cancel writes) carries on
    /// from that position: suspended on its questions, or at the steps it was to run next.
    /// The cancel deleted what the run journaled: the fork's step does again what the
    /// original's had journaled.
    ///
    /// Any other position is a step's start: a fork from it runs that step afresh, its
    /// `ctx.step`s included, whatever the original run journaled in it before it crashed or
    /// failed there (a charge made again, say). To carry a crashed or failed run on without
    /// redoing what it journaled, `recover` it, not a fork of its newest checkpoint.
    ///
    /// Only a top-level checkpoint starts a thread: a subgraph's state is not the thread's.
    /// A fork never discards another run's work: `new_thread` must have no run, or a
    /// finished one (completed, failed or cancelled). A fork onto `thread` itself (going
    /// back on one thread) abandons that thread's run, suspended or stopped half-way (by a
    /// crash, a hand-back, or another fork not carried on yet), not a queued one.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::UnknownCheckpoint`] when `thread` has no such checkpoint;
    /// [`RuntimeError::SubgraphCheckpoint`] when the checkpoint is a subgraph's;
    /// [`RuntimeError::Busy`] when a run is executing on `new_thread`;
    /// [`RuntimeError::RunActive`] when `new_thread`'s run is queued, or (on another thread
    /// than `thread`) suspended or stopped half-way; a store failure.
    pub async fn fork(&self, thread: &str, checkpoint_id: u64, new_thread: &str) -> Result<()> {
        let checkpoint = self
            .inner
            .store
            .get_checkpoint(thread, checkpoint_id)
            .await?
            .ok_or_else(|| RuntimeError::UnknownCheckpoint {
                thread: thread.to_owned(),
                checkpoint: checkpoint_id,
            })?;
        if !checkpoint.namespace.is_empty() {
            return Err(RuntimeError::SubgraphCheckpoint {
                thread: thread.to_owned(),
                checkpoint: checkpoint_id,
                namespace: checkpoint.namespace,
            });
        }
        // Written under a claim, like every write of a run: never into a thread that is
        // executing, and the run number below stays right.
        let claim = self.claim_run(&Arc::from(new_thread), None).await?;
        match self
            .fork_claimed(&claim, thread, checkpoint, new_thread)
            .await
        {
            Ok(()) => {
                claim.release().await?;
                // The fork's run may wait for what is queued for the thread already.
                self.wake_if_waiting(new_thread).await;
                Ok(())
            }
            Err(error) => {
                // A run of `new_thread` it replaces is let go as it was (a suspended run
                // keeps its wake time), not made runnable at once.
                if let Err(release) = claim.release().await {
                    tracing::warn!(thread = new_thread, %release, "the thread was not let go after its fork failed; its lease runs out");
                }
                self.wake_if_waiting(new_thread).await;
                Err(error)
            }
        }
    }

    /// [`fork`](Self::fork)'s writes, under `claim` on `new_thread`.
    async fn fork_claimed(
        &self,
        claim: &RunClaim,
        thread: &str,
        mut checkpoint: Checkpoint,
        new_thread: &str,
    ) -> Result<()> {
        // Under the claim, nothing starts a run there meanwhile: a submit is refused. Going
        // back on one thread abandons the run that stands there (suspended, or stopped
        // half-way: a crash, a hand-back, another fork), not one queued.
        if let Some(record) = self.inner.store.get_run(new_thread).await?
            && !record.state.is_finished()
            && (new_thread != thread || record.state == RunState::Queued)
        {
            return Err(RuntimeError::RunActive {
                thread: new_thread.to_owned(),
                state: record.state,
            });
        }
        // A new run of `new_thread`: its journal keys must not meet those of earlier runs
        // there, or their recorded results would be replayed.
        let run = self
            .inner
            .store
            .latest_checkpoint(new_thread, "")
            .await?
            .map_or(1, |latest| latest.run + 1);
        // A cancel writes the run's last position again as cancelled: the fork carries on
        // from that position as it was (suspended on its questions, or between steps), not
        // as a run that nothing may carry on. (The cancel deleted the run's journal.)
        let cancelled = checkpoint.status == RunStatus::Cancelled;
        if cancelled {
            let asks = checkpoint.interrupts().is_ok_and(|asks| !asks.is_empty());
            checkpoint.status = match asks {
                true => RunStatus::Interrupted,
                false => RunStatus::Running,
            };
            checkpoint.error = None;
        }
        let described = checkpoint.graph_name().is_some();
        let interrupted = checkpoint.status == RunStatus::Interrupted;
        let all = match described && !interrupted {
            true => Vec::new(),
            false => self.inner.store.list_checkpoints(thread).await?,
        };
        if !described {
            describe(&mut checkpoint, &all);
        }
        // A run suspended inside a subgraph keeps the child's position in the child's own
        // checkpoints: they go along, or a resume of the fork would start the child afresh
        // and ask its question again, whatever the answer.
        if interrupted {
            // Where the children stood at the position: for a cancel's copy, at the one it
            // copied (a resume may have moved them on before the cancel).
            let position = match cancelled {
                true => copied_position(&all, &checkpoint),
                false => checkpoint.id,
            };
            let children = children_at(all, &checkpoint, position);
            // What the suspended step (and the subgraph steps it suspended in) journaled
            // before it suspended: the fork's step replays it, as the original's would (a
            // sleep keeps its wake time, a journaled step its result). Not the signals its
            // waits took once resumed: they came for the run the fork leaves behind.
            let received = received_after(&checkpoint, &children);
            let journal = self
                .inner
                .store
                .list_journal(thread, checkpoint.run)
                .await?;
            for (mut key, value) in journal {
                if !suspended_in(&key, &checkpoint, &children)
                    || received.iter().any(|wait| wait.took(&key))
                {
                    continue;
                }
                new_thread.clone_into(&mut key.thread);
                key.run = run;
                claim.put_journal_audited(key, value, Vec::new()).await?;
            }
            for mut child in children {
                child.id = 0;
                child.thread = new_thread.to_owned();
                child.run = run;
                claim.put_checkpoint(child).await?;
            }
        }
        checkpoint.id = 0;
        checkpoint.thread = new_thread.to_owned();
        checkpoint.run = run;
        let asked = claim.put_checkpoint(checkpoint).await?;
        // Resume requests queued for `new_thread` were for the questions of the run the fork
        // replaced: none is left over to answer the fork's. Dropped once the fork is written
        // (under the claim, nothing applies them meanwhile): a fork that failed part way
        // leaves the run it did not replace its answers. One sent since for the fork's own
        // question (checked against its checkpoint, and taken) stays.
        self.drop_resume_requests_but_for(new_thread, asked, "its run was replaced by a fork")
            .await
    }
}

/// Gives `checkpoint` its run's graph name, and its description when the run kept the
/// structure it started with, from the run's first top-level checkpoint among `all`, its
/// thread's checkpoints: the executor writes them there only, and a fork starts a run whose
/// first checkpoint is `checkpoint`. A run carried on with a changed graph (edges declared
/// in another order, or `allow_graph_change`) is still its graph's: its row must name it.
///
/// A run carried on with a changed graph describes it again at the first checkpoint after
/// the change: the description is the newest of the run's, up to `checkpoint`, of its
/// structure.
fn describe(checkpoint: &mut Checkpoint, all: &[Checkpoint]) {
    let described = |cp: &&Checkpoint| {
        cp.run == checkpoint.run && cp.namespace.is_empty() && cp.graph_name().is_some()
    };
    let first = all.iter().find(described);
    let description = all
        .iter()
        .filter(described)
        .filter(|cp| cp.id <= checkpoint.id && cp.fingerprint() == checkpoint.fingerprint())
        .filter_map(|cp| cp.body.get("graph_description"))
        .next_back();
    let (Some(first), Some(body)) = (first, checkpoint.body.as_object_mut()) else {
        return;
    };
    if let Some(name) = first.body.get("graph_name") {
        body.insert("graph_name".to_owned(), name.clone());
    }
    if let Some(description) = description {
        body.insert("graph_description".to_owned(), description.clone());
    }
}

/// Whether `key` was journaled by a node of the step `parent` (an interrupted top-level
/// checkpoint) suspended in, or of the step one of its `children` suspended in. Not the
/// resume requests journaled at `parent` (no node): they were the original's.
fn suspended_in(key: &JournalKey, parent: &Checkpoint, children: &[Checkpoint]) -> bool {
    let in_step = |cp: &Checkpoint| key.namespace == cp.namespace && key.step == cp.step + 1;
    !key.node.is_empty() && (in_step(parent) || children.iter().any(in_step))
}

/// A wait for a signal a suspended step parked on: the `occurrence`th receipt of `name` by
/// `node` in the step after `step` of `namespace` (`node#signal:name#occurrence`).
struct ParkedWait {
    namespace: String,
    step: u64,
    node: String,
    name: String,
    occurrence: u32,
}

impl ParkedWait {
    /// Whether `key` is a receipt of that signal, or of a later one of its name, by that
    /// node in that step: taken once the run was carried on, as the node parked for want of
    /// it.
    fn took(&self, key: &JournalKey) -> bool {
        key.namespace == self.namespace
            && key.step == self.step + 1
            && key.node == self.node
            && key.occurrence >= self.occurrence
            && key.name.strip_prefix("signal:") == Some(&*self.name)
    }
}

/// The waits for a signal `parent` (an interrupted top-level checkpoint) and its suspended
/// `children` parked on.
fn received_after(parent: &Checkpoint, children: &[Checkpoint]) -> Vec<ParkedWait> {
    let mut waits = Vec::new();
    for cp in std::iter::once(parent).chain(children) {
        for interrupt in cp.interrupts().unwrap_or_default() {
            let Some(name) = interrupt.signal else {
                continue;
            };
            // `…#signal:name`, or `…#signal:name#k` for the node's wait after k others.
            let marker = format!("#signal:{name}");
            let Some(at) = interrupt.id.rfind(&marker) else {
                continue;
            };
            let rest = &interrupt.id[at + marker.len()..];
            let occurrence = match rest.strip_prefix('#') {
                Some(k) => k.parse().unwrap_or(0),
                None => 0,
            };
            waits.push(ParkedWait {
                namespace: cp.namespace.clone(),
                step: cp.step,
                node: interrupt.node,
                name,
                occurrence,
            });
        }
    }
    waits
}

/// The id of the checkpoint `cancelled` (a cancel's copy) copied: the newest top-level one
/// of its run before it that is not a cancel's.
fn copied_position(all: &[Checkpoint], cancelled: &Checkpoint) -> u64 {
    all.iter()
        .filter(|cp| cp.namespace.is_empty() && cp.run == cancelled.run)
        .filter(|cp| cp.id < cancelled.id && cp.status != RunStatus::Cancelled)
        .map(|cp| cp.id)
        .max()
        .unwrap_or(cancelled.id)
}

/// The newest checkpoint of each subgraph namespace of `parent`'s run among `all`, its
/// thread's checkpoints, written before `position` (`parent`'s id, or the one it copied):
/// where its children stood then. Oldest first, the order the run wrote them (a nested
/// subgraph's before its parent's), which the fork keeps: a resume takes a child checkpoint
/// newer than where its parent stood for a new question.
fn children_at(all: Vec<Checkpoint>, parent: &Checkpoint, position: u64) -> Vec<Checkpoint> {
    let mut newest: Vec<Checkpoint> = Vec::new();
    let children = all
        .into_iter()
        .filter(|cp| !cp.namespace.is_empty() && cp.run == parent.run && cp.id < position);
    for cp in children {
        match newest
            .iter_mut()
            .find(|kept| kept.namespace == cp.namespace)
        {
            Some(kept) if kept.id < cp.id => *kept = cp,
            Some(_) => {}
            None => newest.push(cp),
        }
    }
    newest.sort_by_key(|cp| cp.id);
    newest
}
