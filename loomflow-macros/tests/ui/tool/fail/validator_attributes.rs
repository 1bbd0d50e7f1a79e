use loomflow::prelude::*;

/// A derive's helper attribute on a parameter (the validator crate's, garde's) would be
/// applied by nothing: refused, naming it and what bounds a value instead.
#[tool]
fn bounded(
    /// How many.
    #[validate(range(min = 1, max = 10))]
    limit: u32,
    #[garde(length(min = 1))] city: String,
    #[allow(unused_variables)] note: Option<String>,
) -> String {
    format!("{city} {limit}")
}

fn main() {}
