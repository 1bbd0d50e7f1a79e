//! [`WorkerHandle`]: stopping a worker started in the background.

use tokio::sync::watch;

use super::Result;

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
    /// or suspends first (a waiting run suspends after the grace).
    ///
    /// # Errors
    ///
    /// The store failure that stopped the worker, if one did.
    pub async fn shutdown(mut self) -> Result<()> {
        let _ = self.stop.send(true);
        match self.task.take() {
            Some(task) => task.await.unwrap_or(Ok(())),
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
