use loomflow::prelude::*;

#[derive(Clone, Default, Serialize, Deserialize)]
struct Pair {
    first: u32,
}

/// A node's name is a static: a binding of the same name where the node is in scope is
/// refused with a clear error rather than a type error about the node.
#[node]
async fn first(state: &mut Pair) {
    state.first += 1;
}

fn bind() -> u32 {
    let first = 5;
    first
}

fn destructure(pair: Pair) -> u32 {
    let Pair { first, .. } = pair;
    first
}

fn parameter(first: u32) -> u32 {
    first
}

fn main() {
    let _ = (bind(), destructure(Pair::default()), parameter(1));
}
