//! MCP servers as tools, against the real reference servers from npm
//! (`@modelcontextprotocol/server-everything` and `server-filesystem`) and a small server on
//! the official TypeScript SDK whose tool list grows (`.ci/mcp/growing_server.mjs`).
//!
//! `.ci/mcp/install.sh` installs them into `.ci/mcp/node_modules`; `LOOMFLOW_MCP_DIR` points
//! elsewhere. Without them each test says `skipped: …` and passes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use loomflow::agent::Agent;
use loomflow::model::{ModelResponse, ScriptedModel, ToolCall};
use loomflow::tool::mcp::{McpError, McpServer};
use loomflow::tool::{
    ApprovalDecision, DispatchContext, HookDecision, Permission, PermissionPolicy, ToolError,
    ToolHost, ToolOutcome, approver_fn,
};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// The directory holding `node_modules/@modelcontextprotocol/…`, or `None` (and a line
/// saying the test was skipped).
fn servers(test: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("LOOMFLOW_MCP_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/mcp"),
        PathBuf::from,
    );
    let modules = dir.join("node_modules/@modelcontextprotocol");
    if modules.join("server-everything").is_dir() && modules.join("server-filesystem").is_dir() {
        return Some(dir);
    }
    // Asked for by name (as `.ci/run` does), missing servers are a failure, not a skip.
    assert!(
        std::env::var_os("LOOMFLOW_MCP_DIR").is_none(),
        "{test}: LOOMFLOW_MCP_DIR={} has no MCP reference servers (run .ci/mcp/install.sh)",
        dir.display()
    );
    println!(
        "{test}: skipped: MCP reference servers not installed \
         (run .ci/mcp/install.sh, or set LOOMFLOW_MCP_DIR to a directory where they are)"
    );
    None
}

fn node(script: PathBuf) -> Command {
    let mut command = Command::new("node");
    command.arg(script);
    command
}

fn everything(dir: &Path) -> Command {
    let mut command =
        node(dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js"));
    command.arg("stdio");
    command
}

fn filesystem(dir: &Path, root: &Path) -> Command {
    let mut command =
        node(dir.join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"));
    command.arg(root);
    command
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("loomflow-mcp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

async fn dispatch(host: &ToolHost, name: &str, arguments: Value) -> ToolOutcome {
    let call = ToolCall::new("c1", name, arguments);
    host.dispatch(&[call], DispatchContext::new("session-1").user(Some("ada")))
        .await
        .unwrap()
        .pop()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_tools_keep_their_schemas_and_answer_through_the_host() {
    let Some(dir) = servers("stdio_tools") else {
        return;
    };
    let server = McpServer::builder("everything")
        .tool_prefix("ev_")
        .stdio(everything(&dir))
        .await
        .unwrap();
    assert!(server.process_id().is_some());
    let host = ToolHost::new().with_set(server.clone());

    let echo = host
        .get("ev_echo")
        .expect("the echo tool is listed under the prefix");
    let schema = &echo.spec().parameters;
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["properties"]["message"]["type"], "string");
    assert_eq!(schema["required"], json!(["message"]));
    assert!(host.definitions().iter().any(|d| d.name == "ev_get-sum"));

    let outcome = dispatch(&host, "ev_echo", json!({ "message": "hi there" })).await;
    assert!(!outcome.is_error, "{}", outcome.content);
    assert!(outcome.content.contains("hi there"), "{}", outcome.content);

    let outcome = dispatch(&host, "ev_get-sum", json!({ "a": 2, "b": 40 })).await;
    assert!(!outcome.is_error, "{}", outcome.content);
    assert!(outcome.content.contains("42"), "{}", outcome.content);

    // The schema as given is enforced by the host before the server sees the call.
    let outcome = dispatch(&host, "ev_get-sum", json!({ "a": "two", "b": 1 })).await;
    assert!(outcome.is_error);
    assert!(outcome.content.contains("field `a`"), "{}", outcome.content);

    // Directly, by the server's own name.
    let value = server
        .call("echo", json!({ "message": "direct" }))
        .await
        .unwrap();
    assert!(value.to_string().contains("direct"));
    let refused = server.call("no-such-tool", json!({})).await.unwrap_err();
    assert!(
        matches!(&refused, McpError::Refused { server, .. } | McpError::ToolFailed { server, .. } if server == "everything"),
        "{refused:?}"
    );
    server.close().await;
    assert!(server.is_closed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permissions_hooks_and_approvals_apply_to_mcp_tools() {
    let Some(dir) = servers("mcp_permissions") else {
        return;
    };
    let server = McpServer::stdio("everything", everything(&dir))
        .await
        .unwrap();
    let before = Arc::new(AtomicUsize::new(0));
    let after = Arc::new(AtomicUsize::new(0));
    let asked = Arc::new(AtomicUsize::new(0));
    let (b, a, q) = (before.clone(), after.clone(), asked.clone());
    let host = ToolHost::new()
        .with_set(server.clone())
        .permissions(
            PermissionPolicy::allow_all()
                .tool("get-env", Permission::Deny("no secrets".into()))
                .tool("get-sum", Permission::Ask),
        )
        .approval_handler(approver_fn(move |request| {
            q.fetch_add(1, Ordering::SeqCst);
            async move {
                Ok(if request.arguments["a"] == 1 {
                    ApprovalDecision::Allow
                } else {
                    ApprovalDecision::deny("too big")
                })
            }
        }))
        .before_tool(move |call| {
            b.fetch_add(1, Ordering::SeqCst);
            async move {
                if call.arguments["message"] == "forbidden" {
                    HookDecision::Deny("the hook said no".into())
                } else {
                    HookDecision::Continue
                }
            }
        })
        .after_tool(move |_| {
            a.fetch_add(1, Ordering::SeqCst);
            async { Ok::<(), String>(()) }
        });

    let denied = dispatch(&host, "get-env", json!({})).await;
    assert!(
        denied.is_error && denied.content.contains("no secrets"),
        "{}",
        denied.content
    );

    let hooked = dispatch(&host, "echo", json!({ "message": "forbidden" })).await;
    assert!(hooked.is_error && hooked.content.contains("the hook said no"));

    let allowed = dispatch(&host, "get-sum", json!({ "a": 1, "b": 2 })).await;
    assert!(
        !allowed.is_error && allowed.content.contains('3'),
        "{}",
        allowed.content
    );
    let refused = dispatch(&host, "get-sum", json!({ "a": 5, "b": 2 })).await;
    assert!(refused.is_error && refused.content.contains("too big"));

    assert_eq!(before.load(Ordering::SeqCst), 4);
    assert_eq!(after.load(Ordering::SeqCst), 4);
    assert_eq!(asked.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_writes_and_reads_files_through_the_filesystem_server() {
    let Some(dir) = servers("mcp_agent_filesystem") else {
        return;
    };
    let root = temp_dir("agent");
    let files = McpServer::builder("files")
        .tool_prefix("fs_")
        .stdio(filesystem(&dir, &root))
        .await
        .unwrap();
    let write_spec = files
        .specs()
        .into_iter()
        .find(|s| s.name == "fs_write_file")
        .unwrap();
    assert!(write_spec.destructive, "destructiveHint is kept");
    let note = root.join("note.txt");
    let model = Arc::new(ScriptedModel::new([
        ModelResponse::tool_calls(vec![ToolCall::new(
            "w1",
            "fs_write_file",
            json!({ "path": note, "content": "milk, eggs" }),
        )]),
        ModelResponse::tool_calls(vec![ToolCall::new(
            "r1",
            "fs_read_text_file",
            json!({ "path": note }),
        )]),
        ModelResponse::text("The note says: milk, eggs."),
    ]));
    let runtime = loomflow::Runtime::in_memory();
    let agent = Agent::builder("You keep notes in files.")
        .model(Arc::clone(&model))
        .tool_set(files)
        .runtime(runtime.clone())
        .build()
        .unwrap();
    let result = agent
        .run("Write my shopping list, then read it back.")
        .session("notes")
        .await
        .unwrap();
    // The server's tools are audited like any other: what ran, with what.
    let calls = runtime
        .audit_query(
            &loomflow::runtime::AuditQuery::thread("notes")
                .kind(loomflow::runtime::AuditKind::ToolCall),
        )
        .await
        .unwrap();
    let tools: Vec<&str> = calls.iter().map(|c| c.subject.as_str()).collect();
    assert_eq!(tools, ["fs_write_file", "fs_read_text_file"]);
    assert_eq!(calls[0].detail["arguments"]["content"], "milk, eggs");
    assert_eq!(calls[0].detail["outcome"], "ok");
    assert_eq!(result.output, "The note says: milk, eggs.");
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "milk, eggs");
    // The model saw the server's tools, and the file's text came back to it.
    let first = &model.requests()[0];
    assert!(first.tools.iter().any(|t| t.name == "fs_list_directory"));
    let last = model
        .requests()
        .last()
        .unwrap()
        .messages
        .last()
        .unwrap()
        .clone();
    assert!(serde_json::to_string(&last).unwrap().contains("milk, eggs"));
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_stdio_server_fails_calls_at_once_naming_server_and_tool() {
    let Some(dir) = servers("mcp_killed_stdio") else {
        return;
    };
    let server = McpServer::stdio("everything", everything(&dir))
        .await
        .unwrap();
    let host = ToolHost::new()
        .with_set(server.clone())
        .timeout(Duration::from_secs(120));
    let pid = server.process_id().unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());

    let started = Instant::now();
    let error = loop {
        // The kill is seen when the pipe closes; until then a call may still be in flight.
        match server.call("echo", json!({ "message": "anyone?" })).await {
            Err(error) => break error,
            Ok(_) if started.elapsed() < Duration::from_secs(5) => tokio::task::yield_now().await,
            Ok(value) => panic!("a killed server answered: {value}"),
        }
    };
    println!("after the kill ({:?}): {error}", started.elapsed());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    match &error {
        McpError::Gone {
            server, operation, ..
        } => {
            assert_eq!(server, "everything");
            assert_eq!(operation, "tools/call echo");
        }
        other => panic!("expected McpError::Gone, got {other:?}"),
    }
    assert!(server.is_closed());

    let started = Instant::now();
    let outcome = dispatch(&host, "echo", json!({ "message": "anyone?" })).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(outcome.is_error);
    assert!(
        outcome.content.contains("tool echo is unavailable")
            && outcome.content.contains("server everything is gone"),
        "{}",
        outcome.content
    );
    // The Tool itself reports the typed error.
    let tool = host.get("echo").unwrap();
    let ctx = loomflow::tool::ToolContext::new("s", None, "c9");
    let error = tool
        .call(json!({ "message": "x" }), &ctx)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ToolError::Unavailable { ref tool, ref server, .. } if tool == "echo" && server == "everything")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_list_changes_are_followed() {
    let Some(dir) = servers("mcp_list_changes") else {
        return;
    };
    let script = dir.join("growing_server.mjs");
    if !script.exists() {
        println!("mcp_list_changes: skipped: {} not found", script.display());
        return;
    }
    let server = McpServer::stdio("growing", node(script)).await.unwrap();
    let host = ToolHost::new().with_set(server.clone());
    assert!(host.get("wave").is_none());
    let mut changes = server.subscribe();
    let seen = *changes.borrow_and_update();

    let outcome = dispatch(&host, "add_tool", json!({ "name": "wave" })).await;
    assert!(!outcome.is_error, "{}", outcome.content);
    tokio::time::timeout(Duration::from_secs(10), changes.wait_for(|v| *v > seen))
        .await
        .expect("the list was read again after notifications/tools/list_changed")
        .unwrap();

    assert!(host.definitions().iter().any(|d| d.name == "wave"));
    let outcome = dispatch(&host, "wave", json!({})).await;
    assert_eq!(outcome.content, "wave says hello");

    // A tool added without a word is found by `refresh`, which asks the server, though it
    // said its list could be kept for a minute.
    let outcome = dispatch(&host, "add_quietly", json!({ "name": "hush" })).await;
    assert!(!outcome.is_error, "{}", outcome.content);
    server.refresh().await.unwrap();
    assert!(host.definitions().iter().any(|d| d.name == "hush"));
}

/// Starts server-everything's streamable HTTP transport on a free port; returns the child and
/// the port once it listens.
async fn everything_http(dir: &Path) -> (tokio::process::Child, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child =
        node(dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js"))
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let listening = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("listening on port") {
                return;
            }
        }
        panic!("server-everything exited before it listened");
    };
    tokio::time::timeout(Duration::from_secs(30), listening)
        .await
        .unwrap();
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_tools_answer_and_a_stopped_server_fails_promptly() {
    let Some(dir) = servers("mcp_streamable_http") else {
        return;
    };
    let (mut child, port) = everything_http(&dir).await;
    let server = McpServer::builder("everything-http")
        .request_timeout(Duration::from_secs(20))
        .http(format!("http://127.0.0.1:{port}/mcp"))
        .await
        .unwrap();
    assert_eq!(server.process_id(), None);
    let host = ToolHost::new().with_set(server.clone());
    let outcome = dispatch(&host, "get-sum", json!({ "a": 20, "b": 22 })).await;
    assert!(
        !outcome.is_error && outcome.content.contains("42"),
        "{}",
        outcome.content
    );

    child.kill().await.unwrap();
    let started = Instant::now();
    let outcome = dispatch(&host, "echo", json!({ "message": "anyone?" })).await;
    println!(
        "after the server stopped ({:?}): {}",
        started.elapsed(),
        outcome.content
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert!(outcome.is_error);
    assert!(
        outcome.content.contains("everything-http"),
        "{}",
        outcome.content
    );
    assert!(outcome.content.contains("echo"), "{}", outcome.content);
    // Nothing listens: the request never left, and the call says the server is unavailable
    // (not that it may have run).
    let direct = server.call("echo", json!({ "message": "anyone?" })).await;
    assert!(
        matches!(direct, Err(McpError::NotSent { .. })),
        "{direct:?}"
    );
    assert!(
        outcome.content.contains("could not be reached") && !outcome.content.contains("is gone"),
        "{}",
        outcome.content
    );
    // Reading the list again asks the server, which is gone: not a list kept from before.
    let refreshed = server.refresh().await;
    assert!(refreshed.is_err(), "{refreshed:?}");
}

#[tokio::test]
async fn bad_connections_are_typed_errors() {
    let error = McpServer::stdio(" ", Command::new("true"))
        .await
        .unwrap_err();
    assert!(matches!(error, McpError::EmptyName));

    let error = McpServer::stdio("ghost", Command::new("/nonexistent/mcp-server"))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, McpError::Spawn { server, .. } if server == "ghost"),
        "{error:?}"
    );
    assert_eq!(error.to_string(), "mcp server ghost could not be started");

    let error = McpServer::http("web", "ftp://example.com/mcp")
        .await
        .unwrap_err();
    assert!(
        matches!(&error, McpError::BadUrl { server, url } if server == "web" && url == "ftp://example.com/mcp")
    );

    let error = McpServer::builder("slow")
        .request_timeout(Duration::ZERO)
        .http("http://127.0.0.1:1/mcp")
        .await
        .unwrap_err();
    assert!(matches!(&error, McpError::ZeroTimeout { server } if server == "slow"));
    // Nor may a call's longest time be zero: every call would time out as it went out.
    let error = McpServer::builder("hasty")
        .max_call_time(Duration::ZERO)
        .http("http://127.0.0.1:1/mcp")
        .await
        .unwrap_err();
    assert!(matches!(&error, McpError::ZeroTimeout { server } if server == "hasty"));

    // A process that is not an MCP server: the handshake fails, it does not hang.
    let error = McpServer::builder("not-mcp")
        .request_timeout(Duration::from_secs(10))
        .stdio(Command::new("true"))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, McpError::Handshake { server, .. } if server == "not-mcp"),
        "{error:?}"
    );

    // Nothing listens on port 1.
    let error = McpServer::builder("nobody")
        .request_timeout(Duration::from_secs(10))
        .http("http://127.0.0.1:1/mcp")
        .await
        .unwrap_err();
    assert!(
        matches!(&error, McpError::Handshake { server, .. } if server == "nobody"),
        "{error:?}"
    );
}

/// The request timeout is how long a server may stay silent on a call, not how long the
/// call may take: each progress notification of the call starts the wait again. A call the
/// server says nothing about for that long times out, naming server and tool, and the
/// server is told it is cancelled (it answers the next call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_reports_progress_outlives_the_request_timeout() {
    let Some(dir) = servers("progress") else {
        return;
    };
    let server = McpServer::builder("everything")
        .request_timeout(Duration::from_secs(3))
        .stdio(everything(&dir))
        .await
        .unwrap();
    // Six seconds, with progress every half second.
    let long = json!({ "duration": 6, "steps": 12 });
    let done = server
        .call("trigger-long-running-operation", long)
        .await
        .unwrap();
    assert!(done.to_string().contains("completed"), "{done}");
    // Five seconds, with progress only at the end.
    let silent = json!({ "duration": 5, "steps": 1 });
    let started = Instant::now();
    let error = server
        .call("trigger-long-running-operation", silent)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, McpError::TimedOut { server, operation, .. }
            if server == "everything" && operation.contains("trigger-long-running-operation")),
        "{error:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let echo = server.call("echo", json!({ "message": "after" })).await;
    assert!(echo.unwrap().to_string().contains("after"));
    // However often it reports progress, a call takes at most its longest time.
    let capped = McpServer::builder("everything")
        .request_timeout(Duration::from_secs(3))
        .max_call_time(Duration::from_secs(2))
        .stdio(everything(&dir))
        .await
        .unwrap();
    let long = json!({ "duration": 6, "steps": 12 });
    let error = capped
        .call("trigger-long-running-operation", long)
        .await
        .unwrap_err();
    assert!(
        matches!(error, McpError::TimedOut { seconds, .. } if seconds == 2.0),
        "{error:?}"
    );
    capped.close().await;
    server.close().await;
}

/// A server's log messages (`notifications/message`) are `tracing` events of target
/// `loomflow::mcp`, naming the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_log_messages_are_tracing_events() {
    use tracing_subscriber::layer::SubscriberExt as _;
    struct Logged(Arc<std::sync::Mutex<Vec<String>>>);
    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Logged {
        fn on_event(
            &self,
            event: &tracing::Event<'_>,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            if event.metadata().target() != "loomflow::mcp" {
                return;
            }
            let mut text = format!("{} ", event.metadata().level());
            let mut visit = |field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
                text.push_str(&format!("{}={value:?} ", field.name()));
            };
            event.record(&mut visit);
            self.0.lock().unwrap().push(text);
        }
    }
    let Some(dir) = servers("logging") else {
        return;
    };
    // The messages come on the connection's task, another thread: the subscriber is the
    // process's (this test binary sets no other).
    let logged = Arc::new(std::sync::Mutex::new(Vec::new()));
    let subscriber = tracing_subscriber::registry().with(Logged(Arc::clone(&logged)));
    tracing::subscriber::set_global_default(subscriber).unwrap();
    let server = McpServer::stdio("everything", everything(&dir))
        .await
        .unwrap();
    // Starts the server's simulated logging: one message at once, then one every 5 s.
    server
        .call("toggle-simulated-logging", json!({}))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while logged.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "no log message arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let first = logged.lock().unwrap()[0].clone();
    assert!(first.contains("server=\"everything\""), "{first}");
    // At the level it maps to: `Info-level message` is INFO, `Alert level-message` ERROR.
    let level = |mcp: &str| match mcp {
        "Debug" => "DEBUG",
        "Info" | "Notice" => "INFO",
        "Warning" => "WARN",
        _ => "ERROR",
    };
    let said = [
        "Debug",
        "Info",
        "Notice",
        "Warning",
        "Error",
        "Critical",
        "Alert",
        "Emergency",
    ]
    .into_iter()
    .find(|mcp| first.contains(&format!("message={mcp}")))
    .unwrap_or_else(|| panic!("no level named: {first}"));
    assert!(first.starts_with(level(said)), "{first}");
    server.close().await;
}

/// A call the host stops waiting for (its own per-call timeout) is cancelled with the
/// server (`notifications/cancelled`), which can stop working on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_the_host_gave_up_on_is_cancelled_with_the_server() {
    let Some(dir) = servers("mcp_cancel") else {
        return;
    };
    let script = dir.join("growing_server.mjs");
    let server = McpServer::stdio("growing", node(script)).await.unwrap();
    let host = ToolHost::new()
        .timeout(Duration::from_millis(500))
        .with_set(server.clone());
    let outcome = dispatch(&host, "wait_for_cancel", json!({})).await;
    assert!(outcome.is_error, "{}", outcome.content);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let count = server.call("cancelled_calls", json!({})).await.unwrap();
        if count == json!("1") {
            break;
        }
        assert!(Instant::now() < deadline, "never cancelled: {count}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.close().await;
}
