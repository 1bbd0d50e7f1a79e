//! The thread's signal session of a top-level execution, opened only when something needs
//! it.
//!
//! While a run executes, the signals sent to its thread queue in the thread's session
//! rather than in the pending mailbox, whose bounds and TTL are for threads nobody runs;
//! what the run has not received when it stops goes back to pending, for the execution
//! that carries it on. Most runs are sent nothing while they execute, so the session is not
//! opened with the claim: it is opened by the first thing that needs it, and closed when
//! the run stops. What opens it:
//!
//! - the run itself, at its start, when signals wait pending for its thread or someone
//!   holds its session already (a guard, a parked waiter), and before it receives (a wait,
//!   a poll, a payload given back);
//! - anything that brings a signal into the mailbox for a thread an execution in this
//!   process holds: a send, a stored signal loaded from the store.
//!
//! Each of them finds the execution through the runtime's live claims (see
//! [`Runtime::open_for_live_run`]). A run registers its claim before it looks for pending
//! signals, and a send or a load that found no run looks again once its signal went
//! pending (see [`Runtime::settle_pending`]): whichever comes second sees the other, so a
//! signal sent as a run starts is not left to the pending TTL. A session is opened at most
//! once per execution, and not after the run closed it. One opened for an execution that stopped
//! before it got under way (a signal came while it read where to start, and that failed)
//! is closed with the claim.

use std::sync::Mutex;

use super::RunClaim;
use crate::runtime::mailbox::Delivery;
use crate::runtime::{Runtime, SessionGuard};

/// An execution's hold on its thread's session.
#[derive(Default)]
pub(super) struct RunSession {
    slot: Mutex<Slot>,
}

#[derive(Default)]
struct Slot {
    guard: Option<SessionGuard>,
    /// The run stopped: a signal arriving now is pending, for the next execution.
    closed: bool,
}

impl RunClaim {
    /// Opens the thread's session for this execution, unless it is open already or the
    /// run has stopped. Returns whether the execution holds it open now.
    pub(crate) fn open_session(&self, runtime: &Runtime) -> bool {
        let mut slot = crate::sync::lock(&self.inner.session.slot);
        if slot.closed {
            return false;
        }
        if slot.guard.is_none() {
            let guard = runtime.shared_session(&self.inner.thread);
            guard.keep_leftovers();
            slot.guard = Some(guard);
        }
        true
    }

    /// Closes the session, if the execution opened it: what it did not receive goes back to
    /// pending. Nothing opens it again for this execution.
    pub(crate) fn close_session(&self) {
        let guard = {
            let mut slot = crate::sync::lock(&self.inner.session.slot);
            slot.closed = true;
            slot.guard.take()
        };
        // Closed outside the slot's lock: the guard takes the mailbox's.
        drop(guard);
    }

    /// Whether the execution holds its thread's session open.
    #[cfg(test)]
    pub(crate) fn session_open(&self) -> bool {
        crate::sync::lock(&self.inner.session.slot).guard.is_some()
    }
}

impl Runtime {
    /// Opens `thread`'s session for the execution of its run this process holds, if there
    /// is one: called before a signal for `thread` enters the mailbox, and before a receive.
    /// Returns whether such an execution holds the session open now.
    pub(crate) fn open_for_live_run(&self, thread: &str) -> bool {
        self.inner
            .live_claims
            .running(thread)
            .is_some_and(|claim| claim.open_session(self))
    }

    /// What became of a signal for `thread` that the mailbox took as `delivery`, once a run
    /// that claimed the thread meanwhile has its say. Its start looked for pending signals
    /// before this one went pending (the sender looked for a run before the claim): the
    /// sender looks again, and the run's session takes the signal in, out of the pending
    /// mailbox's bounds and TTL.
    pub(crate) fn settle_pending(&self, thread: &str, delivery: Delivery) -> Delivery {
        match delivery {
            Delivery::Pending if self.open_for_live_run(thread) => Delivery::Queued,
            delivery => delivery,
        }
    }

    /// Opens the session of `claim`'s thread when something is there for the run to take:
    /// signals waiting pending (taken into its session, out of the pending mailbox's bounds),
    /// or a session someone holds already (a guard, a parked waiter), whose queued signals
    /// the run keeps when that holder lets go.
    pub(crate) fn open_if_needed(&self, claim: &RunClaim) {
        if self.mailbox().is_live_or_pending(claim.thread()) {
            claim.open_session(self);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use serde_json::json;

    use crate::runtime::Runtime;
    use crate::runtime::mailbox::{Delivery, Scope};

    /// An execution sent nothing keeps no session; the first signal for its thread opens
    /// it and queues there; once the run stopped, signals wait pending for the next one.
    #[tokio::test]
    async fn a_run_opens_its_session_when_a_signal_comes_for_it() {
        let runtime = Runtime::in_memory();
        let thread: Arc<str> = Arc::from("t");
        let claim = runtime.claim_run(&thread, None).await.unwrap();
        assert!(!claim.session_open() && !runtime.mailbox().is_open("t"));
        assert_eq!(
            runtime.signal("t", "go", 1).await.unwrap(),
            Delivery::Queued
        );
        assert!(claim.session_open() && runtime.mailbox().is_open("t"));
        assert_eq!(
            runtime.signal("t", "go", 2).await.unwrap(),
            Delivery::Queued
        );

        claim.close_session();
        assert!(!claim.session_open() && !runtime.mailbox().is_open("t"));
        assert_eq!(
            runtime.signal("t", "go", 3).await.unwrap(),
            Delivery::Pending
        );
        assert!(!claim.session_open(), "a closed session stays closed");
        // Nothing lost, nothing reordered: the leftovers went back to pending, before it.
        for n in 1..=3 {
            assert_eq!(runtime.poll_signal::<u32>("t", "go").unwrap(), Some(n));
        }
        claim.release().await.unwrap();
    }

    /// A run that starts while signals wait pending for its thread takes them into its
    /// session; a thread with nothing pending, or another thread's signals, open nothing.
    #[tokio::test]
    async fn a_run_takes_in_what_waits_pending_for_its_thread() {
        let runtime = Runtime::in_memory();
        assert_eq!(
            runtime.signal("t", "go", 1).await.unwrap(),
            Delivery::Pending
        );
        assert_eq!(
            runtime.signal("u", "go", 2).await.unwrap(),
            Delivery::Pending
        );

        let quiet = runtime.claim_run(&Arc::from("v"), None).await.unwrap();
        runtime.open_if_needed(&quiet);
        assert!(!quiet.session_open());

        let claim = runtime.claim_run(&Arc::from("t"), None).await.unwrap();
        runtime.open_if_needed(&claim);
        assert!(claim.session_open() && runtime.mailbox().is_open("t"));
        assert!(!runtime.mailbox().is_open("u"));
        assert_eq!(runtime.mailbox().queued("t", "go"), 1);
    }

    /// A signal that went pending as a run claimed its thread (the sender looked for a run
    /// before the claim, the run for pending signals before the signal) is taken into the
    /// run's session when the sender looks again; with no run, it stays pending.
    #[tokio::test]
    async fn a_signal_that_went_pending_as_a_run_started_joins_its_session() {
        let runtime = Runtime::in_memory();
        let claim = runtime.claim_run(&Arc::from("t"), None).await.unwrap();
        runtime.open_if_needed(&claim);
        assert!(!claim.session_open(), "nothing was pending yet");
        let mailbox = runtime.mailbox();
        let went = mailbox.send("t", "go", json!(1), None, Scope::User, 0);
        assert_eq!(went.unwrap(), Delivery::Pending);
        assert_eq!(
            runtime.settle_pending("t", Delivery::Pending),
            Delivery::Queued
        );
        assert!(claim.session_open() && mailbox.is_open("t"));
        assert_eq!(mailbox.queued("t", "go"), 1);
        assert_eq!(mailbox.pending_sessions(), 0, "out of the pending mailbox");

        let went = mailbox.send("u", "go", json!(2), None, Scope::User, 0);
        assert_eq!(went.unwrap(), Delivery::Pending);
        assert_eq!(
            runtime.settle_pending("u", Delivery::Pending),
            Delivery::Pending
        );
        assert_eq!(runtime.settle_pending("t", Delivery::Woke), Delivery::Woke);
    }

    /// A run that starts while someone holds its thread's session shares it: what is queued
    /// there stays for the run when that holder lets go, and goes back to pending when the
    /// run stops.
    #[tokio::test]
    async fn a_run_shares_a_session_someone_holds_as_it_starts() {
        let runtime = Runtime::in_memory();
        let held = runtime.session("t");
        assert_eq!(
            runtime.signal("t", "go", 1).await.unwrap(),
            Delivery::Queued
        );
        let claim = runtime.claim_run(&Arc::from("t"), None).await.unwrap();
        runtime.open_if_needed(&claim);
        assert!(claim.session_open());
        drop(held);
        assert!(runtime.mailbox().is_open("t"));
        assert_eq!(runtime.mailbox().queued("t", "go"), 1, "kept for the run");

        claim.close_session();
        assert_eq!(runtime.poll_signal::<u32>("t", "go").unwrap(), Some(1));
    }

    /// A receive of the run's thread opens its session; a released claim opens nothing.
    #[tokio::test]
    async fn a_receive_opens_the_session_of_a_running_thread_only() {
        let runtime = Runtime::in_memory();
        let claim = runtime.claim_run(&Arc::from("t"), None).await.unwrap();
        assert_eq!(runtime.poll_signal::<u32>("t", "go").unwrap(), None);
        assert!(claim.session_open());

        let done = runtime.claim_run(&Arc::from("u"), None).await.unwrap();
        done.release().await.unwrap();
        runtime.open_for_live_run("u");
        assert!(!done.session_open() && !runtime.mailbox().is_open("u"));
    }
}
