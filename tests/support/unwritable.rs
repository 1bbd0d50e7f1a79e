//! A state that a durable store cannot write once a node has poisoned it (its `Serialize`
//! fails), after a journaled side effect: the run must fail once, not be let go to be
//! claimed and fail again and again.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use loomflow::prelude::*;
use loomflow::runtime::RunState;
use serde::Serializer;

#[derive(Clone, Debug, Default, Deserialize)]
struct Unwritable {
    poisoned: bool,
}

impl Serialize for Unwritable {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.poisoned {
            return Err(serde::ser::Error::custom(
                "a poisoned state cannot be written",
            ));
        }
        #[derive(Serialize)]
        struct Plain {
            poisoned: bool,
        }
        Plain { poisoned: false }.serialize(serializer)
    }
}

/// A worker runs a node that does a journaled side effect and then poisons the state: the
/// checkpoint cannot be written, and the run fails, claimed once, the effect done once.
pub(crate) async fn a_state_that_cannot_be_written_fails_its_run_once(runtime: &Runtime) {
    let effects = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&effects);
    let graph = Graph::new("unwritable")
        .node_fn("poison", move |state: &mut Unwritable, ctx| {
            let counted = Arc::clone(&counted);
            Box::pin(async move {
                let _: u32 = ctx
                    .step("charge", || async {
                        counted.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, loomflow::Error>(7)
                    })
                    .await?;
                state.poisoned = true;
                Ok(())
            })
        })
        .edge(START, "poison")
        .edge("poison", END)
        .compile()
        .unwrap();
    let worker = Worker::builder(runtime)
        .graph(&graph)
        .poll_interval(Duration::from_millis(20))
        .build()
        .start();
    runtime
        .submit("unwritable", "u-1", json!({"poisoned": false}))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while runtime.run("u-1").await.unwrap().record.state != RunState::Failed {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run never failed: {:?}",
            runtime.run("u-1").await.unwrap().record
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Time for a worker that let the run go to claim it again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let record = runtime.run("u-1").await.unwrap().record;
    assert_eq!(record.state, RunState::Failed);
    assert_eq!(record.attempts, 1, "claimed once: {record:?}");
    assert_eq!(
        effects.load(Ordering::SeqCst),
        1,
        "the side effect ran once"
    );
    let error = record.error.unwrap_or_default();
    assert!(error.contains("poisoned"), "{error}");
    worker.shutdown().await.unwrap();
}
