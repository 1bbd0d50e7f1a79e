//! The scenario of a worker with a long poll interval that carries on runs when their timer
//! or wait deadline is due, for every store that runs a worker.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use loomflow::prelude::*;
use loomflow::runtime::RunState;
use loomflow::{RunError, SignalError};

/// What the two one-second runs did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Timed {
    pub(crate) slept: bool,
    pub(crate) approved: Option<bool>,
    pub(crate) timed_out: bool,
}

/// `nap` sleeps durably for a second; `hurry` waits a second at most for `approve`.
pub(crate) fn one_second_graphs() -> [CompiledGraph<Timed>; 2] {
    let nap = Graph::new("nap")
        .node_fn("nap", |timed: &mut Timed, ctx| {
            Box::pin(async move {
                ctx.sleep(Duration::from_secs(1)).await?;
                timed.slept = true;
                Ok(())
            })
        })
        .edge(START, "nap")
        .edge("nap", END)
        .compile()
        .unwrap();
    let hurry = Graph::new("hurry")
        .node_fn("hurry", |timed: &mut Timed, ctx| {
            Box::pin(async move {
                let wait = ctx.wait_for_signal::<bool>("approve");
                match wait.timeout(Duration::from_secs(1)).await {
                    Ok(approved) => timed.approved = Some(approved),
                    Err(RunError::Signal(SignalError::Timeout { .. })) => timed.timed_out = true,
                    Err(other) => return Err(other.into()),
                }
                Ok(())
            })
        })
        .edge(START, "hurry")
        .edge("hurry", END)
        .compile()
        .unwrap();
    [nap, hurry]
}

/// A worker whose poll interval is a minute carries on a run it suspended on a timer, and
/// one whose wait has a deadline, when they are due: each within 20 s, long before its next
/// poll.
pub(crate) async fn timers_and_deadlines_fire_when_due(runtime: &Runtime) {
    let [nap, hurry] = one_second_graphs();
    let finished = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&finished);
    let handle = Worker::builder(runtime)
        .graph(&nap)
        .graph(&hurry)
        .poll_interval(Duration::from_secs(60))
        .park_grace(Duration::from_millis(10))
        .on_finished(move |report| {
            seen.lock()
                .unwrap()
                .push((report.thread.clone(), report.state));
        })
        .build()
        .start();
    runtime
        .submit("nap", "t-1", Timed::default())
        .await
        .unwrap();
    runtime
        .submit("hurry", "t-2", Timed::default())
        .await
        .unwrap();
    for thread in ["t-1", "t-2"] {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let record = runtime.run(thread).await.unwrap().record;
            if record.state == RunState::Completed {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{thread} was not carried on when due: {record:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    handle.shutdown().await.unwrap();
    let mut finished = finished.lock().unwrap().clone();
    finished.sort_by(|a, b| a.0.cmp(&b.0)); // stable: each run's reports stay in order
    assert_eq!(
        finished,
        [
            ("t-1".to_owned(), RunState::Sleeping),
            ("t-1".to_owned(), RunState::Completed),
            ("t-2".to_owned(), RunState::Waiting),
            ("t-2".to_owned(), RunState::Completed),
        ],
        "each run suspended (a second is far longer than the grace), then went on"
    );
    let slept: Timed = runtime.get_state("t-1").await.unwrap().unwrap();
    let hurried: Timed = runtime.get_state("t-2").await.unwrap().unwrap();
    assert!(slept.slept, "{slept:?}");
    assert!(hurried.timed_out, "{hurried:?}");
}
