use loomflow::prelude::*;

/// Generic.
#[tool]
fn echo<T: Serialize>(value: T) -> T {
    value
}

fn main() {
    // The original fn is still emitted: this call compiles.
    let _: u32 = echo(1);
}

/// Generic in disguise.
#[tool]
fn show(value: impl std::fmt::Display) -> String {
    value.to_string()
}
