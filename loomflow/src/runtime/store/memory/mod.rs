//! The in-memory store: fast, and gone with the process.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;

use super::audit::signal_sent;
use super::{
    AuditEntry, AuditQuery, Checkpoint, Claim, ClaimedRun, DeletedThread, JournalKey, RunFilter,
    RunRecord, RunState, SignalPush, Store, StoreError, StoredSignal, Submitted,
};
use crate::runtime::clock::now_ms;

mod audit_log;
mod ending;
mod in_line;
mod inner;
mod kept;
mod keys;
mod retention;
mod run_row;
mod slot;
mod threads;

pub(crate) use threads::{NO_PLACE, SharedName};

pub use audit_log::DEFAULT_RETAINED_AUDIT_ENTRIES;
pub use retention::DEFAULT_RETAINED_CHECKPOINTS;

use futures_util::future::BoxFuture;
use run_row::RunRow;

/// Keeps checkpoints, journal entries and signals in memory. The store of
/// [`Runtime::in_memory`](crate::Runtime::in_memory).
///
/// # Retention
///
/// A long-lived process would otherwise keep every checkpoint of every run. By default a
/// thread keeps its newest [`DEFAULT_RETAINED_CHECKPOINTS`] checkpoints, as many interrupted
/// ones besides (for forks), and the checkpoints runs need to carry on: the first of every run
/// with a top-level one kept (it describes the graph: a changed graph is refused saying
/// what changed, and a fork's row names the graph a worker runs it with); and, of the
/// thread's newest run, its newest top-level one and the newest of each subgraph inside a
/// step not over yet. A subgraph of a finished step (an earlier turn of a loop) is not kept
/// on that account, so a thread stays bounded however many namespaces its runs go through.
/// Older ones are dropped half the bound at a time: [`list_checkpoints`](Store::list_checkpoints)
/// returns only those kept, and
/// [`Runtime::fork`](crate::Runtime::fork) from a dropped one fails with
/// `RuntimeError::UnknownCheckpoint`. [`MemoryStore::with_retention`] changes the bound;
/// `None` keeps everything. A thread goes altogether, its slot with it, with
/// [`Runtime::delete_thread`](crate::Runtime::delete_thread).
///
/// A thread's journal (what `ctx.step`, model and tool calls recorded) is dropped when a run of
/// the thread completes or is cancelled, as in every store, but for what its suspended steps
/// recorded, which a fork from their checkpoints replays (kept until the thread is deleted).
///
/// # Cost of a checkpoint
///
/// A graph's step hands this store a copy of its state, not the checkpoint's JSON body:
/// the body is built only when the checkpoint is read through the [`Store`] API
/// (`latest_checkpoint`, `get_checkpoint`, `list_checkpoints`), and most are never read. A
/// step costs a clone of the state rather than a JSON tree of it. A suspension is kept the
/// same way, with its interrupts and resume values as they are, and a resume or recover in
/// the same process reads them back without building the body. The state itself still goes
/// through JSON on that read, as it would from a durable store, so a field the state does
/// not serialize (`#[serde(skip)]`) starts afresh after a resume whichever store a run uses.
///
/// The executor writes to this store and reads from it in line, with no future to box:
/// claims, checkpoints and journaled steps (a step's result and its audit entries under
/// one lock). A thread's name is kept once, shared with the execution that filed it, and a
/// kept row does not repeat it. What a run keeps per step is a 56-byte row and, for a
/// state of one word, a 48-byte snapshot (plus the allocator's header): what most steps
/// leave empty (a subgraph's namespace, an error, joins in progress, a suspension, a
/// `traceparent`) is boxed apart. A thread's run row and its checkpoints share one slot,
/// found with one lookup per write; the execution that finishes a run trims its list of rows
/// to what it holds as it lets go.
///
/// Audit entries are kept compact too, a small detail (up to about 1 KiB of text) as JSON
/// text rather than a tree of values (a resume's two-field detail is a 632-byte map node as
/// values): 104 bytes an entry plus its text, built back into an [`AuditEntry`] when the log
/// is queried. A larger detail stays a value, so that no long write is made under the
/// store's lock.
///
/// # Examples
///
/// ```
/// use loomflow::runtime::MemoryStore;
///
/// let everything = MemoryStore::with_retention(None);
/// let little = MemoryStore::with_retention(Some(10));
/// # let _ = (everything, little);
/// ```
#[derive(Debug)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
    /// How many checkpoints a thread keeps (see [Retention](MemoryStore#retention)).
    retention: Option<usize>,
    /// Bumped by every write, for [`Store::change_counter`].
    changes: std::sync::atomic::AtomicU64,
    /// Whether a run of the store was ever asked to stop: until then, a run's look at its
    /// row for a cancel (twice an execution) takes no lock.
    cancels_asked: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    /// Each thread's run row, checkpoints and journal.
    threads: threads::Threads,
    next_seq: u64,
    signals: BTreeMap<u64, StoredSignal>,
    /// The idempotency keys remembered.
    keys: keys::SignalKeys,
    audit: audit_log::AuditLog,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::with_retention(Some(DEFAULT_RETAINED_CHECKPOINTS))
    }
}

impl MemoryStore {
    /// An empty store, keeping [`DEFAULT_RETAINED_CHECKPOINTS`] checkpoints per thread (see
    /// [Retention](MemoryStore#retention)).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store keeping `checkpoints` checkpoints per thread (pruned a batch at a
    /// time), besides as many interrupted ones and those runs need; `None` keeps every one.
    pub fn with_retention(checkpoints: Option<usize>) -> Self {
        Self {
            inner: Mutex::default(),
            retention: checkpoints.map(|n| n.max(1)),
            changes: std::sync::atomic::AtomicU64::new(0),
            cancels_asked: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn lock(&self) -> Result<MutexGuard<'_, Inner>, StoreError> {
        // Every critical section below is panic-free, so a poisoned lock holds sound data.
        Ok(crate::sync::lock(&self.inner))
    }

    /// The lock, for a write: counts a change.
    fn lock_mut(&self) -> Result<MutexGuard<'_, Inner>, StoreError> {
        self.count_change();
        self.lock()
    }

    /// Counts a change (see [`Store::change_counter`]).
    fn count_change(&self) {
        self.changes
            .fetch_add(1, std::sync::atomic::Ordering::Release);
    }
}

fn ready<'a, T: Send + 'a>(value: T) -> BoxFuture<'a, T> {
    Box::pin(std::future::ready(value))
}

impl Store for MemoryStore {
    fn is_durable(&self) -> bool {
        false
    }

    fn as_memory(&self) -> Option<&MemoryStore> {
        Some(self)
    }

    fn put_checkpoint(&self, checkpoint: Checkpoint) -> BoxFuture<'_, Result<u64, StoreError>> {
        let mut checkpoint = checkpoint;
        let thread = std::mem::take(&mut checkpoint.thread);
        ready(
            self.lock_mut()
                .map(|mut inner| inner.insert_checkpoint(&*thread, checkpoint, self.retention)),
        )
    }

    fn latest_checkpoint<'a>(
        &'a self,
        thread: &'a str,
        namespace: &'a str,
    ) -> BoxFuture<'a, Result<Option<Checkpoint>, StoreError>> {
        ready(
            self.latest_unnamed((thread, NO_PLACE), namespace)
                .and_then(|cp| {
                    cp.map(|mut cp| {
                        cp.thread = thread.to_owned();
                        cp.serialized()
                    })
                    .transpose()
                }),
        )
    }

    fn get_checkpoint<'a>(
        &'a self,
        thread: &'a str,
        id: u64,
    ) -> BoxFuture<'a, Result<Option<Checkpoint>, StoreError>> {
        ready(self.lock().and_then(|inner| {
            let slot = inner.threads.get(thread);
            let found = slot.and_then(|slot| slot.kept.iter().find(|c| c.id == id));
            found.map(|cp| cp.serialized(thread)).transpose()
        }))
    }

    fn list_checkpoints<'a>(
        &'a self,
        thread: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Checkpoint>, StoreError>> {
        ready(self.lock().and_then(|inner| {
            let kept = inner.threads.get(thread).map_or(&[][..], |s| &s.kept);
            kept.iter().map(|cp| cp.serialized(thread)).collect()
        }))
    }

    fn put_journal(&self, key: JournalKey, value: Value) -> BoxFuture<'_, Result<(), StoreError>> {
        ready(self.lock_mut().map(|mut inner| inner.journal(key, value)))
    }

    fn get_journal<'a>(
        &'a self,
        key: &'a JournalKey,
    ) -> BoxFuture<'a, Result<Option<Value>, StoreError>> {
        ready(self.get_journal_now(key))
    }

    fn list_journal<'a>(
        &'a self,
        thread: &'a str,
        run: u64,
    ) -> BoxFuture<'a, Result<Vec<(JournalKey, Value)>, StoreError>> {
        ready(self.list_journal_now(thread, run))
    }

    fn push_signal(
        &self,
        mut signal: StoredSignal,
    ) -> BoxFuture<'_, Result<SignalPush, StoreError>> {
        ready(self.lock_mut().map(|mut inner| {
            if !inner.keys.remember(&signal, now_ms()) {
                return SignalPush::Duplicate;
            }
            inner.next_seq += 1;
            signal.seq = inner.next_seq;
            let seq = signal.seq;
            inner.audit.append([signal_sent(&signal)]);
            inner.signals.insert(seq, signal);
            SignalPush::Stored(seq)
        }))
    }

    fn signal_key_seen<'a>(
        &'a self,
        session: &'a str,
        name: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        ready(
            self.lock()
                .map(|mut inner| inner.keys.knows(session, name, key, now_ms())),
        )
    }

    fn take_signal<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
        journal: Option<(JournalKey, Value)>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        ready(self.lock_mut().map(|mut inner| {
            let run = journal.as_ref().map_or(0, |(key, _)| key.run);
            inner.take(session, seq, run);
            if let Some((key, value)) = journal {
                inner.journal(key, value);
            }
        }))
    }

    fn discard_signal<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        ready(self.lock_mut().map(|mut inner| {
            inner.remove_signal(session, seq);
        }))
    }

    fn pending_signals(&self) -> BoxFuture<'_, Result<Vec<StoredSignal>, StoreError>> {
        ready(
            self.lock()
                .map(|inner| inner.signals.values().cloned().collect()),
        )
    }

    fn prune_signals<'a>(
        &'a self,
        sent_before_ms: u64,
        spare: &'a [String],
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        ready(
            self.lock_mut()
                .map(|mut inner| inner.prune_signals(sent_before_ms, spare)),
        )
    }

    fn claim<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
        lease_until_ms: u64,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        ready(
            self.claim_now(thread, owner, lease_until_ms, now_ms)
                .map(|(claim, _)| claim),
        )
    }

    fn release<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        ready(self.release_now(thread, owner, false))
    }

    fn release_runnable<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        ready(self.release_now(thread, owner, true))
    }

    fn renew_claim<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        ready(
            self.lock_mut()
                .and_then(|mut inner| inner.fence(thread, owner, lease_until_ms)),
        )
    }

    fn put_checkpoint_claimed<'a>(
        &'a self,
        checkpoint: Checkpoint,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        let mut checkpoint = checkpoint;
        let thread = std::mem::take(&mut checkpoint.thread);
        ready(self.put_checkpoint_claimed_now(
            (&*thread, NO_PLACE),
            checkpoint,
            owner,
            lease_until_ms,
        ))
    }

    fn put_checkpoint_and_release<'a>(
        &'a self,
        checkpoint: Checkpoint,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        let mut checkpoint = checkpoint;
        let thread = std::mem::take(&mut checkpoint.thread);
        ready(self.put_checkpoint_and_release_now((&*thread, NO_PLACE), checkpoint, owner))
    }

    fn put_journal_claimed<'a>(
        &'a self,
        key: JournalKey,
        value: Value,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        ready(self.put_journal_claimed_now((key, value), (Vec::new(), None), owner, lease_until_ms))
    }

    fn put_journal_audited<'a>(
        &'a self,
        key: JournalKey,
        value: Value,
        audit: Vec<AuditEntry>,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        ready(self.put_journal_claimed_now((key, value), (audit, None), owner, lease_until_ms))
    }

    fn take_signal_claimed<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
        journal: (JournalKey, Value),
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        ready(self.lock_mut().and_then(|mut inner| {
            let (key, value) = journal;
            inner.fence_writing(&key.thread, owner, lease_until_ms)?;
            let taken = inner.take(session, seq, key.run);
            if taken {
                inner.journal(key, value);
            }
            Ok(taken)
        }))
    }

    fn try_take_signal<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        ready(self.lock_mut().map(|mut inner| inner.take(session, seq, 0)))
    }

    fn submit_run<'a>(
        &'a self,
        thread: &'a str,
        graph: &'a str,
        input: Value,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Submitted, StoreError>> {
        ready(self.lock_mut().map(|mut inner| {
            let row = &mut inner.threads.slot(thread).row;
            let finished = row.state.is_none_or(RunState::is_finished);
            if !finished || !row.is_free(now_ms) {
                return Submitted::Active(Box::new(row.active_record(thread)));
            }
            *row = RunRow {
                run: row.run,
                state: Some(RunState::Queued),
                graph: Some(Arc::from(graph)),
                runnable_at_ms: Some(0),
                input: Some(input),
                created_at_ms: now_ms,
                updated_at_ms: now_ms,
                ..RunRow::default()
            };
            Submitted::Queued
        }))
    }

    fn claim_next_run<'a>(
        &'a self,
        graphs: &'a [String],
        owner: &'a str,
        lease_until_ms: u64,
        now_ms: u64,
        due_ms: u64,
    ) -> BoxFuture<'a, Result<Option<ClaimedRun>, StoreError>> {
        // A claim that finds nothing changes nothing: an idle worker would otherwise see its
        // own looks as changes, and look every poll interval.
        ready(self.lock().map(|mut inner| {
            let thread = inner.next_runnable(graphs, now_ms, due_ms)?;
            self.count_change();
            inner.claim_row(&thread, owner, lease_until_ms, now_ms)
        }))
    }

    fn claim_waiting_run<'a>(
        &'a self,
        thread: &'a str,
        signal: &'a str,
        graphs: &'a [String],
        owner: &'a str,
        lease_until_ms: u64,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Option<ClaimedRun>, StoreError>> {
        ready(self.lock().map(|mut inner| {
            let row = &inner.threads.get(thread)?.row;
            if !row.waits_for(signal) || !row.in_graphs(graphs) || !row.is_free(now_ms) {
                return None;
            }
            self.count_change();
            inner.claim_row(thread, owner, lease_until_ms, now_ms)
        }))
    }

    fn get_run<'a>(
        &'a self,
        thread: &'a str,
    ) -> BoxFuture<'a, Result<Option<RunRecord>, StoreError>> {
        ready(
            self.lock()
                .map(|inner| inner.threads.get(thread).and_then(|s| s.row.record(thread))),
        )
    }

    fn cancels_requested<'a>(
        &'a self,
        threads: &'a [Arc<str>],
    ) -> BoxFuture<'a, Result<Vec<Arc<str>>, StoreError>> {
        ready(self.lock().map(|inner| {
            let asked = |thread: &&Arc<str>| {
                (inner.threads.get(thread)).is_some_and(|slot| slot.row.cancel_requested)
            };
            threads.iter().filter(asked).cloned().collect()
        }))
    }

    fn list_runs<'a>(
        &'a self,
        filter: &'a RunFilter,
    ) -> BoxFuture<'a, Result<Vec<RunRecord>, StoreError>> {
        ready(self.lock().map(|inner| {
            let mut records: Vec<RunRecord> = inner
                .threads
                .iter()
                .filter_map(|(thread, slot)| slot.row.record(thread))
                .filter(|record| filter.matches(record))
                .collect();
            records.sort_by(|a, b| (b.updated_at_ms, &a.thread).cmp(&(a.updated_at_ms, &b.thread)));
            records.truncate(filter.limit.unwrap_or(usize::MAX));
            records
        }))
    }

    fn request_cancel<'a>(
        &'a self,
        thread: &'a str,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Option<RunRecord>, StoreError>> {
        ready(self.lock_mut().map(|mut inner| {
            let row = &mut inner.threads.get_mut(thread)?.row;
            if row.state.is_some_and(|s| !s.is_finished()) {
                // Before the lock is let go: a run that takes it next sees the flag.
                self.cancels_asked
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                row.cancel_requested = true;
                row.updated_at_ms = now_ms;
            }
            row.record(thread)
        }))
    }

    fn finish_run<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
        state: RunState,
        error: Option<String>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        ready(self.finish_now((thread, owner), state, error))
    }

    fn delete_thread<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<DeletedThread, StoreError>> {
        ready(self.delete_thread_now(thread, owner))
    }

    fn next_wake_at_ms<'a>(
        &'a self,
        graphs: &'a [String],
        due_ms: u64,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        ready(self.lock().map(|inner| {
            inner
                .threads
                .values()
                .map(|slot| &slot.row)
                .filter(|row| row.in_graphs(graphs))
                .filter_map(|row| row.runnable_at_ms)
                .filter(|&at| at > due_ms)
                .min()
        }))
    }

    fn change_counter(&self) -> Option<u64> {
        Some(self.changes.load(std::sync::atomic::Ordering::Acquire))
    }

    fn append_audit(&self, entries: Vec<AuditEntry>) -> BoxFuture<'_, Result<(), StoreError>> {
        ready(self.lock().map(|mut inner| inner.audit.append(entries)))
    }

    fn audit<'a>(
        &'a self,
        query: &'a AuditQuery,
    ) -> BoxFuture<'a, Result<Vec<AuditEntry>, StoreError>> {
        ready(self.lock().and_then(|inner| inner.audit.query(query)))
    }

    fn prune_audit(&self, before_ms: u64) -> BoxFuture<'_, Result<u64, StoreError>> {
        ready(self.lock().map(|mut inner| inner.audit.prune(before_ms)))
    }
}
