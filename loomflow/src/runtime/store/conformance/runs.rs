//! Checks of run rows: submitting, claiming what a worker should carry on, cancelling.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::json;

use super::{signal, unique};
use crate::runtime::store::{
    Checkpoint, Interrupt, RunFilter, RunState, RunStatus, SignalPush, Store, StoreError, Submitted,
};

/// Far enough in the future that no lease in these checks expires on its own.
pub(super) const LATER: u64 = u64::MAX / 4;

pub(super) fn interrupt(signal: Option<&str>, wake_at_ms: Option<u64>) -> Interrupt {
    Interrupt {
        id: "n#0".to_owned(),
        node: "n".to_owned(),
        index: 0,
        payload: json!(null),
        signal: signal.map(str::to_owned),
        wake_at_ms,
    }
}

/// Writes a suspended run of `graph` on `thread`, held by nobody afterwards.
pub(super) async fn suspend(
    store: &dyn Store,
    thread: &str,
    graph: &str,
    interrupts: Vec<Interrupt>,
) {
    assert_eq!(
        store.claim(thread, "writer", LATER, 1).await.unwrap(),
        crate::runtime::store::Claim::Claimed
    );
    let body = json!({
        "state": 1,
        "interrupts": interrupts,
        "graph": "fingerprint",
        "graph_name": graph,
    });
    let cp = Checkpoint::new(thread, 1, "", 1, RunStatus::Interrupted, body);
    store
        .put_checkpoint_and_release(cp, "writer")
        .await
        .unwrap();
}

/// A submitted run is claimed once, with its input; a second submit is refused while it
/// has not finished; a finished run is not claimed again.
pub(super) async fn submitted_runs_are_claimed_once(store: &dyn Store) {
    let (thread, graph) = (unique("submit"), unique("graph"));
    let graphs = [graph.clone()];
    let input = json!({"order": 7});
    assert_eq!(
        store
            .submit_run(&thread, &graph, input.clone(), 10)
            .await
            .unwrap(),
        Submitted::Queued
    );
    match store
        .submit_run(&thread, &graph, json!(0), 11)
        .await
        .unwrap()
    {
        Submitted::Active(record) => assert_eq!(record.state, RunState::Queued),
        other => panic!("a second submit while queued must be refused, got {other:?}"),
    }
    let claimed = store
        .claim_next_run(&graphs, "w1", LATER, 20, 20)
        .await
        .unwrap()
        .expect("the queued run is claimed");
    assert_eq!(claimed.record.thread, thread);
    assert_eq!(claimed.record.state, RunState::Queued);
    assert_eq!(claimed.record.graph.as_deref(), Some(graph.as_str()));
    assert_eq!(claimed.input, Some(input));
    assert_eq!(claimed.record.lease_owner.as_deref(), Some("w1"));
    assert!(
        store
            .claim_next_run(&graphs, "w2", LATER, 21, 21)
            .await
            .unwrap()
            .is_none(),
        "a claimed run is not claimed twice"
    );
    assert!(matches!(
        store
            .finish_run(&thread, "w2", RunState::Failed, None)
            .await,
        Err(StoreError::LeaseLost { .. })
    ));
    store
        .finish_run(&thread, "w1", RunState::Failed, Some("bad input".into()))
        .await
        .unwrap();
    let record = store.get_run(&thread).await.unwrap().unwrap();
    assert_eq!(
        (record.state, record.error.as_deref(), record.lease_owner),
        (RunState::Failed, Some("bad input"), None)
    );
    assert!(
        store
            .claim_next_run(&graphs, "w2", LATER, 22, 22)
            .await
            .unwrap()
            .is_none(),
        "a failed run is not taken again"
    );
    // A finished thread takes a new run.
    assert_eq!(
        store
            .submit_run(&thread, &graph, json!(1), 30)
            .await
            .unwrap(),
        Submitted::Queued
    );
    assert!(store.get_run(&unique("nobody")).await.unwrap().is_none());
}

/// A submit waits for the run before to be let go, finished or not: a run whose last
/// checkpoint says it completed but whose execution still holds it is refused; once
/// released, the thread takes the new run.
pub(super) async fn a_finished_run_still_held_refuses_a_submit(store: &dyn Store) {
    let (thread, graph) = (unique("held"), unique("graph"));
    assert_eq!(
        store.claim(&thread, "runner", LATER, 1).await.unwrap(),
        crate::runtime::store::Claim::Claimed
    );
    let body = json!({"state": 1, "graph": "fingerprint", "graph_name": graph});
    let cp = Checkpoint::new(&thread, 1, "", 1, RunStatus::Completed, body);
    store
        .put_checkpoint_claimed(cp, "runner", LATER)
        .await
        .unwrap();
    match store
        .submit_run(&thread, &graph, json!(2), 5)
        .await
        .unwrap()
    {
        Submitted::Active(record) => assert_eq!(
            (record.state, record.lease_owner.as_deref()),
            (RunState::Completed, Some("runner"))
        ),
        other => panic!("a run still held must refuse a submit, got {other:?}"),
    }
    store.release(&thread, "runner").await.unwrap();
    assert_eq!(
        store
            .submit_run(&thread, &graph, json!(3), 6)
            .await
            .unwrap(),
        Submitted::Queued
    );
    let claimed = store
        .claim_next_run(std::slice::from_ref(&graph), "w", LATER, 7, 7)
        .await
        .unwrap()
        .expect("the new run is claimed");
    assert_eq!(claimed.record.thread, thread);
    assert_eq!(claimed.input, Some(json!(3)));
}

/// A thread an execution claimed and has not written to yet (a direct run before its first
/// checkpoint) refuses a submit as a running run: queuing would take the lease from under
/// it. Once released, or once the lease runs out, the submit is taken.
pub(super) async fn a_claim_not_written_yet_refuses_a_submit(store: &dyn Store) {
    let (thread, graph) = (unique("fresh-claim"), unique("graph"));
    assert_eq!(
        store.claim(&thread, "runner", 100, 1).await.unwrap(),
        crate::runtime::store::Claim::Claimed
    );
    match store
        .submit_run(&thread, &graph, json!(1), 5)
        .await
        .unwrap()
    {
        Submitted::Active(record) => assert_eq!(
            (record.state, record.lease_owner.as_deref()),
            (RunState::Running, Some("runner"))
        ),
        other => panic!("a claimed thread must refuse a submit, got {other:?}"),
    }
    assert_eq!(
        store.claim(&thread, "worker", LATER, 6).await.unwrap(),
        crate::runtime::store::Claim::Busy {
            owner: "runner".to_owned(),
            until_ms: 100
        },
        "the refused submit left the claim as it was"
    );
    assert_eq!(
        store
            .submit_run(&thread, &graph, json!(2), 100)
            .await
            .unwrap(),
        Submitted::Queued,
        "a lease run out no longer holds the thread"
    );
}

/// A waiting run is claimed once its signal is stored or its deadline is due; a sleeping
/// one when its time is due; neither before.
pub(super) async fn suspended_runs_wake_on_a_signal_or_their_time(store: &dyn Store) {
    let graph = unique("graph");
    let graphs = [graph.clone()];
    let waiting = unique("waiting");
    suspend(
        store,
        &waiting,
        &graph,
        vec![interrupt(Some("go"), Some(1_000))],
    )
    .await;
    let record = store.get_run(&waiting).await.unwrap().unwrap();
    assert_eq!(record.state, RunState::Waiting);
    assert_eq!(record.waiting_on, ["go"]);
    assert_eq!(record.wake_at_ms, Some(1_000));
    assert_eq!(record.graph.as_deref(), Some(graph.as_str()));
    assert_eq!(record.fingerprint.as_deref(), Some("fingerprint"));

    let sleeping = unique("sleeping");
    suspend(store, &sleeping, &graph, vec![interrupt(None, Some(2_000))]).await;
    assert_eq!(
        store.get_run(&sleeping).await.unwrap().unwrap().state,
        RunState::Sleeping
    );
    let asking = unique("asking");
    suspend(store, &asking, &graph, vec![interrupt(None, None)]).await;
    assert_eq!(
        store.get_run(&asking).await.unwrap().unwrap().state,
        RunState::Interrupted
    );

    let next = |owner: &'static str, due: u64| {
        let graphs = graphs.clone();
        async move {
            store
                .claim_next_run(&graphs, owner, LATER, 5, due)
                .await
                .unwrap()
                .map(|run| run.record.thread)
        }
    };
    assert_eq!(
        next("w", 999).await,
        None,
        "nothing is due, nothing signalled"
    );
    assert_eq!(
        store.next_wake_at_ms(&graphs, 999).await.unwrap(),
        Some(1_000)
    );
    // Another session's signal, or another name, wakes nothing.
    store
        .push_signal(signal(&unique("other"), "go", 1, None))
        .await
        .unwrap();
    store
        .push_signal(signal(&waiting, "stop", 1, None))
        .await
        .unwrap();
    assert_eq!(next("w", 999).await, None);
    assert_eq!(
        store
            .claim_waiting_run(&waiting, "stop", &graphs, "w", LATER, 5)
            .await
            .unwrap(),
        None,
        "a hint of another name wakes nothing"
    );
    store
        .push_signal(signal(&waiting, "go", 1, None))
        .await
        .unwrap();
    assert_eq!(next("w1", 999).await.as_deref(), Some(waiting.as_str()));
    assert_eq!(next("w2", 1_999).await, None, "the waiting run is held");
    assert_eq!(next("w3", 2_000).await.as_deref(), Some(sleeping.as_str()));
    assert_eq!(
        next("w4", u64::MAX / 8).await,
        None,
        "interrupts wait for a person"
    );
    let asking_row = store.get_run(&asking).await.unwrap().unwrap();
    assert_eq!(
        asking_row.waiting_on,
        ["loomflow:resume"],
        "an interrupted run waits for a resume request"
    );
    // A hint (a signal sent in this process) claims a run that waits for that signal only:
    // an interrupted run waits for a resume request, not for any signal of its session.
    let hint = |thread: &str, signal: &'static str| {
        let (graphs, thread) = (graphs.clone(), thread.to_owned());
        async move {
            store
                .claim_waiting_run(&thread, signal, &graphs, "w5", LATER, 5)
                .await
                .unwrap()
        }
    };
    assert_eq!(hint(&asking, "go").await, None, "not a resume request");
    let hinted = hint(&asking, "loomflow:resume").await;
    assert_eq!(
        hinted.map(|r| r.record.thread).as_deref(),
        Some(asking.as_str())
    );
    store.release(&asking, "w5").await.unwrap();
    store
        .push_signal(signal(&asking, "loomflow:resume", 1, None))
        .await
        .unwrap();
    assert_eq!(
        next("w6", 5).await.as_deref(),
        Some(asking.as_str()),
        "a stored resume request makes an interrupted run runnable"
    );
    let filter = RunFilter::new().graph(graph.clone());
    assert_eq!(store.list_runs(&filter).await.unwrap().len(), 3);
    let filter = RunFilter::new()
        .graph(graph.clone())
        .state(RunState::Interrupted);
    let listed = store.list_runs(&filter).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].thread, asking);
}

/// A cancel request is recorded on an unfinished run and cleared when it finishes; the
/// runs asked to stop are found among many in one read.
pub(super) async fn cancel_requests_are_recorded(store: &dyn Store) {
    // A quote and a backslash: the names reach the query as a list, not as SQL text.
    let (thread, graph) = (unique("cancel \"a\\b\" é"), unique("graph"));
    let (other, never_ran) = (unique("cancel-other"), unique("cancel-never"));
    assert!(store.request_cancel(&thread, 1).await.unwrap().is_none());
    store
        .submit_run(&thread, &graph, json!(0), 1)
        .await
        .unwrap();
    // Of another graph: the claim below takes `thread`'s run.
    (store.submit_run(&other, &unique("graph"), json!(0), 1))
        .await
        .unwrap();
    let threads: Vec<Arc<str>> = [&thread, &other, &never_ran]
        .map(|thread| Arc::from(thread.as_str()))
        .into();
    assert!(store.cancels_requested(&threads).await.unwrap().is_empty());
    let record = store.request_cancel(&thread, 2).await.unwrap().unwrap();
    assert!(record.cancel_requested);
    let asked = store.cancels_requested(&threads).await.unwrap();
    assert_eq!(asked, [Arc::clone(&threads[0])]);
    assert!(store.cancels_requested(&[]).await.unwrap().is_empty());
    let run = store
        .claim_next_run(&[graph], "w", LATER, 3, 3)
        .await
        .unwrap()
        .unwrap();
    assert!(run.record.cancel_requested);
    let cp = Checkpoint::new(&thread, 1, "", 0, RunStatus::Cancelled, json!({"state": 0}));
    store.put_checkpoint_and_release(cp, "w").await.unwrap();
    let record = store.get_run(&thread).await.unwrap().unwrap();
    assert_eq!(record.state, RunState::Cancelled);
    assert!(!record.cancel_requested);
    let again = store.request_cancel(&thread, 4).await.unwrap().unwrap();
    assert!(!again.cancel_requested, "a finished run is left as it is");
    assert!(store.cancels_requested(&threads).await.unwrap().is_empty());
}

/// Many workers claiming at once: every queued run is claimed by exactly one of them.
pub(super) async fn concurrent_workers_claim_each_run_once(store: Arc<dyn Store>) {
    const RUNS: usize = 40;
    const WORKERS: usize = 8;
    let graph = unique("graph");
    let mut submitted = BTreeSet::new();
    for n in 0..RUNS {
        let thread = format!("{}-{n}", unique("many"));
        assert_eq!(
            store
                .submit_run(&thread, &graph, json!(n), 1)
                .await
                .unwrap(),
            Submitted::Queued
        );
        submitted.insert(thread);
    }
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (store, graphs) = (Arc::clone(&store), vec![graph.clone()]);
            tokio::spawn(async move {
                let owner = format!("worker-{w}");
                let mut claimed = Vec::new();
                while let Some(run) = store
                    .claim_next_run(&graphs, &owner, LATER, 2, 2)
                    .await
                    .unwrap()
                {
                    assert_eq!(run.record.lease_owner.as_deref(), Some(owner.as_str()));
                    claimed.push(run.record.thread);
                }
                claimed
            })
        })
        .collect();
    let mut claimed = Vec::new();
    for worker in workers {
        claimed.extend(worker.await.unwrap());
    }
    let mut distinct = BTreeSet::new();
    let twice: BTreeSet<&String> = claimed.iter().filter(|t| !distinct.insert(*t)).collect();
    assert!(twice.is_empty(), "runs claimed more than once: {twice:?}");
    let distinct: BTreeSet<String> = distinct.into_iter().cloned().collect();
    assert_eq!(distinct, submitted, "every queued run is claimed");
    for thread in &submitted {
        let record = store.get_run(thread).await.unwrap().unwrap();
        assert_eq!(record.attempts, 1, "{thread} was claimed once");
    }
}

/// A suspended run whose execution died (claimed, never written again) is runnable once its
/// lease runs out; one let go without a write is runnable only at its wake time, as before.
pub(super) async fn a_claimed_suspended_run_whose_execution_died_is_runnable(store: &dyn Store) {
    let graph = unique("graph");
    let graphs = [graph.clone()];
    let died = unique("died");
    suspend(store, &died, &graph, vec![interrupt(Some("go"), None)]).await;
    // An execution claims it (its signal arrived and was consumed), then dies.
    assert_eq!(
        store.claim(&died, "dead", 100, 10).await.unwrap(),
        crate::runtime::store::Claim::Claimed
    );
    let next = |owner: &'static str, now: u64| {
        let graphs = graphs.clone();
        async move {
            store
                .claim_next_run(&graphs, owner, LATER, now, now)
                .await
                .unwrap()
                .map(|run| run.record.thread)
        }
    };
    assert_eq!(next("w1", 50).await, None, "its lease still runs");
    assert_eq!(next("w1", 100).await.as_deref(), Some(died.as_str()));
    // Let go without a write: back to waiting for its signal.
    store.release(&died, "w1").await.unwrap();
    assert_eq!(next("w2", 200).await, None);
}

/// A suspended run let go half way (`release_runnable`) is runnable at once, whatever the
/// worker's clock: waiting for a signal, or interrupted beside a signal wait (a subgraph's
/// child may have taken the signal before its parent stopped).
pub(super) async fn a_run_let_go_half_way_is_runnable_at_once(store: &dyn Store) {
    let graph = unique("graph");
    let graphs = [graph.clone()];
    let beside_a_value = vec![interrupt(None, None), interrupt(Some("go"), None)];
    for waits in [vec![interrupt(Some("go"), None)], beside_a_value] {
        let thread = unique("half-way");
        suspend(store, &thread, &graph, waits).await;
        let claimed = store.claim(&thread, "stopped", LATER, 1).await.unwrap();
        assert_eq!(claimed, crate::runtime::store::Claim::Claimed);
        store.release_runnable(&thread, "stopped").await.unwrap();
        let next = store
            .claim_next_run(&graphs, "w", LATER, 2, 2)
            .await
            .unwrap();
        assert_eq!(
            next.map(|run| run.record.thread).as_deref(),
            Some(thread.as_str())
        );
    }
}

/// A failure's message is recorded whatever characters it holds: one with a NUL (a node's
/// error quoting raw bytes) ends its run as failed, on the row and in the checkpoint, and
/// reads back with its text around the NUL (PostgreSQL, whose `TEXT` cannot hold a NUL,
/// keeps U+FFFD in its place).
pub(super) async fn a_failure_with_a_nul_in_its_message_is_recorded(store: &dyn Store) {
    let message = "bad\0byte";
    let kept = |error: Option<&str>| error.is_some_and(|e| e == message || e == "bad\u{FFFD}byte");
    let failed_with_it = async |thread: &str| {
        let record = store.get_run(thread).await.unwrap().unwrap();
        assert_eq!(record.state, RunState::Failed);
        assert!(
            kept(record.error.as_deref()),
            "run error {:?}",
            record.error
        );
    };
    let thread = unique("nul-checkpoint");
    assert_eq!(
        store.claim(&thread, "w", LATER, 1).await.unwrap(),
        crate::runtime::store::Claim::Claimed
    );
    let mut cp = Checkpoint::new(&thread, 1, "", 1, RunStatus::Failed, json!({"state": 1}));
    cp.error = Some(message.to_owned());
    let id = store.put_checkpoint_and_release(cp, "w").await.unwrap();
    let read = store.get_checkpoint(&thread, id).await.unwrap().unwrap();
    assert!(
        kept(read.error.as_deref()),
        "checkpoint error {:?}",
        read.error
    );
    failed_with_it(&thread).await;

    let thread = unique("nul-finish");
    let graph = unique("graph");
    store
        .submit_run(&thread, &graph, json!(1), 1)
        .await
        .unwrap();
    let graphs = [graph];
    let claimed = store
        .claim_next_run(&graphs, "w", LATER, 2, 2)
        .await
        .unwrap();
    assert!(claimed.is_some(), "the submitted run is claimed");
    let failed = store.finish_run(&thread, "w", RunState::Failed, Some(message.to_owned()));
    failed.await.unwrap();
    failed_with_it(&thread).await;
}

/// Old pending signals of sessions with no unfinished run are dropped (kept as consumed when
/// they have an idempotency key, so that a retried send is still a duplicate); the prune
/// leaves the signals of a queued, held or suspended run whatever their age, those of the
/// sessions the caller spares, and newer ones.
///
/// The old signals are sent in the first second of 1970, before the cutoff and before
/// anything the other checks send, so that pruning touches nothing else a store holds.
/// Another run of this check on the same store may drop this one's signals first: only
/// what is left is checked, not the count.
pub(super) async fn old_signals_of_sessions_without_a_run_are_dropped(store: &dyn Store) {
    const CUTOFF_MS: u64 = 5_000;
    let old = |session: &str, key: Option<&str>| {
        let mut old = signal(session, "ping", 1, key);
        old.sent_at_ms = 100;
        old
    };
    let graph = unique("graph");
    let [orphan, keyed, recent, spared, queued, held, waiting, done] = [
        "orphan", "keyed", "recent", "spared", "queued", "held", "waiting", "done",
    ]
    .map(unique);
    store
        .submit_run(&queued, &graph, json!(0), 10)
        .await
        .unwrap();
    assert_eq!(
        store.claim(&held, "runner", LATER, 10).await.unwrap(),
        crate::runtime::store::Claim::Claimed
    );
    suspend(store, &waiting, &graph, vec![interrupt(Some("ping"), None)]).await;
    assert_eq!(
        store.claim(&done, "runner", LATER, 10).await.unwrap(),
        crate::runtime::store::Claim::Claimed
    );
    let body = json!({"state": 1, "graph": "fingerprint", "graph_name": graph});
    let cp = Checkpoint::new(&done, 1, "", 1, RunStatus::Completed, body);
    store
        .put_checkpoint_and_release(cp, "runner")
        .await
        .unwrap();

    let sent = [
        old(&orphan, None),
        old(&keyed, Some("k")),
        signal(&recent, "ping", 1, None),
        old(&spared, None),
        old(&queued, None),
        old(&held, None),
        old(&waiting, None),
        old(&done, None),
    ];
    for signal in sent {
        assert!(matches!(
            store.push_signal(signal).await.unwrap(),
            SignalPush::Stored(_)
        ));
    }

    store
        .prune_signals(CUTOFF_MS, std::slice::from_ref(&spared))
        .await
        .unwrap();
    let pending: BTreeSet<String> = (store.pending_signals().await.unwrap())
        .into_iter()
        .map(|s| s.session)
        .collect();
    for session in [&orphan, &keyed, &done] {
        assert!(!pending.contains(session), "{session} is dropped");
    }
    for session in [&recent, &spared, &queued, &held, &waiting] {
        assert!(pending.contains(session), "{session} keeps its signal");
    }
    assert_eq!(
        store.push_signal(old(&keyed, Some("k"))).await.unwrap(),
        SignalPush::Duplicate,
        "a dropped signal's idempotency key is still remembered"
    );
    store.release(&held, "runner").await.unwrap();
}
