use loomflow::prelude::*;
use std::borrow::Cow;

/// Borrowed.
#[tool]
fn borrowed(city: &str) -> String {
    city.to_owned()
}

/// Borrowed inside.
#[tool]
fn tags(names: Vec<&str>, note: Option<&str>) -> String {
    format!("{names:?} {note:?}")
}

/// Borrowed copy-on-write.
#[tool]
fn cows(elided: Cow<str>, named: Cow<'static, str>) -> String {
    format!("{elided} {named}")
}

fn main() {}
