//! The in-memory store: fast, and gone with the process.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

use serde_json::Value;

use super::{Checkpoint, JournalKey, SignalPush, Store, StoreError, StoredSignal};
use futures_util::future::BoxFuture;

/// Keeps checkpoints, journal entries and signals in memory. The store of
/// [`Runtime::in_memory`](crate::Runtime::in_memory).
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    checkpoints: HashMap<String, Vec<Checkpoint>>,
    journal: HashMap<JournalKey, Value>,
    next_seq: u64,
    signals: BTreeMap<u64, StoredSignal>,
    /// (session, name, key) of every signal stored with a key.
    keys: HashSet<(String, String, String)>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> Result<MutexGuard<'_, Inner>, StoreError> {
        // Every critical section below is panic-free, so a poisoned lock holds sound data.
        Ok(crate::sync::lock(&self.inner))
    }
}

fn ready<'a, T: Send + 'a>(value: T) -> BoxFuture<'a, T> {
    Box::pin(std::future::ready(value))
}

impl Store for MemoryStore {
    fn is_durable(&self) -> bool {
        false
    }

    fn put_checkpoint(&self, mut checkpoint: Checkpoint) -> BoxFuture<'_, Result<u64, StoreError>> {
        ready(self.lock().map(|mut inner| {
            inner.next_id += 1;
            checkpoint.id = inner.next_id;
            let id = checkpoint.id;
            inner
                .checkpoints
                .entry(checkpoint.thread.clone())
                .or_default()
                .push(checkpoint);
            id
        }))
    }

    fn latest_checkpoint<'a>(
        &'a self,
        thread: &'a str,
        namespace: &'a str,
    ) -> BoxFuture<'a, Result<Option<Checkpoint>, StoreError>> {
        ready(self.lock().map(|inner| {
            inner
                .checkpoints
                .get(thread)
                .and_then(|cps| cps.iter().rev().find(|c| c.namespace == namespace).cloned())
        }))
    }

    fn get_checkpoint<'a>(
        &'a self,
        thread: &'a str,
        id: u64,
    ) -> BoxFuture<'a, Result<Option<Checkpoint>, StoreError>> {
        ready(self.lock().map(|inner| {
            inner
                .checkpoints
                .get(thread)
                .and_then(|cps| cps.iter().find(|c| c.id == id).cloned())
        }))
    }

    fn list_checkpoints<'a>(
        &'a self,
        thread: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Checkpoint>, StoreError>> {
        ready(
            self.lock()
                .map(|inner| inner.checkpoints.get(thread).cloned().unwrap_or_default()),
        )
    }

    fn put_journal(&self, key: JournalKey, value: Value) -> BoxFuture<'_, Result<(), StoreError>> {
        ready(self.lock().map(|mut inner| {
            inner.journal.entry(key).or_insert(value);
        }))
    }

    fn get_journal<'a>(
        &'a self,
        key: &'a JournalKey,
    ) -> BoxFuture<'a, Result<Option<Value>, StoreError>> {
        ready(self.lock().map(|inner| inner.journal.get(key).cloned()))
    }

    fn push_signal(
        &self,
        mut signal: StoredSignal,
    ) -> BoxFuture<'_, Result<SignalPush, StoreError>> {
        ready(self.lock().map(|mut inner| {
            if let Some(key) = &signal.idempotency_key {
                let entry = (signal.session.clone(), signal.name.clone(), key.clone());
                if !inner.keys.insert(entry) {
                    return SignalPush::Duplicate;
                }
            }
            inner.next_seq += 1;
            signal.seq = inner.next_seq;
            let seq = signal.seq;
            inner.signals.insert(seq, signal);
            SignalPush::Stored(seq)
        }))
    }

    fn take_signal<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
        journal: Option<(JournalKey, Value)>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        ready(self.lock().map(|mut inner| {
            if inner
                .signals
                .get(&seq)
                .is_some_and(|s| s.session == session)
            {
                inner.signals.remove(&seq);
            }
            if let Some((key, value)) = journal {
                inner.journal.entry(key).or_insert(value);
            }
        }))
    }

    fn pending_signals(&self) -> BoxFuture<'_, Result<Vec<StoredSignal>, StoreError>> {
        ready(
            self.lock()
                .map(|inner| inner.signals.values().cloned().collect()),
        )
    }
}
