//! The context is the second parameter whatever it is called: a renamed import, an alias.

use loomflow::prelude::*;

use loomflow::Context as FlowContext;

type Ctx = loomflow::Context;

#[node]
async fn renamed(state: &mut u32, ctx: &FlowContext) -> loomflow::Result<()> {
    *state += u32::try_from(ctx.node().len()).unwrap_or(0);
    Ok(())
}

#[node]
async fn aliased(state: &mut u32, ctx: &Ctx) {
    let _ = ctx.thread();
    *state += 1;
}

fn main() {
    let graph = Graph::new("renamed")
        .node(renamed)
        .node(aliased)
        .edge(START, "renamed")
        .edge("renamed", "aliased")
        .edge("aliased", END)
        .compile()
        .unwrap();
    let _ = graph;
}
