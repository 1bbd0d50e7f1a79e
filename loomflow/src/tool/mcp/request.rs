//! One `tools/call` request: timed out when the server says nothing for the request
//! timeout (a progress notification of the call restarts the wait), and cancelled with the
//! server when the caller stops waiting.

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientNotification, ClientRequest, Notification, RequestId, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, ServiceError};

use super::catalog::Catalog;

/// Sends `params` and waits for the result. The wait ends with [`ServiceError::Timeout`]
/// once the server has sent nothing for the call (no result, no progress) for the
/// catalog's timeout; rmcp then tells the server the request is cancelled.
pub(super) async fn call_tool(
    catalog: &Catalog,
    peer: &Peer<RoleClient>,
    params: CallToolRequestParams,
) -> Result<CallToolResult, ServiceError> {
    let options = PeerRequestOptions::with_timeout(catalog.timeout).reset_timeout_on_progress();
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = peer.send_request_with_option(request, options).await?;
    let mut abandoned = Abandoned {
        peer,
        id: Some(handle.id.clone()),
    };
    let result = handle.await_response().await;
    abandoned.id = None;
    match result? {
        ServerResult::CallToolResult(result) => Ok(result),
        // A tool that answered with nothing (`{}`, as a notification would).
        ServerResult::EmptyResult(_) => Ok(CallToolResult::success(Vec::new())),
        _ => Err(ServiceError::UnexpectedResponse),
    }
}

/// Tells the server that a call nobody waits for any more (the host's own timeout, a run
/// cancelled) is cancelled, so that it can stop working on it.
struct Abandoned<'a> {
    peer: &'a Peer<RoleClient>,
    /// The request, until its answer came.
    id: Option<RequestId>,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        let (Some(id), Ok(runtime)) = (self.id.take(), tokio::runtime::Handle::try_current())
        else {
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
