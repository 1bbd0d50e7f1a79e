//! One HTTP/1.1 request on a fresh connection, written byte for byte: a test can send what
//! a real client would not (a non-ASCII header, a body of the wrong type) and read exactly
//! what the server answers.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends `method path` with `headers` (raw values) and `body`; returns the status, the
/// response's head and its body.
pub(crate) async fn try_request<V: AsRef<[u8]>>(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, V)],
    body: &[u8],
) -> std::io::Result<(u16, String, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    )
    .into_bytes();
    for (name, value) in headers {
        head.extend_from_slice(name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_ref());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    stream.write_all(&head).await?;
    stream.write_all(body).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok((status, head.to_owned(), body.to_owned()))
}

/// [`try_request`], the connection expected to work.
pub(crate) async fn request<V: AsRef<[u8]>>(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, V)],
    body: &[u8],
) -> (u16, String, String) {
    match try_request(addr, method, path, headers, body).await {
        Ok(reply) => reply,
        Err(error) => panic!("{method} {path}: {error}"),
    }
}

/// No headers, for [`request`] (an empty list has no type of its own).
pub(crate) const NO_HEADERS: &[(&str, &str)] = &[];
