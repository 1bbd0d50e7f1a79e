//! An operator takes a payload no wait can read out of its queue (`Runtime::drop_signal`):
//! the run that failed on it carries on with the corrected one sent after it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use loomflow::prelude::*;
use loomflow::runtime::{AuditKind, AuditQuery};
use loomflow_tests::TempDb;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Refund {
    approved: Option<bool>,
}

#[derive(Deserialize)]
struct Review {
    approved: bool,
}

/// Wait for the manager's review, letting an unreadable one out as the node's error.
#[node]
async fn ask_manager(state: &mut Refund, ctx: &Context) -> loomflow::Result<()> {
    let review: Review = ctx.wait_for_signal("review").await?;
    state.approved = Some(review.approved);
    Ok(())
}

fn refund_graph() -> CompiledGraph<Refund> {
    Graph::new("refund")
        .node(ask_manager)
        .edge(START, "ask_manager")
        .edge("ask_manager", END)
        .compile()
        .unwrap()
}

/// The run fails on the unreadable payload, and again at every recover while it is queued;
/// dropped by `operator`, the corrected one behind it is taken.
async fn fails_then_carries_on_once_dropped(runtime: &Runtime, operator: &Runtime) {
    let graph = refund_graph();
    operator
        .signal("order-7", "review", json!("yes"))
        .await
        .unwrap();
    operator
        .signal("order-7", "review", json!({ "approved": true }))
        .await
        .unwrap();
    let out = graph
        .invoke(runtime, "order-7", Refund::default())
        .await
        .unwrap();
    assert!(matches!(out, RunOutcome::Failed { .. }), "{out:?}");
    let again = graph.recover(runtime, "order-7").await.unwrap();
    assert!(matches!(again, RunOutcome::Failed { .. }), "{again:?}");

    let dropped = operator.drop_signal("order-7", "review", "ops@example.com");
    assert_eq!(dropped.await.unwrap(), Some(json!("yes")));
    let done = graph.recover(runtime, "order-7").await.unwrap();
    assert_eq!(done.completed().unwrap().approved, Some(true));
    // Nothing is left to drop: the corrected payload was the run's.
    let none = operator.drop_signal("order-7", "review", "ops@example.com");
    assert_eq!(none.await.unwrap(), None);

    let decisions = (operator
        .audit_query(&AuditQuery::thread("order-7").kind(AuditKind::Decision)))
    .await
    .unwrap();
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(decisions[0].subject, "review");
    assert_eq!(decisions[0].actor.as_deref(), Some("ops@example.com"));
    assert_eq!(decisions[0].detail["dropped"], true);
    assert_eq!(decisions[0].detail["payload"], "yes");
}

#[tokio::test]
async fn a_dropped_payload_lets_the_run_take_the_next_in_memory() {
    let runtime = Runtime::in_memory();
    fails_then_carries_on_once_dropped(&runtime, &runtime).await;
}

/// The operator's process is another runtime on the same file, as `loomflow drop-signal` is.
#[tokio::test]
async fn a_payload_dropped_by_another_process_is_not_taken_by_the_run() {
    let db = TempDb::new("signal-drop");
    let runtime = Runtime::sqlite(db.path()).unwrap();
    let operator = Runtime::sqlite(db.path()).unwrap();
    fails_then_carries_on_once_dropped(&runtime, &operator).await;
}

#[tokio::test]
async fn dropping_a_reserved_or_blank_name_is_refused() {
    let runtime = Runtime::in_memory();
    let blank = runtime.drop_signal("order-7", " ", "ops").await;
    assert!(blank.unwrap_err().to_string().contains("is empty"));
    let reserved = runtime
        .drop_signal("order-7", "loomflow:approval:c1", "ops")
        .await;
    assert!(reserved.unwrap_err().to_string().contains("loomflow:"));
}
