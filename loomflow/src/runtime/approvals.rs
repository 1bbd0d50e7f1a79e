//! Tool calls waiting for a person: listed while a [`SignalApprover`](crate::tool::SignalApprover)
//! waits, answered by [`Runtime::decide_approval`].

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use super::Runtime;
use super::mailbox::SignalOptions;
use crate::Result;
use crate::tool::{ApprovalDecision, ApprovalRequest, SignalApprover};

/// The calls waiting for approval, by session.
#[derive(Debug, Default)]
pub(crate) struct Approvals(Mutex<HashMap<String, Vec<ApprovalRequest>>>);

/// Removes a call from the pending list when its wait ends, however it ends.
pub(crate) struct PendingApproval {
    runtime: Runtime,
    session: String,
    call_id: String,
    keep: bool,
}

impl PendingApproval {
    /// Leaves the call listed until it is answered (the run suspended on it).
    pub(crate) fn keep(mut self) {
        self.keep = true;
    }
}

impl Drop for PendingApproval {
    fn drop(&mut self) {
        if !self.keep {
            self.runtime.forget_approval(&self.session, &self.call_id);
        }
    }
}

impl Runtime {
    /// The tool calls of `session` waiting for a person's decision, oldest first: the tool,
    /// the exact arguments and the call id to answer with
    /// [`decide_approval`](Self::decide_approval).
    pub fn pending_approvals(&self, session: &str) -> Vec<ApprovalRequest> {
        let approvals = self
            .approvals()
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        approvals.get(session).cloned().unwrap_or_default()
    }

    /// Answers a call waiting for approval: sends `decision` on the framework signal
    /// `loomflow:approval:<call_id>` of `session`.
    ///
    /// # Errors
    ///
    /// As for [`signal`](Self::signal): the mailbox refused it or the store failed.
    pub async fn decide_approval(
        &self,
        session: &str,
        call_id: &str,
        decision: ApprovalDecision,
    ) -> Result<()> {
        let payload = serde_json::to_value(&decision)
            .map_err(|e| crate::Error::json("approval decision", e))?;
        self.send(
            session,
            &SignalApprover::signal_name(call_id),
            payload,
            SignalOptions::default(),
            true,
        )
        .await?;
        self.forget_approval(session, call_id);
        Ok(())
    }

    pub(crate) fn register_approval(&self, request: ApprovalRequest) -> PendingApproval {
        let guard = PendingApproval {
            runtime: self.clone(),
            session: request.session.clone(),
            call_id: request.call_id.clone(),
            keep: false,
        };
        let mut approvals = self
            .approvals()
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let list = approvals.entry(request.session.clone()).or_default();
        // A node that runs again after suspending registers the same call again.
        list.retain(|r| r.call_id != request.call_id);
        list.push(request);
        drop(approvals);
        guard
    }

    pub(crate) fn forget_approval(&self, session: &str, call_id: &str) {
        let mut approvals = self
            .approvals()
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(list) = approvals.get_mut(session) {
            list.retain(|r| r.call_id != call_id);
            if list.is_empty() {
                approvals.remove(session);
            }
        }
    }

    /// Removes a signal consumed outside a node from a durable store, in the background.
    pub(crate) fn forget_consumed_signal(&self, session: &str, seq: Option<u64>) {
        let Some(seq) = seq else { return };
        let runtime = self.clone();
        let session = session.to_owned();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                if let Err(error) = runtime.store().take_signal(&session, seq, None).await {
                    tracing::error!(%error, %session, seq, "could not remove a consumed signal");
                }
            });
        }
    }
}
