//! Long-term memory on SQLite (FTS5): scoping, ranking, restart survival, consolidation.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/memory.rs"]
mod behaviour;

use loomflow::memory::{Memory, Scope, SqliteMemory};
use loomflow::prelude::*;

fn temp_file(name: &str) -> std::path::PathBuf {
    let path =
        std::env::temp_dir().join(format!("loomflow-memory-{name}-{}.db", std::process::id()));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    path
}

#[tokio::test]
async fn scopes_are_kept_apart() {
    behaviour::scopes_are_kept_apart(&SqliteMemory::in_memory().unwrap()).await;
}

#[tokio::test]
async fn recall_ranks_by_relevance() {
    behaviour::recall_ranks_by_relevance(&SqliteMemory::in_memory().unwrap()).await;
}

#[tokio::test]
async fn a_query_of_only_common_words_finds_nothing() {
    behaviour::a_query_of_only_common_words_finds_nothing(&SqliteMemory::in_memory().unwrap())
        .await;
}

#[tokio::test]
async fn bad_input_is_a_typed_error() {
    behaviour::bad_input_is_a_typed_error(&SqliteMemory::in_memory().unwrap()).await;
}

#[tokio::test]
async fn consolidation_is_journaled() {
    let journal = temp_file("consolidation-journal");
    let runtime = Runtime::sqlite(&journal).unwrap();
    behaviour::consolidation_is_journaled(&SqliteMemory::in_memory().unwrap(), &runtime).await;
}

#[tokio::test]
async fn consolidation_rewrites_once() {
    let journal = temp_file("consolidation-once");
    let runtime = Runtime::sqlite(&journal).unwrap();
    behaviour::consolidation_rewrites_once(&SqliteMemory::in_memory().unwrap(), &runtime).await;
}

#[tokio::test]
async fn consolidation_writes_nothing_over_forgotten_items() {
    let runtime = Runtime::in_memory();
    behaviour::consolidation_writes_nothing_over_forgotten_items(
        &SqliteMemory::in_memory().unwrap(),
        &runtime,
    )
    .await;
}

#[tokio::test]
async fn consolidation_after_a_thread_delete_rewrites_again() {
    let journal = temp_file("consolidation-after-delete");
    let runtime = Runtime::sqlite(&journal).unwrap();
    behaviour::consolidation_after_a_thread_delete_rewrites_again(
        &SqliteMemory::in_memory().unwrap(),
        &runtime,
    )
    .await;
}

#[tokio::test]
async fn named_memories_consolidate_apart() {
    let (a, b) = (
        SqliteMemory::in_memory().unwrap(),
        SqliteMemory::in_memory().unwrap(),
    );
    behaviour::named_memories_consolidate_apart(&a, &b, &Runtime::in_memory()).await;
}

#[tokio::test]
async fn items_survive_a_restart() {
    let path = temp_file("restart");
    let ada = Scope::user("ada");
    {
        let memory = SqliteMemory::open(&path).unwrap();
        memory
            .remember(
                &ada,
                "Ada is allergic to peanuts",
                json!({ "source": "doctor" }),
            )
            .await
            .unwrap();
        memory
            .remember(&ada, "Ada plays the cello", json!({}))
            .await
            .unwrap();
    }
    let memory = SqliteMemory::open(&path).unwrap();
    let found = memory.recall(&ada, "peanuts allergy", 5).await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].text, "Ada is allergic to peanuts");
    assert_eq!(found[0].metadata, json!({ "source": "doctor" }));
    assert_eq!(memory.count(&ada).await.unwrap(), 2);
    // The index follows deletions across the restart too.
    assert!(memory.forget(&ada, found[0].id).await.unwrap());
    drop(memory);
    let memory = SqliteMemory::open(&path).unwrap();
    assert!(memory.recall(&ada, "peanuts", 5).await.unwrap().is_empty());
    assert_eq!(memory.recall(&ada, "cello", 5).await.unwrap().len(), 1);
}

#[tokio::test]
async fn an_unopenable_file_is_a_typed_error() {
    let error = SqliteMemory::open("/nonexistent-dir/memory.db").unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("sqlite memory failed to open /nonexistent-dir/memory.db"),
        "{error}"
    );
}

#[tokio::test]
async fn a_long_message_still_recalls_what_it_names() {
    behaviour::a_long_message_still_recalls_what_it_names(&SqliteMemory::in_memory().unwrap())
        .await;
}

#[tokio::test]
async fn a_query_finds_its_own_text() {
    behaviour::a_query_finds_its_own_text(&SqliteMemory::in_memory().unwrap()).await;
}

#[tokio::test]
async fn ties_go_to_the_newer_item_after_a_replace() {
    behaviour::ties_go_to_the_newer_item_after_a_replace(&SqliteMemory::in_memory().unwrap()).await;
}

#[tokio::test]
async fn a_text_is_found_as_it_is() {
    behaviour::a_text_is_found_as_it_is(&SqliteMemory::in_memory().unwrap()).await;
}

/// `older_than` measures an item's age by the system's clock, which dates it: a runtime
/// whose `ManualClock` reads a day ahead does not make items stored a moment ago old.
/// Before, the age was the runtime's clock against the items' system time, and every item
/// was merged.
#[tokio::test]
async fn consolidation_ages_items_by_the_clock_that_dated_them() {
    use loomflow::memory::Consolidation;
    use loomflow::model::{ModelResponse, ScriptedModel};
    use loomflow::runtime::ManualClock;
    use std::time::{Duration, SystemTime};
    let memory = SqliteMemory::in_memory().unwrap();
    let cy = Scope::user("cy");
    for fact in ["Cy likes jazz", "Cy likes cool jazz", "Cy plays piano"] {
        memory.remember(&cy, fact, json!({})).await.unwrap();
    }
    let ahead = ManualClock::new(SystemTime::now() + Duration::from_secs(86_400));
    let runtime = Runtime::builder().clock(ahead).build();
    let model = std::sync::Arc::new(ScriptedModel::new([ModelResponse::text(
        r#"["Cy likes cool jazz and plays piano"]"#,
    )]));
    let report = Consolidation::new(std::sync::Arc::clone(&model))
        .keep_newest(0)
        .older_than(Duration::from_secs(3_600))
        .run(&memory, &runtime, &cy)
        .await
        .unwrap();
    assert!(report.removed.is_empty(), "{report:?}");
    assert_eq!(memory.count(&cy).await.unwrap(), 3);
    assert!(model.requests().is_empty());
}
