use loomflow::prelude::*;

/// Generic.
#[tool]
fn echo<T: Serialize>(value: T) -> T {
    value
}

fn main() {
    // The tool's value and body are still emitted: these compile.
    let _: u32 = echo::call(1);
    let _ = ToolHost::new().with(echo).with(show);
}

/// Generic in disguise.
#[tool]
fn show(value: impl std::fmt::Display) -> String {
    value.to_string()
}
