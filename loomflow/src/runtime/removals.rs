//! Stored signals on their way out of a durable store, in the background: those the mailbox
//! let go undelivered (pending bounds, a session's last exit), and those consumed where the
//! consumer cannot await (`poll_signal`).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::mailbox::Dropped;
use super::store::Store;

/// By name, the newest seq of the signals of one session kept in the store for its run.
type NewestSpared = HashMap<Arc<str>, u64>;

/// A stored signal to take out of the store.
enum Removal {
    /// Received by a consumer that cannot take it out of the store itself: its receipt is
    /// audited.
    Received { session: Arc<str>, seq: u64 },
    /// Let go undelivered by the mailbox: removed without a receipt, as it went to nobody,
    /// or kept for its session's run.
    Dropped(Dropped),
}

/// A removal in the queue, with how many times the store failed to make it and, once it
/// did, when it is tried again.
struct Queued {
    removal: Removal,
    failed: u32,
    due: Option<tokio::time::Instant>,
}

/// How many times a removal the store fails to make is tried again, the wait doubling
/// from [`FIRST_RETRY`]: about a minute and a half in all, past which it is given up
/// (logged). Until it is made, a signal received by `poll_signal` stays in the store, and
/// a restart would load it again.
const RETRIES: u32 = 10;
const FIRST_RETRY: std::time::Duration = std::time::Duration::from_millis(100);
const LONGEST_RETRY: std::time::Duration = std::time::Duration::from_secs(30);

/// The removals queued and not made yet, for one store.
pub(crate) struct Removals {
    store: Arc<dyn Store>,
    queue: Mutex<VecDeque<Queued>>,
    /// Queued and not yet removed: lets an operation skip the flush when there is nothing.
    outstanding: AtomicUsize,
    /// Held while removing, so that a flush waits for one already under way.
    flushing: tokio::sync::Mutex<()>,
    /// The names, by session, of signals dropped from memory and kept in the store for
    /// their session's run (see [`awaited`](Self::awaited)): their waits look in the store
    /// for an older signal first, until none older is left there.
    spared: Mutex<HashMap<Arc<str>, NewestSpared>>,
    /// Where the next [`sweep_spared`](Self::sweep_spared) starts among the names kept.
    sweep_from: AtomicUsize,
    /// When the flush that tries failed removals again is to run, if one is scheduled.
    retry_at: Mutex<Option<tokio::time::Instant>>,
}

/// A removal taken off the queue and not made yet: put back at the front if the flush
/// making it is dropped.
struct UnderWay<'a> {
    queue: &'a Mutex<VecDeque<Queued>>,
    removal: Option<Queued>,
}

impl Drop for UnderWay<'_> {
    fn drop(&mut self) {
        if let Some(removal) = self.removal.take() {
            crate::sync::lock(self.queue).push_front(removal);
        }
    }
}

/// How many of the names kept in `spared` one sweep looks at, at most: one read each.
const SWEPT_AT_ONCE: usize = 1024;

impl Removals {
    pub(crate) fn new(store: Arc<dyn Store>) -> Arc<Self> {
        Arc::new(Self {
            store,
            queue: Mutex::new(VecDeque::new()),
            outstanding: AtomicUsize::new(0),
            flushing: tokio::sync::Mutex::new(()),
            spared: Mutex::default(),
            sweep_from: AtomicUsize::new(0),
            retry_at: Mutex::new(None),
        })
    }

    /// Queues the signals the mailbox dropped undelivered.
    pub(crate) fn push_dropped(self: &Arc<Self>, dropped: Vec<Dropped>) {
        self.push(dropped.into_iter().map(Removal::Dropped).collect());
    }

    /// Queues signal `seq` of `session`, which a consumer received and cannot take out of
    /// the store itself.
    pub(crate) fn push_received(self: &Arc<Self>, session: Arc<str>, seq: u64) {
        self.push(vec![Removal::Received { session, seq }]);
    }

    /// Queues `removals` and starts making them in the background (without a tokio runtime
    /// at hand, the next async signal operation makes them).
    fn push(self: &Arc<Self>, removals: Vec<Removal>) {
        if removals.is_empty() {
            return;
        }
        self.outstanding.fetch_add(removals.len(), Ordering::AcqRel);
        let queued = removals.into_iter().map(|removal| Queued {
            removal,
            failed: 0,
            due: None,
        });
        crate::sync::lock(&self.queue).extend(queued);
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let this = Arc::clone(self);
            handle.spawn(async move { this.flush().await });
        }
    }

    /// Removes every queued signal from the store; returns once those queued before the call
    /// are gone or failed (the mailbox no longer holds them either way).
    ///
    /// Cancel-safe: the removals are taken off the queue one at a time, and one under way
    /// when the caller gives up (a timed-out wait, a dropped request) goes back to the front
    /// of the queue for the next flush. A removal is made at most once more that way, which
    /// every store takes as done already.
    ///
    /// A removal the store fails to make goes back to the queue at once, to be tried again
    /// a little later, by a flush of its own then or by any flush after that (see
    /// [`RETRIES`]); flushes before then pass it by.
    pub(crate) async fn flush(self: &Arc<Self>) {
        if self.outstanding.load(Ordering::Acquire) == 0 {
            return;
        }
        let _flushing = self.flushing.lock().await;
        // Those queued now: one failed again goes to the back, for a later flush.
        let mut left = crate::sync::lock(&self.queue).len();
        while left > 0 {
            left -= 1;
            let Some(queued) = crate::sync::lock(&self.queue).pop_front() else {
                break;
            };
            if let Some(due) = queued.due.filter(|&due| due > tokio::time::Instant::now()) {
                crate::sync::lock(&self.queue).push_back(queued);
                // Failed after the one whose retry this may be: it has a retry of its own
                // still, not only the next operation's flush.
                self.schedule_retry(due);
                continue;
            }
            let mut under_way = UnderWay {
                queue: &self.queue,
                removal: Some(queued),
            };
            let made = match &under_way.removal {
                Some(queued) => self.remove(&queued.removal, queued.failed).await,
                None => true,
            };
            match under_way.removal.take() {
                Some(mut queued) if !made && queued.failed < RETRIES => {
                    queued.failed += 1;
                    let wait = FIRST_RETRY.saturating_mul(1 << (queued.failed - 1).min(16));
                    let due = tokio::time::Instant::now() + wait.min(LONGEST_RETRY);
                    queued.due = Some(due);
                    crate::sync::lock(&self.queue).push_back(queued);
                    self.schedule_retry(due);
                }
                _ => {
                    self.outstanding.fetch_sub(1, Ordering::AcqRel);
                }
            }
        }
    }

    /// Schedules a flush at `due`, unless one is scheduled by then already.
    fn schedule_retry(self: &Arc<Self>, due: tokio::time::Instant) {
        {
            let mut scheduled = crate::sync::lock(&self.retry_at);
            if scheduled.is_some_and(|at| at <= due) {
                return;
            }
            *scheduled = Some(due);
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(Arc::clone(self).flush_at(due));
        }
    }

    /// [`flush`](Self::flush), at `due`: boxed, a future that names its own type (`flush`
    /// spawns it).
    fn flush_at(
        self: Arc<Self>,
        due: tokio::time::Instant,
    ) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move {
            tokio::time::sleep_until(due).await;
            {
                let mut scheduled = crate::sync::lock(&self.retry_at);
                if *scheduled == Some(due) {
                    *scheduled = None;
                }
            }
            self.flush().await;
        })
    }

    /// Makes one removal, which the store failed to make `failed` times before; whether it
    /// was made. A failure is logged.
    async fn remove(&self, removal: &Removal, failed: u32) -> bool {
        let (session, seq) = match removal {
            Removal::Received { session, seq } => (session, *seq),
            Removal::Dropped(dropped) => (&dropped.session, dropped.seq),
        };
        let removed = match removal {
            Removal::Received { .. } => self.store.take_signal(session, seq, None).await,
            Removal::Dropped(dropped) if self.awaited(session).await => {
                // Dropped from memory only: its run takes it from the store.
                let mut spared = crate::sync::lock(&self.spared);
                let names = spared.entry(Arc::clone(session)).or_default();
                let newest = names.entry(Arc::clone(&dropped.name)).or_default();
                *newest = (*newest).max(seq);
                Ok(())
            }
            Removal::Dropped(_) => self.store.discard_signal(session, seq).await,
        };
        match removed {
            Ok(()) => true,
            Err(error) if failed < RETRIES => {
                tracing::warn!(%error, %session, seq, "removing a stored signal failed; retrying");
                false
            }
            Err(error) => {
                tracing::error!(%error, %session, seq, "removing a stored signal failed; given up");
                false
            }
        }
    }

    /// Whether no removal is queued or under way.
    pub(crate) fn is_idle(&self) -> bool {
        self.outstanding.load(Ordering::Acquire) == 0
    }

    /// The newest of the signals `name` of `session` dropped from memory and kept in the
    /// store for its run, if any may be left there: a queued one may then be younger than
    /// one in the store.
    pub(crate) fn spared(&self, session: &str, name: &str) -> Option<u64> {
        let spared = crate::sync::lock(&self.spared);
        spared
            .get(session)
            .and_then(|names| names.get(name).copied())
    }

    /// Forgets that `session` had signals `name` kept in the store, up to `newest`: none
    /// older than what its mailbox holds is left there. A signal dropped since, newer than
    /// `newest`, is remembered still.
    pub(crate) fn none_spared(&self, session: &str, name: &str, newest: u64) {
        let mut spared = crate::sync::lock(&self.spared);
        if let Some(names) = spared.get_mut(session) {
            if names.get(name).is_some_and(|&kept| kept <= newest) {
                names.remove(name);
            }
            if names.is_empty() {
                spared.remove(session);
            }
        }
    }

    /// Forgets the names whose kept signals are all gone from the store: taken by a node's
    /// wait here or elsewhere, or pruned once their session's run ended without taking
    /// them. Otherwise a name that no run waits for again would be remembered for as long
    /// as the runtime lives. Looks at up to [`SWEPT_AT_ONCE`] names a call, in turns; a name
    /// whose signals could not be read is remembered still.
    pub(crate) async fn sweep_spared(&self) {
        let listed: Vec<(Arc<str>, Arc<str>, u64)> = {
            let spared = crate::sync::lock(&self.spared);
            let all = spared.iter().flat_map(|(session, names)| {
                let named = names.iter();
                named.map(|(name, &newest)| (Arc::clone(session), Arc::clone(name), newest))
            });
            all.collect()
        };
        if listed.is_empty() {
            return;
        }
        let from = self.sweep_from.load(Ordering::Relaxed) % listed.len();
        let turn = listed
            .iter()
            .cycle()
            .skip(from)
            .take(SWEPT_AT_ONCE.min(listed.len()));
        for (session, name, newest) in turn {
            let gone = match self.store.oldest_signal(session, name).await {
                Ok(oldest) => oldest.is_none_or(|oldest| oldest.seq > *newest),
                Err(_) => false,
            };
            if gone {
                self.none_spared(session, name, *newest);
            }
        }
        (self.sweep_from).store(from.wrapping_add(SWEPT_AT_ONCE), Ordering::Relaxed);
    }

    /// Whether `session` has a run that has not ended, which may take the signals sent to
    /// it: a signal the mailbox drops from memory (past the pending TTL, beyond the pending
    /// bound) stays in the store for it, as `prune_signals` spares it. When the store cannot
    /// say, it stays too; `prune_signals` drops it later if nobody takes it.
    pub(crate) async fn awaited(&self, session: &str) -> bool {
        match self.store.get_run(session).await {
            Ok(Some(run)) => !run.state.is_finished(),
            Ok(None) => false,
            Err(_) => true,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::runtime::MemoryStore;
    use crate::runtime::store::{SignalPush, StoredSignal};

    async fn store_signal(store: &dyn Store, session: &str, name: &str) -> u64 {
        let signal = StoredSignal {
            seq: 0,
            session: session.to_owned(),
            name: name.to_owned(),
            payload: serde_json::json!(1),
            idempotency_key: None,
            sent_at_ms: 1,
        };
        match store.push_signal(signal).await.unwrap() {
            SignalPush::Stored(seq) => seq,
            other => unreachable!("{other:?}"),
        }
    }

    fn spare(removals: &Removals, session: &str, name: &str, newest: u64) {
        let mut spared = crate::sync::lock(&removals.spared);
        let names = spared.entry(Arc::from(session)).or_default();
        names.insert(Arc::from(name), newest);
    }

    /// A name is remembered while a signal it kept for a run is in the store, and forgotten
    /// once none is left (taken or pruned): a run that ended without waiting for it again
    /// does not leave it remembered for the runtime's life.
    #[tokio::test]
    async fn a_sweep_forgets_names_whose_kept_signals_are_gone() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let removals = Removals::new(Arc::clone(&store));
        let kept = store_signal(&*store, "s", "still-kept").await;
        spare(&removals, "s", "still-kept", kept);
        let gone = store_signal(&*store, "s", "gone").await;
        spare(&removals, "s", "gone", gone);
        store.discard_signal("s", gone).await.unwrap();
        // Only a younger signal of that name is left: none of those kept.
        let older = store_signal(&*store, "t", "younger-left").await;
        spare(&removals, "t", "younger-left", older);
        store.discard_signal("t", older).await.unwrap();
        store_signal(&*store, "t", "younger-left").await;

        removals.sweep_spared().await;
        assert_eq!(removals.spared("s", "still-kept"), Some(kept));
        assert_eq!(removals.spared("s", "gone"), None);
        assert_eq!(removals.spared("t", "younger-left"), None);
        assert!(!crate::sync::lock(&removals.spared).contains_key("t"));

        store.discard_signal("s", kept).await.unwrap();
        removals.sweep_spared().await;
        assert!(crate::sync::lock(&removals.spared).is_empty());
    }
}
