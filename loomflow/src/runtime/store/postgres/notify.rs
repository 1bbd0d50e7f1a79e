//! The change counter: writes that may give a worker something to do notify channel
//! `loomflow_changes` (`SELECT pg_notify(...)` from the rows they change, in the statement
//! that changes them, so the notification goes out only if they commit); a connection of
//! the store's own `LISTEN`s and bumps a counter for every notification, which
//! [`Store::change_counter`](crate::runtime::Store::change_counter) returns.
//!
//! Notifications say only "look again": a missed one delays a worker until its next sweep
//! (every half lease), never loses work. While the listening connection is down the
//! counter reads `None`, and workers look at every poll interval, as they do on a store
//! without a counter; when it is back the counter moves once, since anything may have
//! happened meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use tokio_postgres::{AsyncMessage, NoTls};

use super::error::chain;
use super::target::Target;

/// What the listening task shares with the store.
#[derive(Debug, Default)]
struct Shared {
    changes: AtomicU64,
    listening: AtomicBool,
    /// Wakes the workers waiting for a change at once.
    notify: Arc<tokio::sync::Notify>,
}

impl Shared {
    fn bump(&self) {
        self.changes.fetch_add(1, Ordering::AcqRel);
        self.notify.notify_waiters();
    }
}

/// The listening task; it stops when this is dropped.
#[derive(Debug)]
pub(super) struct Listener {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

/// The longest wait between two attempts to connect again.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How long the listening connection may be quiet before TCP probes it, how often it probes
/// then, and how many unanswered probes end it. A connection that only listens sends
/// nothing: a link that died without a word (a dropped NAT entry, a failover) would
/// otherwise read as alive for the kernel's default two hours, the counter frozen, and a
/// process waiting for a signal from another would not hear of it. With these it is known
/// dead within a minute, and the listener connects again.
const PROBE_AFTER: Duration = Duration::from_secs(30);
const PROBE_EVERY: Duration = Duration::from_secs(10);
const PROBES: u32 = 3;

/// The settings of every connection (the pool's and the listener's): the store's, with TCP
/// keepalive probes, and, where the system has it (Linux), a limit on how long data sent may
/// go unacknowledged. A pooled connection whose link died while idle is then found closed
/// before it is handed out, and a statement sent on a link that dies fails within a minute
/// instead of waiting out the kernel's retransmissions (about 15).
pub(super) fn probed_config(target: &Target) -> tokio_postgres::Config {
    let mut config = target.config.clone();
    config
        .keepalives(true)
        .keepalives_idle(PROBE_AFTER)
        .keepalives_interval(PROBE_EVERY)
        .keepalives_retries(PROBES)
        .tcp_user_timeout(UNACKNOWLEDGED_FOR);
    config
}

/// How long data sent may go unacknowledged before the connection is given up.
const UNACKNOWLEDGED_FOR: Duration = Duration::from_secs(60);

impl Listener {
    /// Starts listening on `target` from a task of the current tokio runtime.
    pub(super) fn spawn(target: Target) -> Self {
        let shared = Arc::new(Shared::default());
        let task = tokio::spawn(listen(target, Arc::clone(&shared)));
        Self { shared, task }
    }

    /// Woken at every notification.
    pub(super) fn notifier(&self) -> Arc<tokio::sync::Notify> {
        Arc::clone(&self.shared.notify)
    }

    /// The number of notifications received so far, or `None` while not listening.
    pub(super) fn counter(&self) -> Option<u64> {
        self.shared
            .listening
            .load(Ordering::Acquire)
            .then(|| self.shared.changes.load(Ordering::Acquire))
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Listens until aborted, connecting again (with a growing pause) whenever the connection
/// fails.
async fn listen(target: Target, shared: Arc<Shared>) {
    // Dropped with the task (an abort, or the runtime it runs on shutting down while the
    // store lives on): the counter then reads "not listening", and its readers poll.
    let _stops = NotListening(Arc::clone(&shared));
    let mut backoff = Duration::from_millis(50);
    loop {
        match session(&target, &shared).await {
            Ok(()) => {
                tracing::warn!(store = %target.shown, "the PostgreSQL change listener's connection closed")
            }
            Err(error) => tracing::warn!(
                store = %target.shown,
                error = %target.scrub(chain(&error)),
                "the PostgreSQL change listener failed; workers poll until it is back"
            ),
        }
        if shared.listening.swap(false, Ordering::AcqRel) {
            backoff = Duration::from_millis(50); // it had worked: try again soon
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Says the listener is not listening once it is dropped.
struct NotListening(Arc<Shared>);

impl Drop for NotListening {
    fn drop(&mut self) {
        self.0.listening.store(false, Ordering::Release);
    }
}

/// One connection's life: `LISTEN`, then count notifications until it ends.
async fn session(target: &Target, shared: &Shared) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = probed_config(target).connect(NoTls).await?;
    let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
    // The connection is driven by polling its messages, so `LISTEN` runs beside that.
    {
        let listen = client.batch_execute("LISTEN loomflow_changes");
        tokio::pin!(listen);
        loop {
            tokio::select! {
                done = &mut listen => {
                    done?;
                    break;
                }
                message = messages.next() => match message {
                    Some(Ok(AsyncMessage::Notification(_))) => shared.bump(),
                    Some(Ok(_)) => {}
                    Some(Err(error)) => return Err(error),
                    None => return Ok(()),
                },
            }
        }
    }
    // Anything may have been committed while nobody listened.
    shared.bump();
    shared.listening.store(true, Ordering::Release);
    while let Some(message) = messages.next().await {
        if let AsyncMessage::Notification(_) = message? {
            shared.bump();
        }
    }
    // `client` lives until here: dropping it would close the connection.
    drop(client);
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_silent_listening_connection_is_probed_within_a_minute() {
        let target = Target::parse("postgres://loomflow@127.0.0.1:5432/flows").unwrap();
        assert_eq!(
            target.config.get_keepalives_idle(),
            Duration::from_secs(7_200)
        );
        let config = probed_config(&target);
        assert!(config.get_keepalives());
        let probed_dead = config.get_keepalives_idle()
            + config.get_keepalives_interval().unwrap() * config.get_keepalives_retries().unwrap();
        assert!(probed_dead <= Duration::from_secs(60), "{probed_dead:?}");
        assert_eq!(config.get_dbname(), target.config.get_dbname());
    }
}
