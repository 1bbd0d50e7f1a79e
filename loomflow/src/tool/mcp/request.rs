//! One `tools/call` request: timed out when the server says nothing for the request
//! timeout (a progress notification of the call restarts the wait, up to the call's longest
//! time), and cancelled with the server when the caller stops waiting.

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientNotification, ClientRequest, Notification, RequestId, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, ServiceError};
use serde_json::Value;

use super::catalog::Catalog;

/// Sends `params` and waits for the result. The wait ends with [`ServiceError::Timeout`]
/// once the server has sent nothing for the call (no result, no progress) for the
/// catalog's timeout, or once the call has taken its longest time; rmcp then tells the
/// server the request is cancelled.
pub(super) async fn call_tool(
    catalog: &Catalog,
    peer: &Peer<RoleClient>,
    params: CallToolRequestParams,
) -> Result<CallToolResult, ServiceError> {
    let options = PeerRequestOptions::with_timeout(catalog.timeout)
        .reset_timeout_on_progress()
        .with_max_total_timeout(catalog.max_call_time);
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = peer.send_request_with_option(request, options).await?;
    let runtime = tokio::runtime::Handle::try_current().ok();
    let mut abandoned = Abandoned {
        peer,
        id: Some(handle.id.clone()),
        runtime: runtime.clone(),
    };
    // Awaited in a task of its own, which ends however this call does (by the answer, or
    // by the timeouts): rmcp forgets the call's progress only once it has.
    let result = match runtime {
        // A task that panicked or was cancelled (its runtime shutting down) says nothing of
        // the connection: not `TransportClosed`, which would mark the server gone.
        Some(runtime) => runtime
            .spawn(handle.await_response())
            .await
            .unwrap_or(Err(ServiceError::UnexpectedResponse)),
        None => handle.await_response().await,
    };
    abandoned.id = None;
    match result? {
        ServerResult::CallToolResult(result) => Ok(result),
        // A call that answered with no content (`{}`, an acknowledgement, only `_meta`),
        // as rmcp's own `call_tool` takes it.
        ServerResult::EmptyResult(_) | ServerResult::TaskAckResult(_) => {
            Ok(CallToolResult::success(Vec::new()))
        }
        ServerResult::CustomResult(custom) if meta_only(&custom.0) => {
            Ok(CallToolResult::success(Vec::new()))
        }
        _ => Err(ServiceError::UnexpectedResponse),
    }
}

/// Whether a result holds nothing but its `_meta`.
fn meta_only(result: &Value) -> bool {
    result.as_object().is_some_and(|fields| {
        fields.len() == 1 && fields.get("_meta").is_some_and(Value::is_object)
    })
}

/// Tells the server that a call nobody waits for any more (the host's own timeout, a run
/// cancelled) is cancelled, so that it can stop working on it.
struct Abandoned<'a> {
    peer: &'a Peer<RoleClient>,
    /// The request, until its answer came.
    id: Option<RequestId>,
    /// The runtime the call was made on, where the notification is sent from.
    runtime: Option<tokio::runtime::Handle>,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        let (Some(id), Some(runtime)) = (self.id.take(), self.runtime.take()) else {
            return;
        };
        let reason = "the caller stopped waiting".to_owned();
        let cancelled = Notification::new(CancelledNotificationParam::new(Some(id), Some(reason)));
        let peer = self.peer.clone();
        runtime.spawn(async move {
            let notification = ClientNotification::CancelledNotification(cancelled);
            let _ = peer.send_notification(notification).await;
        });
    }
}
