//! The in-memory store: fast, and gone with the process.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

use serde_json::Value;

use super::{Checkpoint, Claim, JournalKey, SignalPush, Store, StoreError, StoredSignal};
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
    /// Each thread's current run and its lease.
    runs: HashMap<String, RunRow>,
}

/// A thread's current run, as the SQLite store's `runs` table keeps it.
#[derive(Debug, Default)]
#[allow(dead_code)] // `run` and `status` are kept for run queries, which come with the worker
struct RunRow {
    run: u64,
    status: Option<&'static str>,
    owner: Option<String>,
    until_ms: u64,
    attempts: u64,
}

impl Inner {
    /// Checks that `owner` holds `thread` and extends its lease: the first half of every
    /// write under a claim.
    fn fence(&mut self, thread: &str, owner: &str, until_ms: u64) -> Result<(), StoreError> {
        match self.runs.get_mut(thread) {
            Some(row) if row.owner.as_deref() == Some(owner) => {
                row.until_ms = until_ms;
                Ok(())
            }
            _ => Err(StoreError::LeaseLost {
                thread: thread.to_owned(),
                owner: owner.to_owned(),
            }),
        }
    }

    fn insert_checkpoint(&mut self, mut checkpoint: Checkpoint) -> u64 {
        self.next_id += 1;
        checkpoint.id = self.next_id;
        let id = checkpoint.id;
        self.checkpoints
            .entry(checkpoint.thread.clone())
            .or_default()
            .push(checkpoint);
        id
    }

    /// Removes a pending signal; says whether it was there.
    fn take(&mut self, session: &str, seq: u64) -> bool {
        if self.signals.get(&seq).is_some_and(|s| s.session == session) {
            self.signals.remove(&seq);
            true
        } else {
            false
        }
    }
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

    fn put_checkpoint(&self, checkpoint: Checkpoint) -> BoxFuture<'_, Result<u64, StoreError>> {
        ready(
            self.lock()
                .map(|mut inner| inner.insert_checkpoint(checkpoint)),
        )
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
            inner.take(session, seq);
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

    fn claim<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
        lease_until_ms: u64,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        ready(self.lock().map(|mut inner| {
            let row = inner.runs.entry(thread.to_owned()).or_default();
            match &row.owner {
                Some(holder) if holder != owner && row.until_ms > now_ms => Claim::Busy {
                    owner: holder.clone(),
                    until_ms: row.until_ms,
                },
                holder => {
                    if holder.as_deref() != Some(owner) {
                        row.attempts += 1;
                    }
                    row.owner = Some(owner.to_owned());
                    row.until_ms = lease_until_ms;
                    Claim::Claimed
                }
            }
        }))
    }

    fn release<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        ready(self.lock().map(|mut inner| {
            if let Some(row) = inner.runs.get_mut(thread)
                && row.owner.as_deref() == Some(owner)
            {
                row.owner = None;
                row.until_ms = 0;
            }
        }))
    }

    fn renew_claim<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        ready(
            self.lock()
                .and_then(|mut inner| inner.fence(thread, owner, lease_until_ms)),
        )
    }

    fn put_checkpoint_claimed<'a>(
        &'a self,
        checkpoint: Checkpoint,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        ready(self.lock().and_then(|mut inner| {
            inner.fence(&checkpoint.thread, owner, lease_until_ms)?;
            if checkpoint.namespace.is_empty()
                && let Some(row) = inner.runs.get_mut(&checkpoint.thread)
            {
                row.run = checkpoint.run;
                row.status = Some(checkpoint.status.as_str());
            }
            Ok(inner.insert_checkpoint(checkpoint))
        }))
    }

    fn put_checkpoint_and_release<'a>(
        &'a self,
        checkpoint: Checkpoint,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        ready(self.lock().and_then(|mut inner| {
            inner.fence(&checkpoint.thread, owner, 0)?;
            if let Some(row) = inner.runs.get_mut(&checkpoint.thread) {
                if checkpoint.namespace.is_empty() {
                    row.run = checkpoint.run;
                    row.status = Some(checkpoint.status.as_str());
                }
                row.owner = None;
            }
            Ok(inner.insert_checkpoint(checkpoint))
        }))
    }

    fn put_journal_claimed<'a>(
        &'a self,
        key: JournalKey,
        value: Value,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        ready(self.lock().and_then(|mut inner| {
            inner.fence(&key.thread, owner, lease_until_ms)?;
            inner.journal.entry(key).or_insert(value);
            Ok(())
        }))
    }

    fn take_signal_claimed<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
        journal: (JournalKey, Value),
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        ready(self.lock().and_then(|mut inner| {
            let (key, value) = journal;
            inner.fence(&key.thread, owner, lease_until_ms)?;
            let taken = inner.take(session, seq);
            if taken {
                inner.journal.entry(key).or_insert(value);
            }
            Ok(taken)
        }))
    }

    fn try_take_signal<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        ready(self.lock().map(|mut inner| inner.take(session, seq)))
    }
}
