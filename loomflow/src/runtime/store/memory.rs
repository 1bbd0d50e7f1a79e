//! The in-memory store: fast, and gone with the process.

use std::collections::HashMap;
use std::sync::Mutex;

use super::{Checkpoint, Store, StoreError};
use crate::graph::BoxFuture;

/// Keeps checkpoints in memory. The default store of [`Runtime::in_memory`](crate::Runtime::in_memory).
#[derive(Debug, Default)]
pub struct MemoryStore {
    threads: Mutex<HashMap<String, Vec<Checkpoint>>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn with_threads<T>(
        &self,
        thread: &str,
        f: impl FnOnce(&mut HashMap<String, Vec<Checkpoint>>) -> T,
    ) -> Result<T, StoreError> {
        let mut threads = self.threads.lock().map_err(|_| StoreError::Read {
            thread: thread.to_owned(),
            message: "memory store lock poisoned".to_owned(),
        })?;
        Ok(f(&mut threads))
    }
}

impl Store for MemoryStore {
    fn put_checkpoint(&self, checkpoint: Checkpoint) -> BoxFuture<'_, Result<(), StoreError>> {
        let thread = checkpoint.thread.clone();
        let result = self.with_threads(&thread, |threads| {
            threads.entry(thread.clone()).or_default().push(checkpoint);
        });
        Box::pin(std::future::ready(result))
    }

    fn latest_checkpoint<'a>(
        &'a self,
        thread: &'a str,
    ) -> BoxFuture<'a, Result<Option<Checkpoint>, StoreError>> {
        let result = self.with_threads(thread, |threads| {
            threads
                .get(thread)
                .and_then(|cps| cps.iter().rev().find(|c| c.namespace.is_empty()).cloned())
        });
        Box::pin(std::future::ready(result))
    }

    fn list_checkpoints<'a>(
        &'a self,
        thread: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Checkpoint>, StoreError>> {
        let result = self.with_threads(thread, |threads| {
            threads.get(thread).cloned().unwrap_or_default()
        });
        Box::pin(std::future::ready(result))
    }
}
