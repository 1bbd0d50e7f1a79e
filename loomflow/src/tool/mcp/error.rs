//! [`McpError`]: what can go wrong with an MCP server.

use crate::tool::ToolError;

/// Why an MCP server could not be reached, listed or called. Every variant names the server
/// (and the tool, for calls).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The server's name is empty.
    #[error("an mcp server needs a non-empty name")]
    EmptyName,
    /// The request timeout, or a call's longest time, is zero.
    #[error(
        "mcp server {server}: the request timeout and a call's longest time must be more than zero"
    )]
    ZeroTimeout {
        /// The server.
        server: String,
    },
    /// The address of a streamable HTTP server is not an `http` or `https` URL.
    #[error("mcp server {server}: {url} is not an http or https url")]
    BadUrl {
        /// The server.
        server: String,
        /// The address given.
        url: String,
    },
    /// The child process of a stdio server could not be started.
    #[error("mcp server {server} could not be started")]
    Spawn {
        /// The server.
        server: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP client for a streamable HTTP server could not be set up (TLS).
    #[error("mcp server {server}: http client set-up failed: {message}")]
    Client {
        /// The server.
        server: String,
        /// What failed.
        message: String,
    },
    /// The server did not complete the MCP handshake.
    #[error("mcp server {server} did not complete the handshake")]
    Handshake {
        /// The server.
        server: String,
        /// The SDK's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The server did not answer in time.
    #[error("mcp server {server} did not answer {operation} within {seconds} s")]
    TimedOut {
        /// The server.
        server: String,
        /// What was asked: `the handshake`, `tools/list`, `tools/call <tool>`.
        operation: String,
        /// The limit.
        seconds: f64,
    },
    /// The server's process exited or its connection closed; nothing more can be asked of it.
    #[error("mcp server {server} is gone ({reason}); {operation} failed")]
    Gone {
        /// The server.
        server: String,
        /// What was asked: `tools/list`, `tools/call <tool>`.
        operation: String,
        /// What was seen.
        reason: String,
    },
    /// A request to a streamable HTTP server could not be sent: the server could not be
    /// reached (its connection refused, its name unknown, the TLS handshake failed). That
    /// request failed, and the server may answer the next one.
    #[error("mcp server {server}: {operation} could not be sent ({reason})")]
    NotSent {
        /// The server.
        server: String,
        /// What was asked.
        operation: String,
        /// What the transport said.
        reason: String,
    },
    /// A request to a streamable HTTP server went out but got no answer to read (a proxy's
    /// 502 or 504, a 401, the connection reset while it waited): the server may have
    /// carried it out. That request failed, and the server may answer the next one.
    #[error(
        "mcp server {server}: {operation} got no answer ({reason}); it may have been carried out"
    )]
    NoAnswer {
        /// The server.
        server: String,
        /// What was asked.
        operation: String,
        /// What the transport said.
        reason: String,
    },
    /// The server answered a request with a protocol error (an unknown tool, bad arguments).
    #[error("mcp server {server} refused {operation}: {message}")]
    Refused {
        /// The server.
        server: String,
        /// What was asked.
        operation: String,
        /// The server's error message.
        message: String,
    },
    /// The tool ran and reported an error (`isError` in its result).
    #[error("tool {tool} of mcp server {server} failed: {message}")]
    ToolFailed {
        /// The server.
        server: String,
        /// The tool, as the server names it.
        tool: String,
        /// The text of the result.
        message: String,
    },
}

impl McpError {
    /// The error a tool call reports to the host, under the tool's name in the host.
    pub(super) fn into_tool_error(self, tool: &str) -> ToolError {
        let tool = tool.to_owned();
        match self {
            Self::Gone { server, reason, .. } => ToolError::Unavailable {
                tool,
                server,
                reason,
            },
            Self::NotSent { server, reason, .. } => ToolError::Unreachable {
                tool,
                server,
                reason,
            },
            Self::TimedOut { seconds, .. } => ToolError::TimedOut { tool, seconds },
            Self::ToolFailed { message, .. } => ToolError::Failed { tool, message },
            other => ToolError::Failed {
                tool,
                message: other.to_string(),
            },
        }
    }
}
