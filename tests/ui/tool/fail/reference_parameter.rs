use loomflow::prelude::*;

/// Borrowed.
#[tool]
fn borrowed(city: &str) -> String {
    city.to_owned()
}

fn main() {}
