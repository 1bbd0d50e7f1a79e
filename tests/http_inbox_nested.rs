//! The approval inbox as an app that mounts the ingress under a prefix meets it: the login
//! cookie, the redirects and the forms keep the prefix, so an operator can log in and
//! decide. And a page that cannot show every waiting run says so, rather than telling the
//! operator that nothing waits.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/http_harness.rs"]
#[allow(dead_code)] // this file serves its own router, nested
mod http_harness;
#[path = "support/refunds.rs"]
mod refunds;

use std::net::SocketAddr;

use http_harness::{NO_HEADERS, request};
use loomflow::http::inbox::SHOWN_RUNS;
use loomflow::http::{HttpConfig, router};
use loomflow::model::ModelResponse;
use loomflow::prelude::*;
use refunds::{agent, ask_for_refund};

const TOKEN: &str = "inbox-token";

/// The ingress nested under `/ops` in an app of its own, on a loopback port.
async fn serve_nested(runtime: &Runtime) -> SocketAddr {
    let ingress = router(runtime.clone(), HttpConfig::new().bearer_token(TOKEN));
    let app = axum::Router::new().nest("/ops", ingress);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

fn header<'a>(head: &'a str, name: &str) -> &'a str {
    head.lines()
        .find_map(|line| line.strip_prefix(&format!("{name}: ")))
        .unwrap_or_else(|| panic!("no {name}: {head}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inbox_nested_under_a_prefix_logs_in_and_decides() {
    let runtime = Runtime::in_memory();
    ask_for_refund(&runtime, "n1", 250).await;
    let addr = serve_nested(&runtime).await;

    let login = format!("/ops/inbox?token={TOKEN}");
    let (status, head, _) = request(addr, "GET", &login, NO_HEADERS, b"").await;
    assert_eq!(status, 303, "{head}");
    assert_eq!(header(&head, "location"), "/ops/inbox");
    let cookie = header(&head, "set-cookie");
    assert!(cookie.contains("Path=/ops/inbox"), "{cookie}");
    let cookie = ("Cookie", cookie.split(';').next().unwrap().to_owned());

    let (status, _, page) = request(
        addr,
        "GET",
        "/ops/inbox",
        std::slice::from_ref(&cookie),
        b"",
    )
    .await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("action=\"/ops/inbox/decide\""), "{page}");
    assert!(!page.contains("id=\"more\""), "{page}");
    let at = page.find("name=\"csrf\" value=\"").unwrap() + "name=\"csrf\" value=\"".len();
    let csrf = page[at..].split('"').next().unwrap();
    let form = format!("csrf={csrf}&thread=n1&call_id=call_1&decision=approve");
    let form_type = (
        "Content-Type",
        "application/x-www-form-urlencoded".to_owned(),
    );
    let (status, head, reply) = request(
        addr,
        "POST",
        "/ops/inbox/decide",
        &[form_type, cookie.clone()],
        form.as_bytes(),
    )
    .await;
    assert_eq!(status, 303, "{head}{reply}");
    assert_eq!(header(&head, "location"), "/ops/inbox");
    let (_, _, page) = request(addr, "GET", "/ops/inbox", &[cookie], b"").await;
    assert!(page.contains("No tool call waits for approval."), "{page}");

    let done = agent(&runtime, vec![ModelResponse::text("Done.")])
        .resume("n1")
        .await
        .unwrap();
    assert!(
        serde_json::to_string(&done.messages)
            .unwrap()
            .contains("refunded 250 cents on ord_42")
    );
}

/// A run whose approvals cannot be read (its checkpoint damaged) is named on the page, and
/// the other runs' approvals are shown: the page failed with 500 for all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_run_does_not_hide_the_others() {
    let db = std::env::temp_dir().join(format!("loomflow-inbox-{}.db", std::process::id()));
    let runtime = Runtime::sqlite(&db).unwrap();
    ask_for_refund(&runtime, "readable", 250).await;
    ask_for_refund(&runtime, "damaged", 300).await;
    drop(runtime);
    let sql = rusqlite::Connection::open(&db).unwrap();
    let changed = sql
        .execute(
            "UPDATE checkpoints SET body = json_set(body, '$.interrupts', 'not a list') \
             WHERE thread = 'damaged' AND status = 'interrupted'",
            [],
        )
        .unwrap();
    assert!(changed > 0);
    drop(sql);
    let runtime = Runtime::sqlite(&db).unwrap();
    let addr = serve_nested(&runtime).await;
    let bearer = ("Authorization", format!("Bearer {TOKEN}"));
    let (status, _, page) = request(addr, "GET", "/ops/inbox", &[bearer], b"").await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("data-thread=\"readable\""), "{page}");
    assert!(
        page.contains("The approvals of thread <code>damaged</code> could not be read"),
        "{page}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inbox_with_more_waiting_runs_than_it_shows_says_so() {
    let runtime = Runtime::in_memory();
    // The oldest run asks first; a page of newer runs ask after it.
    ask_for_refund(&runtime, "asks-first", 250).await;
    for i in 0..SHOWN_RUNS {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        ask_for_refund(&runtime, &format!("newer-{i}"), 250).await;
    }
    let addr = serve_nested(&runtime).await;
    let bearer = ("Authorization", format!("Bearer {TOKEN}"));
    let (status, _, page) = request(addr, "GET", "/ops/inbox", &[bearer], b"").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(
        page.matches("<section class=\"approval\"").count(),
        SHOWN_RUNS
    );
    assert!(!page.contains("asks-first"), "the oldest is past the page");
    assert!(
        page.contains("id=\"more\""),
        "the page says it does not show every run"
    );
    assert!(
        page.contains("id=\"more-approvals\""),
        "the page says it does not show every call waiting"
    );
    assert!(page.contains("GET /v1/runs?status=waiting"), "{page}");
}

/// Runs waiting for something else (a webhook), however many and however new, do not push
/// a run that waits for an approval off the page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_waiting_for_webhooks_do_not_hide_an_approval() {
    let runtime = Runtime::in_memory();
    ask_for_refund(&runtime, "asks-first", 250).await;
    let hook: CompiledGraph<u32> = Graph::new("hook")
        .node_fn("wait", |n: &mut u32, ctx| {
            Box::pin(async move {
                *n = ctx.wait_for_signal("delivered").or_suspend().await?;
                Ok(())
            })
        })
        .edge(START, "wait")
        .edge("wait", END)
        .compile()
        .unwrap();
    for i in 0..=SHOWN_RUNS {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        hook.invoke(&runtime, format!("hook-{i}"), 0).await.unwrap();
    }
    let addr = serve_nested(&runtime).await;
    let bearer = ("Authorization", format!("Bearer {TOKEN}"));
    let (status, _, page) = request(addr, "GET", "/ops/inbox", &[bearer], b"").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page.matches("<section class=\"approval\"").count(), 1);
    assert!(page.contains("data-thread=\"asks-first\""), "{page}");
    assert!(
        page.contains("id=\"more\""),
        "the table of waiting runs is cut"
    );
    assert!(
        !page.contains("id=\"more-approvals\""),
        "every call is shown"
    );
}
