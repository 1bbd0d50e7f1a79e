use loomflow::prelude::*;

struct Opaque;

/// Uses a type the model cannot send.
#[tool]
fn takes_opaque(value: Opaque) -> String {
    let _ = value;
    String::new()
}

fn main() {}
