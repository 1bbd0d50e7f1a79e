use loomflow::prelude::*;

/// Looks a city up.
#[doc = concat!("Returns its ", "weather.")]
#[tool]
fn weather(city: String) -> String {
    city
}

fn main() {}
