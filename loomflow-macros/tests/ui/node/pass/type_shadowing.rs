#![allow(dead_code)]
use loomflow::prelude::*;

// User types that share names with what the macro generates must not confuse it.
struct Result;
struct Option;
struct Box;
struct Value;
struct Send;
struct Pin;
struct Future;
mod std {}
mod core {}

#[derive(Clone, Default, Serialize, Deserialize)]
struct S {
    n: u32,
}

#[node]
async fn step(state: &mut S, _ctx: &Context) -> loomflow::Result<()> {
    state.n += 1;
    Ok(())
}

fn main() {
    let _ = Graph::new("g").node(step);
}
