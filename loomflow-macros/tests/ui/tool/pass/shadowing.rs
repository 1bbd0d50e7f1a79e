use loomflow::prelude::*;

mod tools {
    use loomflow::prelude::*;

    /// Looks a key up.
    #[tool]
    pub fn lookup(key: String) -> String {
        key
    }
}

use tools::lookup;

// Bindings named like the tool are fine where the tool is not in scope.
mod elsewhere {
    pub fn twice(lookup: &str) -> String {
        let lookup = lookup.repeat(2);
        lookup
    }
}

fn main() {
    assert_eq!(elsewhere::twice("a"), "aa");
    // Everything the tool's name stands for still works.
    assert_eq!(lookup.spec().name, "lookup");
    assert_eq!(lookup::call("k".to_owned()), "k");
    let copy = lookup;
    let host = ToolHost::new().with(copy);
    assert_eq!(host.list().len(), 1);
}
