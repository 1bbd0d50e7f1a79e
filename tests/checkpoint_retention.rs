//! Checkpoint retention on the durable stores, as a chat-like thread meets it: a thread run
//! again and again with a state that grows keeps about its newest checkpoints, its old
//! suspension stays (a fork from it still runs), and its state and history read as before.
//! On SQLite, and PostgreSQL (skipped without `LOOMFLOW_PG_URL`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/postgres.rs"]
mod postgres;

use loomflow::prelude::*;
use loomflow::runtime::{
    PostgresOptions, PostgresStore, RunStatus, SqliteOptions, SqliteStore, StoreError,
};

/// `START → reply → END` over a transcript: the first run asks who is there and keeps the
/// answer; every run after appends a reply that says how long the transcript was.
fn chat() -> CompiledGraph<Vec<String>> {
    Graph::new("chat")
        .node_fn("reply", |transcript: &mut Vec<String>, ctx| {
            Box::pin(async move {
                if transcript.is_empty() {
                    let name: String = ctx.interrupt(json!("who is there?"))?;
                    transcript.push(name);
                } else {
                    transcript.push(format!("reply {}", transcript.len()));
                }
                Ok(())
            })
        })
        .edge(START, "reply")
        .edge("reply", END)
        .compile()
        .expect("the chat graph compiles")
}

/// Runs the chat on `thread`: its first run suspends and is answered, then `turns` more.
/// Returns the id of the suspension.
async fn talk(runtime: &Runtime, thread: &str, turns: usize) -> u64 {
    let graph = chat();
    let first = graph.invoke(runtime, thread, Vec::new()).await.unwrap();
    assert_eq!(first.interrupts().len(), 1);
    let suspension = (runtime.list_checkpoints(thread).await.unwrap().iter())
        .rfind(|cp| cp.status == RunStatus::Interrupted)
        .expect("the first run's suspension")
        .id;
    graph.resume(runtime, thread, "ada").await.unwrap();
    for _ in 0..turns {
        let transcript: Vec<String> = runtime.get_state(thread).await.unwrap().unwrap();
        graph.invoke(runtime, thread, transcript).await.unwrap();
    }
    suspension
}

/// With a retention of 10, a thread of 200 runs keeps a bounded number of checkpoints: its
/// first run's suspension and that run's first row among them, so a fork from it runs; the
/// state reads whole; a thread without retention keeps every one.
async fn a_long_thread_keeps_its_newest_checkpoints(kept: &Runtime, everything: &Runtime) {
    let suspension = talk(kept, "long", 200).await;
    let rows = kept.list_checkpoints("long").await.unwrap();
    assert!(
        (10..=20).contains(&rows.len()),
        "{} checkpoints kept",
        rows.len()
    );
    assert!(
        rows.iter().any(|cp| cp.id == suspension),
        "the suspension stays"
    );
    let state: Vec<String> = kept.get_state("long").await.unwrap().unwrap();
    assert_eq!(state.len(), 201);
    assert_eq!(state[200], "reply 200");
    assert!(
        (kept.store().get_checkpoint("long", suspension + 3).await)
            .unwrap()
            .is_none(),
        "an old step's row went"
    );

    // A fork from the old suspension still reads its run's graph and runs.
    kept.fork("long", suspension, "long-fork").await.unwrap();
    let forked = chat().resume(kept, "long-fork", "grace").await.unwrap();
    assert_eq!(forked.completed().unwrap(), vec!["grace".to_owned()]);

    talk(everything, "long", 30).await;
    let all = everything.list_checkpoints("long").await.unwrap().len();
    assert!(all > 60, "without retention every checkpoint stays: {all}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite() {
    let (kept, all) = (
        loomflow_tests::TempDb::new("retention-kept"),
        loomflow_tests::TempDb::new("retention-all"),
    );
    let open = |db: &loomflow_tests::TempDb, retention| {
        let options = SqliteOptions::default().retention(retention);
        let store = SqliteStore::open_with(db.path(), options).unwrap();
        Runtime::builder().store(store).build()
    };
    a_long_thread_keeps_its_newest_checkpoints(&open(&kept, Some(10)), &open(&all, None)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres() {
    let (Some(kept), Some(all)) = (
        postgres::TempPgDb::create("checkpoint retention").await,
        postgres::TempPgDb::create("checkpoint retention").await,
    ) else {
        return;
    };
    let open = async |url: &str, retention| -> Result<Runtime, StoreError> {
        let options = PostgresOptions::default().retention(retention);
        let store = PostgresStore::connect_with(url, options).await?;
        Ok(Runtime::builder().store(store).build())
    };
    let kept = open(&kept.url, Some(10)).await.unwrap();
    let all = open(&all.url, None).await.unwrap();
    a_long_thread_keeps_its_newest_checkpoints(&kept, &all).await;
}
