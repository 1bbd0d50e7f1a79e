use loomflow::prelude::*;

/// Adds one.
// Only a `where` clause: refused, pointing at the clause, not at the attribute.
#[tool]
async fn add_one(n: u32) -> Result<u32, ToolError>
where
    u32: Default,
{
    Ok(n + 1)
}

fn main() {}
