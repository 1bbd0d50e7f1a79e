use loomflow::prelude::*;

#[agent(model = "echo")]
struct Silent;

fn main() {}
