//! Reading the audit log, and pruning it.

use std::time::Duration;

use super::clock::now_ms;
use super::store::{AuditEntry, AuditQuery};
use super::{Result, Runtime};

impl Runtime {
    /// The audit log of a thread, oldest first: every tool call, permission decision and
    /// approval, signal sent and received, interrupt and resume (see
    /// [`AuditEntry`]).
    ///
    /// Entries are written with what they describe, so they survive restarts and every
    /// process on the store sees them. "Oldest first" is in the order they were written
    /// (their ids), which is not always the order of their times (`at_ms`): a `resume`
    /// entry, dated when the execution picked the run up, is written with the resumed
    /// step's checkpoint, after the entries of what that step did (its tool calls,
    /// decisions, signals received), so that a crash before it records no resume twice.
    ///
    /// # Errors
    ///
    /// A store failure.
    ///
    /// # Examples
    ///
    /// ```
    /// use loomflow::prelude::*;
    /// use loomflow::runtime::AuditKind;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
    /// let runtime = Runtime::in_memory();
    /// runtime.signal("order-7", "approval", json!({ "approved": true })).await?;
    /// let log = runtime.audit("order-7").await?;
    /// assert_eq!(log[0].kind, AuditKind::SignalSent);
    /// assert_eq!(log[0].subject, "approval");
    /// # Ok(()) }
    /// ```
    pub async fn audit(&self, thread: &str) -> Result<Vec<AuditEntry>> {
        self.audit_query(&AuditQuery::thread(thread)).await
    }

    /// The audit entries `query` selects, oldest first: one kind, every thread, a page after
    /// an id.
    ///
    /// # Errors
    ///
    /// A store failure.
    pub async fn audit_query(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>> {
        Ok(self.store().audit(query).await?)
    }

    /// Deletes the audit entries older than `keep`; returns how many.
    ///
    /// # Errors
    ///
    /// A store failure.
    pub async fn prune_audit(&self, keep: Duration) -> Result<u64> {
        let keep_ms = u64::try_from(keep.as_millis()).unwrap_or(u64::MAX);
        Ok(self
            .store()
            .prune_audit(now_ms().saturating_sub(keep_ms))
            .await?)
    }
}
