use loomflow::prelude::*;

/// You are a researcher.
#[doc = concat!("Cite ", "your sources.")]
#[agent(model = "echo")]
struct Researcher;

fn main() {}
