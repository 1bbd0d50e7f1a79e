//! The claims live in one runtime: found by thread for a cancel, and renewed together by
//! one heartbeat.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use super::{ClaimInner, RunClaim, millis};
use crate::runtime::clock::instant_after;
use crate::runtime::clock::now_ms;
use crate::runtime::store::StoreError;

/// The claims executing in this runtime, by thread: a cancel reaches them at once, and one
/// heartbeat renews them all.
///
/// The heartbeat is one task for the whole runtime, running while it has claims, rather
/// than one per claim: starting and stopping a task for every run cost a handoff between
/// threads on every invoke and every resume. On a durable store it also wakes every poll
/// interval to look for cancels asked from another process (see `CancelLooks`), and so
/// stops within an interval of the last claim's end.
#[derive(Default)]
pub(crate) struct LiveClaims {
    shared: Arc<LiveShared>,
}

#[derive(Default)]
struct LiveShared {
    /// Between beats, how often the heartbeat looks whether the store changed, and if so
    /// reads the rows of its claims' runs for a cancel asked from another process; `None`
    /// for a store no other process shares (memory).
    probe_every: Option<Duration>,
    /// By thread, hashed with foldhash as the memory store's maps are: every execution
    /// inserts its claim.
    claims:
        Mutex<std::collections::HashMap<Arc<str>, Weak<ClaimInner>, foldhash::fast::RandomState>>,
    /// The heartbeat task, while there is one.
    beating: Mutex<Beating>,
    /// How often it beats, in ms: a third of the shortest lease it has seen.
    every_ms: AtomicU64,
    /// The renewals on their way, kept here rather than by one heartbeat: a heartbeat that
    /// replaces another counts those the other left going.
    in_flight: InFlight,
}

/// The heartbeat task, and which one it is.
#[derive(Default)]
struct Beating {
    task: Option<tokio::task::JoinHandle<()>>,
    /// How many heartbeats were started: the last one's number. A heartbeat replaced by
    /// another (aborted, but still running up to its next await) tells by it that the slot
    /// is no longer its own.
    started: u64,
}

impl LiveClaims {
    /// The claims of a runtime whose store other processes may share (`probe_every`, its
    /// poll interval) or not (`None`).
    pub(crate) fn new(probe_every: Option<Duration>) -> Self {
        let shared = LiveShared {
            probe_every,
            ..LiveShared::default()
        };
        Self {
            shared: Arc::new(shared),
        }
    }

    pub(super) fn insert(&self, claim: &RunClaim) {
        {
            let mut claims = crate::sync::lock(&self.shared.claims);
            if claims.len() >= 64 && claims.len().is_power_of_two() {
                claims.retain(|_, claim| claim.strong_count() > 0);
            }
            let replaced = claims.insert(
                Arc::clone(&claim.inner.thread),
                Arc::downgrade(&claim.inner),
            );
            // The store granted this claim, so the execution it replaces here lost its lease
            // (it ran out while its heartbeat could not renew it): it learns it now, and
            // stops at its next step, rather than at its next write, which in `Exit` mode is
            // its last.
            if let Some(old) = replaced.as_ref().and_then(Weak::upgrade)
                && !Arc::ptr_eq(&old, &claim.inner)
                && holds(&old)
                && !old.releasing.load(Ordering::Acquire)
            {
                RunClaim { inner: old }.lose();
            }
        }
        // Inserted before the heartbeat is looked at: a heartbeat that stops for want of
        // claims decides under this lock, after the insert, or leaves the slot empty here.
        let every = beat_for(claim.inner.lease);
        let mut beating = crate::sync::lock(&self.shared.beating);
        let stopped = (beating.task.as_ref()).is_none_or(tokio::task::JoinHandle::is_finished);
        // A claim with a shorter lease than the heartbeat beats for (a worker's) needs it
        // sooner: the heartbeat starts again at its pace.
        let too_slow = millis(every) < self.shared.every_ms.load(Ordering::Acquire);
        if (stopped || too_slow)
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            if let Some(old) = beating.task.take() {
                old.abort();
            }
            self.shared.every_ms.store(millis(every), Ordering::Release);
            beating.started += 1;
            let shared = Arc::downgrade(&self.shared);
            beating.task = Some(handle.spawn(heartbeat(shared, every, beating.started)));
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
/// from another process: at each beat, and in between whenever the store's change probe
/// moved; stops when the runtime has no claim left (or is dropped). `me`: its number
/// among the heartbeats started (see [`Beating`]).
async fn heartbeat(shared: Weak<LiveShared>, every: Duration, me: u64) {
    let mut next_beat = instant_after(every);
    let mut looks = CancelLooks::default();
    loop {
        let probe_every = match shared.upgrade() {
            Some(live) => live.probe_every,
            None => return,
        };
        let probe_at = probe_every.map(instant_after);
        tokio::time::sleep_until(probe_at.map_or(next_beat, |at| at.min(next_beat))).await;
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
                // a new heartbeat. A heartbeat another replaced leaves the slot to it.
                if beating.started == me {
                    beating.task.take();
                    live.every_ms.store(u64::MAX, Ordering::Release);
                }
                return;
            }
            claims
        };
        let in_flight = live.in_flight.clone();
        drop(live);
        if tokio::time::Instant::now() >= next_beat {
            next_beat = instant_after(every);
            let renewals = claims
                .iter()
                .map(|claim| renew_within(claim, every, &in_flight));
            let renewed = futures_util::future::join_all(renewals).await;
            let renewed: Vec<&Arc<ClaimInner>> = (claims.iter().zip(renewed))
                .filter_map(|(claim, renewed)| renewed.then_some(claim))
                .collect();
            // A failed read is tried again at the next look or beat; one that does not
            // answer by then holds the beats back no longer.
            for some in renewed.chunks(ROWS_A_READ) {
                let reading = tokio::spawn(read_cancels(some));
                if tokio::time::timeout(every, reading).await.is_err() {
                    tracing::warn!("reading the runs' rows for a cancel did not answer in time");
                    break;
                }
            }
        } else {
            // A slow store does not hold the next beat back: the look gives way to it.
            tokio::select! {
                () = looks.look(&claims) => {}
                () = tokio::time::sleep_until(next_beat) => {}
            }
        }
    }
}

/// How many rows of runs one read asks for at most: with more runs executing, a look
/// reads only that many (a cancel then takes a few looks to be read), and a beat reads in
/// as many queries as it needs.
const ROWS_A_READ: usize = 512;

/// The heartbeat's looks, between beats, for cancels asked from another process.
#[derive(Default)]
struct CancelLooks {
    /// The store's change counter at the last look.
    seen: Option<u64>,
    /// The claims live at the last look, by address: a run is read once it has been executing
    /// for a look's interval, so that short runs cost no read.
    live: HashSet<usize>,
    /// The claims whose rows are still to be read since the store last changed, in the order
    /// they became due: one that keeps its place is read before those due after it.
    due: VecDeque<usize>,
    /// A read a beat cut short, going on in a task of its own: the next look waits for it
    /// rather than reading again. Dropped half way, a query would hand its connection back
    /// to the pool (PostgreSQL's) with its answer still to come.
    reading: Option<Reading>,
}

/// A look's read of the runs' rows, and the claims it reads.
struct Reading {
    task: tokio::task::JoinHandle<bool>,
    claims: HashSet<usize>,
}

impl CancelLooks {
    /// Reads the rows of `claims`' runs for a cancel, once after each change of the store
    /// (the look is a cheap probe), a few at a time. A store that cannot tell leaves it to
    /// the beats.
    async fn look(&mut self, claims: &[Arc<ClaimInner>]) {
        self.finish_reading().await;
        let Some(first) = claims.first() else { return };
        let change = first.store.change_counter();
        if change.is_none() {
            return;
        }
        let was_live = std::mem::replace(&mut self.live, claims.iter().map(address).collect());
        // Ended claims are no longer due.
        self.due.retain(|claim| self.live.contains(claim));
        if change != self.seen {
            self.seen = change;
            let already: HashSet<usize> = self.due.iter().copied().collect();
            let newly = claims
                .iter()
                .map(address)
                .filter(|at| !already.contains(at));
            self.due.extend(newly);
        }
        // New claims wait for the next look.
        let by_address: HashMap<usize, &Arc<ClaimInner>> =
            claims.iter().map(|claim| (address(claim), claim)).collect();
        let read: Vec<&Arc<ClaimInner>> = (self.due.iter())
            .filter(|at| was_live.contains(at))
            .filter_map(|at| by_address.get(at).copied())
            .filter(|claim| !claim.cancel.load(Ordering::Acquire))
            .take(ROWS_A_READ)
            .collect();
        if read.is_empty() {
            return;
        }
        self.reading = Some(Reading {
            task: tokio::spawn(read_cancels(&read)),
            claims: read.iter().map(|claim| address(claim)).collect(),
        });
        self.finish_reading().await;
    }

    /// Waits for the read on its way, if any. Only once read are its claims no longer due:
    /// a read that failed leaves them due.
    async fn finish_reading(&mut self) {
        let Some(reading) = &mut self.reading else {
            return;
        };
        // Waited for through a reference: a look given up here (for a beat) leaves it going.
        let read = (&mut reading.task).await.unwrap_or(false);
        if let Some(reading) = self.reading.take()
            && read
        {
            self.due.retain(|claim| !reading.claims.contains(claim));
        }
    }
}

/// Where `claim` lives: what tells it apart from the other claims live at the same time.
fn address(claim: &Arc<ClaimInner>) -> usize {
    Arc::as_ptr(claim).addr()
}

/// Flags those of `claims` whose run's row asks them to stop, read in one query: a cancel
/// asked for from another process reaches its run here. Says whether the rows could be
/// read. Owns what it needs (a task of its own runs it): it holds the claims by weak
/// references, so that a run dropped while the read waits lets go rather than being
/// renewed meanwhile.
fn read_cancels(claims: &[&Arc<ClaimInner>]) -> impl Future<Output = bool> + Send + 'static {
    let store = claims.first().map(|claim| Arc::clone(&claim.store));
    let threads: Vec<Arc<str>> = claims
        .iter()
        .map(|claim| Arc::clone(&claim.thread))
        .collect();
    let weak: Vec<Weak<ClaimInner>> = claims.iter().map(|claim| Arc::downgrade(claim)).collect();
    async move {
        let Some(store) = store else { return true };
        let Ok(asked) = store.cancels_requested(&threads).await else {
            return false;
        };
        let asked: HashSet<&str> = asked.iter().map(|thread| &**thread).collect();
        for claim in weak.iter().filter_map(Weak::upgrade) {
            if asked.contains(&*claim.thread) {
                claim.cancel.store(true, Ordering::Release);
                claim.cancelled.notify_waiters();
            }
        }
        true
    }
}

/// The claims whose renewal is on its way, by thread and owner (an execution's claim; not by
/// address, which a claim freed meanwhile hands on).
#[derive(Clone, Default)]
struct InFlight(Arc<Mutex<HashSet<ClaimKey>>>);

/// A claim's thread and owner.
type ClaimKey = (Arc<str>, String);

/// A claim's renewal on its way, until dropped.
struct Renewing {
    in_flight: InFlight,
    claim: ClaimKey,
}

impl Drop for Renewing {
    fn drop(&mut self) {
        crate::sync::lock(&self.in_flight.0).remove(&self.claim);
    }
}

/// A beat's renewal of `claim`, waited for up to `every`. In a task of its own: one that
/// does not answer (its connection died without a word, and the database's TCP timeout is a
/// minute or more) holds back neither the other claims' renewals nor the next beat, whose
/// leases would run out meanwhile; and it is not dropped half way, which would hand its
/// connection on with the query still in it.
///
/// One at a time a claim: a second, on another connection, could save the lease, but the
/// first, answered late, would then write an expiry older than the second's, and the row
/// would say the lease ran out while this execution counts on it. The lease of a claim whose
/// renewal does not answer runs out instead; another execution takes the run, and this one's
/// writes are refused. The task holds no claim alive: a claim dropped meanwhile lets go.
async fn renew_within(claim: &Arc<ClaimInner>, every: Duration, in_flight: &InFlight) -> bool {
    let key = (Arc::clone(&claim.thread), claim.owner_text().to_owned());
    if !crate::sync::lock(&in_flight.0).insert(key.clone()) {
        tracing::warn!(thread = %claim.thread, "the lease's renewal does not answer; waiting for it");
        return false;
    }
    let renewing = Renewing {
        in_flight: in_flight.clone(),
        claim: key,
    };
    let (store, weak) = (Arc::clone(&claim.store), Arc::downgrade(claim));
    let until = now_ms().saturating_add(millis(claim.lease));
    let task = tokio::spawn(async move {
        let (thread, owner) = &renewing.claim;
        let answer = store.renew_claim(thread, owner, until).await;
        drop(renewing);
        weak.upgrade()
            .is_some_and(|claim| renewed(&claim, until, answer))
    });
    match tokio::time::timeout(every, task).await {
        Ok(renewed) => renewed.unwrap_or(false),
        Err(_) => {
            tracing::warn!(thread = %claim.thread, "renewing the lease did not answer in time; retrying");
            false
        }
    }
}

/// What the store answered a renewal of `claim` to `until`: whether it extended the lease;
/// the beat then reads the rows of the renewed claims' runs for a cancel.
fn renewed(claim: &ClaimInner, until: u64, answer: Result<(), StoreError>) -> bool {
    match answer {
        Ok(()) => {
            claim.until_ms.fetch_max(until, Ordering::AcqRel);
            true
        }
        // Released while the renewal was on its way (the run is over, nothing was lost), or
        // let go to run out on purpose (see `stopped`): another execution may hold it now.
        Err(StoreError::LeaseLost { .. })
            if claim.released.load(Ordering::Acquire)
                || claim.releasing.load(Ordering::Acquire)
                || claim.stopped.load(Ordering::Acquire) =>
        {
            false
        }
        Err(StoreError::LeaseLost { .. }) => {
            tracing::warn!(thread = %claim.thread, owner = %claim.owner, "lease lost: another execution claimed the run");
            claim.lost.store(true, Ordering::Release);
            // A node waiting in memory (a signal, a sleep) stops waiting: the run is no
            // longer this execution's to carry on.
            claim.cancelled.notify_waiters();
            false
        }
        Err(error) => {
            tracing::warn!(thread = %claim.thread, %error, "could not renew the lease; retrying");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A heartbeat that another replaced, and that finds no claims before its abort is
    /// seen, leaves the slot to its successor: otherwise it would take the successor's
    /// handle, the next claim would start a third heartbeat, and two would run. The
    /// heartbeat in the slot clears it.
    #[tokio::test]
    async fn a_replaced_heartbeat_leaves_the_slot_to_its_successor() {
        let live = LiveClaims::new(None);
        {
            let mut beating = crate::sync::lock(&live.shared.beating);
            beating.started = 2;
            beating.task = Some(tokio::spawn(std::future::pending::<()>()));
        }
        live.shared.every_ms.store(5, Ordering::Release);
        let shared = Arc::downgrade(&live.shared);
        heartbeat(shared.clone(), Duration::from_millis(1), 1).await;
        {
            let beating = crate::sync::lock(&live.shared.beating);
            assert!(beating.task.is_some(), "the successor's handle was taken");
        }
        assert_eq!(live.shared.every_ms.load(Ordering::Acquire), 5);

        heartbeat(shared, Duration::from_millis(1), 2).await;
        let mut beating = crate::sync::lock(&live.shared.beating);
        let task = beating.task.take();
        assert!(task.is_none(), "the heartbeat in the slot left it taken");
        assert_eq!(live.shared.every_ms.load(Ordering::Acquire), u64::MAX);
    }
}
