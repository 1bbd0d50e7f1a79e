//! Checkpoint retention on the durable stores, as a chat-like thread meets it: a thread run
//! again and again with a state that grows keeps about its newest checkpoints, its old
//! suspension stays (a fork from it still runs), and its state and history read as before.
//! On SQLite, and PostgreSQL (skipped without `LOOMFLOW_PG_URL`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/postgres.rs"]
mod postgres;

use loomflow::prelude::*;
use loomflow::runtime::{
    MemoryStore, PostgresOptions, PostgresStore, RunStatus, SqliteOptions, SqliteStore, StoreError,
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

/// `START → ask → w0 → … → w19 → END`, its edges declared in order or reversed (the same
/// graph to a run, under another fingerprint: a run carried on with the other describes it
/// again at its first checkpoint after the change).
fn chain(reversed: bool) -> CompiledGraph<Vec<String>> {
    let mut graph = Graph::new("chain").node_fn("ask", |t: &mut Vec<String>, ctx| {
        Box::pin(async move {
            t.push(ctx.interrupt(json!("go?"))?);
            Ok(())
        })
    });
    let mut edges = vec![(START.to_owned(), "ask".to_owned())];
    let mut last = "ask".to_owned();
    for n in 0..20 {
        let name = format!("w{n}");
        graph = graph.node_sync(name.as_str(), move |t: &mut Vec<String>| {
            t.push(format!("w{n}"))
        });
        edges.push((last, name.clone()));
        last = name;
    }
    edges.push((last, END.to_owned()));
    if reversed {
        edges.reverse();
    }
    for (from, to) in edges {
        graph = graph.edge(from.as_str(), to.as_str());
    }
    graph.compile().unwrap()
}

/// `START → ask → reply → ask …`: one run that asks for every message, for ever.
fn conversation() -> CompiledGraph<Vec<String>> {
    Graph::new("conversation")
        .node_fn("ask", |t: &mut Vec<String>, ctx| {
            Box::pin(async move {
                t.push(ctx.interrupt(json!("you?"))?);
                Ok(())
            })
        })
        .node_sync("reply", |t: &mut Vec<String>| t.push("ok".to_owned()))
        .edge(START, "ask")
        .edge("ask", "reply")
        .branch("reply", ["ask", END], |t: &Vec<String>| {
            if t.iter().any(|m| m == "bye") {
                END
            } else {
                "ask"
            }
        })
        .recursion_limit(10_000)
        .compile()
        .unwrap()
}

/// A run that suspends every turn is cut down as it suspends, not only when it ends (it
/// never does); a run carried on with its graph's edges declared in another order keeps the
/// checkpoint that describes the graph again, which the memory store keeps too.
async fn suspensions_and_descriptions_are_cut_as_the_memory_store_cuts_them(kept: &Runtime) {
    chain(false)
        .invoke(kept, "chain", Vec::new())
        .await
        .unwrap();
    let done = chain(true).resume(kept, "chain", "go").await.unwrap();
    assert_eq!(done.completed().unwrap().len(), 21);
    let described = (kept.list_checkpoints("chain").await.unwrap().iter())
        .filter(|cp| cp.body.get("graph_description").is_some())
        .count();
    assert_eq!(
        described, 2,
        "the run's first row, and the first after the change"
    );

    let talk = conversation();
    // A NUL in the row that names the graph, which PostgreSQL keeps escaped in JSON text.
    let hello = vec!["hello\u{0}".to_owned()];
    talk.invoke(kept, "talk", hello).await.unwrap();
    for turn in 0..100 {
        let out = talk.resume(kept, "talk", format!("m{turn}")).await.unwrap();
        assert_eq!(out.interrupts().len(), 1);
    }
    let rows = kept.list_checkpoints("talk").await.unwrap();
    assert!(rows.len() <= 30, "{} checkpoints kept", rows.len());
    let state: Vec<String> = kept.get_state("talk").await.unwrap().unwrap();
    assert_eq!(state.len(), 201);
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
    let kept = open(&kept, Some(10));
    a_long_thread_keeps_its_newest_checkpoints(&kept, &open(&all, None)).await;
    suspensions_and_descriptions_are_cut_as_the_memory_store_cuts_them(&kept).await;
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
    suspensions_and_descriptions_are_cut_as_the_memory_store_cuts_them(&kept).await;
}

#[tokio::test]
async fn on_the_memory_store() {
    let kept = Runtime::builder()
        .store(MemoryStore::with_retention(Some(10)))
        .build();
    suspensions_and_descriptions_are_cut_as_the_memory_store_cuts_them(&kept).await;
}
