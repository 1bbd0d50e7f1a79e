use loomflow::prelude::*;

/// Takes its context by value.
#[tool]
fn owned(ctx: ToolContext, city: String) -> String {
    format!("{city} {}", ctx.session)
}

/// Takes its context mutably.
#[tool]
fn mutable(ctx: &mut ToolContext, city: String) -> String {
    format!("{city} {}", ctx.session)
}

fn main() {}
