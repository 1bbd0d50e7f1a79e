//! The wake-ups that tell this process's workers that there may be work: a run was
//! submitted, or a signal was sent to a thread (whose run may be waiting for it).
//!
//! Each worker listens with an inbox of its own: workers of different graphs in one process
//! each hear of every wake-up, and each claims only the runs of its own graphs.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A thread that was sent a signal, and the signal's name.
pub(crate) type Signalled = (String, String);

/// How many signalled threads an inbox holds; past this, workers find the runs through the
/// store's signals, or the mailbox's (see `Runtime::signalled_in_mailbox`).
const INBOX_BOUND: usize = 100_000;

/// The workers listening in this process.
#[derive(Default)]
pub(crate) struct Wakes {
    inboxes: Mutex<Vec<Arc<WakeInbox>>>,
    /// How many inboxes there are: read without the lock on every signal and submit.
    listeners: AtomicUsize,
}

impl Wakes {
    /// Records a wake-up in every inbox; `(thread, name)` when the signal `name` was sent to
    /// `thread`.
    pub(crate) fn wake(&self, signalled: Option<(&str, &str)>) {
        if !self.listened() {
            return;
        }
        for inbox in crate::sync::lock(&self.inboxes).iter() {
            inbox.wake(signalled);
        }
    }

    /// Whether any worker listens.
    pub(crate) fn listened(&self) -> bool {
        self.listeners.load(Ordering::Acquire) > 0
    }

    /// A worker starts listening: from now on, wake-ups reach the inbox returned.
    pub(crate) fn listen(&self) -> Arc<WakeInbox> {
        let inbox = Arc::new(WakeInbox::default());
        let mut inboxes = crate::sync::lock(&self.inboxes);
        inboxes.push(Arc::clone(&inbox));
        self.listeners.store(inboxes.len(), Ordering::Release);
        inbox
    }

    /// A worker stops listening.
    pub(crate) fn unlisten(&self, inbox: &Arc<WakeInbox>) {
        let mut inboxes = crate::sync::lock(&self.inboxes);
        inboxes.retain(|listening| !Arc::ptr_eq(listening, inbox));
        self.listeners.store(inboxes.len(), Ordering::Release);
    }
}

/// One worker's wake-ups.
#[derive(Default)]
pub(crate) struct WakeInbox {
    notify: tokio::sync::Notify,
    /// The threads that were sent a signal since the worker last looked, with the signal's
    /// name: only a run waiting for that name is woken.
    signalled: Mutex<Vec<Signalled>>,
    /// A run was submitted since the worker last looked.
    submitted: AtomicBool,
    /// Signals went unrecorded because the list was full.
    overflowed: AtomicBool,
}

impl WakeInbox {
    fn wake(&self, signalled: Option<(&str, &str)>) {
        match signalled {
            Some((thread, name)) => {
                let mut signalled = crate::sync::lock(&self.signalled);
                if signalled.len() < INBOX_BOUND {
                    signalled.push((thread.to_owned(), name.to_owned()));
                } else {
                    self.overflowed.store(true, Ordering::Release);
                }
            }
            None => self.submitted.store(true, Ordering::Release),
        }
        self.notify.notify_one();
    }

    /// Waits for the next wake-up.
    pub(crate) async fn notified(&self) {
        self.notify.notified().await;
    }

    /// Whether a run was submitted since the last call.
    pub(crate) fn take_submitted(&self) -> bool {
        self.submitted.swap(false, Ordering::AcqRel)
    }

    /// The threads signalled since the last call, with the signals' names.
    pub(crate) fn take_signalled(&self) -> Vec<Signalled> {
        std::mem::take(&mut *crate::sync::lock(&self.signalled))
    }

    /// Puts back signalled threads taken and not tried (a claim failed), ahead of those
    /// signalled since.
    pub(crate) fn put_back(&self, untried: impl IntoIterator<Item = Signalled>) {
        let mut signalled = crate::sync::lock(&self.signalled);
        let since = std::mem::take(&mut *signalled);
        signalled.extend(untried);
        signalled.extend(since);
    }

    /// Whether signals went unrecorded, the list being full, since the last call.
    pub(crate) fn take_overflowed(&self) -> bool {
        self.overflowed.swap(false, Ordering::AcqRel)
    }

    /// Says again that signals went unrecorded: the look that took the flag did not finish.
    pub(crate) fn put_back_overflowed(&self) {
        self.overflowed.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listening_worker_hears_of_every_wake_up() {
        let wakes = Wakes::default();
        let first = wakes.listen();
        let second = wakes.listen();
        wakes.wake(Some(("t-1", "approve")));
        wakes.wake(None);
        for inbox in [&first, &second] {
            assert_eq!(
                inbox.take_signalled(),
                [("t-1".to_owned(), "approve".to_owned())]
            );
            assert!(inbox.take_submitted());
            assert!(inbox.take_signalled().is_empty());
            assert!(!inbox.take_submitted());
        }
    }

    #[test]
    fn a_worker_that_stopped_listening_hears_nothing_more() {
        let wakes = Wakes::default();
        let gone = wakes.listen();
        let staying = wakes.listen();
        wakes.unlisten(&gone);
        assert!(wakes.listened());
        wakes.wake(Some(("t-1", "approve")));
        assert!(gone.take_signalled().is_empty());
        assert_eq!(staying.take_signalled().len(), 1);
        wakes.unlisten(&staying);
        assert!(!wakes.listened());
    }

    #[test]
    fn signalled_threads_put_back_come_before_those_signalled_since() {
        let wakes = Wakes::default();
        let inbox = wakes.listen();
        wakes.wake(Some(("t-1", "approve")));
        wakes.wake(Some(("t-2", "approve")));
        let taken = inbox.take_signalled();
        wakes.wake(Some(("t-3", "approve")));
        // The claim of t-1 failed: t-1 and t-2 were not tried.
        inbox.put_back(taken);
        let threads: Vec<String> = inbox.take_signalled().into_iter().map(|(t, _)| t).collect();
        assert_eq!(threads, ["t-1", "t-2", "t-3"]);
    }
}
