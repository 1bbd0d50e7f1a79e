//! Tests of the PostgreSQL store that need no server.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

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
