//! Runs as rows: submitting work for a worker, looking runs up, cancelling them; and the
//! wake-ups that tell this process's workers that something changed.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use super::claim::RunClaim;
use super::clock::now_ms;
use super::store::runs::RESUME_SIGNAL;
use super::store::{Interrupt, RunFilter, RunRecord, RunState, RunStatus, Submitted};
use super::{Runtime, RuntimeError};

type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// One run, as [`Runtime::run`] shows it: its row, and where its newest checkpoint stands.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RunInfo {
    /// The run's row: state, graph, what it waits for, lease, attempts, times.
    pub record: RunRecord,
    /// What a suspended run waits on: signal waits (with their deadlines), timers, and
    /// interrupts for a person, among them tool calls awaiting approval (their payload
    /// carries the exact call and arguments).
    pub interrupts: Vec<Interrupt>,
    /// The state in the run's newest top-level checkpoint (`null` before the first).
    pub state: Value,
}

impl Runtime {
    /// Tells the workers about `thread`, which has just let go of a run suspended on
    /// `interrupts`, if what the run waits for is queued here already: a signal or a resume
    /// request that came while the run was still held (a sibling node finishing its step)
    /// found nothing to wake. A store that keeps signals finds them itself; the memory
    /// store has only the mailbox.
    pub(crate) fn wake_if_queued(&self, thread: &str, interrupts: &[Interrupt]) {
        if !self.wakes().listened() {
            return;
        }
        let queued = |name: &str| self.mailbox().queued(thread, name) > 0;
        let arrived = interrupts
            .iter()
            .find_map(|i| match (&i.signal, i.wake_at_ms) {
                (Some(signal), _) => queued(signal).then_some(signal.as_str()),
                (None, None) => queued(RESUME_SIGNAL).then_some(RESUME_SIGNAL),
                (None, Some(_)) => None,
            });
        if let Some(name) = arrived {
            self.wakes().wake(Some((thread, name)));
        }
    }

    /// As [`wake_if_queued`](Self::wake_if_queued), for a run let go as it was suspended
    /// before (a resume request refused, a direct resume whose step failed): what it waits
    /// for, as its row lists it, may have come while it was held. In this process's mailbox:
    /// a durable store's claims find the signals stored, and only a resume request sent
    /// here is looked for (the row is not read again).
    pub(crate) async fn wake_if_waiting(&self, thread: &str) {
        if !self.wakes().listened() {
            return;
        }
        if self.store().is_durable() {
            if self.mailbox().queued(thread, RESUME_SIGNAL) > 0 {
                self.wakes().wake(Some((thread, RESUME_SIGNAL)));
            }
            return;
        }
        let row = match self.store().get_run(thread).await {
            Ok(row) => row,
            Err(error) => {
                tracing::warn!(%thread, %error, "could not read a run let go, to wake it");
                return;
            }
        };
        let waiting_on = row.map(|row| row.waiting_on).unwrap_or_default();
        let queued = |name: &&String| self.mailbox().queued(thread, name) > 0;
        if let Some(name) = waiting_on.iter().find(queued) {
            self.wakes().wake(Some((thread, name)));
        }
    }

    /// The suspended runs of the graphs named whose awaited signal is queued in this
    /// process's mailbox, each with the name of one such signal, when the store keeps no
    /// signals (the memory store): the runs signalled while no worker listened, which the
    /// store's claims cannot find. Nothing on a durable store, whose claims find them.
    ///
    /// # Errors
    ///
    /// A store failure.
    pub(crate) async fn signalled_in_mailbox(
        &self,
        graphs: &[String],
    ) -> Result<Vec<super::wakes::Signalled>> {
        if self.store().is_durable() {
            return Ok(Vec::new());
        }
        let mut found = Vec::new();
        for state in [RunState::Waiting, RunState::Interrupted] {
            let suspended = self
                .store()
                .list_runs(&RunFilter::new().state(state))
                .await?;
            for record in suspended {
                if !record.graph.as_ref().is_some_and(|g| graphs.contains(g)) {
                    continue;
                }
                let queued = |name: &&String| self.mailbox().queued(&record.thread, name) > 0;
                if let Some(name) = record.waiting_on.iter().find(queued) {
                    found.push((record.thread.clone(), name.clone()));
                }
            }
        }
        Ok(found)
    }

    /// Whether an execution in this process holds `thread`'s run: a run that has written
    /// nothing yet (with [`Durability::Exit`](crate::Durability::Exit), until it ends) has
    /// no row in the store (or the row of the run before it), and is executing all the same.
    pub(crate) fn executes_here(&self, thread: &str) -> bool {
        self.inner.live_claims.executing(thread)
    }

    /// Whether `lease_owner` is an execution of this runtime that no longer executes
    /// `thread`: it let the run go (its stream dropped, its timeout passed), and its release
    /// may still be on its way to the store.
    pub(crate) fn let_go_here(&self, thread: &str, lease_owner: &str) -> bool {
        let ours = (lease_owner.strip_prefix(&*self.inner.owner))
            .is_some_and(|execution| execution.starts_with('#'));
        ours && !self.executes_here(thread)
    }

    pub(crate) fn wakes(&self) -> &super::wakes::Wakes {
        &self.inner.wakes
    }

    /// Queues a run of the graph registered as `graph` on `thread`, starting from `input`,
    /// for a [`Worker`](crate::Worker) to start: one in this process, or in any process on
    /// the same store.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::EmptyThread`] for a blank thread name;
    /// [`RuntimeError::RunActive`] when the thread's current run has not finished;
    /// [`RuntimeError::Busy`] when it has, but an execution holds the thread for a moment (a
    /// fork onto it, say): try again; an `input` that does not serialize; a store failure.
    /// A thread that never had a run, held by an execution that has written nothing yet,
    /// says `RunActive` with [`RunState::Running`]: the store cannot tell a fork or a delete
    /// there, which lets go at once, from a direct run that writes nothing until it ends
    /// ([`Durability::Exit`](crate::Durability::Exit)).
    ///
    /// # Examples
    ///
    /// ```
    /// use loomflow::prelude::*;
    /// use loomflow::runtime::RunState;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
    /// let runtime = Runtime::in_memory();
    /// runtime.submit("refund", "order-7", json!({"amount": 40})).await?;
    /// assert_eq!(runtime.run("order-7").await?.record.state, RunState::Queued);
    /// # Ok(()) }
    /// ```
    pub async fn submit(&self, graph: &str, thread: &str, input: impl Serialize) -> Result<()> {
        if thread.trim().is_empty() {
            return Err(RuntimeError::EmptyThread);
        }
        let input = serde_json::to_value(input)
            .map_err(|e| RuntimeError::json(format!("input of a run of graph {graph}"), e))?;
        match self
            .store()
            .submit_run(thread, graph, input, now_ms())
            .await?
        {
            // A finished run still held (a fork onto the thread, a recover of the finished
            // run, a fresh run before its first write): a short claim, not a run to wait
            // for, and one to try again after.
            Submitted::Active(record) if record.state.is_finished() => Err(RuntimeError::Busy {
                thread: thread.to_owned(),
                owner: record.lease_owner.unwrap_or_default(),
                until: std::time::UNIX_EPOCH
                    + std::time::Duration::from_millis(record.lease_until_ms),
            }),
            Submitted::Active(record) => Err(RuntimeError::RunActive {
                thread: thread.to_owned(),
                state: record.state,
            }),
            _ => {
                self.wakes().wake(None);
                Ok(())
            }
        }
    }

    /// The runs `filter` selects, most recently updated first.
    ///
    /// # Errors
    ///
    /// A store failure.
    pub async fn runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>> {
        Ok(self.store().list_runs(filter).await?)
    }

    /// One thread's current run: its row, what it waits on (nothing once it has ended), and
    /// its state.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::UnknownRun`] when the thread never ran; a store failure.
    pub async fn run(&self, thread: &str) -> Result<RunInfo> {
        let record = self.run_row(thread).await?;
        let latest = self.store().latest_checkpoint(thread, "").await?;
        let (interrupts, state) = match latest {
            Some(cp) if cp.run == record.run && record.state != RunState::Queued => {
                // A run that ended (failed in a worker over its interrupted checkpoint, say)
                // waits for nothing, whatever its newest checkpoint asked.
                let waits = cp.status == RunStatus::Interrupted && !record.state.is_finished();
                let interrupts = if waits { cp.interrupts()? } else { Vec::new() };
                (interrupts, cp.state().clone())
            }
            _ => (Vec::new(), Value::Null),
        };
        Ok(RunInfo {
            record,
            interrupts,
            state,
        })
    }

    /// Stops `thread`'s run, from any process, and returns its row afterwards.
    ///
    /// A run nobody is executing (queued, suspended, or whose process died and whose lease
    /// ran out) is cancelled at once: its newest checkpoint is written again as cancelled,
    /// so resuming it is refused with [`RunError::Cancelled`](crate::RunError::Cancelled).
    /// A run whose process died still holds its claim until its lease runs out: it is asked
    /// to stop as a running one is, and is cancelled when a worker or a recover takes it up
    /// after that (the row says `running` meanwhile). A run executing right now
    /// is asked to stop (`cancel_requested` on the row), which it learns at once in this
    /// process. In another, a run that has executed for a while learns it once that
    /// process's runtime sees the store change: within the runtime's
    /// [`poll_interval`](crate::runtime::RuntimeBuilder::poll_interval) on SQLite and on
    /// PostgreSQL with notifications (it reads the rows of the runs it executes in one
    /// query, up to 512 a look). In any case it learns it at the next heartbeat, a third of
    /// the lease. It stops before its next
    /// superstep (a subgraph running in a node, before the subgraph's); a node waiting for
    /// a signal or sleeping in memory stops waiting, and the run is cancelled where that
    /// step started. Other work a node is doing (a model call, a tool) finishes first. A
    /// run that would suspend looks at its row first and is cancelled instead; one the
    /// cancel reaches while its suspension is being written is cancelled right after it,
    /// and its caller gets [`RunError::Cancelled`](crate::RunError::Cancelled) all the same.
    /// A worker does not carry on a run whose row asks it to stop. A finished run is
    /// returned unchanged. A new run may be started on the thread afterwards.
    ///
    /// A run this process executes that is not on its row yet (an
    /// [`Exit`](crate::runtime::Durability::Exit) run that has written nothing) is asked to
    /// stop all the same; the row returned is then the one its cancellation writes (the
    /// one it completes with, when the cancel came during its last step), or, should the
    /// run not stop within a few seconds, the thread's row as it is.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::UnknownRun`] when the thread never ran; a store failure.
    pub async fn cancel(&self, thread: &str) -> Result<RunRecord> {
        let unknown = || RuntimeError::UnknownRun {
            thread: thread.to_owned(),
        };
        // A run this process executes stops even when its row does not show it yet (an
        // `Exit` run that has written nothing): the row would say the run before it.
        let live = self.inner.live_claims.cancel(thread);
        let record = match self.store().get_run(thread).await? {
            Some(record) => record,
            None if live => return self.row_once_cancelled(thread).await,
            None => return Err(unknown()),
        };
        if record.state.is_finished() {
            return match live {
                true => self.row_once_cancelled(thread).await,
                false => Ok(record),
            };
        }
        let thread_name: Arc<str> = Arc::from(thread);
        // Twice at most: an execution that held the run may let go of it (suspended) between
        // the claim this tries and the request it leaves on the row, which nothing would then
        // read until the run is carried on; it is cancelled here instead.
        for _ in 0..2 {
            match self.claim_run(&thread_name, None).await {
                Ok(claim) => {
                    // Read again under the claim: the run may have moved on since the read
                    // above (a worker resumed it and it completed, or a queued run started).
                    let now = self.store().get_run(thread).await?.ok_or_else(unknown)?;
                    if now.state.is_finished() {
                        claim.release().await?;
                        return Ok(now);
                    }
                    if let Err(error) = self.cancel_claimed(&claim, &now).await {
                        // Nothing was cancelled: the run is let go as it was (a suspended
                        // run keeps its wake time), not made runnable at once.
                        if let Err(release) = claim.release().await {
                            tracing::warn!(thread, %release, "the run was not let go after its cancel failed; its lease runs out");
                        }
                        self.wake_if_waiting(thread).await;
                        return Err(error);
                    }
                    break;
                }
                Err(RuntimeError::Busy { .. }) => {
                    tracing::debug!(
                        thread,
                        cancel_busy = true,
                        "the run of thread {thread} is executing; asking it to stop"
                    );
                    self.inner.live_claims.cancel(thread);
                    self.store().request_cancel(thread, now_ms()).await?;
                }
                Err(error) => return Err(error),
            }
            let record = self.store().get_run(thread).await?.ok_or_else(unknown)?;
            let held = record.lease_owner.is_some() && record.lease_until_ms > now_ms();
            if held || record.state.is_finished() {
                return Ok(record);
            }
        }
        self.store().get_run(thread).await?.ok_or_else(unknown)
    }

    /// Cancels the run of `record` under `claim`: its newest checkpoint is written again as
    /// cancelled (a queued run, which has none, is just finished as cancelled).
    pub(crate) async fn cancel_claimed(&self, claim: &RunClaim, record: &RunRecord) -> Result<()> {
        let latest = self.store().latest_checkpoint(&record.thread, "").await?;
        match latest {
            Some(mut cp) if cp.run == record.run && record.state != RunState::Queued => {
                cp.id = 0;
                cp.status = RunStatus::Cancelled;
                cp.error = Some("cancelled".to_owned());
                claim.put_last_checkpoint(cp).await?;
            }
            _ => claim.finish(RunState::Cancelled, None).await?,
        }
        // A request queued to resume the cancelled run would answer the thread's next run.
        // The run is cancelled either way; a request the store could not drop is logged.
        if let Err(error) = self
            .drop_resume_requests(&record.thread, "its run was cancelled")
            .await
        {
            tracing::warn!(thread = %record.thread, %error, "a resume request of the cancelled run was not dropped");
        }
        Ok(())
    }

    /// The row of `thread`'s run once the execution in this process that was asked to
    /// stop has written its cancellation (or has ended otherwise: the cancel came during
    /// its last step, or it failed), or, past a few seconds (it is inside a model call,
    /// say), the row as it is.
    async fn row_once_cancelled(&self, thread: &str) -> Result<RunRecord> {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            // Looked at before the row: an execution that lets go has written its row.
            let over = !self.inner.live_claims.executing(thread);
            let row = self.store().get_run(thread).await?;
            let stopped = row.as_ref().is_some_and(|r| r.state == RunState::Cancelled);
            if stopped || over || tokio::time::Instant::now() >= deadline {
                return row.ok_or_else(|| RuntimeError::UnknownRun {
                    thread: thread.to_owned(),
                });
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    /// `thread`'s run row; [`RuntimeError::UnknownRun`] when it has none.
    pub(crate) async fn run_row(&self, thread: &str) -> Result<RunRecord> {
        self.store()
            .get_run(thread)
            .await?
            .ok_or_else(|| RuntimeError::UnknownRun {
                thread: thread.to_owned(),
            })
    }
}
