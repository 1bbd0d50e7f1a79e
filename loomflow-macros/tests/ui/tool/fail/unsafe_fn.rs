use loomflow::prelude::*;

/// Unsafe.
#[tool]
unsafe fn raw(n: u32) -> u32 {
    n
}

fn main() {}
