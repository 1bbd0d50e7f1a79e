//! The HTTP ingress on loopback, as a web handler or a webhook sender meets it: every
//! refusal (auth, signatures, replays, limits, names, unknown threads), 1,000 concurrent
//! signal POSTs each delivered once, a replayed webhook delivered once, approvals over the
//! API, and the inbox page's forms with their cross-site protection.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/held_run.rs"]
mod held_run;
#[path = "support/http_harness.rs"]
mod http_harness;
#[path = "support/refunds.rs"]
mod refunds;

use std::collections::BTreeSet;
use std::time::Duration;

use held_run::HeldRun;
use http_harness::{NO_HEADERS, request, serve, try_request};
use loomflow::agent::Agent;
use loomflow::http::{HttpConfig, router, sign, signature_header};
use loomflow::model::{ModelResponse, ScriptedModel, ToolCall};
use loomflow::prelude::*;
use loomflow::tool::{SignalApprover, ToolHost};
use refunds::{agent, ask_for_refund};
use serde_json::Value;

const TOKEN: &str = "s3cret-token";
const GITHUB: &str = "github-hook-secret";
const SIGNING: &str = "signing-secret";

/// The inbox's form secret the test's replicas share.
const FORM_SECRET: &str = "replicas-share-this";

fn config() -> HttpConfig {
    HttpConfig::new()
        .bearer_token(TOKEN)
        .github_secret(GITHUB)
        .signing_secret(SIGNING)
}

fn bearer() -> (&'static str, String) {
    ("Authorization", format!("Bearer {TOKEN}"))
}

fn json_type() -> (&'static str, String) {
    ("Content-Type", "application/json".to_owned())
}

fn error_code(body: &str) -> String {
    let value: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {body}"));
    value["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_is_a_json_error_with_a_code() {
    let server = serve("refusals", config()).await;
    server
        .runtime
        .submit("refund", "ord_1", json!({}))
        .await
        .unwrap();
    let path = "/v1/threads/ord_1/signals/review";
    let body = br#"{"approved": true}"#;

    let (status, head, reply) = request(server.addr, "POST", path, &[json_type()], body).await;
    assert_eq!((status, error_code(&reply).as_str()), (401, "unauthorized"));
    assert!(
        head.to_lowercase().contains("www-authenticate: bearer"),
        "{head}"
    );
    let wrong = ("Authorization", "Bearer s3cret-tokem".to_owned());
    let (status, _, reply) = request(server.addr, "POST", path, &[wrong], body).await;
    assert_eq!((status, error_code(&reply).as_str()), (401, "unauthorized"));

    let reserved = "/v1/threads/ord_1/signals/loomflow:approval:x";
    let (status, _, reply) = request(server.addr, "POST", reserved, &[bearer()], body).await;
    assert_eq!(
        (status, error_code(&reply).as_str()),
        (400, "reserved_name")
    );

    let unknown = "/v1/threads/nobody/signals/review";
    let (status, _, reply) = request(server.addr, "POST", unknown, &[bearer()], body).await;
    assert_eq!((status, error_code(&reply).as_str()), (404, "not_found"));

    let big = format!("\"{}\"", "x".repeat(5_000));
    let (status, _, reply) = request(server.addr, "POST", path, &[bearer()], big.as_bytes()).await;
    assert_eq!(
        (status, error_code(&reply).as_str()),
        (413, "payload_too_large")
    );
    // Says what was too big, and the limit.
    assert!(reply.contains("signal review for session ord_1"), "{reply}");
    assert!(reply.contains("limit of 4096 bytes"), "{reply}");
    // A body is read up to three times the payload limit, and some: past it, it is not.
    let huge = format!("\"{}\"", "x".repeat(80_000));
    let (status, _, reply) = request(server.addr, "POST", path, &[bearer()], huge.as_bytes()).await;
    assert_eq!(
        (status, error_code(&reply).as_str()),
        (413, "payload_too_large")
    );
    assert!(reply.contains("signal review for thread ord_1"), "{reply}");
    assert!(reply.contains("payloads of at most 4096 bytes"), "{reply}");
    // Pretty JSON is measured as the payload it is, not by its spaces.
    let pretty = serde_json::to_string_pretty(&json!({"lines": vec![[1, 2, 3]; 200]})).unwrap();
    assert!(pretty.len() > 4096, "{}", pretty.len());
    let (status, _, reply) =
        request(server.addr, "POST", path, &[bearer()], pretty.as_bytes()).await;
    assert_eq!(status, 202, "{reply}");

    // Nested past serde_json's 128 levels, as deep as a payload may be.
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    let (status, _, reply) = request(server.addr, "POST", path, &[bearer()], deep.as_bytes()).await;
    assert_eq!(status, 202, "{reply}");

    let (status, _, reply) = request(server.addr, "POST", path, &[bearer()], b"{nope").await;
    assert_eq!((status, error_code(&reply).as_str()), (400, "bad_request"));

    let forged = (
        "X-Hub-Signature-256",
        format!("sha256={}", sign("wrong", &[body])),
    );
    let (status, _, reply) = request(server.addr, "POST", path, &[forged], body).await;
    assert_eq!(
        (status, error_code(&reply).as_str()),
        (401, "bad_signature")
    );

    // A correctly signed request captured an hour ago is refused: the time is signed too.
    let old = now_secs() - 3_600;
    let stale = signature_header(SIGNING, old, path, "d-old", body);
    let replayed = [
        ("X-Loomflow-Signature", stale),
        ("X-Loomflow-Delivery", "d-old".to_owned()),
    ];
    let (status, _, reply) = request(server.addr, "POST", path, &replayed, body).await;
    assert_eq!(
        (status, error_code(&reply).as_str()),
        (401, "bad_signature")
    );

    // One signed an hour ahead (captured from a sender whose clock runs fast, to be replayed
    // once its delivery id is forgotten) is refused too; a minute's drift is not.
    let ahead = signature_header(SIGNING, now_secs() + 3_600, path, "d-ahead", body);
    let replayed = [
        ("X-Loomflow-Signature", ahead),
        ("X-Loomflow-Delivery", "d-ahead".to_owned()),
    ];
    let (status, _, reply) = request(server.addr, "POST", path, &replayed, body).await;
    assert_eq!(
        (status, error_code(&reply).as_str()),
        (401, "bad_signature"),
        "{reply}"
    );
    assert!(reply.contains("ahead of this server's clock"), "{reply}");
    let drifted = signature_header(SIGNING, now_secs() + 30, path, "d-drift", body);
    let drifted = [
        ("X-Loomflow-Signature", drifted),
        ("X-Loomflow-Delivery", "d-drift".to_owned()),
    ];
    let (status, _, reply) = request(server.addr, "POST", path, &drifted, body).await;
    assert_eq!(status, 202, "{reply}");

    let (status, _, reply) = request(server.addr, "GET", "/v1/nothing", &[bearer()], b"").await;
    assert_eq!((status, error_code(&reply).as_str()), (404, "not_found"));
    let (status, _, reply) = request(
        server.addr,
        "GET",
        "/v1/runs?status=sleepy",
        &[bearer()],
        b"",
    )
    .await;
    assert_eq!((status, error_code(&reply).as_str()), (400, "bad_request"));
    let (status, _, _) = request(server.addr, "GET", "/v1/runs", NO_HEADERS, b"").await;
    assert_eq!(status, 401);

    // And what is accepted: a fresh signature, a bearer token.
    let now = now_secs();
    let fresh = signature_header(SIGNING, now, path, "d-1", body);
    let signed = [
        ("X-Loomflow-Signature", fresh),
        ("X-Loomflow-Delivery", "d-1".to_owned()),
    ];
    let (status, _, reply) = request(server.addr, "POST", path, &signed, body).await;
    assert_eq!(status, 202, "{reply}");
    let (status, _, reply) =
        request(server.addr, "GET", "/v1/threads/ord_1", &[bearer()], b"").await;
    assert_eq!(status, 200, "{reply}");
    let shown: Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(shown["run"]["state"], "queued");
    let (status, _, reply) = request(
        server.addr,
        "GET",
        "/v1/runs?status=queued",
        &[bearer()],
        b"",
    )
    .await;
    assert_eq!(status, 200);
    let listed: Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(listed["runs"][0]["thread"], "ord_1");
}

/// Secrets rotate: a request signed with any configured secret is taken, and a header may
/// carry a `v1=` for each secret its sender signs with; a delivery id that is not ASCII is
/// told so, not called missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_secrets_rotate() {
    let rotating = config()
        .signing_secret("the-old-secret")
        .github_secret("the-old-hook-secret");
    let server = serve("rotation", rotating).await;
    server
        .runtime
        .submit("refund", "ord_1", json!({}))
        .await
        .unwrap();
    let path = "/v1/threads/ord_1/signals/review";
    let body = br#"{"approved": true}"#;
    let signed = |header: String, delivery: &str| {
        [
            ("X-Loomflow-Signature", header),
            ("X-Loomflow-Delivery", delivery.to_owned()),
        ]
    };
    for (secret, delivery) in [("the-old-secret", "d-old"), (SIGNING, "d-new")] {
        let header = signature_header(secret, now_secs(), path, delivery, body);
        let (status, _, reply) =
            request(server.addr, "POST", path, &signed(header, delivery), body).await;
        assert_eq!(status, 202, "{secret}: {reply}");
    }
    // Two `v1=`: one from a secret the server no longer has, one it has.
    let now = now_secs();
    let retired = signature_header("retired", now, path, "d-both", body);
    let current = signature_header(SIGNING, now, path, "d-both", body);
    let current_mac = current.split_once(",v1=").unwrap().1;
    let both = format!("{retired},v1={current_mac}");
    let (status, _, reply) = request(
        server.addr,
        "POST",
        path,
        &signed(both.clone(), "d-both"),
        body,
    )
    .await;
    assert_eq!(status, 202, "{reply}");
    // More signatures than a rotation needs are refused before anything is hashed: each
    // one cost an HMAC over the whole body.
    let many = format!("{both}{}", format!(",v1={current_mac}").repeat(4));
    let (status, _, reply) =
        request(server.addr, "POST", path, &signed(many, "d-many"), body).await;
    assert_eq!(
        (status, error_code(&reply).as_str()),
        (401, "bad_signature")
    );
    assert!(reply.contains("more than 4 v1="), "{reply}");
    let header = signature_header("retired", now, path, "d-gone", body);
    let (status, _, reply) =
        request(server.addr, "POST", path, &signed(header, "d-gone"), body).await;
    assert_eq!(
        (status, error_code(&reply).as_str()),
        (401, "bad_signature")
    );
    for secret in ["the-old-hook-secret", GITHUB] {
        let hub = (
            "X-Hub-Signature-256",
            format!("sha256={}", sign(secret, &[body])),
        );
        let (status, _, reply) = request(server.addr, "POST", path, &[hub], body).await;
        assert_eq!(status, 202, "{secret}: {reply}");
    }
    let header = signature_header(SIGNING, now, path, "dé", body);
    let raw = [
        ("X-Loomflow-Signature", header.into_bytes()),
        ("X-Loomflow-Delivery", "dé".as_bytes().to_vec()),
    ];
    let (status, _, reply) = try_request(server.addr, "POST", path, &raw, body)
        .await
        .unwrap();
    assert_eq!(
        (status, error_code(&reply).as_str()),
        (401, "bad_signature")
    );
    assert!(reply.contains("X-Loomflow-Delivery is not text"), "{reply}");
}

/// `DELETE /v1/threads/{thread}` deletes a queued run and the signal sent to it, says what
/// it deleted, and is refused (409) while a run executes the thread; a thread with nothing to
/// delete is 404; a caller without the token learns nothing (401).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_is_deleted_over_http_unless_a_run_executes_it() {
    let server = serve("delete", config()).await;
    server
        .runtime
        .submit("g", "ord_5", json!({}))
        .await
        .unwrap();
    server.runtime.signal("ord_5", "review", 1).await.unwrap();
    let path = "/v1/threads/ord_5";
    let (status, _, _) = request(server.addr, "DELETE", path, NO_HEADERS, b"").await;
    assert_eq!(status, 401);
    let (status, _, reply) = request(server.addr, "DELETE", path, &[bearer()], b"").await;
    assert_eq!(status, 200, "{reply}");
    let deleted: Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(deleted["thread"], "ord_5");
    assert_eq!(deleted["deleted"]["signals"], 1, "{reply}");
    let (status, _, _) = request(server.addr, "GET", path, &[bearer()], b"").await;
    assert_eq!(status, 404, "the run is gone");
    // Deleted already, or never there: nothing reads as deleted.
    for gone in [path, "/v1/threads/ord_typo"] {
        let (status, _, reply) = request(server.addr, "DELETE", gone, &[bearer()], b"").await;
        assert_eq!((status, error_code(&reply).as_str()), (404, "not_found"));
        assert!(reply.contains(&gone["/v1/threads/".len()..]), "{reply}");
    }

    let held = HeldRun::start(&server.runtime, "busy", 0).await;
    let busy = "/v1/threads/busy";
    let (status, _, reply) = request(server.addr, "DELETE", busy, &[bearer()], b"").await;
    assert_eq!((status, error_code(&reply).as_str()), (409, "conflict"));
    assert_eq!(held.finish().await, 1);
    let (status, _, reply) = request(server.addr, "DELETE", busy, &[bearer()], b"").await;
    assert_eq!(status, 200, "{reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_posts_are_each_delivered_once() {
    let server = serve("thousand", config()).await;
    server.runtime.submit("g", "busy", json!({})).await.unwrap();
    // All at once. A connection the loopback resets under the burst is retried with the same
    // key, as a client should: the key makes the retry one signal, delivered or not before.
    let posts = (0..1_000).map(|i| {
        let addr = server.addr;
        tokio::spawn(async move {
            let key = ("Idempotency-Key", format!("k{i}"));
            let body = i.to_string();
            for _attempt in 0..20 {
                match try_request(
                    addr,
                    "POST",
                    "/v1/threads/busy/signals/n",
                    &[bearer(), key.clone()],
                    body.as_bytes(),
                )
                .await
                {
                    Ok((status, _, reply)) => {
                        assert!(status == 202 || status == 200, "{status} {reply}");
                        return;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
            panic!("post {i} never got through");
        })
    });
    for post in futures_util::future::join_all(posts).await {
        post.unwrap();
    }
    let mut seen = BTreeSet::new();
    for _ in 0..1_000 {
        let n: u32 = server
            .runtime
            .wait_for_signal("busy", "n", Some(Duration::from_secs(5)))
            .await
            .unwrap();
        assert!(seen.insert(n), "{n} delivered twice");
    }
    assert_eq!(seen.len(), 1_000);
    assert_eq!(
        server.runtime.poll_signal::<u32>("busy", "n").unwrap(),
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_github_webhook_is_delivered_once() {
    let server = serve("github", config()).await;
    server.runtime.submit("g", "pr-7", json!({})).await.unwrap();
    let body = br#"{"action": "closed", "pull_request": {"merged": true}}"#;
    let headers = [
        (
            "X-Hub-Signature-256",
            format!("sha256={}", sign(GITHUB, &[body])),
        ),
        ("X-GitHub-Delivery", "72d3162e-cc78-11e3".to_owned()),
        json_type(),
    ];
    let path = "/v1/threads/pr-7/signals/pr_merged";
    let (first, _, reply) = request(server.addr, "POST", path, &headers, body).await;
    assert_eq!(first, 202, "{reply}");
    let (again, _, reply) = request(server.addr, "POST", path, &headers, body).await;
    assert_eq!(again, 200, "{reply}");
    assert!(reply.contains("duplicate"), "{reply}");
    let event: Value = server
        .runtime
        .wait_for_signal("pr-7", "pr_merged", Some(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(event["pull_request"]["merged"], true);
    assert_eq!(
        server
            .runtime
            .poll_signal::<Value>("pr-7", "pr_merged")
            .unwrap(),
        None
    );
}

/// GitHub's defaults: the `ping` it sends as the webhook is made wakes nothing, and an event
/// sent as a form (`payload=<JSON>`, GitHub's default content type) arrives as its JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_github_ping_wakes_nothing_and_a_form_delivery_arrives_as_json() {
    let server = serve("github-form", config()).await;
    server.runtime.submit("g", "pr-8", json!({})).await.unwrap();
    let path = "/v1/threads/pr-8/signals/pr_merged";
    let github = |event: &str, delivery: &str, body: &[u8], content_type: &str| {
        [
            (
                "X-Hub-Signature-256",
                format!("sha256={}", sign(GITHUB, &[body])),
            ),
            ("X-GitHub-Event", event.to_owned()),
            ("X-GitHub-Delivery", delivery.to_owned()),
            ("Content-Type", content_type.to_owned()),
        ]
    };
    let ping = br#"{"zen": "Keep it logically awesome.", "hook_id": 1}"#;
    let headers = github("ping", "d-ping", ping, "application/json");
    let (status, _, reply) = request(server.addr, "POST", path, &headers, ping).await;
    assert_eq!(status, 200, "{reply}");
    assert!(reply.contains("\"delivery\":\"ping\""), "{reply}");
    let nothing = server.runtime.poll_signal::<Value>("pr-8", "pr_merged");
    assert_eq!(nothing.unwrap(), None, "a ping is no event for the run");

    let form = b"payload=%7B%22action%22%3A%22closed%22%2C%22merged%22%3Atrue%7D";
    let form_type = "application/x-www-form-urlencoded";
    let headers = github("pull_request", "d-form", form, form_type);
    let (status, _, reply) = request(server.addr, "POST", path, &headers, form).await;
    assert_eq!(status, 202, "{reply}");
    let event = server.runtime.poll_signal::<Value>("pr-8", "pr_merged");
    assert_eq!(
        event.unwrap(),
        Some(json!({"action": "closed", "merged": true}))
    );

    let bad = b"payload=not-json";
    let headers = github("pull_request", "d-bad", bad, form_type);
    let (status, _, reply) = request(server.addr, "POST", path, &headers, bad).await;
    assert_eq!(
        (status, error_code(&reply)),
        (400, "bad_request".to_owned()),
        "{reply}"
    );
}

/// A signed request's delivery id is its idempotency key: the same request replayed inside
/// the window with a key of the replayer's choosing is still one signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_request_replayed_under_another_key_is_delivered_once() {
    let server = serve("signed-replay", config()).await;
    server
        .runtime
        .submit("g", "ord_9", json!({}))
        .await
        .unwrap();
    let path = "/v1/threads/ord_9/signals/review";
    let body = br#"{"approved": true}"#;
    let signed = vec![
        (
            "X-Loomflow-Signature",
            signature_header(SIGNING, now_secs(), path, "d-9", body),
        ),
        ("X-Loomflow-Delivery", "d-9".to_owned()),
    ];
    let (first, _, reply) = request(server.addr, "POST", path, &signed, body).await;
    assert_eq!(first, 202, "{reply}");
    for (header, key) in [
        ("Idempotency-Key", "fresh-1"),
        ("X-GitHub-Delivery", "fresh-2"),
    ] {
        let mut replay = signed.clone();
        replay.push((header, key.to_owned()));
        let (status, _, reply) = request(server.addr, "POST", path, &replay, body).await;
        assert_eq!(status, 200, "replayed with {header}: {reply}");
        assert!(reply.contains("duplicate"), "{reply}");
    }
    let approved: Value = server
        .runtime
        .wait_for_signal("ord_9", "review", Some(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(approved["approved"], true);
    assert_eq!(
        server
            .runtime
            .poll_signal::<Value>("ord_9", "review")
            .unwrap(),
        None,
        "delivered once"
    );
}

/// An empty webhook secret signs nothing: a request signed with the empty key, as anyone
/// can sign it, is refused (401) like one with no signature, over GitHub's scheme and
/// loomflow's. A window longer than delivery ids are remembered is cut to an hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_secret_signs_nothing() {
    let config = HttpConfig::new()
        .bearer_token(TOKEN)
        .github_secret("")
        .signing_secret("");
    let server = serve("empty-secret", config).await;
    server.runtime.submit("g", "pr-8", json!({})).await.unwrap();
    let path = "/v1/threads/pr-8/signals/pr_merged";
    let body = br#"{"merged": true}"#;
    let github = [
        (
            "X-Hub-Signature-256",
            format!("sha256={}", sign("", &[body])),
        ),
        ("X-GitHub-Delivery", "d-1".to_owned()),
    ];
    let loomflow = [
        (
            "X-Loomflow-Signature",
            signature_header("", now_secs(), path, "d-2", body),
        ),
        ("X-Loomflow-Delivery", "d-2".to_owned()),
    ];
    for headers in [&github, &loomflow] {
        let (status, _, reply) = request(server.addr, "POST", path, headers, body).await;
        assert_eq!(status, 401, "{reply}");
    }
    assert_eq!(
        server
            .runtime
            .poll_signal::<Value>("pr-8", "pr_merged")
            .unwrap(),
        None
    );
    let (status, _, reply) = request(server.addr, "POST", path, &[bearer()], body).await;
    assert_eq!(status, 202, "the token still works: {reply}");

    let long = HttpConfig::new().replay_window(Duration::from_secs(7_200));
    assert!(
        // An hour, less the minute a signed time may be ahead of the server's clock.
        format!("{long:?}").contains("replay_window: 3540s"),
        "{long:?}"
    );
}

/// Webhook secrets read with a trailing newline (a secret file) are the secrets without it,
/// as a bearer token is: GitHub's signature over the body, and loomflow's, are accepted. A
/// secret of whitespace only is as empty: a request signed with nothing is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secrets_surrounding_whitespace_is_not_part_of_it() {
    let config = HttpConfig::new()
        .bearer_token(TOKEN)
        .github_secret(format!("{GITHUB}\n"))
        .signing_secret(format!(" {SIGNING}\r\n"));
    let server = serve("secret-newline", config).await;
    server.runtime.submit("g", "pr-9", json!({})).await.unwrap();
    let path = "/v1/threads/pr-9/signals/pr_merged";
    let body = br#"{"merged": true}"#;
    let github = [
        (
            "X-Hub-Signature-256",
            format!("sha256={}", sign(GITHUB, &[body])),
        ),
        ("X-GitHub-Delivery", "d-1".to_owned()),
    ];
    let loomflow = [
        (
            "X-Loomflow-Signature",
            // The sender read the same file, newline included.
            signature_header(&format!("{SIGNING}\n"), now_secs(), path, "d-2", body),
        ),
        ("X-Loomflow-Delivery", "d-2".to_owned()),
    ];
    for headers in [&github, &loomflow] {
        let (status, _, reply) = request(server.addr, "POST", path, headers, body).await;
        assert_eq!(status, 202, "{reply}");
    }

    let blank = HttpConfig::new().bearer_token(TOKEN).github_secret(" \n");
    let server = serve("secret-blank", blank).await;
    server.runtime.submit("g", "pr-9", json!({})).await.unwrap();
    let unsigned = [
        (
            "X-Hub-Signature-256",
            format!("sha256={}", sign("", &[body])),
        ),
        ("X-GitHub-Delivery", "d-3".to_owned()),
    ];
    let (status, _, reply) = request(server.addr, "POST", path, &unsigned, body).await;
    assert_eq!(status, 401, "{reply}");
}

/// A reserved name is refused (400) whatever the thread, one that never ran included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserved_name_is_refused_on_any_thread() {
    let server = serve("reserved-any-thread", config()).await;
    let path = "/v1/threads/never-ran/signals/loomflow%3Aresume";
    let (status, _, reply) = request(server.addr, "POST", path, &[bearer()], b"1").await;
    assert_eq!(status, 400, "{reply}");
    assert_eq!(error_code(&reply), "reserved_name");
}

/// A caller with neither a token nor a signature is told that, and nothing about its body,
/// the path or the method.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unauthenticated_caller_learns_only_that() {
    let server = serve("unauthenticated", config()).await;
    server
        .runtime
        .submit("g", "ord_1", json!({}))
        .await
        .unwrap();
    let path = "/v1/threads/ord_1/signals/review";
    let big = format!("\"{}\"", "x".repeat(5_000));
    let cases: [(&str, &str, &[u8]); 4] = [
        ("POST", path, big.as_bytes()),
        ("PUT", path, b"{}"),
        ("DELETE", "/v1/runs", b""),
        ("GET", "/v1/nothing", b""),
    ];
    for (method, path, body) in cases {
        let (status, _, reply) = request(server.addr, method, path, NO_HEADERS, body).await;
        assert_eq!(
            (status, error_code(&reply).as_str()),
            (401, "unauthorized"),
            "{method} {path}"
        );
        let (status, _, reply) = request(server.addr, method, path, &[bearer()], body).await;
        let expected = match method {
            "POST" => 413,
            "GET" => 404,
            _ => 405,
        };
        assert_eq!(status, expected, "{method} {path} with a token: {reply}");
    }
    // A signature header that is malformed, stale or of a kind not configured is refused
    // as such before the body is looked at, whatever its size.
    let stale = signature_header(SIGNING, now_secs() - 3_600, path, "d-old", big.as_bytes());
    let junk: [&[(&str, String)]; 3] = [
        &[("X-Loomflow-Signature", "junk".to_owned())],
        &[("X-Hub-Signature-256", "sha256=zz".to_owned())],
        &[
            ("X-Loomflow-Signature", stale),
            ("X-Loomflow-Delivery", "d-old".to_owned()),
        ],
    ];
    for headers in junk {
        let (status, _, reply) = request(server.addr, "POST", path, headers, big.as_bytes()).await;
        assert_eq!(
            (status, error_code(&reply).as_str()),
            (401, "bad_signature"),
            "{headers:?}: {reply}"
        );
    }
}

/// `GET /v1/runs` hands out a cursor with each full page; following it lists every run
/// once, and the last page says there is none after it. The cursor is made of characters a
/// URL carries as they are, so that pasted into the query as it is it reads back the same,
/// whatever the threads are called (`+` is not a space, `&` does not end it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_listed_a_page_at_a_time() {
    let server = serve("paging", config()).await;
    let threads: BTreeSet<String> = (0..7).map(|i| format!("paged:{i}+a&b=c")).collect();
    for thread in &threads {
        server
            .runtime
            .submit("paged", thread, json!({}))
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut path = "/v1/runs?graph=paged&limit=3".to_owned();
    for _ in 0..threads.len() {
        let (status, _, reply) = request(server.addr, "GET", &path, &[bearer()], b"").await;
        assert_eq!(status, 200, "{path}: {reply}");
        let page: Value = serde_json::from_str(&reply).unwrap();
        let runs = page["runs"].as_array().unwrap();
        seen.extend(
            runs.iter()
                .map(|r| r["thread"].as_str().unwrap().to_owned()),
        );
        match page["next"].as_str() {
            Some(next) => {
                assert_eq!(runs.len(), 3, "only a full page has a next: {reply}");
                let unreserved = |c: char| c.is_ascii_alphanumeric() || "-._~".contains(c);
                assert!(next.chars().all(unreserved), "{next}");
                path = format!("/v1/runs?graph=paged&limit=3&after={next}");
            }
            None => break,
        }
    }
    assert_eq!(seen.len(), threads.len(), "each run once: {seen:?}");
    assert_eq!(seen.into_iter().collect::<BTreeSet<_>>(), threads);
    // A page the runs fill exactly is the last, and says so; one short of them is not.
    for (limit, last) in [(7, true), (6, false)] {
        let path = format!("/v1/runs?graph=paged&limit={limit}");
        let (_, _, reply) = request(server.addr, "GET", &path, &[bearer()], b"").await;
        let page: Value = serde_json::from_str(&reply).unwrap();
        assert_eq!(page["runs"].as_array().unwrap().len(), limit);
        assert_eq!(page["next"].is_null(), last, "limit {limit}: {reply}");
    }
    let (status, _, reply) = request(
        server.addr,
        "GET",
        "/v1/runs?after=yesterday",
        &[bearer()],
        b"",
    )
    .await;
    assert_eq!((status, error_code(&reply).as_str()), (400, "bad_request"));
    assert!(reply.contains("yesterday"), "names the bad cursor: {reply}");
    // A cursor as `RunCursor` displays it (the CLI's), encoded, is taken too.
    let path = format!("/v1/runs?graph=paged&after={}%3Apaged%3A9", u64::MAX);
    let (status, _, reply) = request(server.addr, "GET", &path, &[bearer()], b"").await;
    assert_eq!(status, 200, "{reply}");
    let page: Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(
        page["runs"].as_array().unwrap().len(),
        threads.len(),
        "{reply}"
    );
}

/// A cookie left from a token since rotated out does not shut out a caller who sends a good
/// token in its `Authorization` header; without one, the stale cookie is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_inbox_cookie_does_not_hide_a_good_header() {
    let server = serve("inbox-stale-cookie", config()).await;
    let stale = ("Cookie", "loomflow_inbox=rotated-out".to_owned());
    let (status, _, page) = request(
        server.addr,
        "GET",
        "/inbox",
        &[stale.clone(), bearer()],
        b"",
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let (status, _, _) = request(server.addr, "GET", "/inbox", &[stale], b"").await;
    assert_eq!(status, 401);
}

/// A token with the characters base64 uses logs in to the inbox when pasted as it is: a
/// `+` in the query is a `+`, not a space.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inbox_token_with_a_plus_logs_in_as_pasted() {
    let token = "k+9/Yw==";
    let server = serve("inbox-plus", HttpConfig::new().bearer_token(token)).await;
    for query in ["k+9/Yw==", "k%2B9%2FYw%3D%3D"] {
        let path = format!("/inbox?token={query}");
        let (status, head, _) = request(server.addr, "GET", &path, NO_HEADERS, b"").await;
        assert_eq!(status, 303, "{path}: {head}");
        let cookie = head
            .lines()
            .find_map(|l| l.strip_prefix("set-cookie: "))
            .unwrap_or_else(|| panic!("no cookie: {head}"));
        let cookie = ("Cookie", cookie.split(';').next().unwrap().to_owned());
        let (status, _, page) = request(server.addr, "GET", "/inbox", &[cookie], b"").await;
        assert_eq!(status, 200, "{path}: {page}");
    }
    let (status, _, _) = request(
        server.addr,
        "GET",
        "/inbox?token=k%209%2FYw==",
        NO_HEADERS,
        b"",
    )
    .await;
    assert_eq!(status, 401, "a token that is not the one configured");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_are_decided_over_the_api() {
    let server = serve("approvals", config()).await;
    ask_for_refund(&server.runtime, "a1", 1299).await;
    ask_for_refund(&server.runtime, "a2", 1299).await;
    let (status, _, reply) = request(server.addr, "GET", "/v1/threads/a1", &[bearer()], b"").await;
    assert_eq!(status, 200);
    let shown: Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(shown["approvals"][0]["arguments"]["cents"], 1299);

    let missing = "/v1/threads/a1/approvals/call_9/approve";
    let (status, _, reply) = request(server.addr, "POST", missing, &[bearer()], b"").await;
    assert_eq!((status, error_code(&reply).as_str()), (404, "not_found"));
    let reject = "/v1/threads/a1/approvals/call_1/reject";
    let (status, _, reply) = request(server.addr, "POST", reject, &[bearer()], b"{}").await;
    assert_eq!((status, error_code(&reply).as_str()), (400, "bad_request"));
    // A decision for another request than the one that waits (as listed earlier) is refused.
    let stale = br#"{"reason": "no receipt", "requested_at_ms": 1}"#;
    let (status, _, reply) = request(server.addr, "POST", reject, &[bearer()], stale).await;
    assert_eq!(
        (status, error_code(&reply).as_str()),
        (409, "conflict"),
        "{reply}"
    );
    let (status, _, reply) = request(
        server.addr,
        "POST",
        reject,
        &[bearer()],
        br#"{"reason": "no receipt", "by": "grace"}"#,
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    let approve = "/v1/threads/a2/approvals/call_1/approve";
    let (status, _, reply) = request(
        server.addr,
        "POST",
        approve,
        &[bearer()],
        br#"{"arguments": {"order": "ord_42", "cents": 700}}"#,
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    // A second decision while the first waits to be carried on is refused, and says so.
    let (status, _, reply) = request(server.addr, "POST", approve, &[bearer()], b"").await;
    assert_eq!((status, error_code(&reply).as_str()), (409, "conflict"));

    let refused = agent(&server.runtime, vec![ModelResponse::text("No.")])
        .resume("a1")
        .await
        .unwrap();
    assert!(
        serde_json::to_string(&refused.messages)
            .unwrap()
            .contains("no receipt")
    );
    let paid = agent(&server.runtime, vec![ModelResponse::text("Done.")])
        .resume("a2")
        .await
        .unwrap();
    assert!(
        serde_json::to_string(&paid.messages)
            .unwrap()
            .contains("refunded 700 cents on ord_42")
    );
    // Carried on to its end: nothing is pending under that id any more, and the reply says
    // the run has ended.
    let (status, _, reply) = request(server.addr, "POST", approve, &[bearer()], b"").await;
    assert_eq!((status, error_code(&reply).as_str()), (409, "conflict"));
    assert!(reply.contains("its run has ended (completed)"), "{reply}");

    // The audit log, over the API: who decided, and what ran.
    let path = "/v1/threads/a1/audit?kind=decision";
    let (status, _, reply) = request(server.addr, "GET", path, &[bearer()], b"").await;
    assert_eq!(status, 200, "{reply}");
    let log: Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(log["entries"][0]["actor"], "grace");
    assert_eq!(log["entries"][0]["detail"]["reason"], "no receipt");
    let path = "/v1/threads/a2/audit?kind=tool_call";
    let (_, _, reply) = request(server.addr, "GET", path, &[bearer()], b"").await;
    let log: Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(log["entries"][0]["detail"]["arguments"]["cents"], 700);
    let (_, _, reply) = request(server.addr, "GET", "/v1/threads/a2/audit", &[bearer()], b"").await;
    let log: Value = serde_json::from_str(&reply).unwrap();
    let decision = log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "decision")
        .unwrap();
    assert_eq!(decision["actor"], "http", "no name given: the API says so");
    let path = "/v1/threads/a2/audit?kind=nonsense";
    let (status, _, reply) = request(server.addr, "GET", path, &[bearer()], b"").await;
    assert_eq!((status, error_code(&reply).as_str()), (400, "bad_request"));
    let (status, _, _) = request(server.addr, "GET", "/v1/threads/a2/audit", NO_HEADERS, b"").await;
    assert_eq!(status, 401);
}

/// The value of the first `name="csrf"` field in the page.
fn csrf_of(page: &str) -> String {
    field_of(page, "csrf")
}

/// Logs in to the inbox at `addr`: its cookie, and the page it then shows.
async fn inbox_page(addr: std::net::SocketAddr) -> ((&'static str, String), String) {
    let login = format!("/inbox?token={TOKEN}");
    let (_, head, _) = request(addr, "GET", &login, NO_HEADERS, b"").await;
    let cookie = head
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .unwrap();
    let cookie = ("Cookie", cookie.split(';').next().unwrap().to_owned());
    let (_, _, page) = request(addr, "GET", "/inbox", std::slice::from_ref(&cookie), b"").await;
    (cookie, page)
}

/// Approves, with the page's first form, `call_1` of `thread` (form-encoded); the status
/// and head of the answer.
async fn approve_from(
    addr: std::net::SocketAddr,
    (cookie, page): &((&'static str, String), String),
    thread: &str,
) -> (u16, String) {
    let form = format!(
        "csrf={}&thread={thread}&call_id=call_1&requested_at_ms={}&decision=approve",
        csrf_of(page),
        field_of(page, "requested_at_ms")
    );
    let form_type = (
        "Content-Type",
        "application/x-www-form-urlencoded".to_owned(),
    );
    let headers = [form_type, cookie.clone()];
    let (status, head, _) = request(addr, "POST", "/inbox/decide", &headers, form.as_bytes()).await;
    (status, head)
}

/// The value of the first field `name` in the page.
fn field_of(page: &str, name: &str) -> String {
    let field = format!("name=\"{name}\" value=\"");
    let at = page.find(&field).unwrap() + field.len();
    page[at..].split('"').next().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_lists_pending_calls_and_its_forms_refuse_cross_site_posts() {
    let server = serve("inbox", config().inbox_form_secret(FORM_SECRET)).await;
    ask_for_refund(&server.runtime, "i1", 1299).await;

    let (status, _, _) = request(server.addr, "GET", "/inbox", NO_HEADERS, b"").await;
    assert_eq!(status, 401, "the inbox needs the token");
    let (status, head, _) = request(
        server.addr,
        "GET",
        &format!("/inbox?token={TOKEN}"),
        NO_HEADERS,
        b"",
    )
    .await;
    assert_eq!(status, 303, "{head}");
    let cookie = head
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .unwrap_or_else(|| panic!("no cookie: {head}"));
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"),
        "{cookie}"
    );
    assert!(
        !cookie.contains("Secure"),
        "served over plain HTTP: {cookie}"
    );
    // Behind a proxy that ends TLS, the cookie goes back over HTTPS only.
    let (_, proxied, _) = request(
        server.addr,
        "GET",
        &format!("/inbox?token={TOKEN}"),
        &[("X-Forwarded-Proto", "https")],
        b"",
    )
    .await;
    assert!(proxied.contains("; Secure"), "{proxied}");
    let cookie = ("Cookie", cookie.split(';').next().unwrap().to_owned());

    let (status, _, page) = request(
        server.addr,
        "GET",
        "/inbox",
        std::slice::from_ref(&cookie),
        b"",
    )
    .await;
    assert_eq!(status, 200, "{page}");
    for expected in ["refund", "i1", "&quot;cents&quot;: 1299", "call_1"] {
        assert!(
            page.contains(expected),
            "{expected} missing from the page:\n{page}"
        );
    }
    let asked = field_of(&page, "requested_at_ms");
    let form = |csrf: &str| {
        format!("csrf={csrf}&thread=i1&call_id=call_1&requested_at_ms={asked}&decision=approve")
    };
    let form_type = (
        "Content-Type",
        "application/x-www-form-urlencoded".to_owned(),
    );

    // A form posted from elsewhere: no cookie, or no matching token.
    let (status, _, _) = request(
        server.addr,
        "POST",
        "/inbox/decide",
        std::slice::from_ref(&form_type),
        form(&csrf_of(&page)).as_bytes(),
    )
    .await;
    assert_eq!(status, 401);
    let (status, _, reply) = request(
        server.addr,
        "POST",
        "/inbox/decide",
        &[form_type.clone(), cookie.clone()],
        form("forged").as_bytes(),
    )
    .await;
    assert_eq!((status, error_code(&reply).as_str()), (403, "bad_form"));
    // A page shown for an earlier request of a call that reuses its id decides nothing.
    let stale = format!(
        "csrf={}&thread=i1&call_id=call_1&requested_at_ms=1&decision=approve",
        csrf_of(&page)
    );
    let (status, _, reply) = request(
        server.addr,
        "POST",
        "/inbox/decide",
        &[form_type.clone(), cookie.clone()],
        stale.as_bytes(),
    )
    .await;
    assert_eq!(
        (status, error_code(&reply).as_str()),
        (409, "conflict"),
        "{reply}"
    );
    assert!(reply.contains("asked again"), "{reply}");

    // Another process's router, without a form secret shared with this one, refuses the
    // page's form; a replica given the same secret takes it.
    let replica = |config: HttpConfig| async {
        let replica = router(server.runtime.clone(), config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, replica).await.unwrap() });
        addr
    };
    let stranger = replica(config()).await;
    let (status, _, reply) = request(
        stranger,
        "POST",
        "/inbox/decide",
        &[form_type.clone(), cookie.clone()],
        form(&csrf_of(&page)).as_bytes(),
    )
    .await;
    assert_eq!((status, error_code(&reply).as_str()), (403, "bad_form"));
    let replica_addr = replica(config().inbox_form_secret(FORM_SECRET)).await;
    // Behind a proxy that sends the token as a header, the form is the same on both too.
    let by_header = |addr| async move {
        let (_, _, page) = request(addr, "GET", "/inbox", &[bearer()], b"").await;
        csrf_of(&page)
    };
    assert_eq!(by_header(server.addr).await, by_header(replica_addr).await);
    assert_ne!(by_header(server.addr).await, by_header(stranger).await);
    let (status, head, _) = request(
        replica_addr,
        "POST",
        "/inbox/decide",
        &[form_type, cookie.clone()],
        form(&csrf_of(&page)).as_bytes(),
    )
    .await;
    assert_eq!(status, 303, "{head}");
    let (_, _, page) = request(server.addr, "GET", "/inbox", &[cookie], b"").await;
    assert!(page.contains("No tool call waits for approval."), "{page}");
    let done = agent(&server.runtime, vec![ModelResponse::text("Done.")])
        .resume("i1")
        .await
        .unwrap();
    assert!(
        serde_json::to_string(&done.messages)
            .unwrap()
            .contains("refunded 1299 cents on ord_42")
    );
}

/// A call waiting for approval in the memory of the process that serves the inbox (no
/// durable approvals: its run executes, its row says `running`) is listed and decided there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_lists_a_call_waiting_in_memory() {
    let server = serve("inbox-live", config()).await;
    let waiting = Agent::builder("You handle refunds.")
        .name("refunds")
        .model(ScriptedModel::new([
            ModelResponse::tool_calls(vec![refunds::call(250)]),
            ModelResponse::text("Done."),
        ]))
        .tools(
            ToolHost::new()
                .with(refunds::refund)
                .approval_handler(SignalApprover::new()),
        )
        .runtime(server.runtime.clone())
        .build()
        .unwrap();
    let run = tokio::spawn(async move { waiting.run("refund").session("m1").await });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while server
        .runtime
        .pending_approvals("m1")
        .await
        .unwrap()
        .is_empty()
    {
        if run.is_finished() || std::time::Instant::now() > deadline {
            panic!("the call never waited: {:?}", run.await);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let inbox = inbox_page(server.addr).await;
    let page = &inbox.1;
    assert!(page.contains("data-thread=\"m1\""), "{page}");
    assert!(page.contains("&quot;cents&quot;: 250"), "{page}");
    let (status, head) = approve_from(server.addr, &inbox, "m1").await;
    assert_eq!(status, 303, "{head}");
    let done = run.await.unwrap().unwrap();
    let said = serde_json::to_string(&done.messages).unwrap();
    assert!(said.contains("refunded 250 cents on ord_42"), "{said}");
}

/// A run resumed before its call was decided asks again, with the time it first asked: the
/// page shown before still decides the call, and a blank `by`, or one that breaks its line,
/// is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_asked_again_before_its_decision_keeps_its_time() {
    let server = serve("asked-again", config()).await;
    ask_for_refund(&server.runtime, "r1", 900).await;
    let first = server.runtime.pending_approvals("r1").await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let again = agent(&server.runtime, Vec::new())
        .resume("r1")
        .await
        .unwrap();
    assert!(again.interrupted, "no decision yet: {again:?}");
    let now = server.runtime.pending_approvals("r1").await.unwrap();
    assert_eq!(now[0].requested_at_ms, first[0].requested_at_ms);

    let approve = "/v1/threads/r1/approvals/call_1/approve";
    for by in [
        &br#"{"by": " "}"#[..],
        br#"{"by": "ada\n 99  decision  cfo"}"#,
    ] {
        let (status, _, reply) = request(server.addr, "POST", approve, &[bearer()], by).await;
        assert_eq!(
            (status, error_code(&reply).as_str()),
            (400, "bad_request"),
            "{reply}"
        );
    }
    let body = format!(r#"{{"requested_at_ms": {}}}"#, first[0].requested_at_ms);
    let (status, _, reply) =
        request(server.addr, "POST", approve, &[bearer()], body.as_bytes()).await;
    assert_eq!(status, 200, "{reply}");
}

/// Two calls of one turn that need approval are both listed and decided, and one resume
/// runs both: not one call a round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_calls_of_one_turn_wait_for_approval_together() {
    let server = serve("two-calls", config()).await;
    let second = ToolCall::new(
        "call_2",
        "refund",
        json!({ "order": "ord_43", "cents": 300 }),
    );
    let replies = vec![ModelResponse::tool_calls(vec![refunds::call(200), second])];
    let asked = agent(&server.runtime, replies)
        .run("refund both")
        .session("b1")
        .await
        .unwrap();
    assert!(asked.interrupted, "{asked:?}");
    let pending = server.runtime.pending_approvals("b1").await.unwrap();
    let ids: BTreeSet<_> = pending.iter().map(|r| r.call_id.as_str()).collect();
    assert_eq!(ids, BTreeSet::from(["call_1", "call_2"]), "{pending:?}");
    assert_eq!(asked.pending.len(), 2, "{:?}", asked.pending);

    for call in ["call_1", "call_2"] {
        let path = format!("/v1/threads/b1/approvals/{call}/approve");
        let (status, _, reply) = request(server.addr, "POST", &path, &[bearer()], b"").await;
        assert_eq!(status, 200, "{call}: {reply}");
    }
    let done = agent(&server.runtime, vec![ModelResponse::text("Both done.")])
        .resume("b1")
        .await
        .unwrap();
    let said = serde_json::to_string(&done.messages).unwrap();
    assert!(said.contains("refunded 200 cents on ord_42"), "{said}");
    assert!(said.contains("refunded 300 cents on ord_43"), "{said}");
    assert_eq!(done.output, "Both done.");
}

/// A call a `SignalApprover` asks about outside any run (a tool host the application
/// dispatches itself, on the served runtime) is decided over the API, as the inbox lists
/// it. Before its fix the decision asked for a run first, and answered 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_asked_about_outside_any_run_is_decided_over_the_api() {
    let server = serve("approval-no-run", config()).await;
    let host = ToolHost::new()
        .with(refunds::refund)
        .approval_handler(SignalApprover::new());
    let runtime = server.runtime.clone();
    let dispatched = tokio::spawn(async move {
        let dispatch = loomflow::tool::DispatchContext::new("desk-1").runtime(&runtime);
        host.dispatch(&[refunds::call(250)], dispatch).await
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let waiting = loop {
        let pending = server.runtime.pending_approvals("desk-1").await.unwrap();
        if let Some(request) = pending.into_iter().next() {
            break request;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the call never waited"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let approve = format!("/v1/threads/desk-1/approvals/{}/approve", waiting.call_id);
    let (status, _, reply) = request(server.addr, "POST", &approve, &[bearer()], b"").await;
    assert_eq!(status, 200, "{reply}");
    let outcome = dispatched.await.unwrap().unwrap();
    assert!(!outcome[0].is_error, "{outcome:?}");
    assert!(outcome[0].content.contains("250"), "{outcome:?}");
}

/// The page shows a bidi override in a thread's name (or a call's arguments) as its escape,
/// so that nothing reads otherwise than it is; its forms keep the name as it is, and decide.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_shows_a_bidi_override_as_its_escape() {
    let server = serve("inbox-bidi", config()).await;
    let thread = "r\u{202e}lt";
    ask_for_refund(&server.runtime, thread, 1299).await;
    let inbox = inbox_page(server.addr).await;
    let page = &inbox.1;
    assert!(page.contains("<small>on r\\u202elt</small>"), "{page}");
    assert!(page.contains("<td>r\\u202elt</td>"), "{page}");
    assert!(page.contains(&format!("name=\"thread\" value=\"{thread}\"")));
    let shown = page.replace(&format!("\"{thread}\""), "");
    assert!(!shown.contains('\u{202e}'), "{shown}");
    let (status, head) = approve_from(server.addr, &inbox, "r%E2%80%AElt").await;
    assert_eq!(status, 303, "{head}");
    let pending = server.runtime.pending_approvals(thread).await.unwrap();
    assert!(pending.is_empty(), "{pending:?}");
}
