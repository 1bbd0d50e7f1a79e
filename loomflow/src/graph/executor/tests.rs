//! Tests of the executor's internals.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::graph::run::RunBuilder;
use crate::graph::{END, Graph, START};

/// A run's future is moved whole when it is boxed (`.await` on a `RunBuilder`) or
/// spawned, once per run. It held 3,576 bytes when each layer was an `async fn` that kept
/// its arguments twice; the bound leaves room for compilers that lay it out differently.
#[test]
#[cfg(target_pointer_width = "64")]
fn a_run_future_stays_small() {
    let graph = Graph::new("g")
        .node_sync("a", |s: &mut u64| *s += 1)
        .edge(START, "a")
        .edge("a", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let builder = RunBuilder::new(graph, runtime, "t".into(), Start::Fresh(1_u64));
    let run = execute(builder.into_execution(None));
    let size = std::mem::size_of_val(&run);
    assert!(size <= 2_800, "a run's future is {size} bytes");
}
