//! Whose turn it is: runs are claimed in the order they became runnable.

use serde_json::json;

use super::runs::{LATER, interrupt, suspend};
use super::unique;
use crate::runtime::store::{Checkpoint, RunStatus, Store, StoredSignal};

/// A timer come due and a run whose signal arrived are claimed before runs queued after
/// them: a backlog of queued runs does not hold them up until it runs out. Each run is
/// runnable since it was queued, since its timer came due, or since its signal was sent.
pub(super) async fn runs_are_claimed_in_the_order_they_became_runnable(store: &dyn Store) {
    let graph = unique("turns");
    let graphs = [graph.clone()];
    let queued: Vec<String> = (0..3).map(|i| unique(&format!("queued-{i}"))).collect();
    for thread in &queued {
        store
            .submit_run(thread, &graph, json!(0), 3_000)
            .await
            .unwrap();
    }
    let sleeping = unique("sleeping");
    suspend(store, &sleeping, &graph, vec![interrupt(None, Some(1_000))]).await;
    let waiting = unique("waiting");
    suspend(store, &waiting, &graph, vec![interrupt(Some("go"), None)]).await;
    let signal = StoredSignal {
        seq: 0,
        session: waiting.clone(),
        name: "go".to_owned(),
        payload: json!(1),
        idempotency_key: None,
        sent_at_ms: 2_000,
    };
    store.push_signal(signal).await.unwrap();
    let mut order = Vec::new();
    for owner in ["w1", "w2", "w3", "w4", "w5"] {
        let claimed = store
            .claim_next_run(&graphs, owner, LATER, 5, 5_000)
            .await
            .unwrap();
        order.push(claimed.map(|run| run.record.thread).unwrap_or_default());
    }
    assert_eq!(
        order[..2],
        [sleeping, waiting],
        "due at 1,000 and signalled at 2,000 go before runs queued at 3,000"
    );
    let mut rest = order[2..].to_vec();
    rest.sort();
    assert_eq!(rest, queued, "then the queued runs");
}

/// A run that waits for a signal with a deadline is runnable since the earlier of the two:
/// sent its signal before a run was queued, it goes first, though its deadline is later.
pub(super) async fn a_signalled_run_with_a_deadline_counts_from_its_signal(store: &dyn Store) {
    let graph = unique("turns-deadline");
    let graphs = [graph.clone()];
    let waiting = unique("waiting-deadline");
    suspend(
        store,
        &waiting,
        &graph,
        vec![interrupt(Some("go"), Some(5_000))],
    )
    .await;
    let signal = StoredSignal {
        seq: 0,
        session: waiting.clone(),
        name: "go".to_owned(),
        payload: json!(1),
        idempotency_key: None,
        sent_at_ms: 1_000,
    };
    store.push_signal(signal).await.unwrap();
    let queued = unique("queued-before-deadline");
    store
        .submit_run(&queued, &graph, json!(0), 3_000)
        .await
        .unwrap();
    let first = store.claim_next_run(&graphs, "w1", LATER, 5, 6_000).await;
    let first = first.unwrap().map(|run| run.record.thread);
    assert_eq!(
        first,
        Some(waiting),
        "signalled at 1,000, before the run queued at 3,000"
    );
}

/// A run whose execution died part way (its lease ran out) goes before every queued run,
/// whenever it last wrote: a backlog queued before its last heartbeat does not hold up its
/// recovery.
pub(super) async fn a_run_whose_lease_ran_out_goes_before_the_backlog(store: &dyn Store) {
    died_goes_before_the_backlog(store, "died", LastWrite::StepBeforeTheBacklog).await;
}

/// So does a queued run whose execution died before it wrote anything (`Durability::Exit`):
/// its row still says queued, but its heartbeats are no time it was queued at, and a
/// backlog queued since it was claimed does not go first.
pub(super) async fn a_claimed_queued_run_whose_lease_ran_out_goes_before_the_backlog(
    store: &dyn Store,
) {
    died_goes_before_the_backlog(store, "died-silent", LastWrite::HeartbeatAfterTheBacklog).await;
}

/// What the execution that died wrote last.
enum LastWrite {
    /// Its first step, before the backlog was queued: its row says running.
    StepBeforeTheBacklog,
    /// Only a heartbeat, after the backlog was queued: its row still says queued.
    HeartbeatAfterTheBacklog,
}

/// A run claimed (by `dead`, its lease to 100 on the test's clock) whose execution wrote
/// `last` and died, and two runs queued at 10: the run that died is claimed first at 200.
async fn died_goes_before_the_backlog(store: &dyn Store, name: &str, last: LastWrite) {
    let graph = unique(&format!("recovered-{name}"));
    let graphs = [graph.clone()];
    let died = unique(name);
    store.submit_run(&died, &graph, json!(0), 5).await.unwrap();
    let claimed = store
        .claim_next_run(&graphs, "dead", 100, 6, 6)
        .await
        .unwrap();
    assert_eq!(claimed.map(|run| run.record.thread), Some(died.clone()));
    if let LastWrite::StepBeforeTheBacklog = last {
        // Written now (the store's clock), with a lease to 100 on the test's.
        let step = Checkpoint::new(&died, 1, "", 1, RunStatus::Running, json!({"state": 1}));
        store
            .put_checkpoint_claimed(step, "dead", 100)
            .await
            .unwrap();
    }
    let queued: Vec<String> = (0..2).map(|i| unique(&format!("backlog-{i}"))).collect();
    for thread in &queued {
        store
            .submit_run(thread, &graph, json!(0), 10)
            .await
            .unwrap();
    }
    if let LastWrite::HeartbeatAfterTheBacklog = last {
        // On the store's clock: after the backlog was queued.
        store.renew_claim(&died, "dead", 100).await.unwrap();
    }
    let claimed = store
        .claim_next_run(&graphs, "w", LATER, 200, 200)
        .await
        .unwrap();
    assert_eq!(
        claimed.map(|run| run.record.thread),
        Some(died),
        "the run that died goes first"
    );
}
