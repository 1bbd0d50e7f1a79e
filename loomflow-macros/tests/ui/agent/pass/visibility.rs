// #[agent] keeps the struct's visibility: it neither drops it nor widens it.
mod agents {
    /// Private to this module.
    #[loomflow::agent(model = "echo")]
    struct Hidden;

    /// Visible to the crate.
    #[loomflow::agent(model = "echo")]
    pub(crate) struct Shared;

    pub(crate) mod open {
        /// Public, in a module the crate can see.
        #[loomflow::agent(model = "echo")]
        pub struct Open;
    }

    pub(crate) fn hidden_name() -> String {
        Hidden::agent().unwrap().name().to_owned()
    }
}

fn main() {
    assert_eq!(agents::Shared::agent().unwrap().name(), "shared");
    assert_eq!(agents::open::Open::builder().build().unwrap().name(), "open");
    assert_eq!(agents::hidden_name(), "hidden");
}
