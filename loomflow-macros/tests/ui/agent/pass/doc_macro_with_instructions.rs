//! A doc comment written by a macro is only for rustdoc once `instructions` are given.
use loomflow::prelude::*;

#[doc = concat!("A researcher ", "agent.")]
#[agent(model = "echo", instructions = "You are a researcher.")]
struct Researcher;

fn main() {
    let _ = Researcher::agent();
}
