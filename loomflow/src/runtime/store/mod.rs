//! The [`Store`] trait: the only code that touches storage.

mod memory;

pub use memory::MemoryStore;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::graph::BoxFuture;

/// A snapshot of a run taken after a superstep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Checkpoint {
    /// The thread (session) the run belongs to.
    pub thread: String,
    /// Empty for the top-level graph; `parent/child` inside subgraphs.
    pub namespace: String,
    /// The superstep just finished (0 for the input, before any step).
    pub step: u64,
    /// The state after the step, as JSON.
    pub state: Value,
    /// The nodes that run next; empty when the run is over.
    pub next: Vec<String>,
}

impl Checkpoint {
    /// Builds a checkpoint.
    pub fn new(
        thread: impl Into<String>,
        namespace: impl Into<String>,
        step: u64,
        state: Value,
        next: Vec<String>,
    ) -> Self {
        Self {
            thread: thread.into(),
            namespace: namespace.into(),
            step,
            state,
            next,
        }
    }
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The backend failed to write.
    #[error("checkpoint write failed for thread {thread}: {message}")]
    Write {
        /// The thread.
        thread: String,
        /// What the backend said.
        message: String,
    },
    /// The backend failed to read.
    #[error("read failed for thread {thread}: {message}")]
    Read {
        /// The thread.
        thread: String,
        /// What the backend said.
        message: String,
    },
}

/// Durable (or not) storage for checkpoints.
///
/// Object-safe: the runtime holds an `Arc<dyn Store>`.
pub trait Store: Send + Sync + 'static {
    /// Saves a checkpoint.
    fn put_checkpoint(&self, checkpoint: Checkpoint) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The newest checkpoint of a thread's top-level graph.
    fn latest_checkpoint<'a>(
        &'a self,
        thread: &'a str,
    ) -> BoxFuture<'a, Result<Option<Checkpoint>, StoreError>>;

    /// Every checkpoint of a thread, oldest first, all namespaces.
    fn list_checkpoints<'a>(
        &'a self,
        thread: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Checkpoint>, StoreError>>;
}
