//! Tests of the PostgreSQL store that need no server.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use super::*;

#[tokio::test]
async fn a_server_that_cannot_be_reached_is_named_without_the_password() {
    // Port 1 on the loopback: nothing listens there, so the connection is refused.
    let url = "postgres://app:hunter2@127.0.0.1:1/flows";
    let options = PostgresOptions::default().connect_timeout(Duration::from_secs(5));
    let error = PostgresStore::connect_with(url, options).await.unwrap_err();
    let StoreError::Open { ref path, .. } = error else {
        panic!("expected an open error, got {error:?}")
    };
    assert_eq!(path, "postgres://app@127.0.0.1:1/flows");
    let shown = format!("{error} {error:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
}

/// The store's connections use READ COMMITTED whatever the URL asks for: its statements are
/// written for it. Skipped without `LOOMFLOW_PG_URL`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_use_read_committed_whatever_the_url_asks() {
    let Ok(url) = std::env::var("LOOMFLOW_PG_URL") else {
        println!("skipped: PostgreSQL read committed (set LOOMFLOW_PG_URL, or run .ci/run)");
        return;
    };
    // A database of its own, for the tables the store makes.
    let name = format!("loomflow_read_committed_{}", std::process::id());
    let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let recreate = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
    admin.batch_execute(&recreate).await.unwrap();
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let (base, query) = url.split_once('?').unwrap_or((url.as_str(), ""));
    let server = base.rsplit_once('/').map_or(base, |(server, _)| server);
    let strict = format!(
        "{server}/{name}?{query}{}options=-c%20default_transaction_isolation%3Dserializable",
        if query.is_empty() { "" } else { "&" }
    );
    let store = PostgresStore::connect(&strict).await.unwrap();
    let client = store.pool().get().await.unwrap();
    let level: String = client
        .query_one("SHOW transaction_isolation", &[])
        .await
        .unwrap()
        .get(0);
    drop((client, store));
    admin.batch_execute(&recreate).await.unwrap();
    assert_eq!(level, "read committed");
}
