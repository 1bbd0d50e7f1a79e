use loomflow::prelude::*;

/// Documented, but the attribute's blank description would be what the model reads.
#[tool(description = "  ")]
fn blank(city: String) -> String {
    city
}

fn main() {
    let _ = ToolHost::new().with(blank);
}
