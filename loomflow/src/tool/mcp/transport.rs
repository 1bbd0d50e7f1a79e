//! The two ways to reach a server: a child process over stdio, and streamable HTTP.

use std::process::Stdio;
use std::sync::Arc;

use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rustls_platform_verifier::BuilderVerifierExt;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{ChildStderr, Command};

use super::error::McpError;

/// Starts a stdio server; returns the transport and the child's process id. The child's
/// stderr goes to `tracing` (debug level) under the server's name, so a chatty server does
/// not write over the host's terminal.
pub(super) fn stdio(
    server: &str,
    command: Command,
) -> Result<(TokioChildProcess, Option<u32>), McpError> {
    let (process, stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| McpError::Spawn {
            server: server.to_owned(),
            source,
        })?;
    let id = process.id();
    if let Some(stderr) = stderr {
        tokio::spawn(forward_stderr(server.to_owned(), stderr));
    }
    Ok((process, id))
}

async fn forward_stderr(server: String, stderr: ChildStderr) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::debug!(server = %server, "mcp server stderr: {line}");
    }
}

/// A streamable HTTP transport over reqwest with rustls (the `ring` provider, handed to this
/// client only) and the platform's certificate verifier.
pub(super) fn http(
    server: &str,
    url: &str,
    bearer_token: Option<String>,
) -> Result<StreamableHttpClientTransport<reqwest::Client>, McpError> {
    let lower = url.to_ascii_lowercase();
    let has_host = |rest: &str| !rest.is_empty() && !rest.starts_with('/');
    let ok = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"))
        .is_some_and(has_host);
    if !ok {
        return Err(McpError::BadUrl {
            server: server.to_owned(),
            url: url.to_owned(),
        });
    }
    let client_error = |message: String| McpError::Client {
        server: server.to_owned(),
        message,
    };
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .and_then(|builder| builder.with_platform_verifier())
    .map_err(|e| client_error(format!("tls set-up failed: {e}")))?
    .with_no_client_auth();
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .build()
        .map_err(|e| client_error(e.to_string()))?;
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    if let Some(token) = bearer_token {
        config = config.auth_header(token);
    }
    Ok(StreamableHttpClientTransport::with_client(client, config))
}
