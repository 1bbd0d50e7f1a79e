//! A minimal HTTP/1.1 server on 127.0.0.1 for adapter tests and benches: it answers each
//! request with the next scripted [`Reply`] and records what it received.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request as received.
#[derive(Clone, Debug)]
pub(crate) struct Recorded {
    pub(crate) method: String,
    pub(crate) path: String,
    /// Header names lowercased.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: serde_json::Value,
}

impl Recorded {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What to answer.
#[derive(Clone, Debug)]
pub(crate) enum Reply {
    /// A JSON body with this status and extra headers.
    Json {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// An SSE body, sent as one HTTP chunk per piece. With `cut`, the connection closes
    /// after the pieces without ending the body.
    Sse { pieces: Vec<Vec<u8>>, cut: bool },
    /// Sends the SSE pieces, then neither sends more nor closes (for idle timeouts).
    SseThenHang { pieces: Vec<Vec<u8>> },
    /// Never answers (for timeouts); the connection stays open until the test ends.
    Hang,
    /// A 200 JSON reply whose body breaks off half way: the connection closes after half of
    /// the bytes its `content-length` announced.
    JsonCut { body: String },
}

impl Reply {
    pub(crate) fn json(status: u16, body: serde_json::Value) -> Self {
        Self::Json {
            status,
            headers: Vec::new(),
            body: body.to_string(),
        }
    }

    pub(crate) fn with_header(mut self, name: &str, value: &str) -> Self {
        if let Self::Json { headers, .. } = &mut self {
            headers.push((name.to_owned(), value.to_owned()));
        }
        self
    }

    /// SSE from whole transcript text, cut into pieces of `piece` bytes.
    pub(crate) fn sse(text: &str, piece: usize) -> Self {
        Self::Sse {
            pieces: text
                .as_bytes()
                .chunks(piece.max(1))
                .map(<[u8]>::to_vec)
                .collect(),
            cut: false,
        }
    }

    pub(crate) fn sse_cut(text: &str, piece: usize) -> Self {
        match Self::sse(text, piece) {
            Self::Sse { pieces, .. } => Self::Sse { pieces, cut: true },
            other => other,
        }
    }
}

/// The server. Dropping it stops accepting.
pub(crate) struct MockServer {
    pub(crate) addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

struct State {
    replies: VecDeque<Reply>,
    /// Answered when the queue is empty, if set (benches repeat one reply).
    repeat: Option<Reply>,
    requests: Vec<Recorded>,
}

impl MockServer {
    pub(crate) async fn start(replies: Vec<Reply>) -> Self {
        Self::start_inner(replies, None).await
    }

    /// Answers every request with `reply`.
    pub(crate) async fn repeating(reply: Reply) -> Self {
        Self::start_inner(Vec::new(), Some(reply)).await
    }

    async fn start_inner(replies: Vec<Reply>, repeat: Option<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State {
            replies: replies.into(),
            repeat,
            requests: Vec::new(),
        }));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, shared.clone()));
            }
        });
        Self { addr, state, task }
    }

    /// `http://127.0.0.1:PORT`
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().requests.clone()
    }

    pub(crate) fn remaining(&self) -> usize {
        self.state.lock().unwrap().replies.len()
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut socket: TcpStream, state: Arc<Mutex<State>>) {
    let _ = socket.set_nodelay(true);
    let mut buf: Vec<u8> = Vec::with_capacity(8192);
    loop {
        let Some(request) = read_request(&mut socket, &mut buf).await else {
            return;
        };
        let reply = {
            let mut state = state.lock().unwrap();
            state.requests.push(request);
            state.replies.pop_front().or_else(|| state.repeat.clone())
        };
        let reply = reply.unwrap_or_else(|| {
            Reply::json(
                500,
                serde_json::json!({"error": {"message": "mock server: no reply scripted", "type": "server_error"}}),
            )
        });
        match reply {
            Reply::Json {
                status,
                headers,
                body,
            } => {
                let mut head = format!(
                    "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
                    reason(status),
                    body.len()
                );
                for (name, value) in headers {
                    head.push_str(&format!("{name}: {value}\r\n"));
                }
                head.push_str("\r\n");
                let mut out = head.into_bytes();
                out.extend_from_slice(body.as_bytes());
                if socket.write_all(&out).await.is_err() {
                    return;
                }
            }
            Reply::Sse { pieces, cut } => {
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n";
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                for piece in pieces {
                    let mut out = format!("{:x}\r\n", piece.len()).into_bytes();
                    out.extend_from_slice(&piece);
                    out.extend_from_slice(b"\r\n");
                    if socket.write_all(&out).await.is_err() {
                        return;
                    }
                }
                if cut {
                    let _ = socket.shutdown().await;
                    return;
                }
                if socket.write_all(b"0\r\n\r\n").await.is_err() {
                    return;
                }
            }
            Reply::SseThenHang { pieces } => {
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
                let mut out = head.as_bytes().to_vec();
                for piece in pieces {
                    out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                    out.extend_from_slice(&piece);
                    out.extend_from_slice(b"\r\n");
                }
                let _ = socket.write_all(&out).await;
                std::future::pending::<()>().await;
            }
            Reply::Hang => {
                std::future::pending::<()>().await;
            }
            Reply::JsonCut { body } => {
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                );
                let mut out = head.into_bytes();
                out.extend_from_slice(&body.as_bytes()[..body.len() / 2]);
                let _ = socket.write_all(&out).await;
                let _ = socket.shutdown().await;
                return;
            }
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Status",
    }
}

async fn read_request(socket: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Recorded> {
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let mut chunk = [0u8; 8192];
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_owned();
    let path = first.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let body_start = head_end + 4;
    while buf.len() < body_start + length {
        let mut chunk = [0u8; 8192];
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&buf[body_start..body_start + length])
        .unwrap_or(serde_json::Value::Null);
    buf.drain(..body_start + length);
    Some(Recorded {
        method,
        path,
        headers,
        body,
    })
}
