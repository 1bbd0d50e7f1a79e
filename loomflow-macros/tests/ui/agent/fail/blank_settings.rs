use loomflow::prelude::*;

#[agent(model = "echo", name = " ", instructions = "")]
struct Blank;

fn main() {}
