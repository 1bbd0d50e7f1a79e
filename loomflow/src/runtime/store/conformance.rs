//! One test suite that every [`Store`] backend must pass.
//!
//! Backends call [`run_all`] from their tests (and [`check_reopen`] when they keep data
//! across instances). A failed check panics with a message naming the check, like an
//! assertion in a test.
//!
//! # Examples
//!
//! ```
//! use loomflow::runtime::{MemoryStore, store::conformance};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! conformance::run_all(&MemoryStore::new()).await;
//! # }
//! ```

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // a test kit: failures panic

mod audit;
mod claims;
mod deletes;
mod lapses;
mod listing;
mod runs;
mod turns;

use std::sync::Arc;

use serde_json::json;

use super::{Checkpoint, Interrupt, JournalKey, RunStatus, SignalPush, Store, StoredSignal};

fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{prefix}-{nanos}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

fn signal(session: &str, name: &str, n: u64, key: Option<&str>) -> StoredSignal {
    StoredSignal {
        seq: 0,
        session: session.to_owned(),
        name: name.to_owned(),
        payload: json!({ "n": n }),
        idempotency_key: key.map(str::to_owned),
        // Long ago, but after the signals `prune_signals` is checked with: one check's
        // prune leaves the others' signals alone.
        sent_at_ms: 10_000,
    }
}

/// Runs every check against `store`. Each uses fresh thread and session names, so the store
/// need not be empty.
pub async fn run_all(store: &dyn Store) {
    checkpoints_round_trip(store).await;
    latest_is_per_namespace(store).await;
    journal_keeps_the_first_value(store).await;
    signals_are_fifo_and_taken_once(store).await;
    idempotency_keys_are_remembered_after_consumption(store).await;
    checkpoints_are_kept_per_thread(store).await;
    signals_are_taken_only_by_their_session(store).await;
    claims::claims_are_exclusive_until_expiry_or_release(store).await;
    claims::a_claim_stamps_its_rows_update_time(store).await;
    claims::a_time_the_store_cannot_hold_is_refused(store).await;
    claims::writes_under_a_claim_are_fenced(store).await;
    claims::the_last_checkpoint_releases_the_claim(store).await;
    claims::signals_taken_under_a_claim_go_to_one_consumer(store).await;
    claims::an_ended_runs_journal_is_forgotten(store).await;
    claims::a_cancel_request_is_the_runs_it_was_made_for(store).await;
    runs::submitted_runs_are_claimed_once(store).await;
    runs::a_finished_run_still_held_refuses_a_submit(store).await;
    runs::a_claim_not_written_yet_refuses_a_submit(store).await;
    runs::suspended_runs_wake_on_a_signal_or_their_time(store).await;
    runs::cancel_requests_are_recorded(store).await;
    runs::a_claimed_suspended_run_whose_execution_died_is_runnable(store).await;
    lapses::lapses_count_the_executions_that_died_holding_the_run(store).await;
    runs::a_run_let_go_half_way_is_runnable_at_once(store).await;
    runs::old_signals_of_sessions_without_a_run_are_dropped(store).await;
    runs::a_failure_with_a_nul_in_its_message_is_recorded(store).await;
    listing::runs_are_listed_a_page_at_a_time(store).await;
    turns::runs_are_claimed_in_the_order_they_became_runnable(store).await;
    turns::a_signalled_run_with_a_deadline_counts_from_its_signal(store).await;
    turns::a_run_whose_lease_ran_out_goes_before_the_backlog(store).await;
    turns::a_claimed_queued_run_whose_lease_ran_out_goes_before_the_backlog(store).await;
    audit::entries_read_back_in_order(store).await;
    audit::signals_are_audited_with_the_signal(store).await;
    audit::discarded_signals_are_not_audited_as_received(store).await;
    audit::entries_ride_with_their_write(store).await;
    audit::entries_ride_with_an_unclaimed_checkpoint(store).await;
    audit::old_entries_are_pruned(store).await;
    deletes::a_thread_is_deleted_under_its_claim(store).await;
}

/// Runs [`run_all`], and checks that many writers at once lose nothing and that many
/// workers at once never claim one run twice.
pub async fn run_all_concurrent(store: Arc<dyn Store>) {
    run_all(&*store).await;
    concurrent_writers(Arc::clone(&store)).await;
    concurrent_duplicate_sends_store_one(Arc::clone(&store)).await;
    claims::concurrent_claims_have_one_winner(Arc::clone(&store)).await;
    runs::concurrent_workers_claim_each_run_once(store).await;
}

async fn checkpoints_round_trip(store: &dyn Store) {
    let thread = unique("cp");
    // The body is opaque to the store: any JSON comes back exactly as it went in.
    let mut first = Checkpoint::new(
        &thread,
        1,
        "",
        0,
        RunStatus::Running,
        json!({"state": {"a": 1}, "next": ["x"], "joins": [[true, false]]}),
    );
    let id1 = store.put_checkpoint(first.clone()).await.unwrap();
    let interrupts = vec![
        Interrupt {
            id: "y#0".into(),
            node: "y".into(),
            index: 0,
            payload: json!("ok?"),
            signal: None,
            wake_at_ms: None,
        },
        Interrupt {
            id: "y#signal:go".into(),
            node: "y".into(),
            index: 1,
            payload: json!(null),
            signal: Some("go".into()),
            wake_at_ms: None,
        },
    ];
    let mut second = Checkpoint::new(
        &thread,
        1,
        "",
        1,
        RunStatus::Interrupted,
        json!({
            "state": {"a": 2, "s": "é\"\n"},
            "next": ["y"],
            "interrupts": interrupts,
            "anything": [1.5, null, {"deep": [true]}],
        }),
    );
    second.error = Some("boom".into());
    let id2 = store.put_checkpoint(second.clone()).await.unwrap();
    assert!(id2 > id1, "checkpoint ids must increase: {id1} then {id2}");
    assert_eq!(second.interrupts().unwrap(), interrupts);
    assert_eq!(second.next(), ["y"]);

    first.id = id1;
    second.id = id2;
    let listed = store.list_checkpoints(&thread).await.unwrap();
    assert_eq!(
        listed,
        vec![first.clone(), second.clone()],
        "list_checkpoints returns all, oldest first"
    );
    let latest = store.latest_checkpoint(&thread, "").await.unwrap();
    assert_eq!(latest, Some(second), "latest_checkpoint returns the newest");
    let by_id = store.get_checkpoint(&thread, id1).await.unwrap();
    assert_eq!(by_id, Some(first), "get_checkpoint finds by id");
    assert_eq!(
        store
            .get_checkpoint(&thread, id2 + 1_000_000)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store.latest_checkpoint(&unique("none"), "").await.unwrap(),
        None
    );
    assert!(
        store
            .list_checkpoints(&unique("none"))
            .await
            .unwrap()
            .is_empty()
    );
}

async fn latest_is_per_namespace(store: &dyn Store) {
    let thread = unique("ns");
    store
        .put_checkpoint(Checkpoint::new(
            &thread,
            1,
            "",
            1,
            RunStatus::Running,
            json!({"state": 1}),
        ))
        .await
        .unwrap();
    store
        .put_checkpoint(Checkpoint::new(
            &thread,
            1,
            "sub",
            1,
            RunStatus::Running,
            json!({"state": 2}),
        ))
        .await
        .unwrap();
    let top = store.latest_checkpoint(&thread, "").await.unwrap().unwrap();
    assert_eq!(
        *top.state(),
        json!(1),
        "latest_checkpoint must filter by namespace"
    );
    let sub = store
        .latest_checkpoint(&thread, "sub")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(*sub.state(), json!(2));
}

async fn journal_keeps_the_first_value(store: &dyn Store) {
    let thread = unique("journal");
    let key = JournalKey::new(&thread, 1, "", 2, "pay", "charge", 0);
    assert_eq!(store.get_journal(&key).await.unwrap(), None);
    store
        .put_journal(key.clone(), json!({"id": "ch_1"}))
        .await
        .unwrap();
    store
        .put_journal(key.clone(), json!({"id": "ch_2"}))
        .await
        .unwrap();
    assert_eq!(
        store.get_journal(&key).await.unwrap(),
        Some(json!({"id": "ch_1"})),
        "the first recorded value wins"
    );
    let mut other = key.clone();
    other.occurrence = 1;
    assert_eq!(
        store.get_journal(&other).await.unwrap(),
        None,
        "occurrences are separate entries"
    );
    let mut other_run = key.clone();
    other_run.run = 2;
    assert_eq!(
        store.get_journal(&other_run).await.unwrap(),
        None,
        "runs are separate"
    );
    // A run's entries, every namespace, and no other run's.
    let child = JournalKey::new(&thread, 1, "sub:2", 1, "ask", "deadline:ok", 0);
    store.put_journal(child.clone(), json!(5)).await.unwrap();
    store.put_journal(other_run, json!("later")).await.unwrap();
    let mut listed = store.list_journal(&thread, 1).await.unwrap();
    listed.sort_by(|a, b| a.0.namespace.cmp(&b.0.namespace));
    assert_eq!(listed, [(key, json!({"id": "ch_1"})), (child, json!(5))]);
}

async fn signals_are_fifo_and_taken_once(store: &dyn Store) {
    let session = unique("sig");
    let mut seqs = Vec::new();
    for n in 0..3 {
        match store
            .push_signal(signal(&session, "go", n, None))
            .await
            .unwrap()
        {
            SignalPush::Stored(seq) => seqs.push(seq),
            SignalPush::Duplicate => panic!("a signal without a key is never a duplicate"),
        }
    }
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "sequence numbers increase: {seqs:?}"
    );
    let mine = |all: Vec<StoredSignal>| -> Vec<u64> {
        all.into_iter()
            .filter(|s| s.session == session)
            .map(|s| s.payload["n"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(mine(store.pending_signals().await.unwrap()), vec![0, 1, 2]);

    let key = JournalKey::new(&session, 1, "", 1, "wait", "signal:go", 0);
    store
        .take_signal(&session, seqs[0], Some((key.clone(), json!({"n": 0}))))
        .await
        .unwrap();
    assert_eq!(
        mine(store.pending_signals().await.unwrap()),
        vec![1, 2],
        "a taken signal is gone"
    );
    assert_eq!(
        store.get_journal(&key).await.unwrap(),
        Some(json!({"n": 0})),
        "taking journals atomically"
    );
    store.take_signal(&session, seqs[0], None).await.unwrap();
    assert_eq!(
        mine(store.pending_signals().await.unwrap()),
        vec![1, 2],
        "taking twice is harmless"
    );
}

async fn idempotency_keys_are_remembered_after_consumption(store: &dyn Store) {
    let session = unique("idem");
    let first = store
        .push_signal(signal(&session, "pay", 1, Some("k1")))
        .await
        .unwrap();
    let SignalPush::Stored(seq) = first else {
        panic!("first send must be stored")
    };
    assert_eq!(
        store
            .push_signal(signal(&session, "pay", 2, Some("k1")))
            .await
            .unwrap(),
        SignalPush::Duplicate
    );
    assert!(
        matches!(
            store
                .push_signal(signal(&session, "other", 3, Some("k1")))
                .await
                .unwrap(),
            SignalPush::Stored(_)
        ),
        "keys are per name"
    );
    store.take_signal(&session, seq, None).await.unwrap();
    assert_eq!(
        store
            .push_signal(signal(&session, "pay", 4, Some("k1")))
            .await
            .unwrap(),
        SignalPush::Duplicate,
        "a consumed signal's key is still remembered"
    );
    let seen = |name: &'static str, key: &'static str| store.signal_key_seen(&session, name, key);
    assert!(
        seen("pay", "k1").await.unwrap(),
        "seen after it was consumed"
    );
    assert!(seen("other", "k1").await.unwrap(), "seen while pending");
    assert!(!seen("pay", "k2").await.unwrap(), "another key");
    assert!(!seen("third", "k1").await.unwrap(), "another name");
}

async fn concurrent_writers(store: Arc<dyn Store>) {
    let thread = unique("conc");
    let mut tasks = Vec::new();
    for w in 0..16u64 {
        let store = Arc::clone(&store);
        let thread = format!("{thread}-{w}");
        tasks.push(tokio::spawn(async move {
            for step in 0..20u64 {
                store
                    .put_checkpoint(Checkpoint::new(
                        &thread,
                        1,
                        "",
                        step,
                        RunStatus::Running,
                        json!({"state": {"w": w, "step": step}}),
                    ))
                    .await
                    .unwrap();
                store
                    .put_journal(
                        JournalKey::new(&thread, 1, "", step, "n", "s", 0),
                        json!(step),
                    )
                    .await
                    .unwrap();
            }
            thread
        }));
    }
    for task in tasks {
        let thread = task.await.unwrap();
        let steps: Vec<u64> = store
            .list_checkpoints(&thread)
            .await
            .unwrap()
            .iter()
            .map(|c| c.step)
            .collect();
        assert_eq!(
            steps,
            (0..20).collect::<Vec<_>>(),
            "every concurrent write of {thread} landed, in order"
        );
        for step in 0..20 {
            let key = JournalKey::new(&thread, 1, "", step, "n", "s", 0);
            assert_eq!(store.get_journal(&key).await.unwrap(), Some(json!(step)));
        }
    }
}

async fn checkpoints_are_kept_per_thread(store: &dyn Store) {
    let (mine, other) = (unique("own"), unique("own-other"));
    let id = store
        .put_checkpoint(Checkpoint::new(
            &mine,
            1,
            "",
            0,
            RunStatus::Running,
            json!({"state": 1}),
        ))
        .await
        .unwrap();
    assert_eq!(
        store.get_checkpoint(&other, id).await.unwrap(),
        None,
        "get_checkpoint does not return another thread's checkpoint"
    );
    assert!(store.list_checkpoints(&other).await.unwrap().is_empty());
    assert_eq!(store.latest_checkpoint(&other, "").await.unwrap(), None);
}

async fn signals_are_taken_only_by_their_session(store: &dyn Store) {
    let (session, other) = (unique("take"), unique("take-other"));
    let SignalPush::Stored(seq) = store
        .push_signal(signal(&session, "go", 1, None))
        .await
        .unwrap()
    else {
        panic!("a signal without a key is stored")
    };
    store.take_signal(&other, seq, None).await.unwrap();
    let pending: Vec<u64> = store
        .pending_signals()
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.session == session)
        .map(|s| s.seq)
        .collect();
    assert_eq!(
        pending,
        vec![seq],
        "take_signal with another session leaves the signal"
    );
    store.take_signal(&session, seq, None).await.unwrap();
}

async fn concurrent_duplicate_sends_store_one(store: Arc<dyn Store>) {
    let session = unique("dup");
    let tasks: Vec<_> = (0..16u64)
        .map(|n| {
            let store = Arc::clone(&store);
            let session = session.clone();
            tokio::spawn(async move {
                store
                    .push_signal(signal(&session, "pay", n, Some("once")))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut stored = 0;
    for task in tasks {
        if matches!(task.await.unwrap(), SignalPush::Stored(_)) {
            stored += 1;
        }
    }
    assert_eq!(stored, 1, "concurrent sends with one key store exactly one");
    let pending = store
        .pending_signals()
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.session == session)
        .count();
    assert_eq!(pending, 1);
}

/// Checks that what one instance wrote is there when the same location is opened again.
/// `open` must open the same underlying database each time.
pub async fn check_reopen<S: Store>(open: impl Fn() -> S) {
    let thread = unique("reopen");
    let session = unique("reopen-sig");
    let key = JournalKey::new(&thread, 1, "", 1, "n", "s", 0);
    {
        let store = open();
        store
            .put_checkpoint(Checkpoint::new(
                &thread,
                1,
                "",
                1,
                RunStatus::Interrupted,
                json!({"state": {"kept": true}, "next": ["n"]}),
            ))
            .await
            .unwrap();
        store
            .put_journal(key.clone(), json!("recorded"))
            .await
            .unwrap();
        store
            .push_signal(signal(&session, "go", 7, Some("k")))
            .await
            .unwrap();
    }
    let store = open();
    let cp = store
        .latest_checkpoint(&thread, "")
        .await
        .unwrap()
        .expect("checkpoint survives reopen");
    assert_eq!(*cp.state(), json!({"kept": true}));
    assert_eq!(cp.status, RunStatus::Interrupted);
    assert_eq!(
        store.get_journal(&key).await.unwrap(),
        Some(json!("recorded"))
    );
    let pending: Vec<_> = store
        .pending_signals()
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.session == session)
        .collect();
    assert_eq!(pending.len(), 1, "signal survives reopen");
    assert_eq!(
        store
            .push_signal(signal(&session, "go", 8, Some("k")))
            .await
            .unwrap(),
        SignalPush::Duplicate,
        "keys survive reopen"
    );
    let audit = store
        .audit(&super::AuditQuery::thread(&session))
        .await
        .unwrap();
    assert_eq!(audit.len(), 1, "the audit log survives reopen");
    assert_eq!(audit[0].kind, super::AuditKind::SignalSent);
    drop(store);
    claims::check_reopen_claims(&open).await;
}
