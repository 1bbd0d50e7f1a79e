use loomflow::prelude::*;

/// Described twice, and by a macro.
#[tool(param(city = "The city"))]
fn lookup(
    #[schemars(description = "The city, again")] city: String,
    #[doc = include_str!("parameter_descriptions.rs")] note: String,
) -> String {
    format!("{city} {note}")
}

/// A cfg_attr that would configure a parameter out, or shape its argument unseen.
#[tool]
fn shaped(
    #[cfg_attr(test, cfg(any()))] a: u32,
    #[cfg_attr(test, serde(default))] b: u32,
    #[cfg_attr(test, allow(unused_variables))] c: u32,
) -> u32 {
    a + b + c
}

fn main() {}
