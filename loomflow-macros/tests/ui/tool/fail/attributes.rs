use loomflow::prelude::*;

/// Duplicates.
#[tool(name = "a", name = "b")]
fn dup_name() {}

/// Duplicate flags.
#[tool(approval, destructive, approval)]
fn dup_flag() {}

/// Duplicate parameter descriptions.
#[tool(param(x = "one"), param(x = "two"))]
fn dup_param(x: u32) -> u32 {
    x
}

/// A description for a parameter that does not exist.
#[tool(param(y = "why"))]
fn no_such_param(x: u32) -> u32 {
    x
}

fn main() {}
