//! Procedural macros for loomflow. Use them through the `loomflow` crate, which re-exports
//! them and documents them with examples.

use proc_macro::TokenStream;

mod agent;
mod common;
mod node;
mod tool;

/// Turns an async fn over `&mut S` (and optionally `&Context`) into a graph node.
///
/// See `loomflow::node` for the full documentation.
#[proc_macro_attribute]
pub fn node(attr: TokenStream, item: TokenStream) -> TokenStream {
    node::expand_attribute(attr.into(), item.into()).into()
}

/// Turns a documented struct into an agent definition: `Name::builder()` and `Name::agent()`.
///
/// See `loomflow::agent` for the full documentation.
#[proc_macro_attribute]
pub fn agent(attr: TokenStream, item: TokenStream) -> TokenStream {
    agent::expand_attribute(attr.into(), item.into()).into()
}

/// Turns a sync or async fn into a tool a model can call.
///
/// See `loomflow::tool` (the attribute) for the full documentation.
#[proc_macro_attribute]
pub fn tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    tool::expand_attribute(attr.into(), item.into()).into()
}
