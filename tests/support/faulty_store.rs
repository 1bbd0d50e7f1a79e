//! A store that passes every call to a real one (SQLite, in these tests), except where a
//! test arms a fault: checkpoint writes under a claim that fail as a backend's would (a
//! full disk, a dropped connection), or a read of a run's row or a signal's taking that is
//! held back until the test lets it go, to make a race happen in a given order. It also
//! counts the reads of the signals the store keeps for a session's run.

#![allow(dead_code)] // each test uses what it needs

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use loomflow::runtime::{
    AuditEntry, AuditQuery, Checkpoint, Claim, ClaimedRun, JournalKey, RunFilter, RunRecord,
    RunState, SignalPush, Store, StoreError, StoredSignal, Submitted,
};
use serde_json::Value;
use tokio::sync::oneshot;

/// The faults a test arms; shared between the test and the store it handed its runtime.
#[derive(Default)]
pub(crate) struct Faults {
    /// While set, every checkpoint written under a claim fails with [`StoreError::Write`].
    pub(crate) fail_checkpoints: AtomicBool,
    /// How many checkpoint writes failed so.
    checkpoint_faults: AtomicUsize,
    /// The next `get_run` reads the row, says so on the first sender, and returns it only
    /// once the second channel fires.
    held_read: Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>,
    /// How many times the oldest kept signal of a (session, name) was read.
    kept_signal_reads: AtomicUsize,
    /// The next `take_signal_claimed` starts only once this fires (or is dropped); with
    /// `true`, it goes ahead even if its caller gave up meanwhile.
    held_take: Mutex<Option<(oneshot::Receiver<()>, bool)>>,
    /// The next journal write under a claim starts only once this fires (or is dropped).
    held_journal: Mutex<Option<oneshot::Receiver<()>>>,
    /// While set, the next journal write under a claim commits and then fails, as a write
    /// whose connection broke after the database committed it.
    fail_journal_after_commit: AtomicBool,
    /// While set, the next journal write under a claim fails before the store is asked, as
    /// a write whose connection broke before it reached the database.
    fail_journal_before_commit: AtomicBool,
    /// The next journal write under a claim of a step whose name starts with this fails
    /// before the store is asked, as `fail_journal_before_commit` does.
    lose_journal_named: Mutex<Option<String>>,
    /// The next `try_take_signal` starts only once this fires (or is dropped).
    held_try_take: Mutex<Option<oneshot::Receiver<()>>>,
    /// While set, the next `try_take_signal` fails with [`StoreError::Write`].
    fail_try_take: AtomicBool,
    fail_plain_takes: AtomicUsize,
    plain_takes: AtomicUsize,
    /// How many `try_take_signal` calls failed so.
    try_take_faults: AtomicUsize,
    /// The next `take_signal` (outside a claim) starts only once this fires (or is dropped).
    held_plain_take: Mutex<Option<oneshot::Receiver<()>>>,
    /// The next `pending_signals` read starts only once this fires (or is dropped).
    held_pending_read: Mutex<Option<oneshot::Receiver<()>>>,
    /// Renewals of this thread's lease never answer, as a query on a connection that died
    /// without a word.
    hung_renewals_of: Mutex<Option<String>>,
    /// While set, reads of a run's row (`get_run`) never answer.
    hung_run_reads: AtomicBool,
    /// The next `next_wake_at_ms` says so on the first sender once called, and asks the
    /// store only once the second channel fires.
    held_wake_read: Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>,
    /// After the next checkpoint of this thread written under a claim: said on the sender,
    /// and the write returns once the receiver fires.
    held_after_checkpoint: Mutex<Option<HeldAfter>>,
    /// While set, the next `finish_run` fails with [`StoreError::Write`], writing nothing.
    fail_finish: AtomicBool,
    /// While set, the next `signals_after` fails with [`StoreError::Read`].
    fail_signals_after: AtomicBool,
    /// While set, the next `take_signal_claimed` fails with [`StoreError::Write`], taking
    /// nothing.
    fail_claimed_take: AtomicBool,
    /// How many `signals_after` calls failed so.
    signals_after_faults: AtomicUsize,
    /// While set, the next `claim_next_run` panics.
    panic_claim: AtomicBool,
    /// The next `delete_thread` goes to the store, says so on the first sender once the store
    /// has deleted, and returns only when the second channel fires. Unarmed, deletes are
    /// refused as by a store that cannot delete.
    held_delete: Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>,
    /// The next `push_signal` stores its row, says so on the first sender, and returns only
    /// when the second channel fires (or is dropped).
    held_push: Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>,
    /// The next `oldest_signal` reads the row, says so on the first sender, and returns it
    /// only when the second channel fires (or is dropped).
    held_oldest: Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>,
    /// While set, the next read of a session's oldest kept signal fails with
    /// [`StoreError::Read`].
    fail_oldest: AtomicBool,
}

impl Faults {
    /// Holds back the return of the next read of a session's oldest kept signal, after the
    /// row is read: the receiver fires once it is; the read returns when the sender fires.
    pub(crate) fn hold_next_oldest_read(&self) -> (oneshot::Receiver<()>, oneshot::Sender<()>) {
        let (read_tx, read_rx) = oneshot::channel();
        let (go_tx, go_rx) = oneshot::channel();
        *self.held_oldest.lock().unwrap() = Some((read_tx, go_rx));
        (read_rx, go_tx)
    }

    /// Makes the next read of a session's oldest kept signal fail, as a read on a dropped
    /// connection does.
    pub(crate) fn fail_next_oldest_read(&self) {
        self.fail_oldest.store(true, Ordering::SeqCst);
    }

    /// Holds back the return of the next signal push, after its row is stored: the receiver
    /// fires once the row is in the store; the push returns when the sender fires.
    pub(crate) fn hold_next_push_after_store(
        &self,
    ) -> (oneshot::Receiver<()>, oneshot::Sender<()>) {
        let (stored_tx, stored_rx) = oneshot::channel();
        let (go_tx, go_rx) = oneshot::channel();
        *self.held_push.lock().unwrap() = Some((stored_tx, go_rx));
        (stored_rx, go_tx)
    }

    /// Holds back the next read of a run's row: the first receiver fires once it has read
    /// the row; it returns what it read when the sender fires (or is dropped).
    pub(crate) fn hold_next_run_read(&self) -> (oneshot::Receiver<()>, oneshot::Sender<()>) {
        let (read_tx, read_rx) = oneshot::channel();
        let (go_tx, go_rx) = oneshot::channel();
        *self.held_read.lock().unwrap() = Some((read_tx, go_rx));
        (read_rx, go_tx)
    }

    /// Fails the next `finish_run` (a run finished outside a checkpoint: failed by its
    /// worker, cancelled while queued) as a dropped connection would, writing nothing.
    pub(crate) fn fail_next_finish(&self) {
        self.fail_finish.store(true, Ordering::SeqCst);
    }

    /// Lets the next `delete_thread` through to the store, held once the store has deleted:
    /// the receiver fires then; the delete returns when the sender fires (or is dropped).
    pub(crate) fn hold_next_delete(&self) -> (oneshot::Receiver<()>, oneshot::Sender<()>) {
        let (deleted_tx, deleted_rx) = oneshot::channel();
        let (go_tx, go_rx) = oneshot::channel();
        *self.held_delete.lock().unwrap() = Some((deleted_tx, go_rx));
        (deleted_rx, go_tx)
    }

    /// Makes the next `claim_next_run` panic, as a store with a bug would, outside any run.
    pub(crate) fn panic_next_claim(&self) {
        self.panic_claim.store(true, Ordering::SeqCst);
    }

    /// Whether the panic armed by [`panic_next_claim`](Self::panic_next_claim) is still to come.
    pub(crate) fn claim_panic_armed(&self) -> bool {
        self.panic_claim.load(Ordering::SeqCst)
    }

    /// Holds back the next read of the next wake time (a worker's, at the end of a look): the
    /// first receiver fires once it is called; it goes on when the sender fires (or is
    /// dropped).
    /// Holds back the return of the next checkpoint of `thread` written under a claim, once
    /// it is written: the first receiver fires then; it returns when the sender fires.
    pub(crate) fn hold_after_checkpoint_of(
        &self,
        thread: &str,
    ) -> (oneshot::Receiver<()>, oneshot::Sender<()>) {
        let (written_tx, written_rx) = oneshot::channel();
        let (go_tx, go_rx) = oneshot::channel();
        *self.held_after_checkpoint.lock().unwrap() = Some((thread.to_owned(), written_tx, go_rx));
        (written_rx, go_tx)
    }

    pub(crate) fn hold_next_wake_read(&self) -> (oneshot::Receiver<()>, oneshot::Sender<()>) {
        let (called_tx, called_rx) = oneshot::channel();
        let (go_tx, go_rx) = oneshot::channel();
        *self.held_wake_read.lock().unwrap() = Some((called_tx, go_rx));
        (called_rx, go_tx)
    }

    /// Holds back the next signal taken under a claim: the store is not asked until the
    /// returned sender fires or is dropped, and not at all if the taker gives up first.
    pub(crate) fn hold_next_signal_take(&self) -> oneshot::Sender<()> {
        self.hold_take(false)
    }

    /// As [`hold_next_signal_take`](Self::hold_next_signal_take), but the take reaches the
    /// store once let go even if the taker gave up first, as a write already on its way to a
    /// database commits.
    pub(crate) fn hold_next_signal_take_committing(&self) -> oneshot::Sender<()> {
        self.hold_take(true)
    }

    fn hold_take(&self, committing: bool) -> oneshot::Sender<()> {
        let (go_tx, go_rx) = oneshot::channel();
        *self.held_take.lock().unwrap() = Some((go_rx, committing));
        go_tx
    }

    /// Holds back the next journal write under a claim: the store is not asked until the
    /// returned sender fires or is dropped, and not at all if the writer gives up first.
    pub(crate) fn hold_next_journal_write(&self) -> oneshot::Sender<()> {
        hold(&self.held_journal)
    }

    /// Holds back the next signal taken outside any run (`try_take_signal`) until the
    /// returned sender fires or is dropped.
    /// Holds back the next signal taken outside a claim by `take_signal` (the removal of a
    /// signal received outside any run) until the returned sender fires or is dropped.
    pub(crate) fn hold_next_plain_take(&self) -> oneshot::Sender<()> {
        hold(&self.held_plain_take)
    }

    /// Holds back the next read of every pending signal (a runtime loading what the store
    /// keeps) until the returned sender fires or is dropped.
    /// Makes every renewal of `thread`'s lease hang, never answered.
    pub(crate) fn hang_renewals_of(&self, thread: &str) {
        *self.hung_renewals_of.lock().unwrap() = Some(thread.to_owned());
    }

    /// Makes every read of a run's row hang, never answered (the heartbeat reads rows for
    /// cancels with them).
    pub(crate) fn hang_run_reads(&self) {
        self.hung_run_reads.store(true, Ordering::SeqCst);
    }

    pub(crate) fn hold_next_pending_read(&self) -> oneshot::Sender<()> {
        hold(&self.held_pending_read)
    }

    /// Makes the next journal write under a claim fail without reaching the store.
    pub(crate) fn fail_next_journal_write_before_commit(&self) {
        (self.fail_journal_before_commit).store(true, Ordering::SeqCst);
    }

    /// Makes the next journal write under a claim of a step whose name starts with `prefix`
    /// fail without reaching the store.
    pub(crate) fn fail_journal_write_before_commit_named(&self, prefix: &str) {
        *self.lose_journal_named.lock().unwrap() = Some(prefix.to_owned());
    }

    /// Makes the next journal write under a claim commit and then fail.
    pub(crate) fn fail_next_journal_write_after_commit(&self) {
        (self.fail_journal_after_commit).store(true, Ordering::SeqCst);
    }

    /// Whether the next committed journal write is armed to fail, disarming it if so.
    fn journal_write_armed(&self) -> bool {
        self.fail_journal_after_commit.swap(false, Ordering::SeqCst)
    }

    pub(crate) fn hold_next_try_take(&self) -> oneshot::Sender<()> {
        hold(&self.held_try_take)
    }

    /// Fails the next signal taken outside any run (`try_take_signal`), without asking the
    /// store, as a broken connection would.
    pub(crate) fn fail_next_try_take(&self) {
        self.fail_try_take.store(true, Ordering::SeqCst);
    }

    /// Fails the next `n` signals taken outside a claim by `take_signal` (the removal of a
    /// signal received outside any run), taking nothing, as a broken connection would.
    pub(crate) fn fail_next_plain_takes(&self, n: usize) {
        self.fail_plain_takes.store(n, Ordering::SeqCst);
    }

    /// How many signals were taken outside a claim by `take_signal` so far, failed or not.
    pub(crate) fn plain_takes(&self) -> usize {
        self.plain_takes.load(Ordering::SeqCst)
    }

    /// Fails the next read of the signals stored after a sequence number (`signals_after`),
    /// as a dropped connection would.
    pub(crate) fn fail_next_signals_after(&self) {
        self.fail_signals_after.store(true, Ordering::SeqCst);
    }

    /// Fails the next signal taken under a run's claim (`take_signal_claimed`), taking
    /// nothing, as a dropped connection would.
    pub(crate) fn fail_next_claimed_take(&self) {
        self.fail_claimed_take.store(true, Ordering::SeqCst);
    }

    /// How many `signals_after` reads failed so far.
    pub(crate) fn signals_after_faults(&self) -> usize {
        self.signals_after_faults.load(Ordering::SeqCst)
    }

    /// How many signal takes outside any run failed so far.
    pub(crate) fn try_take_faults(&self) -> usize {
        self.try_take_faults.load(Ordering::SeqCst)
    }

    /// How many times the oldest kept signal of a (session, name) was read so far.
    pub(crate) fn kept_signal_reads(&self) -> usize {
        self.kept_signal_reads.load(Ordering::SeqCst)
    }

    /// How many checkpoint writes failed so far.
    pub(crate) fn checkpoint_faults(&self) -> usize {
        self.checkpoint_faults.load(Ordering::SeqCst)
    }

    fn checkpoint_fault(&self, thread: &str) -> Result<(), StoreError> {
        let armed = self.fail_checkpoints.load(Ordering::SeqCst);
        if armed {
            self.checkpoint_faults.fetch_add(1, Ordering::SeqCst);
        }
        match armed {
            true => Err(StoreError::Write {
                thread: thread.to_owned(),
                message: "injected: the disk is full".to_owned(),
            }),
            false => Ok(()),
        }
    }
}

/// `inner`, with the faults of `faults`.
/// Arms `slot` to hold back the call that takes it until the returned sender fires (or is
/// dropped).
/// A thread whose next checkpoint is held once written: who to tell, what to wait for.
type HeldAfter = (String, oneshot::Sender<()>, oneshot::Receiver<()>);

fn hold(slot: &Mutex<Option<oneshot::Receiver<()>>>) -> oneshot::Sender<()> {
    let (go_tx, go_rx) = oneshot::channel();
    *slot.lock().unwrap() = Some(go_rx);
    go_tx
}

pub(crate) struct FaultyStore<S> {
    inner: Arc<S>,
    faults: Arc<Faults>,
}

impl Faults {
    /// The failure of a journal write armed to fail before it reaches the store, disarming it.
    fn journal_write_lost(&self, name: &str, owner: &str) -> Option<StoreError> {
        let named = {
            let mut named = self.lose_journal_named.lock().unwrap();
            let armed = named
                .as_deref()
                .is_some_and(|prefix| name.starts_with(prefix));
            if armed {
                *named = None;
            }
            armed
        };
        (named
            || self
                .fail_journal_before_commit
                .swap(false, Ordering::SeqCst))
        .then(|| StoreError::Write {
            thread: owner.to_owned(),
            message: "connection reset before the write reached the store (armed fault)".to_owned(),
        })
    }

    /// What a journal write that `written` says returns: a committed write fails when armed.
    fn after_journal_write(
        &self,
        owner: &str,
        written: Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        match written {
            Ok(()) if self.journal_write_armed() => Err(StoreError::Write {
                thread: owner.to_owned(),
                message: "connection reset while committing (armed fault)".to_owned(),
            }),
            written => written,
        }
    }
}

impl<S: Store> FaultyStore<S> {
    pub(crate) fn new(inner: S) -> (Self, Arc<Faults>) {
        let faults = Arc::new(Faults::default());
        let store = Self {
            inner: Arc::new(inner),
            faults: Arc::clone(&faults),
        };
        (store, faults)
    }
}

impl<S: Store> Store for FaultyStore<S> {
    fn is_durable(&self) -> bool {
        self.inner.is_durable()
    }

    fn writes_json_bodies(&self) -> bool {
        self.inner.writes_json_bodies()
    }

    fn put_checkpoint(&self, checkpoint: Checkpoint) -> BoxFuture<'_, Result<u64, StoreError>> {
        self.inner.put_checkpoint(checkpoint)
    }

    fn latest_checkpoint<'a>(
        &'a self,
        thread: &'a str,
        namespace: &'a str,
    ) -> BoxFuture<'a, Result<Option<Checkpoint>, StoreError>> {
        self.inner.latest_checkpoint(thread, namespace)
    }

    fn get_checkpoint<'a>(
        &'a self,
        thread: &'a str,
        id: u64,
    ) -> BoxFuture<'a, Result<Option<Checkpoint>, StoreError>> {
        self.inner.get_checkpoint(thread, id)
    }

    fn list_checkpoints<'a>(
        &'a self,
        thread: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Checkpoint>, StoreError>> {
        self.inner.list_checkpoints(thread)
    }

    fn put_journal(&self, key: JournalKey, value: Value) -> BoxFuture<'_, Result<(), StoreError>> {
        self.inner.put_journal(key, value)
    }

    fn get_journal<'a>(
        &'a self,
        key: &'a JournalKey,
    ) -> BoxFuture<'a, Result<Option<Value>, StoreError>> {
        self.inner.get_journal(key)
    }

    fn list_journal<'a>(
        &'a self,
        thread: &'a str,
        run: u64,
    ) -> BoxFuture<'a, Result<Vec<(JournalKey, Value)>, StoreError>> {
        self.inner.list_journal(thread, run)
    }

    fn push_signal(&self, signal: StoredSignal) -> BoxFuture<'_, Result<SignalPush, StoreError>> {
        let held = self.faults.held_push.lock().unwrap().take();
        Box::pin(async move {
            let pushed = self.inner.push_signal(signal).await;
            if let Some((stored, go)) = held {
                let _ = stored.send(());
                let _ = go.await;
            }
            pushed
        })
    }

    fn take_signal<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
        journal: Option<(JournalKey, Value)>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let held = self.faults.held_plain_take.lock().unwrap().take();
        let plain = journal.is_none();
        if plain {
            self.faults.plain_takes.fetch_add(1, Ordering::SeqCst);
        }
        let failing = |n: usize| n.checked_sub(1);
        let fail = plain
            && (self.faults.fail_plain_takes)
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, failing)
                .is_ok();
        Box::pin(async move {
            if let Some(go) = held {
                let _ = go.await;
            }
            if fail {
                return Err(StoreError::Write {
                    thread: session.to_owned(),
                    message: "injected: the connection broke".to_owned(),
                });
            }
            self.inner.take_signal(session, seq, journal).await
        })
    }

    fn discard_signal<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.discard_signal(session, seq)
    }

    fn pending_signals(&self) -> BoxFuture<'_, Result<Vec<StoredSignal>, StoreError>> {
        let held = self.faults.held_pending_read.lock().unwrap().take();
        Box::pin(async move {
            if let Some(go) = held {
                let _ = go.await;
            }
            self.inner.pending_signals().await
        })
    }

    /// Forwarded: the default sees pending signals only, not the consumed keys a store
    /// keeps.
    fn signal_key_seen<'a>(
        &'a self,
        session: &'a str,
        name: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.inner.signal_key_seen(session, name, key)
    }

    fn oldest_signal<'a>(
        &'a self,
        session: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoredSignal>, StoreError>> {
        self.faults.kept_signal_reads.fetch_add(1, Ordering::SeqCst);
        if self.faults.fail_oldest.swap(false, Ordering::SeqCst) {
            return Box::pin(std::future::ready(Err(StoreError::Read {
                thread: session.to_owned(),
                message: "the connection was reset".to_owned(),
            })));
        }
        let held = self.faults.held_oldest.lock().unwrap().take();
        Box::pin(async move {
            let read = self.inner.oldest_signal(session, name).await;
            if let Some((done, go)) = held {
                let _ = done.send(());
                let _ = go.await;
            }
            read
        })
    }

    fn prune_signals<'a>(
        &'a self,
        sent_before_ms: u64,
        spare: &'a [String],
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        self.inner.prune_signals(sent_before_ms, spare)
    }

    fn signals_after(&self, seq: u64) -> BoxFuture<'_, Result<Vec<StoredSignal>, StoreError>> {
        if self.faults.fail_signals_after.swap(false, Ordering::SeqCst) {
            self.faults
                .signals_after_faults
                .fetch_add(1, Ordering::SeqCst);
            return Box::pin(async {
                Err(StoreError::Read {
                    thread: String::new(),
                    message: "injected: the connection dropped".to_owned(),
                })
            });
        }
        self.inner.signals_after(seq)
    }

    fn claim<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
        lease_until_ms: u64,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        self.inner.claim(thread, owner, lease_until_ms, now_ms)
    }

    fn release<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.release(thread, owner)
    }

    fn release_runnable<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.release_runnable(thread, owner)
    }

    fn renew_claim<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        if self.faults.hung_renewals_of.lock().unwrap().as_deref() == Some(thread) {
            return Box::pin(std::future::pending());
        }
        self.inner.renew_claim(thread, owner, lease_until_ms)
    }

    fn put_checkpoint_claimed<'a>(
        &'a self,
        checkpoint: Checkpoint,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        if let Err(fault) = self.faults.checkpoint_fault(&checkpoint.thread) {
            return Box::pin(std::future::ready(Err(fault)));
        }
        let held = {
            let mut slot = self.faults.held_after_checkpoint.lock().unwrap();
            match slot.as_ref() {
                Some((thread, _, _)) if *thread == checkpoint.thread => slot.take(),
                _ => None,
            }
        };
        Box::pin(async move {
            let written = self
                .inner
                .put_checkpoint_claimed(checkpoint, owner, lease_until_ms)
                .await;
            if let Some((_, said, go)) = held {
                let _ = said.send(());
                let _ = go.await;
            }
            written
        })
    }

    fn put_checkpoint_and_release<'a>(
        &'a self,
        checkpoint: Checkpoint,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        if let Err(fault) = self.faults.checkpoint_fault(&checkpoint.thread) {
            return Box::pin(std::future::ready(Err(fault)));
        }
        self.inner.put_checkpoint_and_release(checkpoint, owner)
    }

    fn put_journal_claimed<'a>(
        &'a self,
        key: JournalKey,
        value: Value,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let held = self.faults.held_journal.lock().unwrap().take();
        Box::pin(async move {
            if let Some(go) = held {
                let _ = go.await;
            }
            if let Some(lost) = self.faults.journal_write_lost(&key.name, owner) {
                return Err(lost);
            }
            let written = (self.inner)
                .put_journal_claimed(key, value, owner, lease_until_ms)
                .await;
            self.faults.after_journal_write(owner, written)
        })
    }

    fn put_journal_audited<'a>(
        &'a self,
        key: JournalKey,
        value: Value,
        audit: Vec<AuditEntry>,
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let held = self.faults.held_journal.lock().unwrap().take();
        Box::pin(async move {
            if let Some(go) = held {
                let _ = go.await;
            }
            if let Some(lost) = self.faults.journal_write_lost(&key.name, owner) {
                return Err(lost);
            }
            let written = (self.inner)
                .put_journal_audited(key, value, audit, owner, lease_until_ms)
                .await;
            self.faults.after_journal_write(owner, written)
        })
    }

    fn take_signal_claimed<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
        journal: (JournalKey, Value),
        owner: &'a str,
        lease_until_ms: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        if self.faults.fail_claimed_take.swap(false, Ordering::SeqCst) {
            return Box::pin(async move {
                Err(StoreError::Write {
                    thread: session.to_owned(),
                    message: "injected: the connection dropped".to_owned(),
                })
            });
        }
        let held = self.faults.held_take.lock().unwrap().take();
        if let Some((go, true)) = held {
            let (inner, session, owner) = (
                Arc::clone(&self.inner),
                session.to_owned(),
                owner.to_owned(),
            );
            let take = tokio::spawn(async move {
                let _ = go.await;
                let take =
                    inner.take_signal_claimed(&session, seq, journal, &owner, lease_until_ms);
                take.await
            });
            return Box::pin(async move { take.await.unwrap() });
        }
        Box::pin(async move {
            if let Some((go, _)) = held {
                let _ = go.await;
            }
            (self.inner)
                .take_signal_claimed(session, seq, journal, owner, lease_until_ms)
                .await
        })
    }

    fn try_take_signal<'a>(
        &'a self,
        session: &'a str,
        seq: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let held = self.faults.held_try_take.lock().unwrap().take();
        let fail = self.faults.fail_try_take.swap(false, Ordering::SeqCst);
        Box::pin(async move {
            if let Some(go) = held {
                let _ = go.await;
            }
            if fail {
                self.faults.try_take_faults.fetch_add(1, Ordering::SeqCst);
                return Err(StoreError::Write {
                    thread: session.to_owned(),
                    message: "injected: the connection broke".to_owned(),
                });
            }
            self.inner.try_take_signal(session, seq).await
        })
    }

    fn submit_run<'a>(
        &'a self,
        thread: &'a str,
        graph: &'a str,
        input: Value,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Submitted, StoreError>> {
        self.inner.submit_run(thread, graph, input, now_ms)
    }

    fn claim_next_run<'a>(
        &'a self,
        graphs: &'a [String],
        owner: &'a str,
        lease_until_ms: u64,
        now_ms: u64,
        due_ms: u64,
    ) -> BoxFuture<'a, Result<Option<ClaimedRun>, StoreError>> {
        if self.faults.panic_claim.swap(false, Ordering::SeqCst) {
            panic!("a store bug in claim_next_run");
        }
        self.inner
            .claim_next_run(graphs, owner, lease_until_ms, now_ms, due_ms)
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
        self.inner
            .claim_waiting_run(thread, signal, graphs, owner, lease_until_ms, now_ms)
    }

    fn get_run<'a>(
        &'a self,
        thread: &'a str,
    ) -> BoxFuture<'a, Result<Option<RunRecord>, StoreError>> {
        if self.faults.hung_run_reads.load(Ordering::SeqCst) {
            return Box::pin(std::future::pending());
        }
        let held = self.faults.held_read.lock().unwrap().take();
        Box::pin(async move {
            let row = self.inner.get_run(thread).await;
            if let Some((read, go)) = held {
                let _ = read.send(());
                let _ = go.await;
            }
            row
        })
    }

    fn list_runs<'a>(
        &'a self,
        filter: &'a RunFilter,
    ) -> BoxFuture<'a, Result<Vec<RunRecord>, StoreError>> {
        self.inner.list_runs(filter)
    }

    fn request_cancel<'a>(
        &'a self,
        thread: &'a str,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Option<RunRecord>, StoreError>> {
        self.inner.request_cancel(thread, now_ms)
    }

    fn finish_run<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
        state: RunState,
        error: Option<String>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        if self.faults.fail_finish.swap(false, Ordering::SeqCst) {
            let failed = StoreError::Write {
                thread: thread.to_owned(),
                message: "connection reset (armed fault)".to_owned(),
            };
            return Box::pin(std::future::ready(Err(failed)));
        }
        self.inner.finish_run(thread, owner, state, error)
    }

    fn delete_thread<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<loomflow::runtime::DeletedThread, StoreError>> {
        let Some((deleted, go)) = self.faults.held_delete.lock().unwrap().take() else {
            return Box::pin(std::future::ready(Err(StoreError::Unsupported {
                operation: "delete_thread",
                thread: thread.to_owned(),
            })));
        };
        Box::pin(async move {
            let result = self.inner.delete_thread(thread, owner).await;
            let _ = deleted.send(());
            let _ = go.await;
            result
        })
    }

    fn next_wake_at_ms<'a>(
        &'a self,
        graphs: &'a [String],
        due_ms: u64,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        let held = self.faults.held_wake_read.lock().unwrap().take();
        Box::pin(async move {
            if let Some((called, go)) = held {
                let _ = called.send(());
                let _ = go.await;
            }
            self.inner.next_wake_at_ms(graphs, due_ms).await
        })
    }

    fn change_counter(&self) -> Option<u64> {
        self.inner.change_counter()
    }

    fn change_notifier(&self) -> Option<Arc<tokio::sync::Notify>> {
        self.inner.change_notifier()
    }

    fn append_audit(&self, entries: Vec<AuditEntry>) -> BoxFuture<'_, Result<(), StoreError>> {
        self.inner.append_audit(entries)
    }

    fn audit<'a>(
        &'a self,
        query: &'a AuditQuery,
    ) -> BoxFuture<'a, Result<Vec<AuditEntry>, StoreError>> {
        self.inner.audit(query)
    }

    fn prune_audit(&self, before_ms: u64) -> BoxFuture<'_, Result<u64, StoreError>> {
        self.inner.prune_audit(before_ms)
    }
}
