use loomflow::prelude::*;
use loomflow::tool::ToolContext;

/// A tool refused for another reason reports only that reason: its parameters' `#[serde]`
/// attributes and doc comments are not reported too.
#[tool]
fn borrowed(
    /// How many.
    #[serde(default)]
    limit: u32,
    city: &str,
) -> String {
    format!("{city} {limit}")
}

/// The context takes no argument attributes.
#[tool]
fn contextual(
    #[serde(default)] ctx: &ToolContext,
    n: u32,
) -> u32 {
    let _ = ctx;
    n
}

fn main() {}
