//! The background worker's loop: look, claim, execute, nap.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use super::running::{Claims, Running, spawn};
use super::untried::Untried;
use super::{Result, STORE_RETRY, WorkerInner, nap};
use crate::runtime::clock::unix_ms;
use crate::runtime::store_told;

/// The worker's loop.
pub(super) async fn serve(inner: Arc<WorkerInner>, mut stop: watch::Receiver<bool>) -> Result<()> {
    let runtime = inner.runtime.clone();
    let store = Arc::clone(runtime.store());
    let mut running = Running::default();
    // Threads signalled here not claimed yet (no free slot, a claim failed), with the names:
    // given back however the loop ends (the handle dropped aborts it), for the next start
    // (memory keeps no row).
    let mut signalled = Untried::new(&inner.wakes);
    let mut seen_change: Option<u64> = None;
    let mut next_wake: Option<u64> = None;
    let mut look = true;
    // A lease that runs out changes nothing in the store: look for such runs (their worker
    // died) every half lease even when nothing changed.
    // Every half of the shorter lease, this worker's or the runtime's (direct runs').
    let sweep_every = (inner.lease.min(runtime.lease()) / 2).max(inner.poll_interval);
    let mut last_look = tokio::time::Instant::now();
    // A store that is told of changes (PostgreSQL's LISTEN) wakes the worker at once.
    let notifier = store.change_notifier();
    let mut notified = false;
    // A store that failed a claim, or the read of the next wake time, is tried again this
    // soon rather than at the next poll, which may be a minute away.
    let retry_after = inner.poll_interval.min(STORE_RETRY);
    // When the stop was first seen: the shutdown's timeout runs from then, whatever the
    // loop awaits at that moment.
    let stopped_at = OnceLock::new();
    // Looks in a row the store failed: each waits longer before the next (see
    // `nap::after_failures`).
    let mut failures = 0_u32;
    while !*stop.borrow() {
        // Listening from here, before the change counter is read (see `store_told`).
        let mut listening = std::pin::pin!(notifier.as_deref().map(Notify::notified));
        store_told::enable(listening.as_mut());
        // The store is asked here (claims, reads): raced against the shutdown's timeout, so
        // that a store that does not answer (a connection dead without a word) holds a
        // shutdown no longer than that. A claim given up half way is the store's: its lease
        // runs out, and another worker takes the run.
        let stopping = (stop.clone(), running.claims().clone());
        let looked = async {
            let mut failed = false;
            runtime.prune_if_due().await;
            match inner.unrecorded_signals().await {
                Ok(found) => signalled.extend(found),
                Err(error) => tracing::warn!(%error, "could not look for signalled runs"),
            }
            // Taken only when a run can be claimed: the inbox is bounded (and says when it
            // overflowed), this queue is not.
            // Once asked to stop, nothing more is claimed.
            let room = |running: &Running| running.len() < inner.concurrency && !*stop.borrow();
            if room(&running) {
                signalled.extend(inner.wakes.take_signalled());
            }
            // Taken off the queue once its claim is made: the loop aborted while it is made
            // leaves it there.
            while room(&running)
                && let Some((thread, name)) = signalled.front().cloned()
            {
                let claimed = inner.claim(Some((&thread, &name))).await;
                signalled.pop_front();
                match claimed {
                    Ok(Some((run, claim))) => spawn(&inner, &mut running, run, claim),
                    Ok(None) => {}
                    Err(error) => {
                        tracing::warn!(%error, %thread, "could not claim a signalled run; trying again shortly");
                        // Behind the others: a row that keeps failing holds none of them up.
                        signalled.push_back((thread, name));
                        failed = true;
                        break;
                    }
                }
            }
            // A change in the store (this process's writes count too) is looked at no more
            // than once per poll interval: under load, the signalled threads above and the
            // in-process wake-ups carry the work, not repeated queries.
            let change = store.change_counter();
            // A store that is told of changes moves its counter only when told: a move is a
            // notification, whichever branch of the last nap's `select!` won.
            let told = notified || (notifier.is_some() && change.is_some());
            let changed = (change.is_none() || change != seen_change)
                && (told || last_look.elapsed() >= inner.poll_interval);
            notified = false;
            let due = next_wake.is_some_and(|at| at <= unix_ms(runtime.now()))
                || last_look.elapsed() >= sweep_every;
            look |= inner.wakes.take_submitted();
            // With every slot taken there is nothing to claim: look once one frees.
            if (look || due || changed) && room(&running) {
                // Read before looking, so that a change made while looking is seen next time.
                seen_change = change;
                last_look = tokio::time::Instant::now();
                // Likewise the time: a run that comes due while the claims are made (a slow
                // store) is not past the next wake time asked for below.
                let looked_at = unix_ms(runtime.now());
                if let Err(error) = runtime.refresh_signals().await {
                    tracing::warn!(%error, "could not load new signals");
                }
                while room(&running) {
                    match inner.claim(None).await {
                        Ok(Some((run, claim))) => spawn(&inner, &mut running, run, claim),
                        Ok(None) => break,
                        Err(error) => {
                            tracing::warn!(%error, "could not claim a run; trying again shortly");
                            failed = true;
                            break;
                        }
                    }
                }
                next_wake = store
                    .next_wake_at_ms(&inner.names, looked_at)
                    .await
                    .unwrap_or_else(|error| {
                        tracing::warn!(%error, "could not read the next wake time; trying again shortly");
                        failed = true;
                        None
                    });
                // Full: there may be more to claim once a slot frees. Failed: look again soon.
                look = running.len() >= inner.concurrency || failed;
            }
            (failed, change)
        };
        let (failed, change) = tokio::select! {
            looked = looked => looked,
            () = past_timeout(stopping, inner.shutdown_timeout, &stopped_at) => {
                tracing::warn!("shutdown timeout passed while the store was asked; stopping");
                break;
            }
        };
        // A change seen too soon after the last look is looked at when the interval is up.
        // With every slot taken nothing is looked at (the worker's own claims count as
        // changes): a run ending wakes the worker.
        let slot_free = running.len() < inner.concurrency;
        let pending_change = slot_free && (change.is_none() || change != seen_change);
        let poll = if pending_change {
            inner.poll_interval.saturating_sub(last_look.elapsed())
        } else {
            inner.poll_interval
        };
        let mut nap = nap::length(poll, next_wake, unix_ms(runtime.now()), slot_free);
        if failed {
            failures = failures.saturating_add(1);
            nap = match failures {
                1 => nap.min(retry_after),
                n => nap::after_failures(retry_after, n),
            };
        } else {
            failures = 0;
        }
        tokio::select! {
            _ = stop.changed() => {}
            () = inner.wakes.notified() => {}
            Some(ended) = running.next_ended(), if !running.tasks.is_empty() => {
                // The run it suspended is due then: the store was not asked since.
                if let Some(at) = ended {
                    next_wake = Some(next_wake.map_or(at, |next| next.min(at)));
                }
            }
            () = tokio::time::sleep(nap.max(Duration::from_millis(1))) => {}
            () = store_told::told(listening) => notified = true,
        }
    }
    drop(signalled); // not claimed yet: the next start's
    // Graceful: nothing more is claimed; each run stops at its next superstep (or suspends,
    // a wait after its grace) and lets go, for another worker to carry on.
    running.claims().hand_back();
    let stopped_at = *stopped_at.get_or_init(tokio::time::Instant::now);
    let left = inner.shutdown_timeout.saturating_sub(stopped_at.elapsed());
    let drained = tokio::time::timeout(left, async {
        while running.next_ended().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            runs = running.len(),
            "shutdown timeout passed; aborting the runs still executing"
        );
        running.tasks.shutdown().await;
        // Aborted half way: each run is let go runnable, and the release is written before
        // the shutdown returns (dropping the claims would only queue it).
        // Together, and bounded: a release the store does not answer is left to its lease.
        let held = running.claims().held();
        let releases = held.iter().map(|claim| async move {
            if let Err(error) = claim.release_runnable().await {
                tracing::warn!(thread = %claim.thread(), %error, "could not release an aborted run");
            }
        });
        let released =
            tokio::time::timeout(RELEASE_WAIT, futures_util::future::join_all(releases)).await;
        if released.is_err() {
            tracing::warn!(
                "the store did not answer the aborted runs' releases; their leases run out"
            );
        }
    }
    Ok(())
}

/// How long a shutdown past its timeout waits for the store to take the aborted runs'
/// releases.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// How long what the loop asked the store is waited for once the stop is asked, at least:
/// a shorter shutdown timeout would give up claims a store that answers is making, and
/// leave their runs held until their leases ran out.
const STORE_GRACE: Duration = Duration::from_secs(5);

/// Once the stop is first seen (noted in `stopped_at`), asks the runs to let go; resolves
/// when the shutdown's `timeout` has passed since, or [`STORE_GRACE`] if that is longer.
/// Never, if the worker's handle is gone without asking.
async fn past_timeout(
    (mut stop, claims): (watch::Receiver<bool>, Claims),
    timeout: Duration,
    stopped_at: &OnceLock<tokio::time::Instant>,
) {
    if stop.wait_for(|stop| *stop).await.is_err() {
        return std::future::pending().await;
    }
    let at = *stopped_at.get_or_init(tokio::time::Instant::now);
    claims.hand_back();
    // A timeout too long to add (`Duration::MAX`: never abort) waits for ever.
    match at.checked_add(timeout.max(STORE_GRACE)) {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
