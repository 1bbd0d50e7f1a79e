//! Starting and stopping runs over HTTP, as a web app's backend meets it: a run queued with
//! `POST /v1/threads/{thread}/runs` is carried out by a worker, a second one on the same
//! thread is refused while the first has not ended, a bad body is told what it lacks, and
//! `POST /v1/threads/{thread}/cancel` cancels a queued run, answers a cancelled one as it is
//! and refuses one that completed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/http_harness.rs"]
mod http_harness;

use http_harness::{NO_HEADERS, request, serve};
use loomflow::http::HttpConfig;
use loomflow::prelude::*;
use serde_json::Value;

const TOKEN: &str = "runs-token";

fn bearer() -> (&'static str, String) {
    ("Authorization", format!("Bearer {TOKEN}"))
}

fn reply(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {body}"))
}

/// `double`: the input, twice.
fn double() -> CompiledGraph<u64> {
    Graph::new("double")
        .node_sync("twice", |n: &mut u64| *n *= 2)
        .edge(START, "twice")
        .edge("twice", END)
        .compile()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_queued_over_http_is_carried_out_by_a_worker() {
    let server = serve("runs-submit", HttpConfig::new().bearer_token(TOKEN)).await;
    let (addr, path) = (server.addr, "/v1/threads/ord_1/runs");
    let body = br#"{"graph": "double", "input": 21}"#;

    let (status, _, _) = request(addr, "POST", path, NO_HEADERS, body).await;
    assert_eq!(status, 401, "a caller without the token");
    let (status, _, text) = request(addr, "POST", path, &[bearer()], body).await;
    assert_eq!(status, 202, "{text}");
    assert_eq!(reply(&text)["state"], "queued", "{text}");
    let (status, _, text) = request(addr, "POST", path, &[bearer()], body).await;
    assert_eq!(
        status, 409,
        "a second run while the first is queued: {text}"
    );

    let worker = Worker::builder(&server.runtime).graph(&double()).build();
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    let (status, _, text) = request(addr, "GET", "/v1/threads/ord_1", &[bearer()], b"").await;
    assert_eq!(status, 200, "{text}");
    let thread = reply(&text);
    assert_eq!(thread["run"]["state"], "completed", "{text}");
    assert_eq!(thread["state"], 42, "{text}");

    // The run has ended: the thread takes the next one.
    let (status, _, text) = request(addr, "POST", path, &[bearer()], body).await;
    assert_eq!(status, 202, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_without_a_graph_or_an_input_is_told_what_it_lacks() {
    let server = serve("runs-bad", HttpConfig::new().bearer_token(TOKEN)).await;
    let path = "/v1/threads/ord_2/runs";
    for (body, says) in [
        (&br#"{"input": 1}"#[..], "missing field `graph`"),
        (br#"{"graph": "double"}"#, "missing field `input`"),
        (
            br#"{"graph": "double", "input": 1, "priority": 3}"#,
            "unknown field `priority`",
        ),
        (br#"{"graph": "  ", "input": 1}"#, "blank"),
        (b"not json", "the body must be"),
    ] {
        let (status, _, text) = request(server.addr, "POST", path, &[bearer()], body).await;
        assert_eq!(status, 400, "{text}");
        assert!(text.contains(says), "{says:?} in {text}");
    }
    let blank = "/v1/threads/%20/runs";
    let body = br#"{"graph": "double", "input": 1}"#;
    let (status, _, text) = request(server.addr, "POST", blank, &[bearer()], body).await;
    assert_eq!(status, 400, "a blank thread: {text}");
    assert!(
        server
            .runtime
            .store()
            .get_run("ord_2")
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_cancelled_over_http_until_it_has_ended() {
    let server = serve("runs-cancel", HttpConfig::new().bearer_token(TOKEN)).await;
    let addr = server.addr;
    server.runtime.submit("double", "queued", 1).await.unwrap();
    let cancel = "/v1/threads/queued/cancel";
    let (status, _, _) = request(addr, "POST", cancel, NO_HEADERS, b"").await;
    assert_eq!(status, 401);
    for _ in 0..2 {
        // Cancelled, then answered as it is.
        let (status, _, text) = request(addr, "POST", cancel, &[bearer()], b"").await;
        assert_eq!(status, 200, "{text}");
        assert_eq!(reply(&text)["run"]["state"], "cancelled", "{text}");
    }
    let worker = Worker::builder(&server.runtime).graph(&double()).build();
    assert_eq!(
        worker.run_until_idle().await.unwrap(),
        0,
        "a cancelled run is not run"
    );

    double().invoke(&server.runtime, "done", 4).await.unwrap();
    let (status, _, text) =
        request(addr, "POST", "/v1/threads/done/cancel", &[bearer()], b"").await;
    assert_eq!(status, 409, "{text}");
    assert!(text.contains("has ended (completed)"), "{text}");
    let (status, _, text) =
        request(addr, "POST", "/v1/threads/typo/cancel", &[bearer()], b"").await;
    assert_eq!(status, 404, "{text}");
}
