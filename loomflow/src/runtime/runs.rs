//! Runs as rows: submitting work for a worker, looking runs up, cancelling them; and the
//! wake-ups that tell this process's workers that something changed.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Serialize;
use serde_json::Value;

use super::clock::now_ms;
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

/// Tells the workers of this process that there may be work: a run was submitted, or a
/// signal was sent to a thread (whose run may be waiting for it).
#[derive(Default)]
pub(crate) struct Wakes {
    notify: tokio::sync::Notify,
    /// Threads that were sent a signal since a worker last looked.
    signalled: Mutex<Vec<String>>,
    /// A run was submitted since a worker last looked.
    submitted: std::sync::atomic::AtomicBool,
    /// How many workers listen; with none, nothing is recorded.
    listeners: AtomicUsize,
}

impl Wakes {
    /// Records a wake-up; `thread` when a signal was sent to it.
    pub(crate) fn wake(&self, thread: Option<&str>) {
        if self.listeners.load(Ordering::Acquire) == 0 {
            return;
        }
        match thread {
            Some(thread) => {
                let mut signalled = crate::sync::lock(&self.signalled);
                // Bounded: past this, workers find the runs through the store anyway.
                if signalled.len() < 100_000 {
                    signalled.push(thread.to_owned());
                }
            }
            None => self.submitted.store(true, Ordering::Release),
        }
        self.notify.notify_one();
    }

    /// A worker starts listening.
    pub(crate) fn listen(&self) {
        self.listeners.fetch_add(1, Ordering::AcqRel);
    }

    /// A worker stops listening.
    pub(crate) fn unlisten(&self) {
        self.listeners.fetch_sub(1, Ordering::AcqRel);
    }

    /// Waits for the next wake-up.
    pub(crate) async fn notified(&self) {
        self.notify.notified().await;
    }

    /// Whether a run was submitted since the last call.
    pub(crate) fn take_submitted(&self) -> bool {
        self.submitted.swap(false, Ordering::AcqRel)
    }

    /// The threads signalled since the last call.
    pub(crate) fn take_signalled(&self) -> Vec<String> {
        std::mem::take(&mut *crate::sync::lock(&self.signalled))
    }
}

impl Runtime {
    pub(crate) fn wakes(&self) -> &Wakes {
        &self.inner.wakes
    }

    /// Queues a run of the graph registered as `graph` on `thread`, starting from `input`,
    /// for a [`Worker`](crate::Worker) to start: one in this process, or in any process on
    /// the same store.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::RunActive`] when the thread's current run has not finished; an
    /// `input` that does not serialize; a store failure.
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
        let input = serde_json::to_value(input)
            .map_err(|e| RuntimeError::json(format!("input of a run of graph {graph}"), e))?;
        match self
            .store()
            .submit_run(thread, graph, input, now_ms())
            .await?
        {
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

    /// One thread's current run: its row, what it waits on, and its state.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::UnknownRun`] when the thread never ran; a store failure.
    pub async fn run(&self, thread: &str) -> Result<RunInfo> {
        let record =
            self.store()
                .get_run(thread)
                .await?
                .ok_or_else(|| RuntimeError::UnknownRun {
                    thread: thread.to_owned(),
                })?;
        let latest = self.store().latest_checkpoint(thread, "").await?;
        let (interrupts, state) = match latest {
            Some(cp) if cp.run == record.run && record.state != RunState::Queued => {
                let interrupts = if cp.status == RunStatus::Interrupted {
                    cp.interrupts()?
                } else {
                    Vec::new()
                };
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
    /// A run nobody is executing (queued, suspended, or whose process died) is cancelled at
    /// once: its newest checkpoint is written again as cancelled, so resuming it is refused
    /// with [`RunError::Cancelled`](crate::RunError::Cancelled). A run executing right now
    /// is asked to stop (`cancel_requested` on the row): it stops before its next superstep,
    /// at once in this process, within a third of the lease in another. A finished run is
    /// returned unchanged. A new run may be started on the thread afterwards.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::UnknownRun`] when the thread never ran; a store failure.
    pub async fn cancel(&self, thread: &str) -> Result<RunRecord> {
        let unknown = || RuntimeError::UnknownRun {
            thread: thread.to_owned(),
        };
        let record = self.store().get_run(thread).await?.ok_or_else(unknown)?;
        if record.state.is_finished() {
            return Ok(record);
        }
        match self.claim_run(thread, None).await {
            Ok(claim) => {
                let latest = self.store().latest_checkpoint(thread, "").await?;
                match latest {
                    Some(mut cp) if cp.run == record.run && record.state != RunState::Queued => {
                        cp.id = 0;
                        cp.status = RunStatus::Cancelled;
                        cp.error = Some("cancelled".to_owned());
                        claim.put_last_checkpoint(cp).await?;
                    }
                    _ => claim.finish(RunState::Cancelled, None).await?,
                }
            }
            Err(RuntimeError::Busy { .. }) => {
                self.inner.live_claims.cancel(thread);
                self.store().request_cancel(thread, now_ms()).await?;
            }
            Err(error) => return Err(error),
        }
        self.store().get_run(thread).await?.ok_or_else(unknown)
    }
}
