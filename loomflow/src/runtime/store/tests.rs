//! The stored forms of the store's records.

use super::{RunStatus, StoreError};

#[test]
fn stored_statuses_parse_back() {
    for status in RunStatus::ALL {
        assert_eq!(
            RunStatus::parse_stored(status.as_str(), "t").ok(),
            Some(status)
        );
    }
    assert!(matches!(
        RunStatus::parse_stored("paused", "t"),
        Err(StoreError::Corrupt { thread, .. }) if thread == "t"
    ));
}
