use loomflow::prelude::*;

#[derive(Clone)]
struct NotSerde;

#[node]
async fn step(_state: &mut NotSerde) {}

fn main() {}
