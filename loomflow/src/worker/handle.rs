//! [`WorkerHandle`]: stopping a worker started in the background.

use tokio::sync::watch;

use super::Result;
use crate::runtime::RuntimeError;

/// The handle on a worker started with [`Worker::start`](super::Worker::start).
///
/// Dropping it without [`shutdown`](Self::shutdown) stops the worker too, abruptly: its
/// runs' tasks are aborted, and their leases released or left to run out.
#[derive(Debug)]
pub struct WorkerHandle {
    pub(super) stop: watch::Sender<bool>,
    pub(super) task: Option<tokio::task::JoinHandle<Result<()>>>,
}

impl WorkerHandle {
    /// Stops gracefully: claims nothing more, lets the runs it executes reach their next
    /// stop, up to the shutdown timeout, then returns with their leases released. A run
    /// stops at the end of the superstep under way (or of a subgraph's, when the step runs
    /// one), and is handed back runnable for another worker to carry on; or it completes
    /// or suspends first (a waiting run suspends after the grace). A run in
    /// [`Durability::Exit`](crate::runtime::Durability::Exit), which has written no step,
    /// writes where it stands as it is handed back at its own step's end; one handed back
    /// inside a subgraph's step starts over from its last checkpoint.
    ///
    /// A store failure does not stop a worker: it is logged, and the worker tries again at
    /// its next look. The timeout runs from when the stop is asked, also while the worker
    /// waits on a store that does not answer (a connection dead without a word): its runs
    /// are asked to let go at once, and what it asked the store is given up once the
    /// timeout has passed, or 5 s if the timeout is shorter (a claim a store that answers
    /// is making is not cut short; one given up is left to its lease). The releases of the
    /// runs aborted are waited for up to 5 s more.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::WorkerPanicked`](crate::runtime::RuntimeError::WorkerPanicked) when
    /// the worker had stopped before, its loop having panicked.
    pub async fn shutdown(mut self) -> Result<()> {
        let _ = self.stop.send(true);
        match self.task.take() {
            Some(task) => match task.await {
                Ok(served) => served,
                Err(error) if error.is_panic() => Err(RuntimeError::WorkerPanicked {
                    message: crate::sync::panic_message(&*error.into_panic()),
                }),
                Err(_) => Ok(()),
            },
            None => Ok(()),
        }
    }
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}
