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

/// Renamed only to read: `c` and `a`, apart (no error here).
#[tool]
fn apart(#[serde(rename(deserialize = "c"))] a: String, #[serde(rename = "a")] b: String) -> String {
    format!("{a} {b}")
}

/// Renamed only to read, onto another's name.
#[tool]
fn onto(#[serde(rename(serialize = "x", deserialize = "b"))] a: String, b: String) -> String {
    format!("{a} {b}")
}

fn main() {}
