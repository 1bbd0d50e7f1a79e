use loomflow::prelude::*;

#[node]
fn step(state: &mut u32) {
    *state += 1;
}

fn main() {}
