//! [`Wait`]: the future returned by [`Mailbox::wait`](super::Mailbox::wait), and
//! [`WaitEntry`], the same wait resolving to the whole entry (store sequence number and send
//! time included) for the runtime.

use std::future::Future;
use std::mem;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::oneshot;
use tokio::time::{Instant, Sleep};

use super::entry::Entry;
use super::queued::{Place, Queued};
use super::{Inner, SignalError};

/// A wait for the next payload of one (session, name): resolves to the oldest payload, or to
/// [`SignalError::Timeout`] when its timeout passes first.
///
/// The waiter takes its place in line when [`Mailbox::wait`](super::Mailbox::wait) is called,
/// not when it is first polled, so waiters are served in the order they called `wait`.
/// Dropping a `Wait` at any point never loses a payload: one already handed to it goes to the
/// next waiter in line, or back to its place in the queue.
///
/// # Panics
///
/// A wait with a timeout must be polled inside a tokio runtime with the time driver enabled
/// (tokio's timer panics otherwise). A wait without a timeout runs on any executor.
#[must_use = "a wait does nothing unless awaited; dropping it gives its place in line up"]
pub struct Wait {
    entry: WaitEntry,
}

impl Wait {
    pub(super) fn new(entry: WaitEntry) -> Self {
        Self { entry }
    }
}

impl Future for Wait {
    type Output = Result<Value, SignalError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.get_mut().entry)
            .poll(cx)
            .map_ok(|entry| entry.payload)
    }
}

/// A [`Wait`] that resolves to the whole entry.
#[must_use = "a wait does nothing unless awaited; dropping it gives its place in line up"]
pub(crate) struct WaitEntry {
    inner: Arc<Inner>,
    state: WaitState,
    deadline: Option<(Instant, Duration)>,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl std::fmt::Debug for Wait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wait")
            .field("deadline", &self.entry.deadline.map(|(_, timeout)| timeout))
            .finish_non_exhaustive()
    }
}

enum WaitState {
    /// The arguments were refused.
    Failed(Box<SignalError>),
    /// A payload was queued when the wait was created.
    Ready(Ready),
    /// In line, or handed a payload not yet taken from the slot.
    Parked(Parked),
    /// Resolved.
    Done,
}

struct Ready {
    session: Arc<str>,
    name: Arc<str>,
    queued: Queued,
}

struct Parked {
    session: Arc<str>,
    name: Arc<str>,
    id: u64,
    rx: oneshot::Receiver<Queued>,
}

impl WaitEntry {
    pub(super) fn failed(inner: Arc<Inner>, error: SignalError) -> Self {
        Self {
            inner,
            state: WaitState::Failed(Box::new(error)),
            deadline: None,
            sleep: None,
        }
    }

    pub(super) fn ready(
        inner: Arc<Inner>,
        session: Arc<str>,
        name: Arc<str>,
        queued: Queued,
    ) -> Self {
        Self {
            inner,
            state: WaitState::Ready(Ready {
                session,
                name,
                queued,
            }),
            deadline: None,
            sleep: None,
        }
    }

    pub(super) fn parked(
        inner: Arc<Inner>,
        session: Arc<str>,
        name: Arc<str>,
        id: u64,
        rx: oneshot::Receiver<Queued>,
        timeout: Option<Duration>,
    ) -> Self {
        Self {
            inner,
            state: WaitState::Parked(Parked {
                session,
                name,
                id,
                rx,
            }),
            deadline: timeout
                .map(|timeout| (crate::runtime::clock::instant_after(timeout), timeout)),
            sleep: None,
        }
    }

    /// Leaves the line; returns the payload the waiter had already been handed, if any.
    fn leave(&self, parked: &mut Parked) -> Option<Queued> {
        let mut state = self.inner.lock();
        state.leave(
            &self.inner.config,
            &parked.session,
            &parked.name,
            parked.id,
            &mut parked.rx,
        )
    }
}

impl Future for WaitEntry {
    type Output = Result<Entry, SignalError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let WaitState::Parked(parked) = &mut this.state else {
            return match mem::replace(&mut this.state, WaitState::Done) {
                WaitState::Failed(error) => Poll::Ready(Err(*error)),
                WaitState::Ready(ready) => Poll::Ready(Ok(ready.queued.entry)),
                // Polled after completion: stay pending, like a fused future.
                WaitState::Parked(_) | WaitState::Done => Poll::Pending,
            };
        };
        if let Poll::Ready(result) = Pin::new(&mut parked.rx).poll(cx) {
            let result = match result {
                Ok(queued) => Ok(queued.entry),
                Err(_) => Err(SignalError::Closed {
                    session: parked.session.to_string(),
                    name: parked.name.to_string(),
                }),
            };
            this.state = WaitState::Done;
            return Poll::Ready(result);
        }
        let Some((deadline, timeout)) = this.deadline else {
            return Poll::Pending;
        };
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        let WaitState::Parked(mut parked) = mem::replace(&mut this.state, WaitState::Done) else {
            return Poll::Pending;
        };
        // A payload handed over just as the timer fired is returned rather than refused.
        Poll::Ready(match this.leave(&mut parked) {
            Some(queued) => Ok(queued.entry),
            None => Err(SignalError::Timeout {
                session: parked.session.to_string(),
                name: parked.name.to_string(),
                timeout,
            }),
        })
    }
}

impl Drop for WaitEntry {
    fn drop(&mut self) {
        match mem::replace(&mut self.state, WaitState::Done) {
            WaitState::Parked(mut parked) => {
                // Leave the line and, under the same lock, pass on a payload this waiter was
                // handed but never took: the next waiter gets it, or its place in the queue.
                let mut state = self.inner.lock();
                let config = &self.inner.config;
                let (session, name) = (&*parked.session, &*parked.name);
                if let Some(queued) = state.leave(config, session, name, parked.id, &mut parked.rx)
                {
                    let place = Place::Return(queued.order);
                    state.deliver(config, session, name, queued.entry, place);
                }
            }
            WaitState::Ready(ready) => {
                let mut state = self.inner.lock();
                let config = &self.inner.config;
                let place = Place::Return(ready.queued.order);
                let entry = ready.queued.entry;
                state.deliver(config, &ready.session, &ready.name, entry, place);
            }
            WaitState::Failed(_) | WaitState::Done => {}
        }
    }
}
