use loomflow::prelude::*;

// Only a `where` clause: refused, pointing at the clause, not at the attribute.
#[node]
async fn step(state: &mut u32)
where
    u32: Default,
{
    *state = u32::default();
}

fn main() {}
