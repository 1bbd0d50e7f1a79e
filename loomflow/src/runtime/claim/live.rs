//! The claims live in one runtime: found by thread for a cancel, and renewed together by
//! one heartbeat.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use super::{ClaimInner, RunClaim, millis};
use crate::runtime::clock::now_ms;
use crate::runtime::store::StoreError;

/// The claims executing in this runtime, by thread: a cancel reaches them at once, and one
/// heartbeat renews them all.
///
/// The heartbeat is one task for the whole runtime, running while it has claims, rather
/// than one per claim: starting and stopping a task for every run cost a handoff between
/// threads on every invoke and every resume.
#[derive(Default)]
pub(crate) struct LiveClaims {
    shared: Arc<LiveShared>,
}

#[derive(Default)]
struct LiveShared {
    /// By thread, hashed with foldhash as the memory store's maps are: every execution
    /// inserts its claim.
    claims:
        Mutex<std::collections::HashMap<Arc<str>, Weak<ClaimInner>, foldhash::fast::RandomState>>,
    /// The heartbeat task, while there is one.
    beating: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// How often it beats, in ms: a third of the shortest lease it has seen.
    every_ms: AtomicU64,
}

impl LiveClaims {
    pub(super) fn insert(&self, claim: &RunClaim) {
        {
            let mut claims = crate::sync::lock(&self.shared.claims);
            if claims.len() >= 64 && claims.len().is_power_of_two() {
                claims.retain(|_, claim| claim.strong_count() > 0);
            }
            claims.insert(
                Arc::clone(&claim.inner.thread),
                Arc::downgrade(&claim.inner),
            );
        }
        // Inserted before the heartbeat is looked at: a heartbeat that stops for want of
        // claims decides under this lock, after the insert, or leaves the slot empty here.
        let every = beat_for(claim.inner.lease);
        let mut beating = crate::sync::lock(&self.shared.beating);
        let stopped = beating
            .as_ref()
            .is_none_or(tokio::task::JoinHandle::is_finished);
        // A claim with a shorter lease than the heartbeat beats for (a worker's) needs it
        // sooner: the heartbeat starts again at its pace.
        let too_slow = millis(every) < self.shared.every_ms.load(Ordering::Acquire);
        if (stopped || too_slow)
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            if let Some(old) = beating.take() {
                old.abort();
            }
            self.shared.every_ms.store(millis(every), Ordering::Release);
            let shared = Arc::downgrade(&self.shared);
            *beating = Some(handle.spawn(heartbeat(shared, every)));
        }
    }

    /// Flags the claim executing `thread` in this process, if any; says whether there was one.
    pub(crate) fn cancel(&self, thread: &str) -> bool {
        let claim = crate::sync::lock(&self.shared.claims)
            .get(thread)
            .and_then(Weak::upgrade);
        match claim {
            Some(claim)
                if !claim.released.load(Ordering::Acquire)
                    && !claim.stopped.load(Ordering::Acquire) =>
            {
                claim.cancel.store(true, Ordering::Release);
                claim.cancelled.notify_waiters();
                true
            }
            _ => false,
        }
    }

    /// The claim of the execution in this process that still holds `thread`'s run, if any.
    pub(crate) fn running(&self, thread: &str) -> Option<RunClaim> {
        let claim = crate::sync::lock(&self.shared.claims)
            .get(thread)
            .and_then(Weak::upgrade)?;
        holds(&claim).then_some(RunClaim { inner: claim })
    }

    /// Whether an execution in this process still holds `thread`'s claim: once it has let
    /// go (or was dropped, or lost its lease), what it wrote is on the run's row.
    pub(crate) fn executing(&self, thread: &str) -> bool {
        self.running(thread).is_some()
    }
}

/// Whether `claim`'s execution still holds its run: it has not let go, nor stopped holding
/// resume requests (its lease runs out), nor lost its lease.
pub(super) fn holds(claim: &ClaimInner) -> bool {
    !claim.released.load(Ordering::Acquire)
        && !claim.stopped.load(Ordering::Acquire)
        && !claim.lost.load(Ordering::Acquire)
}

/// How often claims with `lease` need renewing: every third of it.
fn beat_for(lease: Duration) -> Duration {
    (lease / 3).max(Duration::from_millis(1))
}

/// Renews every live claim's lease every third of its length, and notices cancels asked for
/// from another process; stops when the runtime has no claim left (or is dropped).
async fn heartbeat(shared: Weak<LiveShared>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(live) = shared.upgrade() else { return };
        let claims: Vec<Arc<ClaimInner>> = {
            let mut beating = crate::sync::lock(&live.beating);
            let claims: Vec<Arc<ClaimInner>> = crate::sync::lock(&live.claims)
                .values()
                .filter_map(Weak::upgrade)
                .filter(|claim| holds(claim))
                .collect();
            if claims.is_empty() {
                // Decided under the lock an insert takes after adding its claim: either the
                // insert's claim is seen here, or the insert finds the slot empty and starts
                // a new heartbeat.
                beating.take();
                live.every_ms.store(u64::MAX, Ordering::Release);
                return;
            }
            claims
        };
        futures_util::future::join_all(claims.iter().map(|claim| renew(claim))).await;
    }
}

/// One heartbeat of one claim: extends its lease, and picks up a cancel from its run's row.
async fn renew(claim: &ClaimInner) {
    let until = now_ms().saturating_add(millis(claim.lease));
    match claim
        .store
        .renew_claim(&claim.thread, claim.owner_text(), until)
        .await
    {
        Ok(()) => {
            claim.until_ms.fetch_max(until, Ordering::AcqRel);
            // A cancel asked for from another process reaches the run here.
            if let Ok(Some(row)) = claim.store.get_run(&claim.thread).await
                && row.cancel_requested
            {
                claim.cancel.store(true, Ordering::Release);
                claim.cancelled.notify_waiters();
            }
        }
        // Released while the renewal was on its way: the run is over, nothing was lost.
        Err(StoreError::LeaseLost { .. })
            if claim.released.load(Ordering::Acquire)
                || claim.releasing.load(Ordering::Acquire) => {}
        Err(StoreError::LeaseLost { .. }) => {
            tracing::warn!(thread = %claim.thread, owner = %claim.owner, "lease lost: another execution claimed the run");
            claim.lost.store(true, Ordering::Release);
            // A node waiting in memory (a signal, a sleep) stops waiting: the run is no
            // longer this execution's to carry on.
            claim.cancelled.notify_waiters();
        }
        Err(error) => {
            tracing::warn!(thread = %claim.thread, %error, "could not renew the lease; retrying");
        }
    }
}
