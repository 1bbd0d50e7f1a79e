#![allow(dead_code)]
use loomflow::prelude::*;

// User types that share names with what the macro generates must not confuse it.
struct Result;
struct Option;
struct Box;
struct Value;
struct Send;
struct Pin;
struct Future;
struct OnceLock;
struct ToolSpec;
struct ToolError;
mod std {}
mod core {}
mod serde {}
mod schemars {}
mod serde_json {}

/// Weather.
#[tool]
async fn weather(city: ::std::string::String, days: ::core::option::Option<u8>) -> ::std::string::String {
    let _ = days;
    city
}

/// Fallible.
#[tool]
fn check(n: i32) -> ::core::result::Result<i32, ::std::string::String> {
    ::core::result::Result::Ok(n)
}

fn main() {
    let _ = ToolHost::new().with(weather).with(check);
}
