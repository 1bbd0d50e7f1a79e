use loomflow::prelude::*;

/// Generic in disguise.
#[node]
async fn apit_state(state: &mut impl loomflow::State) {
    let _ = state;
}

/// Generic in disguise, deeper.
#[node]
async fn nested_state(state: &mut Vec<impl loomflow::State>) {
    let _ = state;
}

fn main() {}
