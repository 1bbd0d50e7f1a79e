use loomflow::prelude::*;

#[node]
async fn step<T: Default>(state: &mut T) {
    *state = T::default();
}

fn main() {}
