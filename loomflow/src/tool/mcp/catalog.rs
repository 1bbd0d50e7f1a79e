//! The live list of a server's tools, and the client handler that re-reads it when the
//! server announces a change (`notifications/tools/list_changed`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

// Server logging is deprecated by the newest protocol revision (SEP-2577); servers of the
// revisions before it still send it, and their messages are worth keeping.
use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, ProtocolVersion, Tool as RemoteTool,
};
#[allow(deprecated)]
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::{NotificationContext, Peer, RoleClient, ServiceError};
use serde_json::Value;
use tokio::sync::watch;

use super::error::McpError;
use super::remote::McpTool;
use crate::tool::{Tool, ToolSpec};

/// What every tool of one server shares: the server's name, the prefix its tools take in a
/// host, the request timeout, and the current list.
pub(super) struct Catalog {
    pub(super) server: String,
    prefix: String,
    pub(super) timeout: Duration,
    /// The longest a tool call may take, progress or not.
    pub(super) max_call_time: Duration,
    tools: Mutex<Vec<Arc<dyn Tool>>>,
    /// How many times the list was read; ticks on every successful re-read.
    version: watch::Sender<u64>,
    /// One re-read at a time, so an older answer never replaces a newer one.
    reading: tokio::sync::Mutex<()>,
    /// A re-read for a `list_changed` notification is queued and has not started reading.
    refresh_queued: std::sync::atomic::AtomicBool,
    /// A request found the connection closed, could not be sent, or was cancelled as the
    /// connection closed: the server is gone ([`McpError::Gone`]), even before the SDK's
    /// connection task has noticed the end of its output.
    gone: std::sync::atomic::AtomicBool,
    /// Whether each request is sent on its own (streamable HTTP: one POST each), so that one
    /// that could not be sent (a 502 from a proxy, a 401, a reset) says nothing of the
    /// others; a stdio server's requests share its input, and one that cannot be written
    /// means the process is gone.
    sent_apart: bool,
}

impl Catalog {
    pub(super) fn new(
        server: String,
        prefix: String,
        (timeout, max_call_time): (Duration, Duration),
        sent_apart: bool,
    ) -> Arc<Self> {
        Arc::new(Self {
            server,
            prefix,
            timeout,
            max_call_time,
            tools: Mutex::default(),
            version: watch::Sender::new(0),
            reading: tokio::sync::Mutex::new(()),
            refresh_queued: std::sync::atomic::AtomicBool::new(false),
            gone: std::sync::atomic::AtomicBool::new(false),
            sent_apart,
        })
    }

    pub(super) fn tools(&self) -> Vec<Arc<dyn Tool>> {
        crate::sync::lock(&self.tools).clone()
    }

    pub(super) fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// The name a host knows a server's tool by: see [`model_name`].
    pub(super) fn local_name(&self, remote: &str) -> String {
        model_name(&self.prefix, remote)
    }

    /// Lists the server's tools again and replaces the list.
    ///
    /// One read at a time; the wait for another read to end counts toward the timeout.
    pub(super) async fn refresh(self: &Arc<Self>, peer: &Peer<RoleClient>) -> Result<(), McpError> {
        let read = async {
            let one_at_a_time = self.reading.lock().await;
            // Asked again from here: what a notification meanwhile said is read too.
            self.refresh_queued
                .store(false, std::sync::atomic::Ordering::Release);
            (one_at_a_time, peer.list_all_tools().await)
        };
        let listed = tokio::time::timeout(self.timeout, read).await;
        let (_one_at_a_time, listed) = match listed {
            Err(_) => return Err(self.timed_out("tools/list")),
            Ok((guard, result)) => (
                guard,
                result
                    .map_err(|e| self.request_error("tools/list", e, peer.is_transport_closed()))?,
            ),
        };
        let mut tools: Vec<Arc<dyn Tool>> = Vec::with_capacity(listed.len());
        for remote in listed {
            if !is_object_schema(&remote.input_schema) {
                tracing::warn!(server = %self.server, tool = %remote.name, "mcp tool skipped: its input schema is not an object schema");
                continue;
            }
            let tool = self.tool(remote, peer.clone());
            if tools.iter().any(|t| t.spec().name == tool.spec().name) {
                tracing::warn!(server = %self.server, tool = %tool.spec().name, "mcp tool skipped: another of the server's tools has the same name for the model");
                continue;
            }
            tools.push(Arc::new(tool));
        }
        tracing::debug!(server = %self.server, tools = tools.len(), "mcp tool list read");
        *crate::sync::lock(&self.tools) = tools;
        self.version.send_modify(|v| *v += 1);
        Ok(())
    }

    fn tool(self: &Arc<Self>, remote: RemoteTool, peer: Peer<RoleClient>) -> McpTool {
        let description = remote
            .description
            .as_deref()
            .or(remote.title.as_deref())
            .unwrap_or_default()
            .to_owned();
        // The schema is kept as the server gave it.
        let parameters = Value::Object((*remote.input_schema).clone());
        let annotations = remote.annotations.as_ref();
        // As the MCP specification says: a tool is destructive unless it says it is
        // read-only or not destructive. (Hints come from the server; they are not a
        // guarantee, and a permission policy should not trust a server it does not.)
        let destructive = annotations.and_then(|a| a.read_only_hint) != Some(true)
            && annotations.and_then(|a| a.destructive_hint).unwrap_or(true);
        let spec = ToolSpec::new(self.local_name(&remote.name), description, parameters)
            .destructive(destructive);
        McpTool::new(spec, remote.name.into_owned(), self, peer)
    }

    /// Whether a request found the server gone.
    pub(super) fn is_gone(&self) -> bool {
        self.gone.load(std::sync::atomic::Ordering::Acquire)
    }

    pub(super) fn timed_out(&self, operation: &str) -> McpError {
        self.timed_out_after(operation, self.timeout)
    }

    /// [`timed_out`](Self::timed_out) after `limit`: a call's longest time, say.
    fn timed_out_after(&self, operation: &str, limit: Duration) -> McpError {
        McpError::TimedOut {
            server: self.server.clone(),
            operation: operation.to_owned(),
            seconds: limit.as_secs_f64(),
        }
    }

    /// [`service_error`](Self::service_error) for a request that went out, as the SDK failed
    /// it: over HTTP, a response stream that closed before its answer while the connection
    /// stays up (a proxy cut a long call) fails that request only, which may have been
    /// carried out; the server is not gone.
    pub(super) fn request_error(
        &self,
        operation: &str,
        error: ServiceError,
        connection_closed: bool,
    ) -> McpError {
        match error {
            ServiceError::TransportClosed if self.sent_apart && !connection_closed => {
                McpError::NoAnswer {
                    server: self.server.clone(),
                    operation: operation.to_owned(),
                    reason: "its response stream closed before the answer".to_owned(),
                }
            }
            error => self.service_error(operation, error),
        }
    }

    /// The SDK's error for a request, as an [`McpError`] naming the server and request.
    pub(super) fn service_error(&self, operation: &str, error: ServiceError) -> McpError {
        let gone = match error {
            ServiceError::TransportClosed | ServiceError::Cancelled { .. } => true,
            ServiceError::TransportSend(_) => !self.sent_apart,
            _ => false,
        };
        if gone {
            self.gone.store(true, std::sync::atomic::Ordering::Release);
        }
        let server = self.server.clone();
        let operation = operation.to_owned();
        match error {
            ServiceError::TransportSend(error) if self.sent_apart && never_sent(&*error.error) => {
                McpError::NotSent {
                    server,
                    operation,
                    reason: root_cause(&*error.error),
                }
            }
            ServiceError::TransportSend(error) if self.sent_apart => McpError::NoAnswer {
                server,
                operation,
                reason: root_cause(&*error.error),
            },
            ServiceError::TransportClosed => McpError::Gone {
                server,
                operation,
                reason: "its connection closed".to_owned(),
            },
            ServiceError::TransportSend(error) => McpError::Gone {
                server,
                operation,
                reason: format!("a request could not be sent: {}", root_cause(&*error.error)),
            },
            ServiceError::Cancelled { .. } => McpError::Gone {
                server,
                operation,
                reason: "the connection was closed".to_owned(),
            },
            ServiceError::Timeout { timeout } => self.timed_out_after(&operation, timeout),
            ServiceError::McpError(data) => McpError::Refused {
                server,
                operation,
                message: data.message.into_owned(),
            },
            other => McpError::Refused {
                server,
                operation,
                message: other.to_string(),
            },
        }
    }
}

/// The client side of the connection: who we are, and what to do when the server's tool
/// list changes.
pub(super) struct Listener {
    pub(super) catalog: Arc<Catalog>,
}

impl rmcp::ClientHandler for Listener {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("loomflow", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        message: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        log_message(&self.catalog.server, message);
    }

    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        // Re-read in a task of its own: a request made from inside the handler would wait on
        // the loop that is running the handler.
        // A burst of notifications (a server registering its tools one by one) queues one
        // read, not one each: a read not yet started reads what they all said.
        if (self.catalog.refresh_queued).swap(true, std::sync::atomic::Ordering::AcqRel) {
            return;
        }
        let catalog = Arc::clone(&self.catalog);
        let peer = context.peer;
        tokio::spawn(async move {
            if let Err(error) = catalog.refresh(&peer).await {
                tracing::warn!(server = %catalog.server, %error, "mcp tool list could not be re-read");
            }
            // Should the read not have started (it timed out waiting for another), the next
            // notification queues one again.
            (catalog.refresh_queued).store(false, std::sync::atomic::Ordering::Release);
        });
    }
}

/// A server's log message (`notifications/message`) as a `tracing` event of target
/// `loomflow::mcp`, at the level it maps to (notice is info; critical, alert and emergency
/// are errors), with the server's name, its logger's and its data (text as it is, anything
/// else as JSON).
#[allow(deprecated)]
fn log_message(server: &str, message: LoggingMessageNotificationParam) {
    let logger = message.logger.as_deref().unwrap_or("");
    let data = match &message.data {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    macro_rules! log {
        ($level:ident) => {
            tracing::$level!(target: "loomflow::mcp", server, logger, "{data}")
        };
    }
    match message.level {
        LoggingLevel::Debug => log!(debug),
        LoggingLevel::Info | LoggingLevel::Notice => log!(info),
        LoggingLevel::Warning => log!(warn),
        LoggingLevel::Error
        | LoggingLevel::Critical
        | LoggingLevel::Alert
        | LoggingLevel::Emergency => log!(error),
    }
}

/// The name a model can call: `prefix` + the server's name, made one providers accept (see
/// [`callable_name`](crate::tool::callable_name)). The call to the server still uses its
/// own name.
fn model_name(prefix: &str, remote: &str) -> String {
    crate::tool::callable_name(prefix, remote)
}

/// A tool's input schema must describe an object (`"type": "object"`), as MCP requires and
/// as model providers do for a tool's parameters.
fn is_object_schema(schema: &serde_json::Map<String, Value>) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

/// Whether a streamable HTTP request's failure `error` came before the request left: the
/// server could not be reached (a connect error, its name unknown, the TLS handshake). Any
/// other failure may have come after the server got the request.
fn never_sent(error: &(dyn std::error::Error + 'static)) -> bool {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    let mut next = Some(error);
    while let Some(error) = next {
        // The SDK's client error does not name the client's as its source: looked into.
        if let Some(StreamableHttpError::Client(client)) =
            error.downcast_ref::<StreamableHttpError<reqwest::Error>>()
        {
            return client.is_connect();
        }
        if let Some(client) = error.downcast_ref::<reqwest::Error>() {
            return client.is_connect();
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        next = error.source();
    }
    false
}

/// The innermost error of a chain: "connection refused" rather than the transport's type.
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut error = error;
    while let Some(source) = error.source() {
        error = source;
    }
    error.to_string()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn a_tool_name_becomes_one_a_model_provider_accepts() {
        assert_eq!(model_name("", "files.read"), "files_read");
        assert_eq!(model_name("fs.", "read file/é"), "fs_read_file__");
        assert_eq!(model_name("", "get-weather_2"), "get-weather_2");
        assert_eq!(model_name("p_", &"x".repeat(80)).len(), 64);
    }

    /// One HTTP request that failed fails that request only: one that got no answer (a
    /// proxy's 502) may have been carried out, one that could not reach the server was not
    /// sent. A stdio server whose input cannot be written is gone.
    #[test]
    fn a_send_that_failed_ends_a_stdio_server_only() {
        let failing = |error: Box<dyn std::error::Error + Send + Sync>| {
            ServiceError::TransportSend(rmcp::transport::DynamicTransportError::from_parts(
                "http",
                std::any::TypeId::of::<()>(),
                error,
            ))
        };
        let failed = || failing("502 Bad Gateway".into());
        let http = Catalog::new("docs".into(), String::new(), (SECOND, SECOND), true);
        let error = http.service_error("tools/call search", failed());
        assert!(matches!(error, McpError::NoAnswer { .. }), "{error:?}");
        assert!(error.to_string().contains("502 Bad Gateway"), "{error}");
        assert!(
            error.to_string().contains("may have been carried out"),
            "{error}"
        );
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let error = http.service_error("tools/call search", failing(Box::new(refused)));
        assert!(matches!(error, McpError::NotSent { .. }), "{error:?}");
        assert!(!http.is_gone());
        let stdio = Catalog::new("fs".into(), String::new(), (SECOND, SECOND), false);
        let error = stdio.service_error("tools/call read", failed());
        assert!(matches!(error, McpError::Gone { .. }), "{error:?}");
        assert!(stdio.is_gone());
    }

    /// Over HTTP the SDK fails a request whose response stream closed before its answer as
    /// if the connection had closed: with the connection up, that request got no answer
    /// (the tool may have run), and the server is not gone for the calls after it.
    #[test]
    fn a_response_stream_cut_short_fails_that_request_only() {
        let http = Catalog::new("docs".into(), String::new(), (SECOND, SECOND), true);
        let error = http.request_error("tools/call search", ServiceError::TransportClosed, false);
        assert!(matches!(error, McpError::NoAnswer { .. }), "{error:?}");
        assert!(
            error.to_string().contains("response stream closed"),
            "{error}"
        );
        assert!(!http.is_gone());
        let error = http.request_error("tools/call search", ServiceError::TransportClosed, true);
        assert!(matches!(error, McpError::Gone { .. }), "{error:?}");
        assert!(http.is_gone());
        let stdio = Catalog::new("fs".into(), String::new(), (SECOND, SECOND), false);
        let error = stdio.request_error("tools/call read", ServiceError::TransportClosed, false);
        assert!(matches!(error, McpError::Gone { .. }), "{error:?}");
    }

    #[test]
    fn only_object_input_schemas_are_offered() {
        let schema = |value: Value| value.as_object().cloned().unwrap_or_default();
        assert!(is_object_schema(&schema(json!({ "type": "object" }))));
        assert!(!is_object_schema(&schema(json!({ "type": "string" }))));
        assert!(!is_object_schema(&schema(json!({}))));
    }
}
