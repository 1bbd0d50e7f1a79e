//! A [`Store`] that forwards every call to a [`SqliteStore`] and records it: the method,
//! what it wrote (a checkpoint's step and status), and the store's commit counter before the
//! call and when it returned. Used to count and name the commits of a run; never timed.

use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use loomflow::runtime::{
    AuditEntry, AuditQuery, Checkpoint, Claim, ClaimedRun, DeletedThread, JournalKey, RunFilter,
    RunRecord, RunState, SignalPush, SqliteStore, Store, StoreError, StoredSignal, Submitted,
};
use serde_json::Value;

/// One store call.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    /// The method, and what it wrote.
    pub(crate) name: String,
    /// The store's commit count when it was called.
    pub(crate) commits_before: u64,
    /// ... and when it returned (`None` while it runs).
    pub(crate) commits_after: Option<u64>,
}

impl Call {
    /// Commits made while the call ran (its own, and any concurrent call's).
    pub(crate) fn commits(&self) -> u64 {
        self.commits_after
            .map_or(0, |after| after.saturating_sub(self.commits_before))
    }
}

/// Forwards to `inner`, recording every call but the change probes.
#[derive(Debug)]
pub(crate) struct Traced {
    inner: Arc<SqliteStore>,
    log: Arc<Mutex<Vec<Call>>>,
}

impl Traced {
    pub(crate) fn new(inner: Arc<SqliteStore>) -> Self {
        Self {
            inner,
            log: Arc::default(),
        }
    }

    /// The calls recorded, shared: take them with `std::mem::take`.
    pub(crate) fn log(&self) -> Arc<Mutex<Vec<Call>>> {
        Arc::clone(&self.log)
    }

    fn commits(&self) -> u64 {
        self.inner.commit_stats().commits
    }

    /// Records the call `name` whose future is `call`. The SQLite store queues a write when
    /// its method is called, so the counter is read before the method, by the caller.
    fn record<'a, T: Send + 'a>(
        &'a self,
        name: String,
        commits_before: u64,
        call: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        let index = {
            let mut log = self.log.lock().unwrap();
            log.push(Call {
                name,
                commits_before,
                commits_after: None,
            });
            log.len() - 1
        };
        Box::pin(async move {
            let result = call.await;
            let after = self.commits();
            if let Some(entry) = self.log.lock().unwrap().get_mut(index) {
                entry.commits_after = Some(after);
            }
            result
        })
    }
}

fn checkpoint_name(method: &str, checkpoint: &Checkpoint) -> String {
    let namespace = if checkpoint.namespace.is_empty() {
        String::new()
    } else {
        format!(" in {}", checkpoint.namespace)
    };
    format!(
        "{method}(step {} {}{namespace})",
        checkpoint.step,
        checkpoint.status.as_str()
    )
}

impl Store for Traced {
    fn is_durable(&self) -> bool {
        self.inner.is_durable()
    }

    fn put_checkpoint(&self, checkpoint: Checkpoint) -> BoxFuture<'_, Result<u64, StoreError>> {
        let (name, before) = (
            checkpoint_name("put_checkpoint", &checkpoint),
            self.commits(),
        );
        self.record(name, before, self.inner.put_checkpoint(checkpoint))
    }

    fn latest_checkpoint<'a>(
        &'a self,
        thread: &'a str,
        namespace: &'a str,
    ) -> BoxFuture<'a, Result<Option<Checkpoint>, StoreError>> {
        let before = self.commits();
        self.record(
            "latest_checkpoint".into(),
            before,
            self.inner.latest_checkpoint(thread, namespace),
        )
    }

    fn get_checkpoint<'a>(
        &'a self,
        thread: &'a str,
        id: u64,
    ) -> BoxFuture<'a, Result<Option<Checkpoint>, StoreError>> {
        let before = self.commits();
        self.record(
            "get_checkpoint".into(),
            before,
            self.inner.get_checkpoint(thread, id),
        )
    }

    fn list_checkpoints<'a>(
        &'a self,
        thread: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Checkpoint>, StoreError>> {
        let before = self.commits();
        self.record(
            "list_checkpoints".into(),
            before,
            self.inner.list_checkpoints(thread),
        )
    }

    fn put_journal(&self, key: JournalKey, value: Value) -> BoxFuture<'_, Result<(), StoreError>> {
        let before = self.commits();
        self.record(
            format!("put_journal({})", key.name),
            before,
            self.inner.put_journal(key, value),
        )
    }

    fn get_journal<'a>(
        &'a self,
        key: &'a JournalKey,
    ) -> BoxFuture<'a, Result<Option<Value>, StoreError>> {
        let before = self.commits();
        self.record(
            format!("get_journal({})", key.name),
            before,
            self.inner.get_journal(key),
        )
    }

    fn list_journal<'a>(
        &'a self,
        thread: &'a str,
        run: u64,
    ) -> BoxFuture<'a, Result<Vec<(JournalKey, Value)>, StoreError>> {
        let before = self.commits();
        self.record(
            format!("list_journal({thread}, {run})"),
            before,
            self.inner.list_journal(thread, run),
        )
    }

    fn push_signal(&self, signal: StoredSignal) -> BoxFuture<'_, Result<SignalPush, StoreError>> {
        let before = self.commits();
        self.record(
            format!("push_signal({})", signal.name),
            before,
            self.inner.push_signal(signal),
        )
    }

    fn take_signal<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
        journal: Option<(JournalKey, Value)>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let before = self.commits();
        self.record(
            "take_signal".into(),
            before,
            self.inner.take_signal(session, seq, journal),
        )
    }

    fn pending_signals(&self) -> BoxFuture<'_, Result<Vec<StoredSignal>, StoreError>> {
        let before = self.commits();
        self.record(
            "pending_signals".into(),
            before,
            self.inner.pending_signals(),
        )
    }

    fn claim<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
        lease_until_ms: u64,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        let before = self.commits();
        self.record(
            "claim".into(),
            before,
            self.inner.claim(thread, owner, lease_until_ms, now_ms),
        )
    }

    fn release<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let before = self.commits();
        self.record("release".into(), before, self.inner.release(thread, owner))
    }

    fn release_runnable<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let before = self.commits();
        let release = self.inner.release_runnable(thread, owner);
        self.record("release".into(), before, release)
    }

    fn renew_claim<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let before = self.commits();
        self.record(
            "renew_claim".into(),
            before,
            self.inner.renew_claim(thread, owner, lease_until_ms),
        )
    }

    fn put_checkpoint_claimed<'a>(
        &'a self,
        checkpoint: Checkpoint,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        let (name, before) = (
            checkpoint_name("put_checkpoint_claimed", &checkpoint),
            self.commits(),
        );
        self.record(
            name,
            before,
            self.inner
                .put_checkpoint_claimed(checkpoint, owner, lease_until_ms),
        )
    }

    fn put_checkpoint_and_release<'a>(
        &'a self,
        checkpoint: Checkpoint,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        let (name, before) = (
            checkpoint_name("put_checkpoint_and_release", &checkpoint),
            self.commits(),
        );
        self.record(
            name,
            before,
            self.inner.put_checkpoint_and_release(checkpoint, owner),
        )
    }

    fn put_journal_claimed<'a>(
        &'a self,
        key: JournalKey,
        value: Value,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let before = self.commits();
        self.record(
            format!("put_journal_claimed({})", key.name),
            before,
            self.inner
                .put_journal_claimed(key, value, owner, lease_until_ms),
        )
    }

    fn take_signal_claimed<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
        journal: (JournalKey, Value),
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let before = self.commits();
        self.record(
            "take_signal_claimed".into(),
            before,
            self.inner
                .take_signal_claimed(session, seq, journal, owner, lease_until_ms),
        )
    }

    fn try_take_signal<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let before = self.commits();
        self.record(
            "try_take_signal".into(),
            before,
            self.inner.try_take_signal(session, seq),
        )
    }

    fn submit_run<'a>(
        &'a self,
        thread: &'a str,
        graph: &'a str,
        input: Value,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Submitted, StoreError>> {
        let before = self.commits();
        self.record(
            "submit_run".into(),
            before,
            self.inner.submit_run(thread, graph, input, now_ms),
        )
    }

    fn claim_next_run<'a>(
        &'a self,
        graphs: &'a [String],
        owner: &'a str,
        lease_until_ms: u64,
        now_ms: u64,
        due_ms: u64,
    ) -> BoxFuture<'a, Result<Option<ClaimedRun>, StoreError>> {
        let before = self.commits();
        self.record(
            "claim_next_run".into(),
            before,
            self.inner
                .claim_next_run(graphs, owner, lease_until_ms, now_ms, due_ms),
        )
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
        let before = self.commits();
        self.record(
            "claim_waiting_run".into(),
            before,
            self.inner
                .claim_waiting_run(thread, signal, graphs, owner, lease_until_ms, now_ms),
        )
    }

    fn get_run<'a>(
        &'a self,
        thread: &'a str,
    ) -> BoxFuture<'a, Result<Option<RunRecord>, StoreError>> {
        let before = self.commits();
        self.record("get_run".into(), before, self.inner.get_run(thread))
    }

    fn cancels_requested<'a>(
        &'a self,
        threads: &'a [Arc<str>],
    ) -> BoxFuture<'a, Result<Vec<Arc<str>>, StoreError>> {
        let before = self.commits();
        let read = self.inner.cancels_requested(threads);
        self.record("cancels_requested".into(), before, read)
    }

    fn list_runs<'a>(
        &'a self,
        filter: &'a RunFilter,
    ) -> BoxFuture<'a, Result<Vec<RunRecord>, StoreError>> {
        let before = self.commits();
        self.record("list_runs".into(), before, self.inner.list_runs(filter))
    }

    fn request_cancel<'a>(
        &'a self,
        thread: &'a str,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Option<RunRecord>, StoreError>> {
        let before = self.commits();
        self.record(
            "request_cancel".into(),
            before,
            self.inner.request_cancel(thread, now_ms),
        )
    }

    fn finish_run<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
        state: RunState,
        error: Option<String>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let before = self.commits();
        self.record(
            format!("finish_run({})", state.as_str()),
            before,
            self.inner.finish_run(thread, owner, state, error),
        )
    }

    fn delete_thread<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<DeletedThread, StoreError>> {
        let before = self.commits();
        let deleted = self.inner.delete_thread(thread, owner);
        self.record("delete_thread".into(), before, deleted)
    }

    fn next_wake_at_ms<'a>(
        &'a self,
        graphs: &'a [String],
        due_ms: u64,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        let before = self.commits();
        self.record(
            "next_wake_at_ms".into(),
            before,
            self.inner.next_wake_at_ms(graphs, due_ms),
        )
    }

    fn change_counter(&self) -> Option<u64> {
        self.inner.change_counter()
    }

    fn change_notifier(&self) -> Option<Arc<tokio::sync::Notify>> {
        self.inner.change_notifier()
    }

    fn append_audit(&self, entries: Vec<AuditEntry>) -> BoxFuture<'_, Result<(), StoreError>> {
        let before = self.commits();
        self.record(
            format!("append_audit({} entries)", entries.len()),
            before,
            self.inner.append_audit(entries),
        )
    }

    fn audit<'a>(
        &'a self,
        query: &'a AuditQuery,
    ) -> BoxFuture<'a, Result<Vec<AuditEntry>, StoreError>> {
        let before = self.commits();
        self.record("audit".into(), before, self.inner.audit(query))
    }

    fn prune_audit(&self, before_ms: u64) -> BoxFuture<'_, Result<u64, StoreError>> {
        let before = self.commits();
        self.record(
            "prune_audit".into(),
            before,
            self.inner.prune_audit(before_ms),
        )
    }

    fn discard_signal<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let before = self.commits();
        self.record(
            format!("discard_signal({seq})"),
            before,
            self.inner.discard_signal(session, seq),
        )
    }

    fn prune_signals<'a>(
        &'a self,
        sent_before_ms: u64,
        spare: &'a [String],
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        let before = self.commits();
        self.record(
            "prune_signals".into(),
            before,
            self.inner.prune_signals(sent_before_ms, spare),
        )
    }

    fn put_journal_audited<'a>(
        &'a self,
        key: JournalKey,
        value: Value,
        audit: Vec<AuditEntry>,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let before = self.commits();
        self.record(
            format!("put_journal_audited({})", key.name),
            before,
            self.inner
                .put_journal_audited(key, value, audit, owner, lease_until_ms),
        )
    }

    fn signals_after(&self, seq: u64) -> BoxFuture<'_, Result<Vec<StoredSignal>, StoreError>> {
        let before = self.commits();
        self.record(
            "signals_after".into(),
            before,
            self.inner.signals_after(seq),
        )
    }
}
