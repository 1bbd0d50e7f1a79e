use loomflow::prelude::*;

/// A name with a dot: model providers refuse it.
#[tool(name = "files.read")]
fn read_file(path: String) -> String {
    path
}

/// A name past 64 characters.
#[tool(name = "a_name_that_goes_on_and_on_and_on_well_past_what_providers_accept_x")]
fn long_name() {}

/// A function name that is not ASCII.
#[tool]
fn météo() {}

fn main() {}
