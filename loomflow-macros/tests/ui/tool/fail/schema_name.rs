use loomflow::prelude::*;

/// A tool fn named as the JSON schema derive's own bindings is refused, naming the way
/// out, rather than with errors inside generated code.
#[tool]
fn schema(table: String) -> String {
    table
}

/// The same for the other name.
#[tool]
fn generator(seed: u32) -> u32 {
    seed
}

/// The way out: another fn name, the tool's name kept.
#[tool(name = "schema")]
fn table_schema(table: String) -> String {
    table
}

fn main() {}
