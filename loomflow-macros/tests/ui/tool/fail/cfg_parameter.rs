use loomflow::prelude::*;

/// A parameter only some builds have.
#[tool]
fn sometimes(#[cfg(test)] extra: u32, always: u32) -> u32 {
    always
}

fn main() {}
