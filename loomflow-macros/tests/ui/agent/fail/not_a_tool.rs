use loomflow::prelude::*;

struct NotATool;

/// Uses something that is not a tool.
#[agent(model = "echo", tools(NotATool))]
struct Confused;

fn main() {}
