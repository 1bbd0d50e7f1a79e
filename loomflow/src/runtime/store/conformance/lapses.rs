//! Checks of a run's lapses: the executions in a row that lost its lease while they held it.

use serde_json::json;

use super::unique;
use crate::runtime::store::{Checkpoint, Claim, JournalKey, RunStatus, Store};

/// An execution that loses the run's lease without letting it go is counted as the next
/// takes the run over, whether a worker's claim or a direct one; a step written under the
/// claim, a journal entry, a release (runnable or not, or by the step's checkpoint) or the
/// run's end count from 0 again. A renewal does not: an execution that renews and then dies
/// is a lapse all the same.
pub(super) async fn lapses_count_the_executions_that_died_holding_the_run(store: &dyn Store) {
    let (thread, graph) = (unique("lapses"), unique("graph"));
    let graphs = [graph.clone()];
    let lapses = async || store.get_run(&thread).await.unwrap().unwrap().lapses;
    store
        .submit_run(&thread, &graph, json!(1), 10)
        .await
        .unwrap();
    // Each takes the run over once the last one's lease ran out (it held it until 100 * n).
    let take_next = async |owner: &str, n: u64| {
        let now = 100 * n - 50;
        let claimed = store
            .claim_next_run(&graphs, owner, 100 * n, now, now)
            .await;
        let claimed = claimed.unwrap().expect("runnable once the lease ran out");
        claimed.record.lapses
    };
    assert_eq!(take_next("w1", 1).await, 0, "nobody held it");
    assert_eq!(take_next("w2", 2).await, 1);
    assert_eq!(
        store.claim(&thread, "d3", 300, 250).await.unwrap(),
        Claim::Claimed
    );
    assert_eq!(lapses().await, 2, "a direct claim counts too");
    store.renew_claim(&thread, "d3", 300).await.unwrap();
    assert_eq!(lapses().await, 2, "a renewal is no progress");
    // A journal entry written: progress.
    let key = JournalKey::new(&thread, 1, "", 1, "n", "charge", 0);
    store
        .put_journal_claimed(key, json!("paid"), "d3", 300)
        .await
        .unwrap();
    assert_eq!(lapses().await, 0);
    assert_eq!(take_next("w4", 4).await, 1);
    // A step written: progress.
    let step = Checkpoint::new(&thread, 1, "", 1, RunStatus::Running, json!({ "state": 1 }));
    store.put_checkpoint_claimed(step, "w4", 400).await.unwrap();
    assert_eq!(lapses().await, 0);
    assert_eq!(take_next("w5", 5).await, 1);
    // Let go: nobody lapsed.
    store.release(&thread, "w5").await.unwrap();
    assert_eq!(lapses().await, 0);
    assert_eq!(take_next("w6", 6).await, 0);
    assert_eq!(take_next("w7", 7).await, 1);
    // Let go runnable (handed back, or its store failing): no lapse either.
    store.release_runnable(&thread, "w7").await.unwrap();
    assert_eq!(lapses().await, 0);
    assert_eq!(take_next("w8", 8).await, 0);
    assert_eq!(take_next("w9", 9).await, 1);
    // A step that lets the run go (it suspended, say).
    let last = Checkpoint::new(&thread, 1, "", 2, RunStatus::Running, json!({ "state": 2 }));
    store.put_checkpoint_and_release(last, "w9").await.unwrap();
    assert_eq!(lapses().await, 0);
    assert_eq!(take_next("w10", 10).await, 0);
    assert_eq!(take_next("w11", 11).await, 1);
    // The run's end.
    store
        .finish_run(
            &thread,
            "w11",
            crate::runtime::RunState::Failed,
            Some("x".into()),
        )
        .await
        .unwrap();
    assert_eq!(lapses().await, 0);
}
