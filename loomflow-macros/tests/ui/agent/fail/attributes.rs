use loomflow::prelude::*;

/// Twice.
#[agent(model = "echo", model = "gpt-4o")]
struct Twice;

/// Unknown.
#[agent(colour = "red")]
struct Unknown;

/// Zero turns.
#[agent(max_turns = 0)]
struct Zero;

fn main() {}
