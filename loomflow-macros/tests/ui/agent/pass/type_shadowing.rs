#![allow(dead_code)]
use loomflow::prelude::*;

struct Result;
struct Option;
struct Duration;
struct Agent;
struct AgentBuilder;
mod core {}
mod std {}

/// Shadowed names do not confuse the generated code.
#[agent(model = "echo", timeout_secs = 5)]
struct Quiet;

fn main() {
    let _ = Quiet::agent();
}
