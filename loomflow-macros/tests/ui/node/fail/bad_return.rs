use loomflow::prelude::*;

#[node]
async fn step(state: &mut u32) -> u32 {
    *state
}

fn main() {}
