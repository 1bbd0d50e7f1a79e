//! The HTTP tests' harness: the ingress served on a loopback port over a SQLite file, and
//! one HTTP/1.1 request on a fresh connection, written byte for byte, so that a test can
//! send what a real client would not (a non-ASCII header, a body of the wrong type) and
//! read exactly what the server answers.

use std::net::SocketAddr;
use std::path::PathBuf;

use loomflow::Runtime;
use loomflow::http::{HttpConfig, router};
use loomflow::runtime::{MailboxConfig, SqliteStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The ingress serving a runtime on a SQLite file; the file goes when it is dropped.
pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    pub(crate) runtime: Runtime,
    db: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.db.display()));
        }
    }
}

/// Serves `config` on 127.0.0.1 over a fresh SQLite file named after `name`, with a 4 KiB
/// signal payload limit.
pub(crate) async fn serve(name: &str, config: HttpConfig) -> Server {
    let db = std::env::temp_dir().join(format!("loomflow-http-{name}-{}.db", std::process::id()));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    let runtime = Runtime::builder()
        .store(SqliteStore::open(&db).unwrap())
        .signals(MailboxConfig::default().max_payload_bytes(4_096))
        .build();
    let app = router(runtime.clone(), config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Server { addr, runtime, db }
}

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
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    )
    .into_bytes();
    // The listener's address, unless the test names another host.
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        head.extend_from_slice(format!("Host: {addr}\r\n").as_bytes());
    }
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
