//! A run that executes until the test lets it finish: its one node says it has started and
//! waits to be told to go on, so that its claim on the thread is held meanwhile.
#![allow(dead_code)]

use std::sync::Arc;

use loomflow::prelude::*;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

pub(crate) struct HeldRun {
    go_on: Arc<Notify>,
    run: JoinHandle<loomflow::Result<u32>>,
}

impl HeldRun {
    /// Starts a run on `thread` of `runtime` from `input`, and returns once its node
    /// executes.
    pub(crate) async fn start(runtime: &Runtime, thread: &str, input: u32) -> Self {
        let (entered, go_on) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let graph = {
            let (entered, go_on) = (Arc::clone(&entered), Arc::clone(&go_on));
            Graph::new("held")
                .node_fn("work", move |n: &mut u32, _ctx| {
                    let (entered, go_on) = (Arc::clone(&entered), Arc::clone(&go_on));
                    Box::pin(async move {
                        entered.notify_one();
                        go_on.notified().await;
                        *n += 1;
                        Ok(())
                    })
                })
                .edge(START, "work")
                .edge("work", END)
                .compile()
                .expect("the held graph compiles")
        };
        let (runtime, thread) = (runtime.clone(), thread.to_owned());
        let run =
            tokio::spawn(
                async move { Ok(graph.invoke(&runtime, thread, input).await?.completed()?) },
            );
        entered.notified().await;
        Self { go_on, run }
    }

    /// Drops the run where it stands, as a crash would: its row stays running, a worker's
    /// to carry on.
    pub(crate) async fn abandon(self) {
        self.run.abort();
        let _ = self.run.await;
    }

    /// Lets the node finish; the state the run completed with (its input, plus one).
    pub(crate) async fn finish(self) -> u32 {
        self.go_on.notify_one();
        self.run
            .await
            .expect("the held run's task")
            .expect("the held run completes")
    }
}
