use loomflow::prelude::*;

/// Count down. A parameter's `cfg_attr` stays on the fn.
#[tool]
fn countdown(#[cfg_attr(test, allow(unused_variables))] from: u32) -> u32 {
    from.saturating_sub(1)
}

fn main() {
    assert_eq!(countdown::call(3), 2);
}
