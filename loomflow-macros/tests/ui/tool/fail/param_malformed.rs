use loomflow as lf;
use loomflow::prelude::*;

// A malformed parameter description is the one error: the description, the crate path and
// the other parameter's description beside it still count.
#[tool(description = "Gets the weather.", crate = lf, param(city = 5, days = "How many days"))]
fn weather(city: String, days: u8) -> String {
    format!("{city} {days}")
}

fn main() {}
