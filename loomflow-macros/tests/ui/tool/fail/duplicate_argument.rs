use loomflow::prelude::*;

/// Two parameters the model would name alike.
#[tool]
fn dup(#[serde(rename = "q")] a: String, q: u32) -> String {
    format!("{a} {q}")
}

/// A raw identifier and a rename to its name.
#[tool]
fn kinds(#[serde(default, rename = "type")] kind: String, r#type: String) -> String {
    format!("{kind} {type}", type = r#type)
}

fn main() {}
