//! The [`Store`] trait: the only code that touches storage.
//!
//! A store keeps four kinds of rows, all values as JSON:
//! - **checkpoints**: one row per superstep of a run, keyed by thread, run, namespace and
//!   step, with the run's status and the executor's snapshot as an opaque JSON `body`;
//! - **journal entries**: results of side effects run through `ctx.step`, keyed by
//!   [`JournalKey`];
//! - **signals**: payloads sent to a session and not yet consumed;
//! - **audit entries**: an append-only log of tool calls, decisions, signals, interrupts and
//!   resumes ([`AuditEntry`]), each written in the transaction of what it describes;
//! - **runs**: one row per thread for its current run ([`RunRecord`]): its graph, where it
//!   stands ([`RunState`]: queued, running, waiting, sleeping, …), what wakes it, and the
//!   lease (owner and expiry) that lets at most one execution at a time carry the run on
//!   (see [`Store::claim`]). Runs are numbered through their checkpoints.
//!
//! Backends: [`MemoryStore`] here, `SqliteStore` (feature `sqlite`) behind
//! `Runtime::sqlite`, `PostgresStore` (feature `postgres`) behind `Runtime::postgres`. The `conformance` module (feature `test-util`) is one test suite every
//! backend passes.

#[cfg(any(test, feature = "test-util"))]
pub mod conformance;

pub(crate) mod audit;
mod error;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
mod records;
pub(crate) mod retention;
#[cfg(all(test, any(feature = "sqlite", feature = "postgres")))]
mod tests;
mod unserialized;
pub(crate) mod url;
pub(crate) use runs::Waits;
pub(crate) use unserialized::{JsonBody, SnapshotSource};
pub(crate) mod runs;
#[cfg(feature = "sqlite")]
mod sqlite;

pub use audit::{AuditEntry, AuditKind, AuditQuery};
pub use error::StoreError;
pub(crate) use memory::NO_PLACE;
pub use memory::{DEFAULT_RETAINED_AUDIT_ENTRIES, DEFAULT_RETAINED_CHECKPOINTS, MemoryStore};
#[cfg(feature = "postgres")]
pub use postgres::{PostgresOptions, PostgresStore};
#[cfg(feature = "http")]
pub(crate) use records::CONSUMED_KEY_KEPT_MS;
pub(crate) use records::unnamed_answer;
pub use records::{
    Checkpoint, DeletedThread, Interrupt, JournalKey, RunStatus, SignalPush, StoredSignal,
};
pub use runs::{
    BadRunCursor, ClaimedRun, RowUpdate, RunCursor, RunFilter, RunRecord, RunState, Submitted,
};
#[cfg(feature = "sqlite")]
pub use sqlite::{CommitStats, SqliteOptions, SqliteStore, Synchronous};
pub use url::StoreUrl;

use std::sync::Arc;

use serde_json::Value;

use futures_util::future::BoxFuture;

/// What [`Store::claim`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Claim {
    /// The caller holds the thread's lease until the time it asked for.
    Claimed,
    /// Another execution holds it.
    Busy {
        /// Who holds it.
        owner: String,
        /// Until when, in milliseconds since the Unix epoch, unless renewed.
        until_ms: u64,
    },
}

/// Storage for runs: checkpoints, journal entries and signals.
///
/// Object-safe: the runtime holds an `Arc<dyn Store>`. Implementations must be safe to call
/// from many tasks at once, and must never block the async executor's threads.
///
/// Some default methods do less than the built-in stores, and the `conformance` suite
/// (feature `test-util`) checks what those do: `discard_signal` audits a receipt,
/// `signal_key_seen` forgets a key once its signal is taken, `prune_signals` drops nothing,
/// `release_runnable` leaves a suspended run waiting, `put_journal_audited` writes its two
/// parts apart. A store of one's own overrides them to pass the checks.
pub trait Store: Send + Sync + 'static {
    /// Whether what the store holds survives the process. The runtime stores signals only in
    /// durable stores; the in-memory store says `false`.
    fn is_durable(&self) -> bool {
        true
    }

    /// Saves a checkpoint and returns the id it was filed under. Ids increase, and one is
    /// never handed out again, not even after [`delete_thread`](Self::delete_thread).
    ///
    /// A top-level checkpoint that records its run completed or cancelled also deletes the
    /// thread's journal, in the same write: nothing carries such a run on, and the
    /// thread's next run journals under a number of its own. What the step after a kept
    /// interrupted checkpoint journaled stays (step = its step + 1): a fork of it replays it.
    fn put_checkpoint(&self, checkpoint: Checkpoint) -> BoxFuture<'_, Result<u64, StoreError>>;

    /// The newest checkpoint of a thread in a namespace (`""` for the top-level graph).
    fn latest_checkpoint<'a>(
        &'a self,
        thread: &'a str,
        namespace: &'a str,
    ) -> BoxFuture<'a, Result<Option<Checkpoint>, StoreError>>;

    /// One checkpoint by id.
    fn get_checkpoint<'a>(
        &'a self,
        thread: &'a str,
        id: u64,
    ) -> BoxFuture<'a, Result<Option<Checkpoint>, StoreError>>;

    /// Every checkpoint of a thread, all namespaces, oldest first.
    fn list_checkpoints<'a>(
        &'a self,
        thread: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Checkpoint>, StoreError>>;

    /// Records a journaled step's result. Writing the same key twice keeps the first value.
    /// It is kept until a run of its thread completes or is cancelled (see
    /// [`put_checkpoint`](Self::put_checkpoint)).
    fn put_journal(&self, key: JournalKey, value: Value) -> BoxFuture<'_, Result<(), StoreError>>;

    /// A journaled step's recorded result, if any.
    fn get_journal<'a>(
        &'a self,
        key: &'a JournalKey,
    ) -> BoxFuture<'a, Result<Option<Value>, StoreError>>;

    /// The journal entries of run `run` of `thread`, every namespace, in no set order: what
    /// [`Runtime::fork`](crate::Runtime::fork) copies so that a forked suspension's step
    /// replays what the original's would (a sleep keeps its wake time, a step its result).
    /// It has no default: a store (or a wrapper around one) that listed nothing would make
    /// a forked step run its journaled steps, model calls and tool calls included, again.
    fn list_journal<'a>(
        &'a self,
        thread: &'a str,
        run: u64,
    ) -> BoxFuture<'a, Result<Vec<(JournalKey, Value)>, StoreError>>;

    /// Stores a signal until it is consumed. With an idempotency key, a second signal with
    /// the same (session, name, key) is not stored.
    fn push_signal(&self, signal: StoredSignal) -> BoxFuture<'_, Result<SignalPush, StoreError>>;

    /// Removes a consumed signal and, in the same transaction, journals it when `journal`
    /// is given (so that a node that received it gets it again when it re-runs).
    ///
    /// A consumed signal's idempotency key stays remembered for at least an hour, so that a
    /// retried send is still recognised as a duplicate.
    fn take_signal<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
        journal: Option<(JournalKey, Value)>,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Removes a pending signal that nobody received: the mailbox dropped it (past the
    /// pending TTL, beyond the pending bound) or discarded it with its session. As
    /// [`take_signal`](Self::take_signal), its idempotency key stays remembered, but no
    /// entry says it was received.
    ///
    /// The default takes it with [`take_signal`](Self::take_signal), which audits a receipt;
    /// the built-in stores do not.
    fn discard_signal<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.take_signal(session, seq, None)
    }

    /// Every stored, unconsumed signal, oldest first.
    fn pending_signals(&self) -> BoxFuture<'_, Result<Vec<StoredSignal>, StoreError>>;

    /// The oldest stored, unconsumed signal `name` of `session`: what a suspended run's
    /// wait takes when its process's mailbox no longer holds it (the pending bounds drop
    /// signals from memory, not from the store, while the session has a run to take them).
    ///
    /// The default looks through [`pending_signals`](Self::pending_signals).
    fn oldest_signal<'a>(
        &'a self,
        session: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoredSignal>, StoreError>> {
        Box::pin(async move {
            let pending = self.pending_signals().await?;
            Ok((pending.into_iter()).find(|s| s.session == session && s.name == name))
        })
    }

    /// Whether a signal `name` of `session` with the idempotency key `key` is kept: pending,
    /// or consumed recently enough that a send with that key is still a duplicate. What a
    /// send retried after its run ended asks, to be answered as the duplicate it is.
    ///
    /// The default looks through [`pending_signals`](Self::pending_signals) only.
    fn signal_key_seen<'a>(
        &'a self,
        session: &'a str,
        name: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let pending = self.pending_signals().await?;
            Ok(pending.iter().any(|s| {
                s.session == session && s.name == name && s.idempotency_key.as_deref() == Some(key)
            }))
        })
    }

    /// Drops the unconsumed signals sent before `sent_before_ms` (milliseconds since the
    /// Unix epoch) to a session that has no unfinished run (no run at all, or one that
    /// completed, failed or was cancelled) and is not one of `spare`. Returns how many.
    ///
    /// The signals of a queued, running or suspended run are left alone. A dropped signal
    /// with an idempotency key is kept as consumed, as [`take_signal`](Self::take_signal)
    /// keeps it, so that a retried send is still a duplicate. Nothing is audited: nobody
    /// received it.
    ///
    /// The default drops nothing.
    fn prune_signals<'a>(
        &'a self,
        sent_before_ms: u64,
        spare: &'a [String],
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        let _ = (sent_before_ms, spare);
        Box::pin(std::future::ready(Ok(0)))
    }

    // Claims: at most one execution at a time per thread. Each of these methods runs as one
    // transaction, so that checking the lease and writing cannot be split by another process.

    /// Claims `thread`'s run for `owner` until `lease_until_ms` (ms since the Unix epoch).
    ///
    /// Succeeds when the thread has no run row yet, when nobody holds it, when the holder's
    /// lease expired by `now_ms`, or when `owner` already holds it (then it renews); otherwise
    /// returns who holds it and until when. A claim taken over from another owner counts one
    /// more attempt.
    fn claim<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
        lease_until_ms: u64,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Claim, StoreError>>;

    /// loomflow's in-memory store, when this is it. The executor then hands it checkpoints
    /// whose body is built only when read, reads back the values they keep, and makes its
    /// claims, writes and journal lookups in line, with no future to box. Internal to
    /// loomflow: a store
    /// outside the crate keeps the default, `None`.
    #[doc(hidden)]
    fn as_memory(&self) -> Option<&MemoryStore> {
        None
    }

    /// Whether the store writes a checkpoint's body as JSON text, which the executor then
    /// hands it serialized straight from its snapshot rather than as a tree of values.
    /// Internal to loomflow: a store outside the crate keeps the default, `false`, and gets
    /// the body as a value.
    #[doc(hidden)]
    fn writes_json_bodies(&self) -> bool {
        false
    }

    /// Lets `thread`'s run go, if `owner` holds it; does nothing otherwise.
    fn release<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Lets `thread`'s run go, if `owner` holds it; a suspended run (waiting, sleeping or
    /// interrupted) is runnable at once, as after a crash: its execution stopped half way (dropped,
    /// handed back, a store failure) and may have taken what it waited for (a signal it
    /// consumed and journaled), so a worker must carry it on rather than wait for what
    /// already came. The default lets it go as [`release`](Self::release) does.
    fn release_runnable<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.release(thread, owner)
    }

    /// Extends `owner`'s lease on `thread` to `lease_until_ms`: a heartbeat.
    ///
    /// # Errors
    ///
    /// [`StoreError::LeaseLost`] when `owner` no longer holds it.
    fn renew_claim<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// [`put_checkpoint`](Self::put_checkpoint) under a claim: in one transaction, checks
    /// that `owner` still holds the checkpoint's thread, extends the lease to
    /// `lease_until_ms`, records the run's number and status on its run row (for a top-level
    /// checkpoint, namespace `""`), and saves the checkpoint.
    ///
    /// Holding means being the owner on record, expired or not: a lease is lost only when
    /// another execution claimed the run, or it was released.
    ///
    /// # Errors
    ///
    /// [`StoreError::LeaseLost`], and nothing is written, when `owner` does not hold it.
    fn put_checkpoint_claimed<'a>(
        &'a self,
        checkpoint: Checkpoint,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<u64, StoreError>>;

    /// [`put_checkpoint_claimed`](Self::put_checkpoint_claimed) for an execution's last
    /// write: in the same transaction, releases the claim as [`release`](Self::release)
    /// does, so that stopping costs no commit of its own.
    ///
    /// # Errors
    ///
    /// [`StoreError::LeaseLost`], and nothing is written, when `owner` does not hold it.
    fn put_checkpoint_and_release<'a>(
        &'a self,
        checkpoint: Checkpoint,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<u64, StoreError>>;

    /// [`put_journal`](Self::put_journal) under a claim on the key's thread (checked and
    /// renewed as in [`put_checkpoint_claimed`](Self::put_checkpoint_claimed)).
    ///
    /// # Errors
    ///
    /// [`StoreError::LeaseLost`], and nothing is written, when `owner` does not hold it.
    fn put_journal_claimed<'a>(
        &'a self,
        key: JournalKey,
        value: Value,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Consumes a stored signal for a node of a claimed run: in one transaction, checks and
    /// renews the claim on the journal key's thread, then takes the signal and journals it
    /// if it is still pending.
    ///
    /// Returns whether it was: `false` means another consumer (another process on the same
    /// store) took it first, and nothing was journaled: the caller must not use the payload.
    ///
    /// # Errors
    ///
    /// [`StoreError::LeaseLost`], and nothing is taken or written, when `owner` does not
    /// hold the claim.
    fn take_signal_claimed<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
        journal: (JournalKey, Value),
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Consumes a stored signal outside any run (a runtime-level receive); returns whether
    /// it was still pending: `false` means another consumer took it first.
    fn try_take_signal<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    // Runs: the rows workers claim and people query (see [`RunRecord`]). Checkpoints
    // written under a claim keep the row in step with the run ([`RowUpdate::of`]).

    /// Queues a run of the graph named `graph` on `thread`, with `input` (the graph's state,
    /// as JSON), for a worker to start.
    ///
    /// Refused, writing nothing, while the thread's current run has not finished (or an
    /// execution holds the thread): then returns [`Submitted::Active`] with that run's row.
    /// A thread an execution claimed and has not written to yet reads as running.
    fn submit_run<'a>(
        &'a self,
        thread: &'a str,
        graph: &'a str,
        input: Value,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Submitted, StoreError>>;

    /// Claims for `owner`, until `lease_until_ms`, one run of the graphs named that a worker
    /// should carry on now, the longest-waiting first:
    /// - queued;
    /// - running, with nobody holding it or its lease expired by `now_ms` (its process died);
    /// - waiting, sleeping or interrupted, with its wake time (timer, deadline) at or before
    ///   `due_ms`;
    /// - waiting (or interrupted) for a signal that is stored and unconsumed (for an
    ///   interrupted run, a resume request: `loomflow:resume`).
    ///
    /// Longest-waiting means since it became runnable: a running run whose lease expired
    /// before any other (a queued one claimed before too: in `Durability::Exit` its
    /// execution writes nothing, and its row stays queued), then a queued run from when it
    /// was queued, a suspended one from its
    /// wake time, a signalled one from when its oldest awaited signal was sent. A backlog of
    /// queued runs does not hold up timers come due and signals that arrived before them.
    ///
    /// Leases are compared with `now_ms` (the system clock, shared by every process) and
    /// wake times with `due_ms` (the runtime's clock, which tests may set). Every run but a
    /// running one must also be free (nobody holds it, or its lease expired). The claim
    /// counts one more attempt. `None` when no run qualifies.
    fn claim_next_run<'a>(
        &'a self,
        graphs: &'a [String],
        owner: &'a str,
        lease_until_ms: u64,
        now_ms: u64,
        due_ms: u64,
    ) -> BoxFuture<'a, Result<Option<ClaimedRun>, StoreError>>;

    /// Claims `thread`'s run for `owner` if it waits for the signal `signal` (waiting or
    /// interrupted, with `signal` among its [`waiting_on`](RunRecord::waiting_on): an
    /// interrupted run waits for a resume request, `loomflow:resume`, and for the signals of
    /// any signal waits among its interrupts), is of one of the graphs named, and nobody
    /// holds it: a process that just sent the signal wakes the run without the store having
    /// to keep the signal (the in-memory store does not). A signal of another name wakes
    /// nothing.
    fn claim_waiting_run<'a>(
        &'a self,
        thread: &'a str,
        signal: &'a str,
        graphs: &'a [String],
        owner: &'a str,
        lease_until_ms: u64,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Option<ClaimedRun>, StoreError>>;

    /// The row of `thread`'s current run; `None` when the thread never ran.
    fn get_run<'a>(
        &'a self,
        thread: &'a str,
    ) -> BoxFuture<'a, Result<Option<RunRecord>, StoreError>>;

    /// Those of `threads` whose current run asks to stop (its row's `cancel_requested`), in
    /// any order: how a process executing many runs learns, in one read, of the cancels
    /// asked for them from another process.
    ///
    /// The default reads the rows one by one with [`get_run`](Self::get_run); a store that
    /// can select them in one query does.
    fn cancels_requested<'a>(
        &'a self,
        threads: &'a [Arc<str>],
    ) -> BoxFuture<'a, Result<Vec<Arc<str>>, StoreError>> {
        Box::pin(runs::cancels_one_by_one(self, threads))
    }

    /// The runs `filter` selects, most recently updated first.
    fn list_runs<'a>(
        &'a self,
        filter: &'a RunFilter,
    ) -> BoxFuture<'a, Result<Vec<RunRecord>, StoreError>>;

    /// Asks the execution holding `thread`'s unfinished run to stop: sets the row's
    /// `cancel_requested`. Returns the row (`None` for a thread that never ran); a finished
    /// run is returned unchanged.
    fn request_cancel<'a>(
        &'a self,
        thread: &'a str,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Option<RunRecord>, StoreError>>;

    /// Ends `thread`'s run as `state` (failed, or cancelled before its first checkpoint),
    /// with `error`, and releases `owner`'s claim, in one transaction.
    ///
    /// # Errors
    ///
    /// [`StoreError::LeaseLost`], and nothing is written, when `owner` does not hold it.
    fn finish_run<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
        state: RunState,
        error: Option<String>,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Deletes what `thread` keeps, under `owner`'s claim on it, in one transaction: its
    /// checkpoints (every namespace), its journal, the signals pending for the session of
    /// the same name, and its run's row, which ends the claim. Audit entries stay: they
    /// record what happened. Signals already consumed stay too, while their idempotency
    /// keys are remembered.
    ///
    /// The default refuses with [`StoreError::Unsupported`]: a store outside loomflow
    /// deletes nothing unless it says how.
    ///
    /// # Errors
    ///
    /// [`StoreError::LeaseLost`], and nothing is deleted, when `owner` does not hold it.
    fn delete_thread<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<DeletedThread, StoreError>> {
        let _ = owner;
        Box::pin(std::future::ready(Err(StoreError::Unsupported {
            operation: "delete_thread",
            thread: thread.to_owned(),
        })))
    }

    /// The earliest wake time after `due_ms` among suspended runs of the graphs named: when
    /// a worker with nothing to do should look again.
    fn next_wake_at_ms<'a>(
        &'a self,
        graphs: &'a [String],
        due_ms: u64,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>>;

    /// A number that changes whenever anything (this process or another) commits a change to
    /// the store: a worker polls it, cheaply, to learn that it should look for work. `None`
    /// (the default) means the store cannot tell, and the worker looks every time.
    fn change_counter(&self) -> Option<u64> {
        None
    }

    /// Woken (with `notify_waiters`) when the change counter moves, for stores that learn of
    /// changes by notification (PostgreSQL's `LISTEN`): a worker waiting for work looks at
    /// once instead of at its next poll. `None` (the default): the counter is polled.
    fn change_notifier(&self) -> Option<Arc<tokio::sync::Notify>> {
        None
    }

    // The audit log (see [`AuditEntry`]). Stores also append the entries a checkpoint
    // carries ([`Checkpoint::audit`]) with it, and record every signal they store
    // (`signal_sent`) and every signal a `take_signal` method consumes (`signal_received`)
    // in the same transaction.

    /// Appends entries to the audit log, in one transaction.
    fn append_audit(&self, entries: Vec<AuditEntry>) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The audit entries `query` selects, oldest first.
    fn audit<'a>(
        &'a self,
        query: &'a AuditQuery,
    ) -> BoxFuture<'a, Result<Vec<AuditEntry>, StoreError>>;

    /// Deletes the audit entries older than `before_ms` (milliseconds since the Unix epoch);
    /// returns how many. Entry ids never go back: a store whose ids come from its table
    /// (SQLite) keeps the newest entry, whatever its age, until a newer one is written.
    fn prune_audit(&self, before_ms: u64) -> BoxFuture<'_, Result<u64, StoreError>>;

    /// [`put_journal_claimed`](Self::put_journal_claimed), appending `audit` in the same
    /// transaction (a tool call's entries with its result). The default writes the journal
    /// entry, then the audit entries, in two writes; durable stores do both in one.
    ///
    /// # Errors
    ///
    /// [`StoreError::LeaseLost`], and nothing is written, when `owner` does not hold it.
    fn put_journal_audited<'a>(
        &'a self,
        key: JournalKey,
        value: Value,
        audit: Vec<AuditEntry>,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.put_journal_claimed(key, value, owner, lease_until_ms)
                .await?;
            if !audit.is_empty() {
                self.append_audit(audit).await?;
            }
            Ok(())
        })
    }

    /// The stored, unconsumed signals with a sequence number above `seq`, oldest first: what
    /// other processes sent since a worker last looked.
    fn signals_after(&self, seq: u64) -> BoxFuture<'_, Result<Vec<StoredSignal>, StoreError>> {
        Box::pin(async move {
            let mut signals = self.pending_signals().await?;
            signals.retain(|s| s.seq > seq);
            Ok(signals)
        })
    }
}
