//! [`DurableApprover`]: approvals that survive restarts.

use serde_json::json;

use super::approval::{ApprovalDecision, ApprovalHandler, ApprovalRequest, SignalApprover};
use super::host::DispatchContext;
use crate::graph::BoxFuture;

/// An approver that suspends the *run* until a person decides, holding nothing in memory.
///
/// Inside a graph node (an agent's `tools` node), a call that needs approval suspends the
/// run: the run reports `Interrupted`, and its interrupt's payload is the exact pending call
/// (`{"approval": {call_id, tool, arguments, user, session}}`), so whoever decides sees what
/// will run. The process may exit. A decision sent later, from any process, with
/// [`Runtime::decide_approval`](crate::Runtime::decide_approval) is stored (on a durable
/// runtime); carrying the run on (`agent.resume(session)` or `graph.recover(..)`) then runs
/// the tool exactly once after an approval, or shows the model the rejection's reason.
///
/// Outside a node there is no run to suspend, and the call is denied.
#[derive(Clone, Copy, Debug, Default)]
pub struct DurableApprover;

impl ApprovalHandler for DurableApprover {
    fn decide<'a>(
        &'a self,
        request: &'a ApprovalRequest,
        ctx: DispatchContext<'a>,
    ) -> BoxFuture<'a, crate::Result<ApprovalDecision>> {
        Box::pin(async move {
            let Some(node) = ctx.node else {
                return Ok(ApprovalDecision::Deny {
                    reason: "durable approvals need a run to suspend".to_owned(),
                });
            };
            let payload = serde_json::to_value(request)
                .map_err(|e| crate::Error::json("approval request", e))?;
            node.wait_for_framework_signal::<ApprovalDecision>(SignalApprover::signal_name(
                &request.call_id,
            ))
            .or_suspend()
            .payload(json!({ "approval": payload }))
            .await
        })
    }
}
