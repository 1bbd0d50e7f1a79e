use loomflow::prelude::*;

#[derive(Clone, Default, Serialize, Deserialize)]
struct S {
    n: u32,
}

/// Adds one.
#[node]
async fn add(state: &mut S, _ctx: &Context) -> loomflow::Result<()> {
    state.n += 1;
    Ok(())
}

#[node(name = "no context", crate = ::loomflow)]
pub async fn plain(state: &mut S) {
    state.n += 2;
}

fn main() {
    let _graph = Graph::new("g")
        .node(add)
        .node(plain)
        .edge(START, "add")
        .edge("add", "no context")
        .edge("no context", END)
        .compile()
        .unwrap();
}
