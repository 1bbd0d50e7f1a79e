//! Claims: at most one execution of a thread's run at a time, across tasks and processes.
//!
//! Every execution of a run (a start, a resume, a recover) claims its thread in the store
//! before it reads where the run stands, and holds the claim until it stops. The claim is a
//! lease: an owner id and an expiry. Each checkpoint, journal entry and consumed signal is
//! written under it ([`Store::put_checkpoint_claimed`] and its siblings), which checks, in the
//! same transaction, that the lease is still ours and extends it; a heartbeat extends it in
//! between, so a long node does not lose it. A process that dies stops renewing, and once
//! its lease expires another process may claim the run and carry it on. A process that lost
//! its lease (it stalled past the expiry and someone took over) fails at its next write and
//! writes nothing more.
//!
//! The owner id is the runtime's (the process id and a random part) plus a number per
//! execution, so two executions in one process are as distinct as two processes.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::clock::{from_unix_ms, now_ms};
use super::owner::OwnerId;
use super::store::NO_PLACE;
use super::store::{AuditEntry, Claim, JournalKey, Store, StoreError};
use super::{Runtime, RuntimeError};

mod abandon;
mod checkpoints;
mod letting_go;
mod live;
mod request;
mod reserve;
mod session;

pub(crate) use live::LiveClaims;

/// How long a claim lasts without being renewed, unless the runtime sets its own.
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// The longest lease: a century. Stores keep expiry times as signed 64-bit milliseconds.
pub(crate) const MAX_LEASE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `lease` within what a claim can take: at least a millisecond, at most [`MAX_LEASE`].
pub(crate) fn bounded_lease(lease: Duration) -> Duration {
    lease.clamp(Duration::from_millis(1), MAX_LEASE)
}

/// The first pause between two claim attempts of a caller that waits; it doubles up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(2);
const MAX_BACKOFF: Duration = Duration::from_millis(100);

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A runtime's owner id: the process and a random part, so that two runtimes (in one
/// process or in two) never share one.
pub(crate) fn runtime_owner_id() -> String {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!(
        "pid{}-{:08x}",
        std::process::id(),
        hasher.finish() & 0xffff_ffff
    )
}

/// The claim of one execution on its thread's run. Clones share it (a run and its
/// subgraphs, the background checkpoint writer).
///
/// Dropping the last clone without [`release`](Self::release) (an aborted run) releases it
/// on a best-effort basis; if that does not reach the store, the lease expires.
#[derive(Clone)]
pub(crate) struct RunClaim {
    inner: Arc<ClaimInner>,
}

struct ClaimInner {
    store: Arc<dyn Store>,
    /// Shared with the execution's own name for it: a claim copies no string.
    thread: Arc<str>,
    /// The thread's place in the memory store, for the writes under the claim to find its
    /// slot by; [`NO_PLACE`] in another store, or for a claim taken through the `Store` API.
    place: usize,
    /// Shared with the run's row when the claim is taken in line (a memory store's), which
    /// then keeps no text of it.
    owner: OwnerId,
    /// The owner id as text, for a store that takes it: written on first use.
    owner_text: OnceLock<Arc<str>>,
    lease: Duration,
    /// The expiry last written, in ms since the Unix epoch.
    until_ms: AtomicU64,
    /// When the claim was taken, in ms since the Unix epoch.
    claimed_at_ms: u64,
    lost: AtomicBool,
    released: AtomicBool,
    /// The execution stopped without letting go: it holds resume requests it did not
    /// checkpoint past (see [`request`]), and the store did not take its release. The claim
    /// is no longer renewed, and its lease runs out for the next execution to claim the run
    /// and apply them.
    stopped: AtomicBool,
    /// The write that releases the claim is on its way: a renewal refused meanwhile is not a
    /// lost lease.
    releasing: AtomicBool,
    /// Someone asked the run to stop (in this process, or seen on the run's row).
    cancel: AtomicBool,
    /// Wakes what a node waits on (a signal, a sleep) when `cancel` is set.
    cancelled: tokio::sync::Notify,
    /// The worker executing the run shuts down: the run stops at its next superstep and
    /// lets go, for another worker to carry on.
    yield_requested: AtomicBool,
    /// For a run a worker executes: how long a wait with nothing to receive parks in memory
    /// before it suspends the run. `None`: waits park for as long as they wait.
    park_grace: Option<Duration>,
    /// The resume requests the execution took, until a checkpoint past them (see
    /// [`request`]).
    request: request::TakenRequest,
    /// A fresh `Exit` run's start, until its first journal entry (see [`reserve`]).
    reserved: reserve::ReservedStart,
    /// The thread's signal session, once something needed it (see [`session`]).
    session: session::RunSession,
    /// Why the run failed, once the execution said so (see [`abandon`]).
    failed: OnceLock<String>,
}

impl std::fmt::Debug for RunClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunClaim")
            .field("thread", &self.inner.thread)
            .field("owner", &format_args!("{}", self.inner.owner))
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Claims `thread`'s run for a new execution. With `wait`, a busy run is claimed again
    /// after short pauses until it is free or `wait` has passed.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::Busy`], naming the holder and its lease's expiry, when another
    /// execution holds the run (past `wait`); a store failure.
    pub(crate) async fn claim_run(
        &self,
        thread: &Arc<str>,
        wait: Option<Duration>,
    ) -> Result<RunClaim, RuntimeError> {
        if thread.trim().is_empty() {
            return Err(RuntimeError::EmptyThread);
        }
        let owner = self.next_owner();
        let lease = self.inner.lease;
        // On tokio's clock, as the pauses are: under paused time it moves with them.
        let deadline = wait.map(crate::runtime::clock::instant_after);
        let mut backoff = FIRST_BACKOFF;
        // The owner id as text, for a store that takes it: the memory store needs none.
        let text = OnceLock::new();
        loop {
            let now = now_ms();
            let until = now.saturating_add(millis(lease));
            let (claimed, place) = match self.store().as_memory() {
                Some(memory) => memory.claim_now(thread, &owner, until, now)?,
                None => {
                    let text = text.get_or_init(|| owner.to_text());
                    (
                        self.store().claim(thread, text, until, now).await?,
                        NO_PLACE,
                    )
                }
            };
            match claimed {
                Claim::Claimed => {
                    let claim = RunClaim::new(
                        Arc::clone(self.store()),
                        (Arc::clone(thread), place),
                        (owner, text),
                        lease,
                        until,
                        None,
                    );
                    self.inner.live_claims.insert(&claim);
                    return Ok(claim);
                }
                Claim::Busy {
                    owner: holder,
                    until_ms,
                } => {
                    let left = deadline
                        .and_then(|d| d.checked_duration_since(tokio::time::Instant::now()))
                        .filter(|left| !left.is_zero());
                    let Some(left) = left else {
                        return Err(RuntimeError::Busy {
                            thread: thread.to_string(),
                            owner: holder,
                            until: from_unix_ms(until_ms),
                        });
                    };
                    tokio::time::sleep(backoff.min(left)).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }
}

impl Runtime {
    /// A new execution's owner id: the runtime's, and a number.
    pub(crate) fn next_owner(&self) -> OwnerId {
        let execution = self.inner.executions.fetch_add(1, Ordering::Relaxed);
        OwnerId::of_execution(&self.inner.owner, execution)
    }

    /// Wraps a claim `owner` already took in the store (a worker's), until `until_ms`, with
    /// leases of `lease`; its waits park at most `park_grace` before suspending.
    pub(crate) fn adopt_claim(
        &self,
        thread: &str,
        owner: Arc<str>,
        lease: Duration,
        until_ms: u64,
        park_grace: Option<Duration>,
    ) -> RunClaim {
        let store = Arc::clone(self.store());
        let owner = (
            OwnerId::from_text(Arc::clone(&owner)),
            OnceLock::from(owner),
        );
        let thread = (Arc::from(thread), NO_PLACE);
        let claim = RunClaim::new(store, thread, owner, lease, until_ms, park_grace);
        self.inner.live_claims.insert(&claim);
        claim
    }
}

impl RunClaim {
    fn new(
        store: Arc<dyn Store>,
        (thread, place): (Arc<str>, usize),
        (owner, owner_text): (OwnerId, OnceLock<Arc<str>>),
        lease: Duration,
        until_ms: u64,
        park_grace: Option<Duration>,
    ) -> Self {
        Self {
            inner: Arc::new(ClaimInner {
                store,
                thread,
                place,
                owner,
                owner_text,
                lease,
                until_ms: AtomicU64::new(until_ms),
                claimed_at_ms: until_ms.saturating_sub(millis(lease)),
                lost: AtomicBool::new(false),
                released: AtomicBool::new(false),
                stopped: AtomicBool::new(false),
                releasing: AtomicBool::new(false),
                cancel: AtomicBool::new(false),
                cancelled: tokio::sync::Notify::new(),
                yield_requested: AtomicBool::new(false),
                park_grace,
                request: request::TakenRequest::default(),
                reserved: reserve::ReservedStart::default(),
                session: session::RunSession::default(),
                failed: OnceLock::new(),
            }),
        }
    }

    /// The thread claimed.
    pub(crate) fn thread(&self) -> &str {
        &self.inner.thread
    }

    /// The thread's place in the memory store (see `MemoryStore::claim_now`): any other
    /// store, or a claim taken through the `Store` API, has [`NO_PLACE`].
    pub(crate) fn place(&self) -> usize {
        self.inner.place
    }

    /// The owner id as text, as a store other than the memory store takes it.
    fn owner_text(&self) -> &str {
        self.inner.owner_text()
    }

    /// When the claim was taken, in ms since the Unix epoch: when its execution picked the
    /// run up.
    pub(crate) fn claimed_at_ms(&self) -> u64 {
        self.inner.claimed_at_ms
    }

    /// Whether someone asked the run to stop.
    pub(crate) fn cancel_requested(&self) -> bool {
        self.inner.cancel.load(Ordering::Acquire)
    }

    /// Asks the run to stop: its row said so when the claim was taken (a cancel asked for
    /// while another execution held it).
    pub(crate) fn request_cancel(&self) {
        self.inner.cancel.store(true, Ordering::Release);
    }

    /// Whether someone asked the run to stop, here or on its row (another process, or
    /// another runtime sharing the store): what a run about to suspend looks at, since such
    /// a cancel otherwise reaches it only at the next look at its row, after it let go; and
    /// what a resume or a recover looks at before its first step.
    pub(crate) async fn cancel_asked(&self) -> Result<bool, StoreError> {
        if let Some(asked) = self.cancel_asked_now() {
            return asked;
        }
        let asked = (self.inner.store.get_run(&self.inner.thread).await?)
            .is_some_and(|row| row.cancel_requested);
        if asked {
            self.request_cancel();
        }
        Ok(asked)
    }

    /// [`cancel_asked`](Self::cancel_asked) when it needs no wait: the flag is set, or the
    /// store is the memory store; `None` when the row must be read.
    pub(crate) fn cancel_asked_now(&self) -> Option<Result<bool, StoreError>> {
        if self.cancel_requested() {
            return Some(Ok(true));
        }
        let memory = self.inner.store.as_memory()?;
        let asked = memory.cancel_requested_now(&self.inner.thread);
        if let Ok(true) = asked {
            self.request_cancel();
        }
        Some(asked)
    }

    /// `work` (a node's wait: a signal, a sleep), unless the run is asked to stop first:
    /// then [`RunError::Cancelled`](crate::RunError::Cancelled), and the executor ends the
    /// run as cancelled. Or unless the heartbeat finds the lease lost (another execution
    /// took the run over): then the lost lease's error, and the execution stops.
    pub(crate) async fn unless_cancelled<T>(
        &self,
        work: impl Future<Output = T>,
    ) -> Result<T, crate::RunError> {
        let cancelled = self.inner.cancelled.notified();
        tokio::pin!(cancelled);
        // Registered before the flags are read: a cancel or a loss after the read wakes it.
        cancelled.as_mut().enable();
        let stopped = || match self.is_lost() {
            true => crate::RunError::from(self.lost_error()),
            false => crate::RunError::Cancelled {
                thread: self.inner.thread.to_string(),
            },
        };
        if self.cancel_requested() || self.is_lost() {
            return Err(stopped());
        }
        tokio::select! {
            done = work => Ok(done),
            () = cancelled => Err(stopped()),
        }
    }

    /// Whether the execution is over: released, stopped holding resume requests, or its
    /// lease lost.
    pub(crate) fn is_done(&self) -> bool {
        !live::holds(&self.inner)
    }

    /// Asks the run to stop at its next superstep and let go (its worker shuts down).
    pub(crate) fn request_yield(&self) {
        self.inner.yield_requested.store(true, Ordering::Release);
    }

    /// Whether the run should stop at its next superstep and let go.
    pub(crate) fn yield_requested(&self) -> bool {
        self.inner.yield_requested.load(Ordering::Acquire)
    }

    /// How long a wait with nothing to receive parks before suspending the run: `Some` for
    /// runs a worker executes.
    pub(crate) fn park_grace(&self) -> Option<Duration> {
        self.inner.park_grace
    }

    /// Whether a write (or the heartbeat) found the lease taken by another execution.
    pub(crate) fn is_lost(&self) -> bool {
        self.inner.lost.load(Ordering::Acquire)
    }

    /// The error of a lost lease.
    pub(crate) fn lost_error(&self) -> StoreError {
        StoreError::LeaseLost {
            thread: self.inner.thread.to_string(),
            owner: self.owner_text().to_owned(),
        }
    }

    fn next_expiry(&self) -> u64 {
        now_ms().saturating_add(millis(self.inner.lease))
    }

    /// Runs a write under the claim: refused at once when the lease is known to be lost;
    /// records a loss, or the new expiry.
    async fn fenced<T>(
        &self,
        until: u64,
        write: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        if self.is_lost() {
            return Err(self.lost_error());
        }
        self.settle(until, write.await)
    }

    /// Records what a write under the claim found: a loss, or the new expiry.
    fn settle<T>(&self, until: u64, written: Result<T, StoreError>) -> Result<T, StoreError> {
        match written {
            Ok(value) => {
                self.inner.until_ms.fetch_max(until, Ordering::AcqRel);
                Ok(value)
            }
            Err(error @ StoreError::LeaseLost { .. }) => {
                self.lose();
                Err(error)
            }
            Err(error) => Err(error),
        }
    }

    /// Journals a step's result under the claim, with the audit entries recorded since the
    /// last write in the same write.
    pub(crate) async fn put_journal_audited(
        &self,
        key: JournalKey,
        value: Value,
        mut audit: Vec<AuditEntry>,
    ) -> Result<(), StoreError> {
        self.write_reserved_start().await?;
        let until = self.next_expiry();
        let store = &self.inner.store;
        if let Some(memory) = store.as_memory() {
            if self.is_lost() {
                return Err(self.lost_error());
            }
            let audit = (audit, Some((&self.inner.thread, self.inner.place)));
            let owner = &self.inner.owner;
            let written = memory.put_journal_claimed_now((key, value), audit, owner, until);
            return self.settle(until, written);
        }
        let owner = self.owner_text();
        self.entries_named(&mut audit);
        let write = match audit.is_empty() {
            true => store.put_journal_claimed(key, value, owner, until),
            false => store.put_journal_audited(key, value, audit, owner, until),
        };
        self.fenced(until, write).await
    }

    /// Consumes a stored signal and journals it under the claim; `false` when another
    /// consumer took it first (nothing was journaled).
    pub(crate) async fn take_signal(
        &self,
        session: &str,
        seq: u64,
        journal: (JournalKey, Value),
    ) -> Result<bool, StoreError> {
        self.write_reserved_start().await?;
        let until = self.next_expiry();
        let store = &self.inner.store;
        self.fenced(
            until,
            store.take_signal_claimed(session, seq, journal, self.owner_text(), until),
        )
        .await
    }

    /// Makes sure the claim is still ours before acting on the world (a journaled step's
    /// side effect): fails if it is known to be lost, and renews it in the store when less
    /// than half of the lease is left (the heartbeat may have stalled).
    pub(crate) async fn ensure_held(&self) -> Result<(), StoreError> {
        if self.is_lost() {
            return Err(self.lost_error());
        }
        let left = self
            .inner
            .until_ms
            .load(Ordering::Acquire)
            .saturating_sub(now_ms());
        if left >= millis(self.inner.lease) / 2 {
            return Ok(());
        }
        let until = self.next_expiry();
        let store = &self.inner.store;
        self.fenced(
            until,
            store.renew_claim(&self.inner.thread, self.owner_text(), until),
        )
        .await
    }

    /// Notes that the lease is lost, as a write found: a node waiting in memory (a signal,
    /// a sleep, room in a stream) stops waiting, as when the heartbeat finds the loss.
    pub(super) fn lose(&self) {
        self.inner.lost.store(true, Ordering::Release);
        self.inner.cancelled.notify_waiters();
    }
}

impl ClaimInner {
    fn owner_text(&self) -> &str {
        self.owner_text.get_or_init(|| self.owner.to_text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_ids_differ_between_runtimes() {
        assert_ne!(runtime_owner_id(), runtime_owner_id());
    }
}
