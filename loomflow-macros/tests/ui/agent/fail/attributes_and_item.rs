use loomflow::prelude::*;

// Attribute and item problems are reported together, each where it is.
#[agent(colour = "red")]
struct Silent;

#[agent(max_turns = 0)]
enum Choice {
    A,
}

fn main() {
    // The constructors are still emitted: no follow-on errors here.
    let _ = Silent::agent();
    let _ = Choice::builder();
}
