//! A one-node graph whose run waits for the signal `go`, and a worker that suspends it there
//! at once: the runs the durable signal tests send signals to.
#![allow(dead_code)]

use std::time::Duration;

use loomflow::prelude::*;

/// `wait` waits a day at most for `go`.
pub(crate) fn waiting_graph() -> CompiledGraph<Option<u32>> {
    Graph::new("waiting")
        .node_fn("wait", |got: &mut Option<u32>, ctx| {
            Box::pin(async move {
                let wait = ctx.wait_for_signal::<u32>("go");
                *got = Some(wait.timeout(Duration::from_secs(86_400)).await?);
                Ok(())
            })
        })
        .edge(START, "wait")
        .edge("wait", END)
        .compile()
        .expect("the waiting graph compiles")
}

/// A worker of the waiting graph that suspends a run as soon as it waits.
pub(crate) fn worker(runtime: &Runtime) -> Worker {
    Worker::builder(runtime)
        .graph(&waiting_graph())
        .park_grace(Duration::ZERO)
        .build()
}
