//! Checks of claims and of the writes made under them.

use std::sync::Arc;

use serde_json::json;

use super::{signal, unique};
use crate::runtime::store::{
    Checkpoint, Claim, JournalKey, RunStatus, SignalPush, Store, StoreError,
};

/// Far enough in the future that no lease in these checks expires on its own.
const LATER: u64 = u64::MAX / 4;

fn cp(thread: &str, step: u64) -> Checkpoint {
    Checkpoint::new(
        thread,
        1,
        "",
        step,
        RunStatus::Running,
        json!({ "state": step }),
    )
}

fn is_lease_lost<T: std::fmt::Debug>(
    result: Result<T, StoreError>,
    thread: &str,
    owner: &str,
) -> bool {
    match result {
        Err(StoreError::LeaseLost {
            thread: t,
            owner: o,
        }) => t == thread && o == owner,
        other => panic!("expected LeaseLost for {owner} on {thread}, got {other:?}"),
    }
}

/// A thread is held by one owner at a time: until its lease expires or it is released.
pub(super) async fn claims_are_exclusive_until_expiry_or_release(store: &dyn Store) {
    let thread = unique("claim");
    assert_eq!(
        store.claim(&thread, "a", 2_000, 1_000).await.unwrap(),
        Claim::Claimed,
        "a thread without a run row can be claimed"
    );
    assert_eq!(
        store.claim(&thread, "b", 3_000, 1_500).await.unwrap(),
        Claim::Busy {
            owner: "a".into(),
            until_ms: 2_000
        },
        "a live lease keeps others out, and says who holds it until when"
    );
    assert_eq!(
        store.claim(&thread, "a", 4_000, 1_600).await.unwrap(),
        Claim::Claimed,
        "the holder may claim again (renewing)"
    );
    assert!(
        matches!(
            store.claim(&thread, "b", 5_000, 3_999).await.unwrap(),
            Claim::Busy {
                until_ms: 4_000,
                ..
            }
        ),
        "the renewed lease counts"
    );
    assert_eq!(
        store.claim(&thread, "b", 9_000, 4_000).await.unwrap(),
        Claim::Claimed,
        "an expired lease can be taken over"
    );
    store.release(&thread, "a").await.unwrap();
    assert!(
        matches!(
            store.claim(&thread, "c", 9_500, 5_000).await.unwrap(),
            Claim::Busy { ref owner, .. } if owner == "b"
        ),
        "a release by someone who lost the lease does nothing"
    );
    store.release(&thread, "b").await.unwrap();
    assert_eq!(
        store.claim(&thread, "c", 9_500, 5_000).await.unwrap(),
        Claim::Claimed,
        "a released thread can be claimed before the old lease would have expired"
    );
    store.release(&thread, "c").await.unwrap();
}

/// A claim stamps its run's row with the time it was made, as every change to the row does:
/// runs listed newest first show the one just claimed first.
pub(super) async fn a_claim_stamps_its_rows_update_time(store: &dyn Store) {
    let thread = unique("claim-time");
    let graph = unique("graph");
    store
        .submit_run(&thread, &graph, json!(1), 1_000)
        .await
        .unwrap();
    let updated = async || {
        store
            .get_run(&thread)
            .await
            .unwrap()
            .map(|r| r.updated_at_ms)
    };
    assert_eq!(updated().await, Some(1_000));
    assert_eq!(
        store.claim(&thread, "a", LATER, 2_000).await.unwrap(),
        Claim::Claimed
    );
    assert_eq!(updated().await, Some(2_000), "claimed");
    // Renewing the lease and letting go change the row too (as of the store's clock).
    store.renew_claim(&thread, "a", LATER + 500).await.unwrap();
    let renewed = updated().await.unwrap_or_default();
    assert!(renewed > 2_000, "renewed: {renewed}");
    store.release(&thread, "a").await.unwrap();
    let released = updated().await.unwrap_or_default();
    assert!(released >= renewed, "let go: {released}");
    let graphs = [graph];
    let claimed = store.claim_next_run(&graphs, "b", LATER, 3_000, 3_000);
    assert!(claimed.await.unwrap().is_some());
    assert_eq!(updated().await, Some(3_000), "claimed by a worker");
}

/// A time the store cannot hold (past `i64::MAX` ms, for SQL's signed integers) is kept or
/// refused as a value it would refuse again (`Refused`), not failed as a write to try again.
pub(super) async fn a_time_the_store_cannot_hold_is_refused(store: &dyn Store) {
    let thread = unique("far-lease");
    match store.claim(&thread, "a", u64::MAX, 1_000).await {
        Ok(Claim::Claimed) | Err(StoreError::Refused { .. }) => {}
        other => panic!("a lease until u64::MAX: {other:?}"),
    }
    // Nor is an audit entry's time or run number past what the store holds a failure in
    // passing, which the runtime would try again and again.
    let far = crate::runtime::AuditEntry::new(
        &thread,
        crate::runtime::AuditKind::ToolCall,
        "far",
        serde_json::json!({}),
    );
    for entry in [far.clone().at_ms(u64::MAX), far.run(u64::MAX)] {
        match store.append_audit(vec![entry]).await {
            Ok(()) | Err(StoreError::Refused { .. }) => {}
            other => panic!("an audit entry past i64: {other:?}"),
        }
    }
}

/// Writes under a claim land only while their owner holds it; a lost lease writes nothing.
pub(super) async fn writes_under_a_claim_are_fenced(store: &dyn Store) {
    let thread = unique("fence");
    assert!(is_lease_lost(
        store
            .put_checkpoint_claimed(cp(&thread, 0), "a", LATER)
            .await,
        &thread,
        "a"
    ));
    assert_eq!(
        store.latest_checkpoint(&thread, "").await.unwrap(),
        None,
        "no claim, no checkpoint"
    );

    assert_eq!(
        store.claim(&thread, "a", 2_000, 1_000).await.unwrap(),
        Claim::Claimed
    );
    let id = store
        .put_checkpoint_claimed(cp(&thread, 0), "a", 3_000)
        .await
        .unwrap();
    assert_eq!(
        store
            .latest_checkpoint(&thread, "")
            .await
            .unwrap()
            .unwrap()
            .id,
        id
    );
    assert!(
        matches!(
            store.claim(&thread, "b", LATER, 2_500).await.unwrap(),
            Claim::Busy {
                until_ms: 3_000,
                ..
            }
        ),
        "a write under the claim renews the lease"
    );
    let key = JournalKey::new(&thread, 1, "", 1, "n", "charge", 0);
    store
        .put_journal_claimed(key.clone(), json!("first"), "a", 3_000)
        .await
        .unwrap();
    // A subgraph's checkpoint (a namespace of its own) is fenced alike.
    let mut nested = cp(&thread, 0);
    nested.namespace = "sub".into();
    store
        .put_checkpoint_claimed(nested.clone(), "a", 3_000)
        .await
        .unwrap();
    store.renew_claim(&thread, "a", 4_000).await.unwrap();

    // The lease expires and "b" takes the run over: "a" can write nothing more.
    assert_eq!(
        store.claim(&thread, "b", LATER, 4_001).await.unwrap(),
        Claim::Claimed
    );
    assert!(is_lease_lost(
        store
            .put_checkpoint_claimed(cp(&thread, 1), "a", LATER)
            .await,
        &thread,
        "a"
    ));
    nested.step = 1;
    assert!(is_lease_lost(
        store.put_checkpoint_claimed(nested, "a", LATER).await,
        &thread,
        "a"
    ));
    assert_eq!(
        store
            .latest_checkpoint(&thread, "sub")
            .await
            .unwrap()
            .unwrap()
            .step,
        0,
        "the subgraph's checkpoint of a lost lease was not written"
    );
    let other = JournalKey::new(&thread, 1, "", 1, "n", "refund", 0);
    assert!(is_lease_lost(
        store
            .put_journal_claimed(other.clone(), json!("late"), "a", LATER)
            .await,
        &thread,
        "a"
    ));
    assert!(is_lease_lost(
        store.renew_claim(&thread, "a", LATER).await,
        &thread,
        "a"
    ));
    assert_eq!(
        store
            .latest_checkpoint(&thread, "")
            .await
            .unwrap()
            .unwrap()
            .id,
        id,
        "the checkpoint of a lost lease was not written"
    );
    assert_eq!(store.get_journal(&other).await.unwrap(), None);
    assert_eq!(store.get_journal(&key).await.unwrap(), Some(json!("first")));

    // After a release, its former holder is as locked out as anyone.
    store.release(&thread, "b").await.unwrap();
    assert!(is_lease_lost(
        store
            .put_checkpoint_claimed(cp(&thread, 2), "b", LATER)
            .await,
        &thread,
        "b"
    ));
}

/// An execution's last checkpoint releases its claim in the same write.
pub(super) async fn the_last_checkpoint_releases_the_claim(store: &dyn Store) {
    let thread = unique("last");
    assert!(is_lease_lost(
        store.put_checkpoint_and_release(cp(&thread, 0), "a").await,
        &thread,
        "a"
    ));
    assert_eq!(
        store.claim(&thread, "a", LATER, 1).await.unwrap(),
        Claim::Claimed
    );
    let id = store
        .put_checkpoint_and_release(cp(&thread, 0), "a")
        .await
        .unwrap();
    assert_eq!(
        store
            .latest_checkpoint(&thread, "")
            .await
            .unwrap()
            .unwrap()
            .id,
        id
    );
    assert!(is_lease_lost(
        store
            .put_checkpoint_claimed(cp(&thread, 1), "a", LATER)
            .await,
        &thread,
        "a"
    ));
    assert_eq!(
        store.claim(&thread, "b", LATER, 2).await.unwrap(),
        Claim::Claimed,
        "released: another claims it at once, long before the lease would have expired"
    );
    store.release(&thread, "b").await.unwrap();
}

/// A stored signal taken under a claim goes to one consumer; a late one learns it was
/// taken and journals nothing.
pub(super) async fn signals_taken_under_a_claim_go_to_one_consumer(store: &dyn Store) {
    let thread = unique("take-claimed");
    let SignalPush::Stored(seq) = store
        .push_signal(signal(&thread, "decision", 1, None))
        .await
        .unwrap()
    else {
        panic!("a signal without a key is stored")
    };
    let key = |node: &str| JournalKey::new(&thread, 1, "", 1, node, "signal:decision", 0);
    let payload = json!({"n": 1});

    assert!(is_lease_lost(
        store
            .take_signal_claimed(&thread, seq, (key("a"), payload.clone()), "a", LATER)
            .await,
        &thread,
        "a"
    ));
    assert_eq!(
        store
            .pending_signals()
            .await
            .unwrap()
            .iter()
            .filter(|s| s.seq == seq)
            .count(),
        1,
        "a take without the claim leaves the signal"
    );

    assert_eq!(
        store.claim(&thread, "a", LATER, 1).await.unwrap(),
        Claim::Claimed
    );
    assert!(
        store
            .take_signal_claimed(&thread, seq, (key("a"), payload.clone()), "a", LATER)
            .await
            .unwrap(),
        "the first consumer gets it"
    );
    assert_eq!(
        store.get_journal(&key("a")).await.unwrap(),
        Some(payload.clone())
    );
    assert!(
        !store
            .take_signal_claimed(&thread, seq, (key("b"), payload.clone()), "a", LATER)
            .await
            .unwrap(),
        "a second consumer learns it was taken"
    );
    assert_eq!(
        store.get_journal(&key("b")).await.unwrap(),
        None,
        "and journals nothing"
    );
    assert!(
        !store.try_take_signal(&thread, seq).await.unwrap(),
        "so does a runtime-level consumer"
    );
    // A signal with an idempotency key is taken alike (its row stays, consumed).
    let SignalPush::Stored(keyed) = store
        .push_signal(signal(&thread, "decision", 3, Some("once")))
        .await
        .unwrap()
    else {
        panic!("a new keyed signal is stored")
    };
    let keyed_key = JournalKey::new(&thread, 1, "", 2, "a", "signal:decision", 0);
    assert!(
        store
            .take_signal_claimed(
                &thread,
                keyed,
                (keyed_key.clone(), payload.clone()),
                "a",
                LATER
            )
            .await
            .unwrap()
    );
    assert_eq!(
        store.get_journal(&keyed_key).await.unwrap(),
        Some(payload.clone())
    );
    let again = JournalKey::new(&thread, 1, "", 3, "a", "signal:decision", 0);
    assert!(
        !store
            .take_signal_claimed(&thread, keyed, (again.clone(), payload.clone()), "a", LATER)
            .await
            .unwrap(),
        "a keyed signal is taken once"
    );
    assert_eq!(store.get_journal(&again).await.unwrap(), None);
    store.release(&thread, "a").await.unwrap();

    // Outside a run: the first take wins, with or without an idempotency key.
    for key in [None, Some("k")] {
        let SignalPush::Stored(seq) = store
            .push_signal(signal(&thread, "note", 2, key))
            .await
            .unwrap()
        else {
            panic!("a new signal is stored")
        };
        assert!(store.try_take_signal(&thread, seq).await.unwrap());
        assert!(!store.try_take_signal(&thread, seq).await.unwrap());
    }
}

/// Many claimers at once: exactly one wins.
pub(super) async fn concurrent_claims_have_one_winner(store: Arc<dyn Store>) {
    let thread = unique("claim-race");
    let tasks: Vec<_> = (0..16)
        .map(|n| {
            let store = Arc::clone(&store);
            let thread = thread.clone();
            tokio::spawn(async move {
                let owner = format!("owner-{n}");
                let claim = store.claim(&thread, &owner, LATER, 1).await.unwrap();
                (owner, claim)
            })
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        let (owner, claim) = task.await.unwrap();
        if claim == Claim::Claimed {
            winners.push(owner);
        }
    }
    assert_eq!(winners.len(), 1, "one claimer wins: {winners:?}");
    store.release(&thread, &winners[0]).await.unwrap();
}

/// A claim written by one instance holds for the next one opened on the same location.
pub(super) async fn check_reopen_claims<S: Store>(open: impl Fn() -> S) {
    let thread = unique("reopen-claim");
    {
        let store = open();
        assert_eq!(
            store.claim(&thread, "a", LATER, 1).await.unwrap(),
            Claim::Claimed
        );
    }
    let store = open();
    assert!(
        matches!(
            store.claim(&thread, "b", LATER, 2).await.unwrap(),
            Claim::Busy { ref owner, .. } if owner == "a"
        ),
        "the lease survives reopening"
    );
    store
        .put_checkpoint_claimed(cp(&thread, 0), "a", LATER)
        .await
        .unwrap();
    store.release(&thread, "a").await.unwrap();
}

/// A thread's journal lasts until its run completes or is cancelled: through steps, a
/// subgraph's completion, a suspension and a failure, which a resume or a recover carries
/// on. An ended run's is gone, whether its end was written under a claim or not, but for what
/// the step after a kept interrupted checkpoint journaled (a fork of it replays that).
pub(super) async fn an_ended_runs_journal_is_forgotten(store: &dyn Store) {
    let thread = unique("journal-completed");
    let key = |run| JournalKey::new(&thread, run, "", 1, "pay", "charge", 0);
    let at = |run, namespace: &str, status| {
        Checkpoint::new(&thread, run, namespace, 1, status, json!({ "state": 1 }))
    };
    let journaled = |run| {
        let key = key(run);
        async move { store.get_journal(&key).await.unwrap() }
    };
    let claim = || store.claim(&thread, "me", LATER, 1_000);
    assert!(matches!(claim().await.unwrap(), Claim::Claimed));
    store
        .put_journal_claimed(key(1), json!("ch_1"), "me", LATER)
        .await
        .unwrap();
    for cp in [
        at(1, "", RunStatus::Running),
        at(1, "child:1", RunStatus::Completed),
    ] {
        store.put_checkpoint_claimed(cp, "me", LATER).await.unwrap();
        assert_eq!(journaled(1).await, Some(json!("ch_1")));
    }
    for status in [RunStatus::Interrupted, RunStatus::Failed] {
        let cp = at(1, "", status);
        store.put_checkpoint_and_release(cp, "me").await.unwrap();
        assert_eq!(journaled(1).await, Some(json!("ch_1")), "{status:?}");
        assert!(matches!(claim().await.unwrap(), Claim::Claimed));
    }
    // What the step after the interrupted checkpoint journaled before it suspended stays
    // past the run's end, for a fork of that checkpoint to replay.
    let suspended_step = JournalKey::new(&thread, 1, "", 2, "pay", "charge", 0);
    store
        .put_journal_claimed(suspended_step.clone(), json!("ch_s"), "me", LATER)
        .await
        .unwrap();

    let cp = at(1, "", RunStatus::Completed);
    store.put_checkpoint_and_release(cp, "me").await.unwrap();
    assert_eq!(journaled(1).await, None);
    assert_eq!(
        store.get_journal(&suspended_step).await.unwrap(),
        Some(json!("ch_s")),
        "the suspended step's entry is kept"
    );

    // A cancelled run is not carried on either.
    assert!(matches!(claim().await.unwrap(), Claim::Claimed));
    store
        .put_journal_claimed(key(2), json!("ch_2"), "me", LATER)
        .await
        .unwrap();
    let cp = at(2, "", RunStatus::Cancelled);
    store.put_checkpoint_and_release(cp, "me").await.unwrap();
    assert_eq!(journaled(2).await, None);

    store.put_journal(key(3), json!("ch_3")).await.unwrap();
    assert_eq!(journaled(3).await, Some(json!("ch_3")));
    let cp = at(3, "", RunStatus::Completed);
    store.put_checkpoint(cp).await.unwrap();
    assert_eq!(journaled(3).await, None);
}

/// A request to stop a run stays with that run: a checkpoint of the same run keeps it, and
/// the first checkpoint of the thread's next run (the execution asked to stop died, and a
/// new run started) is not cancelled by it.
pub(super) async fn a_cancel_request_is_the_runs_it_was_made_for(store: &dyn Store) {
    let thread = super::unique("cancel-run");
    assert_eq!(
        store.claim(&thread, "a", LATER, 1).await.unwrap(),
        Claim::Claimed
    );
    store
        .put_checkpoint_claimed(cp(&thread, 0), "a", LATER)
        .await
        .unwrap();
    let requested = store.request_cancel(&thread, 2).await.unwrap();
    assert!(requested.is_some_and(|row| row.cancel_requested));
    store
        .put_checkpoint_claimed(cp(&thread, 1), "a", LATER)
        .await
        .unwrap();
    let row = store.get_run(&thread).await.unwrap().unwrap();
    assert!(row.cancel_requested, "a step of the same run keeps it");
    let mut next = cp(&thread, 0);
    next.run = 2;
    store
        .put_checkpoint_claimed(next, "a", LATER)
        .await
        .unwrap();
    let row = store.get_run(&thread).await.unwrap().unwrap();
    assert!(
        !row.cancel_requested,
        "the next run's first step is not asked to stop"
    );

    // A cancel asked while a worker holds the queued run, before its first checkpoint, is
    // that run's: the row keeps the number of the run before until then.
    let graphs = [super::unique("cancel-queued")];
    let queued = super::unique("cancel-queued");
    store
        .submit_run(&queued, &graphs[0], json!(0), 1)
        .await
        .unwrap();
    let claimed = store.claim_next_run(&graphs, "w", LATER, 2, 2).await;
    assert!(claimed.unwrap().is_some(), "the queued run is claimed");
    let requested = store.request_cancel(&queued, 3).await.unwrap();
    assert!(requested.is_some_and(|row| row.cancel_requested));
    store
        .put_checkpoint_claimed(cp(&queued, 0), "w", LATER)
        .await
        .unwrap();
    let row = store.get_run(&queued).await.unwrap().unwrap();
    assert!(
        row.cancel_requested,
        "the queued run's first step is asked to stop"
    );
}
