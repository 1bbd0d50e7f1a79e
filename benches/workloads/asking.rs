//! The peer comparison's in-memory interrupt + resume workload (`a → ask → c`, `ask` asks
//! for a value with a small JSON payload), shared by the `interrupt_memory` benchmark and
//! `examples/cycles.rs`, which include this file.

use loomflow::prelude::*;

#[derive(Clone, Default, Serialize, Deserialize)]
pub(crate) struct Ask {
    pub(crate) x: u64,
    pub(crate) answer: Option<String>,
    pub(crate) done: bool,
}

#[node]
async fn ask(state: &mut Ask, ctx: &Context) -> loomflow::Result<()> {
    let answer: String = ctx.interrupt(json!({"question": "value?", "x": state.x}))?;
    state.answer = Some(answer);
    Ok(())
}

/// The graph: `a` counts, `ask` asks, `c` marks the run done.
pub(crate) fn asking() -> CompiledGraph<Ask> {
    Graph::new("interrupt")
        .node_sync("a", |s: &mut Ask| s.x += 1)
        .node(ask)
        .node_sync("c", |s: &mut Ask| s.done = true)
        .edge(START, "a")
        .edge("a", "ask")
        .edge("ask", "c")
        .edge("c", END)
        .compile()
        .expect("valid graph")
}
