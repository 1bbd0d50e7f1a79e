use loomflow as lf;
use loomflow::prelude::*;

// A misspelt argument is the one error: the description and the crate path given beside
// it still count (no "needs a description", no unresolved `::loomflow` paths).
#[tool(description = "Gets the weather.", crate = lf, approve)]
fn weather(city: String) -> String {
    city
}

fn main() {}
