//! The approval inbox in a real browser: headless Chromium, driven by puppeteer-core
//! (`.ci/inbox/click.mjs`), logs in, takes a screenshot, presses "Approve" on a pending tool
//! call, and the run completes with the call made once.
//!
//! Needs Debian's `chromium` and `.ci/inbox/node_modules` (`.ci/inbox/install.sh`, which
//! `.ci/run` calls); without them the test says `skipped: …` and passes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use loomflow::http::{HttpConfig, router};
use loomflow::model::ModelResponse;
use loomflow::prelude::*;

#[path = "support/refunds.rs"]
mod refunds;
use refunds::{REFUNDS, agent, ask_for_refund};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_approves_a_call_in_the_inbox_and_the_run_completes() {
    let script = root().join(".ci/inbox/click.mjs");
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    if !root()
        .join(".ci/inbox/node_modules/puppeteer-core")
        .exists()
        || !Path::new(&chromium).exists()
    {
        eprintln!(
            "skipped: inbox browser test (run .ci/inbox/install.sh for chromium and puppeteer-core)"
        );
        return;
    }
    let db = std::env::temp_dir().join(format!("loomflow-inbox-{}.db", std::process::id()));
    let runtime = Runtime::sqlite(&db).unwrap();
    ask_for_refund(&runtime, "inbox-1", 1299).await;

    let app = router(
        runtime.clone(),
        HttpConfig::new().bearer_token("browser-token"),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let shots = root().join("target/inbox");
    std::fs::create_dir_all(&shots).unwrap();
    let screenshot = shots.join("inbox.png");
    let output = tokio::process::Command::new("node")
        .arg(&script)
        .arg(format!("http://{addr}"))
        .arg("browser-token")
        .arg(&screenshot)
        .env("CHROMIUM", &chromium)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("APPROVED"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        std::fs::metadata(&screenshot).unwrap().len() > 1_000,
        "a real screenshot"
    );

    let done = agent(&runtime, vec![ModelResponse::text("Refunded.")])
        .resume("inbox-1")
        .await
        .unwrap();
    assert!(!done.interrupted);
    assert_eq!(
        REFUNDS.load(Ordering::SeqCst),
        1,
        "the approved call ran once"
    );
    drop(runtime);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
}
