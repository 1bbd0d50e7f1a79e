//! Listening for what a store is told of changes (PostgreSQL's `LISTEN`; see
//! [`Store::change_notifier`](super::Store::change_notifier)), for those that look at the
//! store when it changes: a worker, and the task that brings other processes' signals in.
//!
//! The store wakes its waiters with `notify_waiters`, which keeps nothing for a waiter that
//! comes later. So a looker enables its listening before it reads the change counter, and
//! waits on it once it has looked: a change told while it looks (after the read) ends the
//! wait rather than being lost until the next poll.

use std::pin::Pin;

use tokio::sync::futures::Notified;

/// What a looker listens with: `None` for a store that is not told of changes.
pub(crate) type Listening<'a> = Option<Notified<'a>>;

/// Starts listening, before the change counter is read.
pub(crate) fn enable(listening: Pin<&mut Listening<'_>>) {
    if let Some(notified) = listening.as_pin_mut() {
        notified.enable();
    }
}

/// Resolves when the store was told of a change since listening was enabled; never, for a
/// store that is not told.
pub(crate) async fn told(listening: Pin<&mut Listening<'_>>) {
    match listening.as_pin_mut() {
        Some(notified) => notified.await,
        None => std::future::pending().await,
    }
}
