use loomflow::prelude::*;

/// `impl Trait` inside an option.
#[tool]
fn nested_impl(x: Option<impl Into<String>>) -> String {
    x.map(Into::into).unwrap_or_default()
}

/// `impl Trait` behind a reference.
#[tool]
fn borrowed_impl(x: &impl std::fmt::Display) -> String {
    x.to_string()
}

fn main() {
    // The tools' values are still emitted: this compiles.
    let _ = ToolHost::new().with(nested_impl).with(borrowed_impl);
}
