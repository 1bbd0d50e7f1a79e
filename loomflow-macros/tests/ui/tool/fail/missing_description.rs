use loomflow::prelude::*;

#[tool]
fn undocumented(city: String) -> String {
    city
}

fn main() {
    // The tool's value and body are still emitted: only the missing description is reported.
    let _ = undocumented::call("Lyon".to_owned());
    let _ = ToolHost::new().with(undocumented);
}
