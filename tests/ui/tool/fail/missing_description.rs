use loomflow::prelude::*;

#[tool]
fn undocumented(city: String) -> String {
    city
}

fn main() {
    // The original fn is still emitted: only the missing description is reported.
    let _ = undocumented("Lyon".to_owned());
}
