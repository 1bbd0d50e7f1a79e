use loomflow::prelude::*;

/// Unknown.
#[tool(label = "x")]
fn unknown() {}

fn main() {}
