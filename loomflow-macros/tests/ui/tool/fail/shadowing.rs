use loomflow::prelude::*;

/// A tool's name is a static: a binding of the same name in its module is refused with a
/// clear error rather than a type error about the tool.
#[tool]
fn lookup(key: String) -> String {
    key
}

fn main() {
    let lookup = "key".to_owned();
    let _ = lookup;
}

fn takes(lookup: u32) -> u32 {
    lookup
}
