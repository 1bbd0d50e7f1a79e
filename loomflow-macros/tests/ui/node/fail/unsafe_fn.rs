use loomflow::prelude::*;

#[derive(Clone, Default, Serialize, Deserialize)]
struct S {
    n: u32,
}

#[node]
async unsafe fn raw(state: &mut S) {
    state.n += 1;
}

fn main() {}
