//! MCP servers as tools (feature `mcp`), over the official Rust SDK, rmcp.
//!
//! [`McpServer`] connects to a Model Context Protocol server, over stdio (a child process)
//! or streamable HTTP, and is a [`ToolSet`]: hand it to a [`ToolHost`](crate::tool::ToolHost)
//! with [`with_set`](crate::tool::ToolHost::with_set), or to an agent with
//! [`tool_set`](crate::agent::AgentBuilder::tool_set), and the server's tools are offered to
//! the model with their input schemas as the server wrote them. Their calls go through the
//! host's one path, like any tool's: schema check, hooks, permissions, approvals, timeout.
//!
//! The tool list is followed: when the server sends `notifications/tools/list_changed`, the
//! list is read again and the next model turn sees it ([`McpServer::subscribe`] ticks).
//! A stdio server that exits, or whose connection closes, fails each call at once with
//! [`ToolError::Unavailable`](crate::tool::ToolError::Unavailable) (in a host) or
//! [`McpError::Gone`] (from [`McpServer::call`]), naming the server and the tool; its tools
//! stay listed, and an `McpServer` does not reconnect (connect a new one, in a new host).
//! An HTTP server that cannot be reached fails that call with
//! [`ToolError::Unreachable`](crate::tool::ToolError::Unreachable) ([`McpError::NotSent`]),
//! and may answer the next; a request that went out and got no
//! answer (a proxy's 504) fails with [`McpError::NoAnswer`]: the tool may have run. Every
//! request also has a timeout, so nothing waits forever on a server; a tool call's is how
//! long the server may stay silent on it, as its progress notifications restart the wait,
//! up to the call's longest time ([`McpServerBuilder::max_call_time`], 10 minutes by
//! default).
//! A call that times out, or that nobody waits for any more (the host's own timeout), is
//! cancelled with the server (`notifications/cancelled`).
//!
//! A server's log messages (`notifications/message`) are `tracing` events of target
//! `loomflow::mcp`, at their level (notice is info; critical, alert and emergency are
//! errors), with fields `server` and `logger`.
//!
//! # Examples
//!
//! ```no_run
//! use loomflow::tool::ToolHost;
//! use loomflow::tool::mcp::McpServer;
//! use tokio::process::Command;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut command = Command::new("npx");
//! command.args(["-y", "@modelcontextprotocol/server-filesystem", "/tmp/notes"]);
//! let files = McpServer::builder("files").tool_prefix("fs_").stdio(command).await?;
//! let host = ToolHost::new().with_set(files.clone());
//! assert!(host.get("fs_read_text_file").is_some());
//!
//! let web = McpServer::http("web", "https://mcp.example.com/mcp").await?;
//! let found = web.call("search", serde_json::json!({ "q": "loomflow" })).await?;
//! println!("{found}");
//! # Ok(()) }
//! ```

mod catalog;
mod error;
mod remote;
mod request;
mod transport;

pub use error::McpError;

use std::sync::Arc;
use std::time::Duration;

use rmcp::service::{Peer, RoleClient, RunningService};
use serde_json::Value;
use tokio::process::Command;
use tokio::sync::watch;

use crate::tool::{Tool, ToolSet, ToolSpec};
use catalog::{Catalog, Listener};

/// The longest a tool call may take by default, however often the server reports progress
/// on it (see [`McpServerBuilder::max_call_time`]).
pub const DEFAULT_MAX_CALL_TIME: Duration = Duration::from_secs(600);

/// The default limit on each request to a server, the handshake included.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A connection to one MCP server, and the live list of its tools. Cheap to clone; the
/// connection closes when the last clone (a host it was added to holds one) is dropped, or
/// on [`close`](Self::close). A stdio server's process is killed then; a tool of it still
/// held elsewhere fails with [`ToolError::Unavailable`](crate::tool::ToolError::Unavailable).
#[derive(Clone)]
pub struct McpServer {
    inner: Arc<Inner>,
}

struct Inner {
    catalog: Arc<Catalog>,
    peer: Peer<RoleClient>,
    service: tokio::sync::Mutex<Option<RunningService<RoleClient, Listener>>>,
    process_id: Option<u32>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tools: Vec<String> = self.specs().into_iter().map(|s| s.name).collect();
        f.debug_struct("McpServer")
            .field("name", &self.inner.catalog.server)
            .field("tools", &tools)
            .field("process_id", &self.inner.process_id)
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// Starts configuring a connection to the server called `name` (the name appears in
    /// errors and logs).
    pub fn builder(name: impl Into<String>) -> McpServerBuilder {
        McpServerBuilder {
            name: name.into(),
            prefix: String::new(),
            timeout: DEFAULT_REQUEST_TIMEOUT,
            max_call_time: DEFAULT_MAX_CALL_TIME,
            bearer_token: None,
        }
    }

    /// Starts `command` and speaks MCP with it over its stdin and stdout, with the default
    /// options (see [`McpServerBuilder::stdio`]).
    ///
    /// # Errors
    ///
    /// As [`McpServerBuilder::stdio`].
    pub async fn stdio(name: impl Into<String>, command: Command) -> Result<Self, McpError> {
        Self::builder(name).stdio(command).await
    }

    /// Connects to a streamable HTTP server at `url`, with the default options (see
    /// [`McpServerBuilder::http`]).
    ///
    /// # Errors
    ///
    /// As [`McpServerBuilder::http`].
    pub async fn http(name: impl Into<String>, url: impl Into<String>) -> Result<Self, McpError> {
        Self::builder(name).http(url).await
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.inner.catalog.server
    }

    /// The specs of the server's tools as the host sees them (prefixed names), as last read.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.inner
            .catalog
            .tools()
            .iter()
            .map(|t| t.spec().clone())
            .collect()
    }

    /// A receiver whose value counts the reads of the tool list: it changes each time the
    /// list is read again, after a `notifications/tools/list_changed` or a
    /// [`refresh`](Self::refresh).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.catalog.subscribe()
    }

    /// Reads the tool list again now.
    ///
    /// # Errors
    ///
    /// [`McpError::Gone`], [`McpError::TimedOut`], [`McpError::Refused`], or for an HTTP
    /// server [`McpError::NotSent`] or [`McpError::NoAnswer`].
    pub async fn refresh(&self) -> Result<(), McpError> {
        self.inner.catalog.refresh(&self.inner.peer).await
    }

    /// Calls the server's tool `tool` (its own name, without the prefix) directly, outside
    /// any host: no hooks, permissions or approvals. Agents call tools through their host.
    ///
    /// # Errors
    ///
    /// [`McpError::Gone`] when the server has exited or its connection closed,
    /// [`McpError::TimedOut`], [`McpError::Refused`] (unknown tool, bad arguments),
    /// [`McpError::ToolFailed`] when the tool reports an error; for an HTTP server,
    /// [`McpError::NotSent`] (it could not be reached) or [`McpError::NoAnswer`] (the
    /// request went out unanswered: the tool may have run).
    pub async fn call(&self, tool: &str, arguments: Value) -> Result<Value, McpError> {
        remote::call(&self.inner.catalog, &self.inner.peer, tool, arguments).await
    }

    /// The process id of a stdio server's child process; `None` for HTTP servers.
    pub fn process_id(&self) -> Option<u32> {
        self.inner.process_id
    }

    /// Whether the connection has closed (the server exited, or [`close`](Self::close)).
    /// Once a call has failed with [`McpError::Gone`], it has.
    pub fn is_closed(&self) -> bool {
        self.inner.catalog.is_gone() || self.inner.peer.is_transport_closed()
    }

    /// Closes the connection (a stdio server's process is killed). Later calls fail with
    /// [`McpError::Gone`]. Closing twice does nothing.
    pub async fn close(&self) {
        let service = self.inner.service.lock().await.take();
        if let Some(mut service) = service
            && let Err(error) = service.close().await
        {
            tracing::debug!(server = %self.name(), %error, "mcp connection task ended badly");
        }
    }
}

impl ToolSet for McpServer {
    fn name(&self) -> &str {
        &self.inner.catalog.server
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.inner.catalog.tools()
    }
}

/// Configures an [`McpServer`] connection; see [`McpServer::builder`].
#[must_use]
pub struct McpServerBuilder {
    name: String,
    prefix: String,
    timeout: Duration,
    max_call_time: Duration,
    bearer_token: Option<String>,
}

impl std::fmt::Debug for McpServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServerBuilder")
            .field("name", &self.name)
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("max_call_time", &self.max_call_time)
            .field(
                "bearer_token",
                &self.bearer_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl McpServerBuilder {
    /// A prefix for the server's tool names in a host (default none), to keep two servers'
    /// tools apart: with `fs_`, the server's `read_file` is `fs_read_file` to the model.
    pub fn tool_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The limit on each request: the handshake, each listing and each tool call (default
    /// [`DEFAULT_REQUEST_TIMEOUT`]). For a tool call it is how long the server may say
    /// nothing about it: each progress notification of the call starts the wait again, so a
    /// long call that reports progress goes on. A host's own per-call timeout bounds the
    /// whole call.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The longest a tool call may take, however often the server reports progress on it
    /// (default [`DEFAULT_MAX_CALL_TIME`]): past it the call fails with
    /// [`McpError::TimedOut`] and is cancelled with the server.
    pub fn max_call_time(mut self, time: Duration) -> Self {
        self.max_call_time = time;
        self
    }

    /// A bearer token sent with every request to a streamable HTTP server (default none).
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.bearer_token = Some(token.into());
        self
    }

    /// Starts `command` as a child process, speaks MCP with it over its stdin and stdout,
    /// and reads its tool list. The child's stderr goes to `tracing` at debug level.
    ///
    /// # Errors
    ///
    /// [`McpError::EmptyName`], [`McpError::ZeroTimeout`], [`McpError::Spawn`] when the
    /// process does not start, [`McpError::Handshake`] or [`McpError::TimedOut`] when it does
    /// not speak MCP, and the errors of [`McpServer::refresh`].
    pub async fn stdio(self, command: Command) -> Result<McpServer, McpError> {
        self.check()?;
        let (process, id) = transport::stdio(&self.name, command)?;
        self.start(process, id).await
    }

    /// Connects to a streamable HTTP server at `url` (`http://` or `https://`) and reads its
    /// tool list.
    ///
    /// # Errors
    ///
    /// [`McpError::EmptyName`], [`McpError::ZeroTimeout`], [`McpError::BadUrl`],
    /// [`McpError::Client`] when TLS cannot be set up, [`McpError::Handshake`] or
    /// [`McpError::TimedOut`] when the server cannot be reached or does not speak MCP, and the
    /// errors of [`McpServer::refresh`].
    pub async fn http(self, url: impl Into<String>) -> Result<McpServer, McpError> {
        self.check()?;
        let transport = transport::http(&self.name, &url.into(), self.bearer_token.clone())?;
        self.start(transport, None).await
    }

    fn check(&self) -> Result<(), McpError> {
        if self.name.trim().is_empty() {
            return Err(McpError::EmptyName);
        }
        if self.timeout.is_zero() || self.max_call_time.is_zero() {
            return Err(McpError::ZeroTimeout {
                server: self.name.clone(),
            });
        }
        Ok(())
    }

    async fn start<T, E, A>(
        self,
        transport: T,
        process_id: Option<u32>,
    ) -> Result<McpServer, McpError>
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A> + Send + 'static,
        E: std::error::Error + Send + Sync + 'static,
    {
        // A stdio server has a process; an HTTP server's requests are sent apart.
        let sent_apart = process_id.is_none();
        let catalog = Catalog::new(
            self.name,
            self.prefix,
            (self.timeout, self.max_call_time),
            sent_apart,
        );
        let listener = Listener {
            catalog: Arc::clone(&catalog),
        };
        let handshake = rmcp::service::serve_client(listener, transport);
        let service = match tokio::time::timeout(catalog.timeout, handshake).await {
            Err(_) => return Err(catalog.timed_out("the handshake")),
            Ok(Err(error)) => {
                return Err(McpError::Handshake {
                    server: catalog.server.clone(),
                    source: Box::new(error),
                });
            }
            Ok(Ok(service)) => service,
        };
        let peer = service.peer().clone();
        // The catalog keeps the tool list itself: rmcp's response cache would answer a refresh
        // from a list the server may have changed since, or a failed one with the last list.
        peer.set_response_cache_config(rmcp::ClientCacheConfig::disabled())
            .await;
        catalog.refresh(&peer).await?;
        Ok(McpServer {
            inner: Arc::new(Inner {
                catalog,
                peer,
                service: tokio::sync::Mutex::new(Some(service)),
                process_id,
            }),
        })
    }
}
