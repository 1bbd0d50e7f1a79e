use loomflow::prelude::*;

#[node(name = "a", name = "b")]
async fn duplicate(state: &mut u32) {
    *state += 1;
}

#[node(label = "x")]
async fn unknown(state: &mut u32) {
    *state += 1;
}

#[node(name = "")]
async fn empty(state: &mut u32) {
    *state += 1;
}

fn main() {}
