//! The runtime: where runs keep their checkpoints (and, later, their signals and timers).
//!
//! The executor reaches storage only through [`Runtime`]; swapping the store behind it does
//! not change graph code.

pub mod store;

use std::sync::Arc;

use serde::de::DeserializeOwned;

pub use store::{
    Checkpoint, CommitStats, Interrupt, JournalKey, MemoryStore, PendingWrite, RunStatus,
    SignalPush, SqliteOptions, SqliteStore, Store, StoreError, StoredSignal, Synchronous,
};

use crate::{Error, Result};

/// When a run's checkpoints reach the store, and what a crash can cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// Each superstep's checkpoint is written before the next step starts. A crash loses at
    /// most the step in progress. The slowest mode, and the default.
    #[default]
    Sync,
    /// Checkpoints are written in the background while the next step runs. A crash can lose
    /// the last few steps, which then run again on recovery.
    Async,
    /// One checkpoint when the run stops (completes, fails or suspends). A crash loses the
    /// whole run so far; the fastest mode, for short runs that are cheap to redo.
    Exit,
}

struct RuntimeInner {
    store: Arc<dyn Store>,
    durability: Durability,
}

/// Owns storage for runs. Cheap to clone; clones share everything.
///
/// # Examples
///
/// ```
/// use loomflow::Runtime;
///
/// let runtime = Runtime::in_memory();
/// let same = runtime.clone();
/// # let _ = same;
/// ```
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<RuntimeInner>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("durability", &self.inner.durability)
            .finish_non_exhaustive()
    }
}

impl Default for Runtime {
    fn default() -> Self {
        Self::in_memory()
    }
}

impl Runtime {
    /// A runtime that keeps everything in memory: for tests, and for runs that need not
    /// survive the process.
    pub fn in_memory() -> Self {
        Self::with_store(MemoryStore::new())
    }

    /// A runtime over any [`Store`].
    pub fn with_store(store: impl Store) -> Self {
        Self {
            inner: Arc::new(RuntimeInner {
                store: Arc::new(store),
                durability: Durability::default(),
            }),
        }
    }

    /// A durable runtime over the SQLite file at `path`, created if it does not exist; see
    /// [`SqliteStore`] (and [`SqliteStore::open_with`] with [`Runtime::with_store`] for
    /// other settings).
    ///
    /// # Examples
    ///
    /// ```
    /// use loomflow::Runtime;
    ///
    /// # fn main() -> loomflow::Result<()> {
    /// let path = std::env::temp_dir().join(format!("loomflow-doc-runtime-{}.db", std::process::id()));
    /// let runtime = Runtime::sqlite(&path)?;
    /// # drop(runtime);
    /// # for suffix in ["", "-wal", "-shm"] { let _ = std::fs::remove_file(format!("{}{suffix}", path.display())); }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`SqliteStore::open`]: a missing directory, a file that is not a SQLite database
    /// or is corrupt or locked, or one written by a newer loomflow.
    pub fn sqlite(path: impl AsRef<std::path::Path>) -> Result<Self> {
        Ok(Self::with_store(SqliteStore::open(path)?))
    }

    /// The durability mode runs use unless they set their own.
    pub fn durability(&self) -> Durability {
        self.inner.durability
    }

    /// The store behind this runtime.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The state of a thread's newest checkpoint, typed.
    ///
    /// # Errors
    ///
    /// A store failure, or a state that does not deserialize into `S`.
    pub async fn get_state<S: DeserializeOwned>(&self, thread: &str) -> Result<Option<S>> {
        let Some(checkpoint) = self
            .inner
            .store
            .latest_checkpoint(thread, "")
            .await
            .map_err(Error::from)?
        else {
            return Ok(None);
        };
        serde_json::from_value(checkpoint.state)
            .map(Some)
            .map_err(|e| Error::json(format!("state of thread {thread}"), e))
    }

    /// Every checkpoint of a thread, oldest first.
    ///
    /// # Errors
    ///
    /// A store failure.
    pub async fn list_checkpoints(&self, thread: &str) -> Result<Vec<Checkpoint>> {
        self.inner
            .store
            .list_checkpoints(thread)
            .await
            .map_err(Error::from)
    }

    /// Writes a checkpoint as the durability mode asks.
    pub(crate) async fn commit(
        &self,
        checkpoint: Checkpoint,
        durability: Durability,
    ) -> Result<()> {
        match durability {
            Durability::Sync | Durability::Exit => self
                .inner
                .store
                .put_checkpoint(checkpoint)
                .await
                .map(drop)
                .map_err(Error::from),
            Durability::Async => {
                let store = Arc::clone(&self.inner.store);
                tokio::spawn(async move {
                    if let Err(error) = store.put_checkpoint(checkpoint).await {
                        tracing::error!(%error, "background checkpoint write failed");
                    }
                });
                Ok(())
            }
        }
    }
}
