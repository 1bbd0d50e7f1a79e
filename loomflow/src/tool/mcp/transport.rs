//! The two ways to reach a server: a child process over stdio, and streamable HTTP.

use std::process::Stdio;
use std::sync::Arc;

use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rustls_platform_verifier::BuilderVerifierExt;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Command;

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

/// The longest stderr line logged whole; the rest of a longer one is dropped.
const STDERR_LINE_BYTES: usize = 8 * 1024;

/// Logs a server's stderr a line at a time, until it closes. Whatever it writes (bytes that
/// are not UTF-8, a line with no end) is read and dropped as it comes: a pipe closed early
/// would make the server's next write to stderr fail, and kill many servers.
async fn forward_stderr(server: String, stderr: impl AsyncRead + Unpin) {
    let mut reader = BufReader::new(stderr);
    let mut line: Vec<u8> = Vec::new();
    loop {
        let (done, used) = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(buf) => match buf.iter().position(|&b| b == b'\n') {
                Some(end) => {
                    keep(&mut line, &buf[..end]);
                    (true, end + 1)
                }
                None => {
                    keep(&mut line, buf);
                    (false, buf.len())
                }
            },
        };
        reader.consume(used);
        if done {
            let text = String::from_utf8_lossy(&line);
            tracing::debug!(server = %server, "mcp server stderr: {}", text.trim_end());
            line.clear();
        }
    }
}

/// Appends `bytes` to `line`, up to [`STDERR_LINE_BYTES`].
fn keep(line: &mut Vec<u8>, bytes: &[u8]) {
    let room = STDERR_LINE_BYTES.saturating_sub(line.len());
    line.extend_from_slice(&bytes[..bytes.len().min(room)]);
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use tokio::io::AsyncWriteExt;

    use super::*;

    /// Bytes that are not UTF-8 and a line far past the cap do not stop the reading: the
    /// server can write to its stderr for as long as it runs.
    #[tokio::test]
    async fn stderr_is_read_to_its_end_whatever_it_holds() {
        let (mut server, ours) = tokio::io::duplex(64);
        let reader = tokio::spawn(forward_stderr("s".to_owned(), ours));
        let write = async {
            server.write_all(b"\xff\xfe not utf-8\n").await.unwrap();
            server
                .write_all(&[b'x'; 3 * STDERR_LINE_BYTES])
                .await
                .unwrap();
            server.write_all(b"\n").await.unwrap();
            for _ in 0..1_000 {
                server.write_all(b"still logging\n").await.unwrap();
            }
            drop(server);
        };
        // Writes that stopped being read would block on the 64-byte pipe.
        tokio::time::timeout(std::time::Duration::from_secs(10), write)
            .await
            .unwrap();
        reader.await.unwrap();
    }
}
