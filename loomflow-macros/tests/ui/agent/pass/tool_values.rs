use loomflow::prelude::*;

/// Add two numbers.
#[tool]
fn add(a: i64, b: i64) -> i64 {
    a + b
}

/// Subtract one number from another.
#[tool]
fn subtract(a: i64, b: i64) -> i64 {
    a - b
}

/// A tool made by a function call.
fn subtraction() -> subtract {
    subtract
}

/// You do sums. `tools(..)` takes any value implementing `Tool`: a path, a call.
#[agent(model = "echo", tools(add, subtraction()))]
struct Sums;

fn main() {
    let builder = Sums::builder();
    let _ = builder;
}
