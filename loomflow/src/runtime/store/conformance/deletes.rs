//! Checks of deleting a thread: everything it keeps goes, under its claim, and nothing of
//! any other thread does.

use serde_json::json;

use super::{signal, unique};
use crate::runtime::store::{
    AuditEntry, AuditKind, AuditQuery, Checkpoint, Claim, JournalKey, RunStatus, SignalPush, Store,
    StoreError,
};

/// Far enough in the future that no lease in these checks expires on its own.
const LATER: u64 = u64::MAX / 4;

/// Writes a run's worth of rows for `thread`, under `owner`'s claim: two checkpoints (one of
/// a subgraph), a journal entry, a pending signal with a key and one without, an audit entry.
async fn fill(store: &dyn Store, thread: &str, owner: &str) {
    let claim = store.claim(thread, owner, LATER, 1_000).await.unwrap();
    assert_eq!(claim, Claim::Claimed);
    let body = json!({"state": 1});
    let top = Checkpoint::new(thread, 1, "", 0, RunStatus::Running, body.clone());
    store
        .put_checkpoint_claimed(top, owner, LATER)
        .await
        .unwrap();
    let child = Checkpoint::new(thread, 1, "sub:1", 0, RunStatus::Running, body);
    store
        .put_checkpoint_claimed(child, owner, LATER)
        .await
        .unwrap();
    let key = JournalKey::new(thread, 1, "", 1, "pay", "charge", 0);
    store
        .put_journal_claimed(key, json!("ch_1"), owner, LATER)
        .await
        .unwrap();
    for key in [None, Some("k")] {
        let pushed = store
            .push_signal(signal(thread, "go", 1, key))
            .await
            .unwrap();
        assert!(matches!(pushed, SignalPush::Stored(_)), "{pushed:?}");
    }
    let entry = AuditEntry::new(thread, AuditKind::ToolCall, "pay", json!({})).at_ms(1_000);
    store.append_audit(vec![entry]).await.unwrap();
}

/// A thread deleted under its claim keeps nothing but its audit entries and what remembers
/// its signals' idempotency keys; a thread beside it keeps everything. Deleting without the
/// claim deletes nothing. A store that does not delete threads says so, naming the thread.
pub(super) async fn a_thread_is_deleted_under_its_claim(store: &dyn Store) {
    let (thread, other) = (unique("del"), unique("del-other"));
    fill(store, &thread, "me").await;
    fill(store, &other, "me").await;

    let refused = store.delete_thread(&thread, "someone-else").await;
    match refused {
        Err(StoreError::LeaseLost { thread: named, .. }) => assert_eq!(named, thread),
        Err(StoreError::Unsupported {
            operation,
            thread: named,
        }) => {
            assert_eq!(
                (operation, named.as_str()),
                ("delete_thread", thread.as_str())
            );
            let again = store.delete_thread(&thread, "me").await;
            assert!(
                matches!(again, Err(StoreError::Unsupported { .. })),
                "{again:?}"
            );
            assert_eq!(store.list_checkpoints(&thread).await.unwrap().len(), 2);
            return;
        }
        other => panic!("a delete without the claim: {other:?}"),
    }
    assert_eq!(store.list_checkpoints(&thread).await.unwrap().len(), 2);

    let deleted = store.delete_thread(&thread, "me").await.unwrap();
    assert_eq!(
        (
            deleted.checkpoints,
            deleted.journal_entries,
            deleted.signals
        ),
        (2, 1, 2),
        "what the delete counted"
    );
    assert!(store.list_checkpoints(&thread).await.unwrap().is_empty());
    assert!(
        store
            .latest_checkpoint(&thread, "")
            .await
            .unwrap()
            .is_none()
    );
    assert!(store.list_journal(&thread, 1).await.unwrap().is_empty());
    assert!(store.oldest_signal(&thread, "go").await.unwrap().is_none());
    assert_eq!(store.get_run(&thread).await.unwrap(), None, "the run's row");
    let audit = store.audit(&AuditQuery::thread(&thread)).await.unwrap();
    assert!(
        audit.iter().any(|e| e.kind == AuditKind::ToolCall),
        "audit entries stay"
    );
    // The key is still remembered: a send repeated with it stores nothing.
    let again = store.push_signal(signal(&thread, "go", 2, Some("k"))).await;
    assert_eq!(again.unwrap(), SignalPush::Duplicate);
    // The thread is free: a claim of it is a new run's.
    let claimed = store.claim(&thread, "next", LATER, 2_000).await.unwrap();
    assert_eq!(claimed, Claim::Claimed);
    let stale = store.delete_thread(&thread, "me").await;
    assert!(
        matches!(stale, Err(StoreError::LeaseLost { .. })),
        "{stale:?}"
    );
    let deleted = store.delete_thread(&thread, "next").await.unwrap();
    assert!(deleted.is_empty(), "nothing left but the row: {deleted:?}");

    assert_eq!(store.list_checkpoints(&other).await.unwrap().len(), 2);
    assert_eq!(store.list_journal(&other, 1).await.unwrap().len(), 1);
    assert!(store.oldest_signal(&other, "go").await.unwrap().is_some());
    let run = store.get_run(&other).await.unwrap().unwrap();
    assert_eq!(run.lease_owner.as_deref(), Some("me"));
    store.release(&other, "me").await.unwrap();

    // A deleted thread's checkpoint ids are not handed out again, even when it held the
    // newest one.
    let last = unique("del-last");
    let claimed = store.claim(&last, "me", LATER, 1_000).await.unwrap();
    assert_eq!(claimed, Claim::Claimed);
    let checkpoint = Checkpoint::new(&last, 1, "", 0, RunStatus::Running, json!(1));
    let gone = store
        .put_checkpoint_claimed(checkpoint.clone(), "me", LATER)
        .await
        .unwrap();
    store.delete_thread(&last, "me").await.unwrap();
    let next = store.put_checkpoint(checkpoint).await.unwrap();
    assert!(next > gone, "id {next} after the delete of id {gone}");
}
