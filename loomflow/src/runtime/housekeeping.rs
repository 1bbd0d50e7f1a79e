//! What workers delete as they go: audit entries past the runtime's retention, and stored
//! signals past the pending TTL that no unfinished run is there to take.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::clock::{now_ms, unix_ms};
use super::{Result, Runtime};

/// How often, at most, workers do each chore.
const EVERY_MS: u64 = 60_000;

/// When a chore last ran: it runs at most once a minute, by whichever caller comes first.
#[derive(Debug, Default)]
struct LastRun(AtomicU64);

impl LastRun {
    /// Whether the chore is due at `now_ms`; if it is, it is the caller's to do.
    fn take(&self, now_ms: u64) -> bool {
        let last = self.0.load(Ordering::Relaxed);
        now_ms.saturating_sub(last) >= EVERY_MS
            && self
                .0
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

/// A runtime's chores: how long its audit entries are kept, and when each chore last ran.
#[derive(Debug)]
pub(super) struct Housekeeping {
    audit_retention: Option<Duration>,
    audit: LastRun,
    signals: LastRun,
}

impl Housekeeping {
    pub(super) fn new(audit_retention: Option<Duration>) -> Self {
        Self {
            audit_retention,
            audit: LastRun::default(),
            signals: LastRun::default(),
        }
    }
}

impl Runtime {
    /// Drops the signals stored more than `older_than` ago (by the runtime's
    /// [clock](super::RuntimeBuilder::clock), which stamps the signals it sends) that nobody
    /// has taken, for
    /// sessions with no unfinished run (none, or one that completed, failed or was
    /// cancelled) that are not open in this runtime; returns how many.
    ///
    /// Workers do this on their own, at most once a minute, with the runtime's
    /// [`pending_signal_ttl`](super::MailboxConfig::pending_signal_ttl) (a worker whose TTL
    /// is `None` does not), so that signals sent to sessions that never run do not pile up
    /// in a durable store. A process that only sends signals and runs no worker can call it
    /// itself.
    ///
    /// Spared: the sessions of queued, running and suspended runs, and those open here (a
    /// [`session`](Runtime::session) guard, a parked wait), whose queued signals are live.
    /// A session open in *another* process is not known here: a signal queued in it for
    /// longer than `older_than` can be dropped, as a worker that starts drops the stored
    /// signals older than its TTL when it loads them. Every process on a store should use
    /// the same TTL; the shortest one a worker uses is the one that holds. An `older_than`
    /// shorter than this runtime's own TTL can drop a signal its mailbox still holds as
    /// pending, which a wait then finds gone from the store and skips.
    ///
    /// # Errors
    ///
    /// A store failure.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loomflow::prelude::*;
    /// use loomflow::runtime::{MailboxConfig, SqliteStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
    /// # let path = std::env::temp_dir().join(format!("loomflow-doc-prune-{}.db", std::process::id()));
    /// let ttl = Duration::from_millis(200);
    /// let runtime = Runtime::builder()
    ///     .store(SqliteStore::open(&path)?)
    ///     .signals(MailboxConfig::default().pending_signal_ttl(Some(ttl)))
    ///     .build();
    /// runtime.signal("nobody-runs-this", "approval", true).await?;
    /// assert_eq!(runtime.prune_signals(ttl).await?, 0, "not that old yet");
    /// tokio::time::sleep(2 * ttl).await;
    /// assert_eq!(runtime.prune_signals(ttl).await?, 1);
    /// # drop(runtime);
    /// # for suffix in ["", "-wal", "-shm"] { let _ = std::fs::remove_file(format!("{}{suffix}", path.display())); }
    /// # Ok(()) }
    /// ```
    pub async fn prune_signals(&self, older_than: Duration) -> Result<u64> {
        let older_than_ms = u64::try_from(older_than.as_millis()).unwrap_or(u64::MAX);
        // A run executing here need not be named: its row is unfinished, and a store spares
        // the signals of unfinished runs, whether or not the run opened its session.
        let spare = self.mailbox().live_sessions();
        let pruned = (self.store())
            .prune_signals(unix_ms(self.now()).saturating_sub(older_than_ms), &spare)
            .await?;
        // What this process remembers of the signals kept for runs goes with them.
        self.removals().sweep_spared().await;
        Ok(pruned)
    }

    /// Does the chores that are due: prunes the audit log to the runtime's
    /// [retention](super::RuntimeBuilder::audit_retention), if it has one, and a durable
    /// store's signals to the pending TTL, if there is one (see
    /// [`prune_signals`](Self::prune_signals)); each at most once a minute. Workers call it
    /// as they go; a failure is logged.
    pub(crate) async fn prune_if_due(&self) {
        let now = now_ms();
        let chores = &self.inner.housekeeping;
        if let Some(keep) = chores.audit_retention
            && chores.audit.take(now)
        {
            match self.prune_audit(keep).await {
                Ok(0) => {}
                Ok(pruned) => tracing::debug!(pruned, "pruned the audit log"),
                Err(error) => tracing::warn!(%error, "pruning the audit log failed"),
            }
        }
        if self.store().is_durable()
            && let Some(ttl) = self.signal_config().pending_signal_ttl
            && chores.signals.take(now)
        {
            match self.prune_signals(ttl).await {
                Ok(0) => {}
                Ok(pruned) => tracing::debug!(pruned, "dropped signals past the pending TTL"),
                Err(error) => tracing::warn!(%error, "pruning stored signals failed"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chore_is_due_once_a_minute_to_one_caller() {
        let last = LastRun::default();
        assert!(last.take(EVERY_MS), "never run: due");
        assert!(!last.take(EVERY_MS), "taken: not due again at once");
        assert!(!last.take(2 * EVERY_MS - 1));
        assert!(last.take(2 * EVERY_MS));
    }
}
