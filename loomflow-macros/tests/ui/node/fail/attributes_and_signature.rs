use loomflow::prelude::*;

#[derive(Clone, Default, Serialize, Deserialize)]
struct S {
    n: u32,
}

// Attribute and signature problems are reported together, each where it is.
#[node(label = "x")]
fn step(state: &mut S, extra: u8) {
    state.n += u32::from(extra);
}

// A fn whose state type is unknown still gives a value usable as a node.
#[node(name = "")]
async fn by_value(state: S) {
    let _ = state;
}

fn main() {
    // The node's value and body are still emitted: no follow-on errors here.
    let _ = Graph::new("g").node(step).node(by_value);
    step::call(&mut S::default(), 1);
}
