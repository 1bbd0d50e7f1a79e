//! loomflow: typed, durable graphs for LLM agents and workflows.

extern crate self as loomflow;

pub mod error;
pub mod model;

#[doc(inline)]
pub use error::{Error, Result};
