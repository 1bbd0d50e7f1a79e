use loomflow::prelude::*;

struct Thing;

impl Thing {
    #[node]
    async fn step(&self, state: &mut u32) {
        *state += 1;
    }
}

fn main() {}
