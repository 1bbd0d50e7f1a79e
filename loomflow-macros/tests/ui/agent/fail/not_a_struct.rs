use loomflow::prelude::*;

/// An enum is not an agent.
#[agent(model = "echo")]
enum Choice {
    A,
}

/// Nor is a generic struct.
#[agent(model = "echo")]
struct Generic<T>(T);

fn main() {}
