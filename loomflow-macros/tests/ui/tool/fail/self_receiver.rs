use loomflow::prelude::*;

struct Service;

impl Service {
    /// A method.
    #[tool]
    fn method(&self, city: String) -> String {
        city
    }
}

fn main() {}
