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

/// The store's connections ask for READ COMMITTED after whatever the URL asks for: its
/// statements are written for it (a serializable default failed them under a race).
#[test]
fn connections_ask_for_read_committed_after_the_urls_options() {
    let url = "postgres://app@127.0.0.1:5432/flows\
               ?options=-c%20default_transaction_isolation%3Dserializable";
    let target = super::target::Target::parse(url).unwrap();
    let config = super::notify::probed_config(&target);
    assert_eq!(
        config.get_options(),
        Some(
            "-c default_transaction_isolation=serializable \
             -c default_transaction_isolation=read\\ committed"
        )
    );
    let plain = super::target::Target::parse("postgres://app@127.0.0.1:5432/flows").unwrap();
    let config = super::notify::probed_config(&plain);
    assert_eq!(
        config.get_options(),
        Some("-c default_transaction_isolation=read\\ committed")
    );
}
