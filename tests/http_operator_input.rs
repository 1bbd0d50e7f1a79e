//! The HTTP ingress under the input operators and webhooks really send: retries with odd
//! keys, empty bodies, typos, late signals, and two people deciding the same call at once.
//! Each refusal is a JSON error that names what is wrong; nothing is delivered twice, and
//! no decision is left over to answer a later call.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/http_harness.rs"]
mod http_harness;
#[path = "support/refunds.rs"]
mod refunds;

use http_harness::{NO_HEADERS, Server, request, serve};
use loomflow::http::{HttpConfig, signature_header};
use loomflow::model::ModelResponse;
use loomflow::prelude::*;
use refunds::{agent, ask_for_refund, call};
use serde_json::Value;

const TOKEN: &str = "s3cret-token";

fn config() -> HttpConfig {
    HttpConfig::new().bearer_token(TOKEN)
}

fn bearer() -> (&'static str, Vec<u8>) {
    ("Authorization", format!("Bearer {TOKEN}").into_bytes())
}

fn is_json_error(body: &str) -> bool {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_owned))
        .is_some()
}

/// A non-ASCII `Idempotency-Key` is refused, naming the header: ignoring it would make two
/// sends with the same key two signals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_is_not_visible_ascii_is_refused() {
    let server = serve("utf8key", config()).await;
    server.runtime.submit("g", "k1", json!({})).await.unwrap();
    let key = ("Idempotency-Key", "commande-é-42".as_bytes().to_vec());
    let path = "/v1/threads/k1/signals/n";
    let (first, _, r1) = request(server.addr, "POST", path, &[bearer(), key.clone()], b"1").await;
    let (second, _, r2) = request(server.addr, "POST", path, &[bearer(), key], b"2").await;
    eprintln!("first {first} {r1}\nsecond {second} {r2}");
    let got1 = server.runtime.poll_signal::<u32>("k1", "n").unwrap();
    let got2 = server.runtime.poll_signal::<u32>("k1", "n").unwrap();
    eprintln!("queued: {got1:?} {got2:?}");
    // Ignoring the key would deliver the retry twice: it is refused, naming the header.
    assert_eq!((first, second), (400, 400), "{r1} {r2}");
    assert!(r1.contains("idempotency-key") && is_json_error(&r1), "{r1}");
    assert_eq!((got1, got2), (None, None), "nothing was delivered");
}

/// The same Idempotency-Key sent in parallel delivers once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_sent_in_parallel_delivers_once() {
    let server = serve("samekey", config()).await;
    server.runtime.submit("g", "p1", json!({})).await.unwrap();
    let posts = (0..40).map(|i| {
        let addr = server.addr;
        tokio::spawn(async move {
            let key = ("Idempotency-Key", b"same".to_vec());
            request(
                addr,
                "POST",
                "/v1/threads/p1/signals/n",
                &[bearer(), key],
                i.to_string().as_bytes(),
            )
            .await
            .0
        })
    });
    let statuses: Vec<u16> = futures_util::future::join_all(posts)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let accepted = statuses.iter().filter(|s| **s == 202).count();
    let mut delivered = 0;
    while server
        .runtime
        .poll_signal::<u32>("p1", "n")
        .unwrap()
        .is_some()
    {
        delivered += 1;
    }
    eprintln!("statuses {statuses:?}; delivered {delivered}");
    assert_eq!((accepted, delivered), (1, 1), "{statuses:?}");
}

/// A signal to a run that has completed: no run will ever read it, and the ingress says so
/// with 409 instead of accepting it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_to_a_completed_run_is_refused() {
    let server = serve("ended", config()).await;
    let graph = Graph::new("count")
        .node_sync("inc", |n: &mut u64| *n += 1)
        .edge(START, "inc")
        .edge("inc", END)
        .compile()
        .unwrap();
    graph.invoke(&server.runtime, "done-1", 1).await.unwrap();
    let (status, _, _) = request(server.addr, "GET", "/v1/threads/done-1", &[bearer()], b"").await;
    assert_eq!(status, 200);
    let (status, _, reply) = request(
        server.addr,
        "POST",
        "/v1/threads/done-1/signals/review",
        &[bearer()],
        b"true",
    )
    .await;
    eprintln!("{status} {reply}");
    assert_eq!(status, 409, "a signal for a finished run: {status} {reply}");
}

/// A signal for a run this process executes and that has written nothing yet (it writes
/// only when it ends, `Durability::Exit`) is delivered: before its fix it was refused as
/// for a thread with no run (404), and a webhook that does not retry lost it; and on a
/// thread whose last run ended, as for that run (409).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_to_a_run_not_written_yet_is_delivered() {
    let server = serve("not-written", config()).await;
    let graph = Graph::new("waits")
        .node_fn("wait", |n: &mut u64, ctx| {
            Box::pin(async move {
                *n += ctx.wait_for_signal::<u64>("review").await?;
                Ok(())
            })
        })
        .edge(START, "wait")
        .edge("wait", END)
        .compile()
        .unwrap();
    // The thread's first run, ended: the row reads `completed` until the next run, in
    // `Durability::Exit`, writes anything.
    let first = graph
        .run(&server.runtime, "exit-1", 1)
        .durability(Durability::Exit)
        .start();
    server.runtime.signal("exit-1", "review", 1).await.unwrap();
    assert_eq!(first.await.unwrap().completed().unwrap(), 2);
    let run = graph
        .run(&server.runtime, "exit-1", 1)
        .durability(Durability::Exit)
        .start();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let (status, _, reply) = request(
        server.addr,
        "POST",
        "/v1/threads/exit-1/signals/review",
        &[bearer()],
        b"41",
    )
    .await;
    assert_eq!(status, 202, "{reply}");
    let done = tokio::time::timeout(std::time::Duration::from_secs(10), run)
        .await
        .expect("the run takes the signal")
        .unwrap();
    assert_eq!(done.completed().unwrap(), 42);
}

/// The audit of a thread with no run and no entries is 404, as for every thread route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_of_a_thread_that_never_ran_is_404() {
    let server = serve("auditunknown", config()).await;
    let (status, _, reply) = request(
        server.addr,
        "GET",
        "/v1/threads/nobody/audit",
        &[bearer()],
        b"",
    )
    .await;
    eprintln!("{status} {reply}");
    assert_eq!(status, 404, "{reply}");
    // A thread with entries but no run (signals sent to a session that never ran): an
    // empty page is an empty list, not 404, so a tail that is up to date reads as such.
    server.runtime.signal("quiet", "ping", 1).await.unwrap();
    let (status, _, reply) = request(
        server.addr,
        "GET",
        "/v1/threads/quiet/audit?after=1000000",
        &[bearer()],
        b"",
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert!(reply.contains("\"entries\":[]"), "{reply}");
}

/// Parallel approve and reject of one pending call: exactly one wins, and the others are
/// told it did not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_and_rejections_at_once_decide_once() {
    let server = serve("race", config()).await;
    ask_for_refund(&server.runtime, "r1", 100).await;
    let mut tasks = Vec::new();
    for i in 0..6 {
        let addr = server.addr;
        tasks.push(tokio::spawn(async move {
            let (path, body): (&str, &[u8]) = if i % 2 == 0 {
                ("/v1/threads/r1/approvals/call_1/approve", b"")
            } else {
                (
                    "/v1/threads/r1/approvals/call_1/reject",
                    br#"{"reason": "no"}"#,
                )
            };
            let (status, _, reply) = request(addr, "POST", path, &[bearer()], body).await;
            (path, status, reply)
        }));
    }
    let results: Vec<_> = futures_util::future::join_all(tasks)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    for r in &results {
        eprintln!("{r:?}");
    }
    let ok = results.iter().filter(|(_, s, _)| *s == 200).count();
    let decisions = server
        .runtime
        .audit_query(&loomflow::runtime::AuditQuery::thread("r1"))
        .await
        .unwrap();
    eprintln!(
        "audit: {}",
        serde_json::to_string_pretty(&decisions).unwrap()
    );
    assert_eq!(ok, 1, "{results:?}");
    for (_, status, reply) in results.iter().filter(|(_, s, _)| *s != 200) {
        // Told nothing is pending (the first decision is queued), or that it was decided.
        assert!(
            [404, 409].contains(status) && is_json_error(reply),
            "{status} {reply}"
        );
    }
}

/// After a raced decision, no leftover decision sits in the mailbox to answer the next call
/// with the same id on the session without anyone deciding it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_decision_is_left_over_for_a_later_call() {
    let server = serve("leftover", config()).await;
    ask_for_refund(&server.runtime, "l1", 100).await;
    // Two operators click "approve" at once.
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let addr = server.addr;
        tasks.push(tokio::spawn(async move {
            request(
                addr,
                "POST",
                "/v1/threads/l1/approvals/call_1/approve",
                &[bearer()],
                b"",
            )
            .await
            .0
        }));
    }
    let statuses: Vec<u16> = futures_util::future::join_all(tasks)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    eprintln!("approve statuses: {statuses:?}");
    let done = agent(&server.runtime, vec![ModelResponse::text("Done.")])
        .resume("l1")
        .await
        .unwrap();
    assert!(!done.interrupted);
    // A new request on the same session; the model reuses the call id (scripted models,
    // local models and some providers number calls per turn).
    let next = agent(
        &server.runtime,
        vec![
            ModelResponse::tool_calls(vec![call(999_999)]),
            ModelResponse::text("Done again."),
        ],
    )
    .run("refund again, much more")
    .session("l1")
    .await
    .unwrap();
    let transcript = serde_json::to_string(&next.messages).unwrap();
    eprintln!("interrupted: {}; {transcript}", next.interrupted);
    assert!(
        next.interrupted && !transcript.contains("refunded 999999"),
        "the second refund ran without anyone approving it: {transcript}"
    );
}

/// A second approval, the first queued for the run, is refused as decided already (409).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_decision_is_refused() {
    let server = serve("seq", config()).await;
    ask_for_refund(&server.runtime, "s1", 5).await;
    let path = "/v1/threads/s1/approvals/call_1/approve";
    let (a, _, _) = request(server.addr, "POST", path, &[bearer()], b"").await;
    let (b, _, reply) = request(server.addr, "POST", path, &[bearer()], b"").await;
    eprintln!("{a} {b} {reply}");
    assert_eq!((a, b), (200, 409), "{reply}");
    assert!(reply.contains("already"), "{reply}");
}

/// Scheme names are case-insensitive (RFC 9110 §11.1): `bearer <token>` is a valid header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_scheme_is_case_insensitive() {
    let server = serve("scheme", config()).await;
    let lower = ("Authorization", format!("bearer {TOKEN}").into_bytes());
    let (status, _, reply) = request(server.addr, "GET", "/v1/runs", &[lower], b"").await;
    eprintln!("{status} {reply}");
    assert_eq!(status, 200, "{reply}");
}

/// Posts `body` as the approval of `session`'s pending refund; returns the status and the
/// reply, and the transcript once the run has been carried on.
async fn approve_with(server: &Server, session: &str, body: &[u8]) -> (u16, String, String) {
    ask_for_refund(&server.runtime, session, 1299).await;
    let path = format!("/v1/threads/{session}/approvals/call_1/approve");
    let (status, _, reply) = request(server.addr, "POST", &path, &[bearer()], body).await;
    let done = agent(&server.runtime, vec![ModelResponse::text("Done.")])
        .resume(session)
        .await
        .unwrap();
    let transcript = serde_json::to_string(&done.messages).unwrap();
    (status, reply, transcript)
}

/// A typo in the approve body (`argumets`) is refused: ignored, the call would run with its
/// original arguments and the API would say "approved".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_field_in_an_approval_is_refused() {
    let server = serve("typo", config()).await;
    let body = br#"{"argumets": {"order": "ord_42", "cents": 700}}"#;
    let (status, reply, transcript) = approve_with(&server, "t1", body).await;
    assert_eq!(
        status, 400,
        "an unknown field must be refused: {reply} {transcript}"
    );
}

/// `{"arguments": "lots"}`: edited arguments that are not an object are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edited_arguments_must_be_an_object() {
    let server = serve("nonobj", config()).await;
    let (status, reply, transcript) =
        approve_with(&server, "t2", br#"{"arguments": "lots"}"#).await;
    assert_eq!(
        status, 400,
        "edited arguments that are not an object: {transcript}"
    );
    assert!(reply.contains("must be an object"), "{reply}");
}

/// An empty `Idempotency-Key:` header is refused: taken as the key "", it would make every
/// later send with an empty key on that (thread, name) a dropped duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_key_is_refused() {
    let server = serve("emptykey", config()).await;
    server.runtime.submit("g", "e1", json!({})).await.unwrap();
    let path = "/v1/threads/e1/signals/n";
    let empty = ("Idempotency-Key", Vec::new());
    let (a, _, ra) = request(server.addr, "POST", path, &[bearer(), empty.clone()], b"1").await;
    let (b, _, rb) = request(server.addr, "POST", path, &[bearer(), empty], b"2").await;
    eprintln!("{a} {ra}\n{b} {rb}");
    assert_eq!((a, b), (400, 400), "{ra} {rb}");
    assert!(
        server
            .runtime
            .poll_signal::<u32>("e1", "n")
            .unwrap()
            .is_none()
    );
}

/// No body at all (a forgotten `-d`) is refused rather than delivered as `null`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_body_is_refused() {
    let server = serve("emptybody", config()).await;
    server.runtime.submit("g", "n1", json!({})).await.unwrap();
    let (a, _, ra) = request(
        server.addr,
        "POST",
        "/v1/threads/n1/signals/n",
        &[bearer()],
        b"",
    )
    .await;
    let got = server.runtime.poll_signal::<Value>("n1", "n").unwrap();
    eprintln!("{a} {ra}; delivered {got:?}");
    assert_eq!(a, 400, "an empty body is not JSON: {ra}");
    assert!(
        ra.contains("the body of signal n for thread n1 is empty") && is_json_error(&ra),
        "{ra}"
    );
    assert_eq!(got, None, "nothing was delivered");
    // Nor a body that is not JSON, or a decision's, each named.
    let path = "/v1/threads/n1/signals/n";
    let (status, _, reply) = request(server.addr, "POST", path, &[bearer()], b"{").await;
    assert_eq!(status, 400, "{reply}");
    assert!(
        reply.contains("signal n for thread n1 is not JSON"),
        "{reply}"
    );
    // A form body under a token: said that forms are read from GitHub only.
    let form = [
        bearer(),
        (
            "Content-Type",
            b"application/x-www-form-urlencoded".to_vec(),
        ),
    ];
    let (status, _, reply) = request(server.addr, "POST", path, &form, b"payload=%7B%7D").await;
    assert_eq!(status, 400, "{reply}");
    assert!(
        reply.contains("read only from a GitHub-signed webhook"),
        "{reply}"
    );
    let path = "/v1/threads/n1/approvals/call_9/approve";
    let (status, _, reply) = request(server.addr, "POST", path, &[bearer()], b"[1]").await;
    assert_eq!(status, 400, "{reply}");
    assert!(reply.contains("call call_9 of thread n1"), "{reply}");
    // What a body should be is said in the API's words, not as a Rust type's name.
    assert!(reply.contains("an object of `arguments`"), "{reply}");
    let path = "/v1/threads/n1/approvals/call_9/reject";
    let (status, _, reply) = request(server.addr, "POST", path, &[bearer()], b"\"no\"").await;
    assert_eq!(status, 400, "{reply}");
    assert!(!reply.contains("RejectBody"), "{reply}");
    assert!(reply.contains("an object of `reason`"), "{reply}");
}

/// A signal for a finished run is refused, so a later run on the thread does not get it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_signal_does_not_answer_the_next_run() {
    let server = serve("ended2", config()).await;
    let graph = Graph::new("review")
        .node_fn("ask", |s: &mut Option<bool>, ctx| {
            Box::pin(async move {
                *s = Some(ctx.wait_for_signal("review").or_suspend().await?);
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
        .unwrap();
    graph.invoke(&server.runtime, "th", None).await.unwrap();
    server.runtime.signal("th", "review", true).await.unwrap();
    let first = graph.recover(&server.runtime, "th").await.unwrap();
    eprintln!("first run: {first:?}");
    // Late duplicate click from an operator, after the run completed: 202.
    let (status, _, reply) = request(
        server.addr,
        "POST",
        "/v1/threads/th/signals/review",
        &[bearer()],
        b"true",
    )
    .await;
    assert_eq!(status, 409, "a signal for a run that has ended: {reply}");
    // Next week, a new run on the thread asks again.
    let second = graph.invoke(&server.runtime, "th", None).await;
    eprintln!("second run: {second:?}");
    assert!(
        matches!(second, Ok(ref o) if !o.interrupts().is_empty()),
        "the second run was answered by the stale signal: {second:?}"
    );
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A signed request signs its path and delivery id too: captured, it is refused on another
/// thread or signal and without its delivery id, and sent again it is the same delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_request_is_good_for_its_own_path_and_delivery_only() {
    let config = HttpConfig::new().bearer_token(TOKEN).signing_secret("sk");
    let server = serve("replay", config).await;
    for thread in ["ci-1", "refund-42"] {
        server.runtime.submit("g", thread, json!({})).await.unwrap();
    }
    let body = br#"{"approved": true}"#;
    let path = "/v1/threads/ci-1/signals/build_done";
    let value = signature_header("sk", now_secs(), path, "d-1", body);
    let signed = ("X-Loomflow-Signature", value.into_bytes());
    let delivery = |id: &str| ("X-Loomflow-Delivery", id.as_bytes().to_vec());

    let (status, _, reply) = request(
        server.addr,
        "POST",
        path,
        &[signed.clone(), delivery("d-1")],
        body,
    )
    .await;
    assert_eq!(status, 202, "{reply}");
    let (status, _, reply) = request(
        server.addr,
        "POST",
        path,
        &[signed.clone(), delivery("d-1")],
        body,
    )
    .await;
    assert_eq!(
        status, 200,
        "the same delivery again is a duplicate: {reply}"
    );
    assert!(reply.contains("duplicate"), "{reply}");

    let elsewhere = "/v1/threads/refund-42/signals/manager_review";
    let refused = [
        (elsewhere, Some("d-1")),
        ("/v1/threads/ci-1/signals/deploy", Some("d-1")),
        (path, Some("d-2")),
        (path, None),
    ];
    for (to, id) in refused {
        let mut headers = vec![signed.clone()];
        headers.extend(id.map(delivery));
        let (status, _, reply) = request(server.addr, "POST", to, &headers, body).await;
        assert_eq!(status, 401, "{to} {id:?}: {reply}");
        assert!(reply.contains("bad_signature"), "{reply}");
    }
    let review = server
        .runtime
        .poll_signal::<Value>("refund-42", "manager_review")
        .unwrap();
    assert_eq!(review, None);
}

/// A request: method, path, headers, body.
type Case<'a> = (&'a str, &'a str, Vec<(&'a str, Vec<u8>)>, &'a [u8]);

/// Every refusal is `{"error": {"code", "message"}}`, a request axum cannot read included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_the_server_cannot_read_are_refused_as_json() {
    let server = serve("extract", config()).await;
    server.runtime.submit("g", "t1", json!({})).await.unwrap();
    let form_type = (
        "Content-Type",
        b"application/x-www-form-urlencoded".to_vec(),
    );
    let cases: Vec<Case<'_>> = vec![
        ("GET", "/v1/runs?limit=abc", vec![bearer()], b""),
        ("GET", "/v1/runs?limit=-1", vec![bearer()], b""),
        // A page of none would read as the last page.
        ("GET", "/v1/runs?limit=0", vec![bearer()], b""),
        ("GET", "/v1/threads/t1/audit?after=-1", vec![bearer()], b""),
        ("GET", "/v1/threads/t1/audit?limit=x", vec![bearer()], b""),
        ("GET", "/v1/threads/%FF", vec![bearer()], b""),
        ("POST", "/v1/threads/%FF/signals/go", vec![bearer()], b"1"),
        // Wrong method on a known path.
        ("GET", "/v1/threads/t1/signals/go", vec![bearer()], b""),
        ("PUT", "/v1/threads/t1", vec![bearer()], b""),
        ("DELETE", "/v1/threads/%FF", vec![bearer()], b""),
        // The inbox form with a missing field / wrong content type.
        (
            "POST",
            "/inbox/decide",
            vec![bearer(), form_type.clone()],
            b"csrf=x",
        ),
        ("POST", "/inbox/decide", vec![bearer()], b"csrf=x"),
    ];
    let mut not_json = Vec::new();
    for (method, path, headers, body) in cases {
        let (status, _, reply) = request(server.addr, method, path, &headers, body).await;
        eprintln!("{method} {path} -> {status} {reply:?}");
        if !is_json_error(&reply) {
            not_json.push(format!("{method} {path} -> {status} body {reply:?}"));
        }
    }
    assert!(
        not_json.is_empty(),
        "refusals that are not JSON errors:\n{}",
        not_json.join("\n")
    );
}

/// Without a token, a malformed query is still 401 (who asks is checked first), not a 400
/// that tells anyone the route's parameters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unauthenticated_caller_learns_nothing_of_a_route() {
    let server = serve("authorder", config()).await;
    let (status, _, reply) =
        request(server.addr, "GET", "/v1/runs?limit=abc", NO_HEADERS, b"").await;
    eprintln!("{status} {reply}");
    assert_eq!(status, 401, "{reply}");
    let (status, _, reply) = request(
        server.addr,
        "POST",
        "/inbox/decide",
        &[(
            "Content-Type",
            b"application/x-www-form-urlencoded".to_vec(),
        )],
        b"x=1",
    )
    .await;
    eprintln!("{status} {reply}");
    assert_eq!(status, 401, "{reply}");
}

/// Without authentication, a page on another site cannot act through the operator's
/// browser: a POST or DELETE the browser marks cross-site (or, from a browser that does
/// not mark it, whose `Origin` is another host) is refused with 403; reads, the server's
/// own pages and clients that are not browsers are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_server_refuses_what_another_site_sends_through_a_browser() {
    let server = serve("crosssite", HttpConfig::new().without_auth()).await;
    server.runtime.submit("g", "t1", json!({})).await.unwrap();
    let signal = "/v1/threads/t1/signals/go";
    let site = |value: &str| ("Sec-Fetch-Site", value.as_bytes().to_vec());
    let origin = |value: &str| ("Origin", value.as_bytes().to_vec());
    let host = format!("{}", server.addr);
    let own = format!("http://{host}");
    for refused in [
        vec![site("cross-site")],
        vec![site("same-site")],
        vec![origin("https://evil.example")],
        vec![origin("null")],
    ] {
        let (status, _, reply) = request(server.addr, "POST", signal, &refused, b"1").await;
        assert_eq!(status, 403, "{reply}");
        assert!(reply.contains("\"forbidden\""), "{reply}");
        let (status, _, _) = request(server.addr, "DELETE", "/v1/threads/t1", &refused, b"").await;
        assert_eq!(status, 403);
    }
    let (status, _, _) = request(server.addr, "GET", "/v1/runs", &[site("cross-site")], b"").await;
    assert_eq!(status, 200, "a read (a link followed) is served");
    for accepted in [vec![site("same-origin")], vec![origin(&own)], vec![]] {
        let (status, _, reply) = request(server.addr, "POST", signal, &accepted, b"1").await;
        assert_eq!(status, 202, "{reply}");
    }
}

/// Without authentication, a request addressed to a host name other than `localhost` (or
/// one allowed) is refused, reads too: a site whose name the attacker points at the
/// listener's address (DNS rebinding) is the listener's own origin to the browser, which
/// sends `Sec-Fetch-Site: same-origin` and an `Origin` that matches its `Host`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_server_answers_only_its_own_host_names() {
    // A name is allowed without its port or final dot, however given.
    let config = (HttpConfig::new().without_auth())
        .allow_host("Ops.Internal")
        .allow_host(" gate.internal:8443 ")
        .allow_host("fqdn.internal.")
        // No name: allows nothing (not an empty Host header).
        .allow_host(":8080");
    let server = serve("rebinding", config).await;
    server.runtime.submit("g", "t1", json!({})).await.unwrap();
    let port = server.addr.port();
    let host = |name: &str| ("Host", format!("{name}:{port}").into_bytes());
    let rebound = [
        host("evil.example"),
        ("Sec-Fetch-Site", b"same-origin".to_vec()),
        ("Origin", format!("http://evil.example:{port}").into_bytes()),
    ];
    let (status, _, reply) = request(server.addr, "GET", "/v1/runs", &rebound, b"").await;
    assert_eq!(status, 403, "{reply}");
    assert!(
        reply.contains("evil.example") && reply.contains("allow_host"),
        "{reply}"
    );
    let signal = "/v1/threads/t1/signals/go";
    let (status, _, _) = request(server.addr, "POST", signal, &rebound, b"1").await;
    assert_eq!(status, 403);
    let allowed = [
        "localhost",
        "127.0.0.1",
        "ops.internal",
        "ops.internal.",
        "api.localhost",
        "gate.internal",
        "fqdn.internal",
    ];
    for name in allowed {
        let (status, _, reply) = request(server.addr, "GET", "/v1/runs", &[host(name)], b"").await;
        assert_eq!(status, 200, "{name}: {reply}");
    }
    let (status, _, reply) = request(server.addr, "GET", "/v1/runs", &[host("")], b"").await;
    assert_eq!(status, 403, "an empty host name: {reply}");
    let ipv6 = [("Host", format!("[::1]:{port}").into_bytes())];
    let (status, _, _) = request(server.addr, "GET", "/v1/runs", &ipv6, b"").await;
    assert_eq!(status, 200);
}

/// No page of the server may be framed by another site's (a decoy over the inbox's
/// buttons): every response says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_response_may_be_framed() {
    let server = serve("framing", HttpConfig::new().without_auth()).await;
    for path in ["/inbox", "/v1/runs", "/nowhere"] {
        let (_, head, _) = request(server.addr, "GET", path, NO_HEADERS, b"").await;
        let head = head.to_ascii_lowercase();
        assert!(head.contains("x-frame-options: deny"), "{path}: {head}");
        assert!(
            head.contains("content-security-policy: frame-ancestors 'none'"),
            "{path}: {head}"
        );
    }
}

/// A query parameter the route does not have is refused, naming it: a misspelt filter
/// (`state=` for `status=`) would otherwise list every run, and a script acting on the
/// "waiting" runs would act on all of them. The audit's page is from 1 to 1,000 entries,
/// as the runs' is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_query_parameters_are_refused() {
    let server = serve("unknown-params", config()).await;
    server.runtime.submit("g", "t1", json!({})).await.unwrap();
    for (path, named) in [
        ("/v1/runs?state=waiting", "state"),
        ("/v1/threads/t1/audit?kinds=decision", "kinds"),
    ] {
        let (status, _, reply) = request(server.addr, "GET", path, &[bearer()], b"").await;
        assert_eq!(status, 400, "{path}: {reply}");
        assert!(
            is_json_error(&reply) && reply.contains(named),
            "{path}: {reply}"
        );
    }
    let path = "/v1/threads/t1/audit?limit=0";
    let (status, _, reply) = request(server.addr, "GET", path, &[bearer()], b"").await;
    assert_eq!(status, 400, "{reply}");
    assert!(reply.contains("limit must be at least 1, not 0"), "{reply}");
    let path = "/v1/threads/t1/audit?limit=100000000";
    let (status, _, reply) = request(server.addr, "GET", path, &[bearer()], b"").await;
    assert_eq!(status, 200, "{reply}");
}

/// The audit log pages as the runs do: a page that leaves entries behind gives `next`, the
/// id to pass as `after`, also when `limit` asked for more than a page holds; the last page
/// gives `null`. Paging reads every entry once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_pages_with_next() {
    let server = serve("audit-pages", config()).await;
    server.runtime.submit("g", "t1", json!({})).await.unwrap();
    for n in 0..5 {
        server.runtime.signal("t1", "note", json!(n)).await.unwrap();
    }
    let page = |after: Option<u64>, limit: usize| {
        let after = after.map_or(String::new(), |id| format!("&after={id}"));
        let path = format!("/v1/threads/t1/audit?limit={limit}{after}");
        async move {
            let (status, _, reply) = request(server.addr, "GET", &path, &[bearer()], b"").await;
            assert_eq!(status, 200, "{path}: {reply}");
            let reply: Value = serde_json::from_str(&reply).unwrap();
            let ids: Vec<u64> = (reply["entries"].as_array().unwrap().iter())
                .map(|e| e["id"].as_u64().unwrap())
                .collect();
            (ids, reply["next"].as_u64())
        }
    };
    let (all, next) = page(None, 100).await;
    assert!(all.len() >= 5, "{all:?}");
    assert_eq!(next, None, "one page holds the whole log");
    let (mut paged, mut after) = (Vec::new(), None);
    loop {
        let (ids, next) = page(after, 2).await;
        assert!(ids.len() <= 2);
        paged.extend(ids);
        match next {
            Some(id) => {
                assert_eq!(Some(&id), paged.last(), "next is the page's last id");
                after = Some(id);
            }
            None => break,
        }
    }
    assert_eq!(paged, all);
    // A page that the log fills exactly is the last.
    let (ids, next) = page(None, all.len()).await;
    assert_eq!((ids, next), (all.clone(), None));
    let (ids, next) = page(None, all.len() - 1).await;
    assert_eq!(next, ids.last().copied());
    // A limit over 1,000 gets a page of 1,000 that says there is more.
    let many = (0..1_000)
        .map(|n| {
            use loomflow::runtime::{AuditEntry, AuditKind};
            AuditEntry::new("t1", AuditKind::SignalSent, "bulk", json!({ "n": n }))
        })
        .collect();
    server.runtime.store().append_audit(many).await.unwrap();
    let (ids, next) = page(None, 5_000).await;
    assert_eq!(ids.len(), 1_000);
    assert_eq!(next, ids.last().copied());
    let (rest, next) = page(next, 5_000).await;
    assert_eq!((rest.len(), next), (all.len(), None));
}

/// A rejection without a reason is refused (400, naming `reason`): the model is told why,
/// and a blank reason tells it nothing. The call stays pending for a real decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blank_rejection_reason_is_refused() {
    let server = serve("blank-reason", config()).await;
    ask_for_refund(&server.runtime, "b1", 5).await;
    let path = "/v1/threads/b1/approvals/call_1/reject";
    let body = br#"{"reason": "  "}"#;
    let (status, _, reply) = request(server.addr, "POST", path, &[bearer()], body).await;
    assert_eq!(status, 400, "{reply}");
    assert!(reply.contains("reason"), "{reply}");
    let body = br#"{"reason": "over the limit"}"#;
    let (status, _, reply) = request(server.addr, "POST", path, &[bearer()], body).await;
    assert_eq!(status, 200, "still pending: {reply}");
}

/// A configured token read with its trailing newline (a secret file) is the token without
/// it: the request that presents the token is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_tokens_surrounding_whitespace_is_not_part_of_it() {
    let server = serve(
        "token-newline",
        HttpConfig::new().bearer_token(format!("{TOKEN}\n")),
    )
    .await;
    let (status, _, reply) = request(server.addr, "GET", "/v1/runs", &[bearer()], b"").await;
    assert_eq!(status, 200, "{reply}");
}

/// The ingress on a loopback port over a memory runtime whose pending mailbox keeps nothing
/// (`max_pending_signal_sessions(Some(0))`): what comes for a session no run of which is
/// open is dropped on arrival.
async fn serve_keeping_nothing() -> (Runtime, std::net::SocketAddr) {
    let signals = loomflow::runtime::MailboxConfig::default().max_pending_signal_sessions(Some(0));
    let runtime = Runtime::builder().signals(signals).build();
    let app = loomflow::http::router(runtime.clone(), config());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (runtime, addr)
}

/// A signal the runtime keeps nothing of (in memory, its pending mailbox turned off, and no
/// run of the thread open) is answered 503 `dropped`, not 202: a webhook sender reads any
/// 2xx as delivered and would not send it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_signal_is_not_answered_as_accepted() {
    let (runtime, addr) = serve_keeping_nothing().await;
    runtime.submit("g", "t1", json!({})).await.unwrap();
    let path = "/v1/threads/t1/signals/go";
    let (status, _, reply) = request(addr, "POST", path, &[bearer()], b"1").await;
    assert_eq!(status, 503, "{reply}");
    assert!(
        is_json_error(&reply) && reply.contains("\"dropped\""),
        "{reply}"
    );
    assert!(reply.contains("signal go for thread t1"), "{reply}");
}

/// A decision the runtime dropped on arrival is answered 503 `dropped`, as a dropped signal
/// is: not 409, which says another decision came first, and which a client does not send
/// again (the run would wait for ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_decision_is_answered_send_it_again() {
    let (runtime, addr) = serve_keeping_nothing().await;
    ask_for_refund(&runtime, "r1", 900).await;
    let path = "/v1/threads/r1/approvals/call_1/approve";
    let (status, _, reply) = request(addr, "POST", path, &[bearer()], b"{}").await;
    assert_eq!(status, 503, "{reply}");
    assert!(
        is_json_error(&reply) && reply.contains("\"dropped\""),
        "{reply}"
    );
    assert_eq!(runtime.pending_approvals("r1").await.unwrap().len(), 1);
}
