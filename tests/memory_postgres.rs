//! Long-term memory on PostgreSQL (full-text search): the same behaviour as on SQLite.
//! Each test skips without `LOOMFLOW_PG_URL`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/memory.rs"]
mod behaviour;
#[path = "support/postgres.rs"]
mod postgres;

use loomflow::memory::{Memory, PostgresMemory, Scope};
use loomflow::prelude::*;
use loomflow::runtime::PostgresStore;
use postgres::TempPgDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scopes_are_kept_apart() {
    let Some(db) = TempPgDb::create("memory scoping").await else {
        return;
    };
    behaviour::scopes_are_kept_apart(&PostgresMemory::connect(&db.url).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recall_ranks_by_relevance() {
    let Some(db) = TempPgDb::create("memory ranking").await else {
        return;
    };
    behaviour::recall_ranks_by_relevance(&PostgresMemory::connect(&db.url).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_of_only_common_words_finds_nothing() {
    let Some(db) = TempPgDb::create("memory common words").await else {
        return;
    };
    let memory = PostgresMemory::connect(&db.url).await.unwrap();
    behaviour::a_query_of_only_common_words_finds_nothing(&memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_typed_error() {
    let Some(db) = TempPgDb::create("memory bad input").await else {
        return;
    };
    behaviour::bad_input_is_a_typed_error(&PostgresMemory::connect(&db.url).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consolidation_is_journaled_in_the_store_database() {
    let Some(db) = TempPgDb::create("memory consolidation").await else {
        return;
    };
    let store = PostgresStore::connect(&db.url).await.unwrap();
    let memory = PostgresMemory::new(&store).await.unwrap();
    let runtime = Runtime::with_store(store);
    behaviour::consolidation_is_journaled(&memory, &runtime).await;
    behaviour::consolidation_rewrites_once(&memory, &runtime).await;
    behaviour::consolidation_after_a_thread_delete_rewrites_again(&memory, &runtime).await;
    behaviour::consolidation_writes_nothing_over_forgotten_items(&memory, &runtime).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_survive_a_reconnect() {
    let Some(db) = TempPgDb::create("memory reconnect").await else {
        return;
    };
    let ada = Scope::user("ada");
    {
        let memory = PostgresMemory::connect(&db.url).await.unwrap();
        memory
            .remember(&ada, "Ada is allergic to peanuts", json!({}))
            .await
            .unwrap();
    }
    let memory = PostgresMemory::connect(&db.url).await.unwrap();
    let found = memory.recall(&ada, "peanut", 5).await.unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_starting_together_create_the_table_once() {
    let Some(db) = TempPgDb::create("memory set-up race").await else {
        return;
    };
    let starting: Vec<_> = (0..6)
        .map(|_| {
            let url = db.url.clone();
            tokio::spawn(async move { PostgresMemory::connect(&url).await })
        })
        .collect();
    for memory in starting {
        let memory = memory.await.unwrap().expect("every process sets up");
        memory
            .remember(&Scope::user("ada"), "Ada likes tea", json!({}))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_message_still_recalls_what_it_names() {
    let Some(db) = TempPgDb::create("memory long message").await else {
        return;
    };
    let memory = PostgresMemory::connect(&db.url).await.unwrap();
    behaviour::a_long_message_still_recalls_what_it_names(&memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_finds_its_own_text() {
    let Some(db) = TempPgDb::create("memory unicode query").await else {
        return;
    };
    let memory = PostgresMemory::connect(&db.url).await.unwrap();
    behaviour::a_query_finds_its_own_text(&memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ties_go_to_the_newer_item_after_a_replace() {
    let Some(db) = TempPgDb::create("memory ties").await else {
        return;
    };
    let memory = PostgresMemory::connect(&db.url).await.unwrap();
    behaviour::ties_go_to_the_newer_item_after_a_replace(&memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_is_found_as_it_is() {
    let Some(db) = TempPgDb::create("memory exact text").await else {
        return;
    };
    let memory = PostgresMemory::connect(&db.url).await.unwrap();
    behaviour::a_text_is_found_as_it_is(&memory).await;
}
