use loomflow::prelude::*;

/// A description given for the context, and for a parameter refused for its type: the
/// first is told what the context is, the second only why its type is refused.
#[tool(param(ctx = "The context", city = "The city", nothing = "Not there"))]
fn lookup(city: &str, ctx: &ToolContext) -> String {
    let _ = ctx;
    city.to_owned()
}

fn main() {}
