//! Deleting a thread, with everything it keeps.

use std::sync::Arc;

use super::store::DeletedThread;
use super::{Result, Runtime};

impl Runtime {
    /// Deletes thread `thread`: its checkpoints (a subgraph's too), its journal, its run,
    /// and the signals pending for its session, those the store keeps and those queued in
    /// this process. Its audit entries stay, as the record of what happened (see
    /// [`prune_audit`](Self::prune_audit)). Afterwards the name is free: a run started on it
    /// is run 1 of a thread that keeps nothing.
    ///
    /// The delete claims the thread first, as an execution would: a run executing it, in
    /// this process or another one sharing the store, holds that claim, and the delete is
    /// refused ([`RuntimeError::Busy`](super::RuntimeError::Busy)); [`cancel`](Self::cancel)
    /// it first. A queued, suspended, failed or finished run is deleted with the rest, and
    /// no worker carries it on. A thread that keeps nothing is deleted all the same, and
    /// every count is 0.
    ///
    /// Another process's mailbox may still hold a signal it loaded from the store before
    /// the delete: a wait there finds its row gone and skips it, but
    /// [`poll_signal`](Self::poll_signal), which cannot ask the store, may return it.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::Busy`](super::RuntimeError::Busy), naming the holder, while a run
    /// executes the thread; [`StoreError::Unsupported`](super::StoreError::Unsupported)
    /// from a store that does not delete threads; a store failure. After an error the thread
    /// keeps everything, and its run is let go as it was.
    ///
    /// # Examples
    ///
    /// ```
    /// use loomflow::prelude::*;
    ///
    /// #[node]
    /// async fn ask(state: &mut String, ctx: &Context) -> loomflow::Result<()> {
    ///     *state = ctx.interrupt("your name?")?;
    ///     Ok(())
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
    /// let graph = Graph::new("greet").node(ask).edge(START, "ask").edge("ask", END).compile()?;
    /// let runtime = Runtime::in_memory();
    /// graph.invoke(&runtime, "t-1", String::new()).await?;
    /// assert_eq!(runtime.pending_interrupts("t-1").await?.len(), 1);
    ///
    /// let deleted = runtime.delete_thread("t-1").await?;
    /// assert_eq!(deleted.checkpoints, 2, "its input and its suspension");
    /// assert_eq!(deleted.signals, 0, "none was sent to it");
    /// assert!(runtime.list_checkpoints("t-1").await?.is_empty());
    /// assert!(runtime.run("t-1").await.is_err(), "no run to carry on");
    /// # Ok(()) }
    /// ```
    pub async fn delete_thread(&self, thread: &str) -> Result<DeletedThread> {
        let claim = self.claim_run(&Arc::from(thread), None).await?;
        // Signals sent while the store deletes are for whatever runs on the name next, as
        // are those sent after: only what this process queued before is forgotten.
        let mark = self.mailbox().send_mark();
        let mut deleted = match claim.delete_thread().await {
            Ok(deleted) => deleted,
            Err(error) => {
                // Nothing was deleted: the run is let go as it was (a suspended run keeps its
                // wake time), not made runnable at once as after an execution cut short.
                if let Err(release) = claim.release().await {
                    tracing::warn!(
                        thread,
                        %release,
                        "the thread was not let go after its delete failed; its lease runs out"
                    );
                }
                self.wake_if_waiting(thread).await;
                return Err(error.into());
            }
        };
        // Queued before the delete: no longer the thread's.
        let forgotten = self.mailbox().forget_queued(thread, mark);
        if !self.store().is_durable() {
            // A store that is not durable keeps no signals: what this process had queued
            // were the only copies. A durable store's rows were counted by its delete.
            deleted.signals += forgotten as u64;
        }
        tracing::debug!(thread, ?deleted, forgotten, "thread deleted");
        Ok(deleted)
    }
}
