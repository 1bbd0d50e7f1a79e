//! The calls waiting for a person: [`Runtime::pending_approvals`] lists them and
//! [`Runtime::decide_approval`] answers them, from any process.
//!
//! The list is derived, not kept: a call whose run suspended on it is read from the run's
//! durable interrupt (where [`SignalApprover::or_suspend`](super::SignalApprover::or_suspend)
//! puts the exact request), so every process on the same store sees it; a call that waits in
//! this process's memory is added from a small in-process registry for as long as it waits.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;

use super::approval::{ApprovalDecision, ApprovalRequest, SignalApprover};
use crate::Result;
use crate::runtime::{Delivery, Interrupt, Runtime, RuntimeError, SignalOptions};

/// Where an approval's interrupt carries its request: `{"waiting_for_signal": .., "details":
/// {"approval": request}}`.
const DETAILS_KEY: &str = "approval";

/// Calls waiting for a decision in this process's memory, by session.
#[derive(Debug, Default)]
pub(crate) struct LiveApprovals(Mutex<HashMap<String, Vec<LiveRequest>>>);

/// A call waiting in memory, and whether a decision for it was sent: it waits until its
/// run takes the decision, unlisted, and a second decision is refused as a duplicate.
#[derive(Debug)]
struct LiveRequest {
    request: ApprovalRequest,
    decided: bool,
}

impl LiveApprovals {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Vec<LiveRequest>>> {
        // The critical sections cannot panic, so a poisoned lock still holds sound data.
        crate::sync::lock(&self.0)
    }

    fn forget(&self, session: &str, call_id: &str) {
        let mut approvals = self.lock();
        if let Some(list) = approvals.get_mut(session) {
            list.retain(|live| live.request.call_id != call_id);
            if list.is_empty() {
                approvals.remove(session);
            }
        }
    }

    /// Notes that the call `call_id` of `session` has its decision.
    fn decided(&self, session: &str, call_id: &str) {
        let mut approvals = self.lock();
        let list = approvals.get_mut(session).into_iter().flatten();
        for live in list.filter(|live| live.request.call_id == call_id) {
            live.decided = true;
        }
    }
}

/// Lists a call while it waits in memory; unlists it when dropped, however the wait ends.
pub(crate) struct LiveApproval {
    registry: Arc<LiveApprovals>,
    session: String,
    call_id: String,
}

impl LiveApproval {
    pub(crate) fn register(runtime: &Runtime, request: &ApprovalRequest) -> Self {
        let registry = runtime.extension::<LiveApprovals>();
        let mut approvals = registry.lock();
        let list = approvals.entry(request.session.clone()).or_default();
        list.retain(|live| live.request.call_id != request.call_id);
        list.push(LiveRequest {
            request: request.clone(),
            decided: false,
        });
        drop(approvals);
        Self {
            registry,
            session: request.session.clone(),
            call_id: request.call_id.clone(),
        }
    }
}

impl Drop for LiveApproval {
    fn drop(&mut self) {
        self.registry.forget(&self.session, &self.call_id);
    }
}

/// The interrupt details that carry `request` while a run is suspended on it.
pub(crate) fn interrupt_details(request: &ApprovalRequest) -> Value {
    serde_json::json!({ DETAILS_KEY: request })
}

/// The approval request an interrupt of `session`'s run is suspended on, if it is one and
/// still waits at `now_ms`: past its approver's timeout (the interrupt's wake time) the call
/// is denied when its run is carried on, and a decision would come too late to count.
///
/// The request names `session`, whatever the interrupt recorded: a fork copies the
/// interrupt, request and all, and its call is decided on the fork's thread.
fn request_of(interrupt: &Interrupt, session: &str, now_ms: u64) -> Option<ApprovalRequest> {
    if interrupt.wake_at_ms.is_some_and(|at| at <= now_ms) {
        return None;
    }
    let signal = interrupt.signal.as_deref()?;
    let call_id = signal.strip_prefix(SignalApprover::PREFIX)?;
    let mut request: ApprovalRequest =
        serde::Deserialize::deserialize(interrupt.payload.get("details")?.get(DETAILS_KEY)?)
            .ok()?;
    session.clone_into(&mut request.session);
    (request.call_id == call_id).then_some(request)
}

/// The idempotency key of a decision for the call `call_id` asked at `asked_at_ms`: one
/// decision a request.
fn decision_key(call_id: &str, asked_at_ms: u64) -> String {
    format!("{call_id}@{asked_at_ms}")
}

impl Runtime {
    /// The tool calls of `session` waiting for a person's decision, oldest first: the tool,
    /// the exact arguments, when it was asked, and the call id to answer with
    /// [`decide_approval`](Self::decide_approval).
    ///
    /// Calls whose run suspended on them are read from the store, so any process on the same
    /// store lists them; calls waiting in memory are listed by the process that waits. A
    /// call past its approver's timeout (by the runtime's clock) is not listed: it is denied.
    /// Nor is a call decided already, whose decision is queued or was taken by its run (the
    /// run carried on, and runs the call before its next checkpoint).
    ///
    /// # Errors
    ///
    /// A store failure.
    pub async fn pending_approvals(&self, session: &str) -> Result<Vec<ApprovalRequest>> {
        self.load_stored_signals().await?;
        let mailbox = self.mailbox();
        let now_ms = crate::runtime::clock::unix_ms(self.now());
        let suspended = self.suspended_requests(session, now_ms).await?;
        let mut requests = Vec::with_capacity(suspended.len());
        for request in suspended {
            // A call whose decision is queued is answered: the run carries on with it. One
            // whose decision a run took already (the run carried on, and runs the call until
            // its next checkpoint) is answered too, as a second decision would be told.
            let name = SignalApprover::signal_name(&request.call_id);
            let key = decision_key(&request.call_id, request.requested_at_ms);
            if mailbox.queued(session, &name) == 0
                && !self.key_already_sent(session, &name, &key).await?
            {
                requests.push(request);
            }
        }
        let live = self.extension::<LiveApprovals>();
        let approvals = live.lock();
        let waiting = approvals.get(session).into_iter().flatten();
        for live in waiting.filter(|live| !live.decided) {
            if !requests.iter().any(|r| r.call_id == live.request.call_id) {
                requests.push(live.request.clone());
            }
        }
        drop(approvals);
        requests.sort_by_key(|r| r.requested_at_ms);
        Ok(requests)
    }

    /// The sessions with a call waiting for a decision in this process's memory, sorted:
    /// their runs execute (a row that says `running`), so a list of waiting runs misses them.
    #[cfg(feature = "http")]
    pub(crate) fn sessions_awaiting_approval(&self) -> Vec<String> {
        let live = self.extension::<LiveApprovals>();
        let mut sessions: Vec<String> = live.lock().keys().cloned().collect();
        sessions.sort();
        sessions
    }

    /// Answers a call waiting for approval: sends `decision` on the framework signal
    /// `loomflow:approval:<call_id>` of `session`. A suspended run carries on when it is
    /// recovered (or by itself, under a worker).
    ///
    /// A call decides once: a second decision for the same request (a retry, a double click,
    /// two people at once) is refused with [`RuntimeError::AlreadyDecided`], and the first
    /// stands.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::NoPendingApproval`] when no call `call_id` of `session` waits for a
    /// decision (list them with [`pending_approvals`](Self::pending_approvals)), a call
    /// past its approver's timeout included; [`RuntimeError::ApprovalRunEnded`] when none
    /// waits because the session's run has ended (cancelled, say);
    /// [`RuntimeError::AlreadyDecided`]; [`RuntimeError::BlankReason`] for a rejection
    /// whose reason is blank; [`RuntimeError::DecisionDropped`] when it was
    /// dropped on arrival (a suspended run, on a runtime that keeps no pending signals); as
    /// for [`signal`](Self::signal): the mailbox refused it or the store failed.
    pub async fn decide_approval(
        &self,
        session: &str,
        call_id: &str,
        decision: ApprovalDecision,
    ) -> Result<()> {
        self.send_decision(session, call_id, decision, None, None)
            .await
    }

    /// [`decide_approval`](Self::decide_approval), naming who decided: the audit log's
    /// `decision` entry for the call records `by` as its actor.
    ///
    /// # Errors
    ///
    /// As for [`decide_approval`](Self::decide_approval).
    pub async fn decide_approval_by(
        &self,
        session: &str,
        call_id: &str,
        decision: ApprovalDecision,
        by: &str,
    ) -> Result<()> {
        self.send_decision(session, call_id, decision, Some(by), None)
            .await
    }

    /// [`decide_approval_by`](Self::decide_approval_by), for the request the call made at
    /// `asked_at_ms` (its `requested_at_ms`, as
    /// [`pending_approvals`](Self::pending_approvals) listed it), if given: a decision made
    /// on what was shown earlier (a page, a printout) is refused with
    /// [`RuntimeError::AskedAgain`] when the call that waits under the id now is another
    /// (its run carried on and asked again under the same id).
    ///
    /// # Errors
    ///
    /// As for [`decide_approval`](Self::decide_approval), and
    /// [`RuntimeError::AskedAgain`].
    pub async fn decide_approval_asked_at(
        &self,
        session: &str,
        call_id: &str,
        asked_at_ms: Option<u64>,
        decision: ApprovalDecision,
        by: &str,
    ) -> Result<()> {
        self.send_decision(session, call_id, decision, Some(by), asked_at_ms)
            .await
    }

    async fn send_decision(
        &self,
        session: &str,
        call_id: &str,
        decision: ApprovalDecision,
        by: Option<&str>,
        decided_for_ms: Option<u64>,
    ) -> Result<()> {
        if matches!(&decision, ApprovalDecision::Deny { reason } if reason.trim().is_empty()) {
            return Err(RuntimeError::BlankReason {
                session: session.to_owned(),
                call_id: call_id.to_owned(),
            }
            .into());
        }
        let mut payload = serde_json::to_value(&decision)
            .map_err(|e| crate::Error::json("approval decision", e))?;
        if let Value::Object(fields) = &mut payload {
            if let Some(by) = by {
                fields.insert("by".to_owned(), Value::from(by));
            }
            // The audit dates the decision by it, not by when a run gets to use it (by the
            // clock the audit's entries are dated by).
            let now = crate::runtime::clock::now_ms();
            fields.insert("decided_at_ms".to_owned(), Value::from(now));
        }
        // The request's time keys the decision: a second one for the same request (a
        // double click, a colleague deciding at the same moment) is a duplicate and refused,
        // so no decision is left over to answer a later call that reuses the id.
        // A decision for a call that does not wait for one (never asked, or answered and
        // carried on already) would stay queued and answer the next call that reuses the id,
        // with nobody deciding it: refused.
        let Some(asked_at) = self.asked_at(session, call_id).await? else {
            // A run that has ended (cancelled, say) is named as such: "no call waits" alone
            // reads as a mistyped id.
            let run = self.store().get_run(session).await?;
            if let Some(run) = run.filter(|run| run.state.is_finished()) {
                return Err(RuntimeError::ApprovalRunEnded {
                    session: session.to_owned(),
                    call_id: call_id.to_owned(),
                    state: run.state,
                }
                .into());
            }
            return Err(RuntimeError::NoPendingApproval {
                session: session.to_owned(),
                call_id: call_id.to_owned(),
            }
            .into());
        };
        if let Some(decided_for_ms) = decided_for_ms.filter(|&at| at != asked_at) {
            return Err(RuntimeError::AskedAgain {
                session: session.to_owned(),
                call_id: call_id.to_owned(),
                asked_at_ms: asked_at,
                decided_for_ms,
            }
            .into());
        }
        // The request it answers: a decision left queued (its run cancelled, or carried on
        // and settled without it) answers no later call that reuses the id.
        if let Value::Object(fields) = &mut payload {
            fields.insert("asked_at_ms".to_owned(), Value::from(asked_at));
        }
        let options = SignalOptions::default().idempotency_key(decision_key(call_id, asked_at));
        let name = SignalApprover::signal_name(call_id);
        // The decision counts against the payload limit whole (with the time it was made).
        self.mailbox().check_size(session, &name, &payload)?;
        let delivery = self
            .send_framework(session, &name, payload, options)
            .await?;
        let refused = match delivery {
            Delivery::Duplicate => RuntimeError::AlreadyDecided {
                session: session.to_owned(),
                call_id: call_id.to_owned(),
            },
            Delivery::Dropped => RuntimeError::DecisionDropped {
                session: session.to_owned(),
                call_id: call_id.to_owned(),
            },
            _ => {
                self.extension::<LiveApprovals>().decided(session, call_id);
                return Ok(());
            }
        };
        Err(refused.into())
    }

    /// The approval requests `session`'s run is suspended on and that still wait at
    /// `now_ms`. None when the run's row says it ended: a worker that failed it at its
    /// lapse limit leaves its checkpoints as they are, and no run waits for a decision then
    /// (a `recover` that carries it on asks again, or replays the decision it took).
    async fn suspended_requests(&self, session: &str, now_ms: u64) -> Result<Vec<ApprovalRequest>> {
        let interrupts = self.pending_interrupts(session).await?;
        if interrupts.is_empty() {
            return Ok(Vec::new());
        }
        let row = self
            .store()
            .get_run(session)
            .await
            .map_err(RuntimeError::from)?;
        // Queued too: only a row whose run ended takes a new run, which has written nothing
        // yet, and the checkpoint is still the ended run's.
        if row.is_some_and(|row| {
            row.state.is_finished() || row.state == crate::runtime::RunState::Queued
        }) {
            return Ok(Vec::new());
        }
        Ok((interrupts.iter())
            .filter_map(|interrupt| request_of(interrupt, session, now_ms))
            .collect())
    }

    /// When the call `call_id` of `session` asked for approval, if it waits for a decision
    /// (one queued already or not).
    async fn asked_at(&self, session: &str, call_id: &str) -> Result<Option<u64>> {
        let now_ms = crate::runtime::clock::unix_ms(self.now());
        let suspended = self.suspended_requests(session, now_ms).await?;
        let live = self.extension::<LiveApprovals>();
        let live: Vec<ApprovalRequest> = (live.lock().get(session).into_iter().flatten())
            .map(|live| live.request.clone())
            .collect();
        // A call waiting in memory first: a run that took its first decision and carried on
        // without a checkpoint may have asked again under the same id, and the interrupt it
        // suspended on before is still the newest.
        Ok(live
            .into_iter()
            .chain(suspended)
            .find(|r| r.call_id == call_id)
            .map(|r| r.requested_at_ms))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;
    use crate::Error;

    /// A call waiting in memory that has its decision is no longer listed, and a second
    /// decision (a double click) is refused as decided already, not as never asked, until
    /// its wait ends.
    #[tokio::test]
    async fn a_second_decision_on_a_call_waiting_in_memory_is_already_decided() {
        let runtime = Runtime::in_memory();
        let request = ApprovalRequest::new("s", "call_1", "pay", json!({"cents": 5}));
        let waiting = LiveApproval::register(&runtime, &request);
        assert_eq!(runtime.pending_approvals("s").await.unwrap().len(), 1);

        let allow = || ApprovalDecision::Allow;
        runtime
            .decide_approval("s", "call_1", allow())
            .await
            .unwrap();
        assert!(runtime.pending_approvals("s").await.unwrap().is_empty());
        let again = runtime.decide_approval("s", "call_1", allow()).await;
        assert!(
            matches!(
                again,
                Err(Error::Runtime(RuntimeError::AlreadyDecided { .. }))
            ),
            "{again:?}"
        );

        drop(waiting);
        let after = runtime.decide_approval("s", "call_1", allow()).await;
        assert!(
            matches!(
                after,
                Err(Error::Runtime(RuntimeError::NoPendingApproval { .. }))
            ),
            "once its wait ended: {after:?}"
        );
    }
}
