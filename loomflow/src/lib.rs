//! loomflow: typed, durable graphs for LLM agents and workflows.
//!
//! Write steps as async functions over your own state type, wire them into a [`Graph`] with
//! edges, branches, fan-outs and joins, [`compile`](Graph::compile) it (every structural
//! problem is reported at once), and run it on a [`Runtime`]. Runs advance in supersteps:
//! every active node runs concurrently on its own copy of the state, their changes merge
//! deterministically, and a checkpoint is taken.
//!
//! # Examples
//!
//! ```
//! use loomflow::prelude::*;
//!
//! #[derive(Clone, Debug, Default, Serialize, Deserialize)]
//! struct Trip { city: String, notes: Vec<String>, booked: bool }
//!
//! /// Look up the weather.
//! #[node]
//! async fn weather(state: &mut Trip, _ctx: &Context) -> loomflow::Result<()> {
//!     state.notes.push(format!("sunny in {}", state.city));
//!     Ok(())
//! }
//!
//! /// Look up hotels.
//! #[node]
//! async fn hotels(state: &mut Trip) -> loomflow::Result<()> {
//!     state.notes.push("3 hotels".into());
//!     Ok(())
//! }
//!
//! #[node]
//! async fn book(state: &mut Trip) -> loomflow::Result<()> {
//!     state.booked = true;
//!     Ok(())
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
//! let graph = Graph::new("trip")
//!     .node(weather)
//!     .node(hotels)
//!     .node(book)
//!     .edge(START, "weather")
//!     .edge(START, "hotels")          // fan-out: both run in the first superstep
//!     .join(["weather", "hotels"], "book")
//!     .edge("book", END)
//!     .reducer("notes", Reducer::append())
//!     .compile()?;
//!
//! let trip = graph
//!     .invoke(&Runtime::in_memory(), "trip-1", Trip { city: "Lyon".into(), ..Default::default() })
//!     .await?
//!     .completed()?;
//! assert_eq!(trip.notes, ["sunny in Lyon", "3 hotels"]);   // declaration order
//! assert!(trip.booked);
//! println!("{}", graph.to_mermaid());
//! # Ok(()) }
//! ```

#![doc(test(attr(deny(warnings))))]

extern crate self as loomflow;

pub mod agent;
pub mod architecture;
pub mod context;
pub mod error;
pub mod event;
pub mod graph;
pub mod model;
pub mod runtime;
pub mod tool;

#[doc(inline)]
pub use context::Context;
#[doc(inline)]
pub use error::{Error, GraphError, GraphProblem, Result, RunError};
#[doc(inline)]
pub use event::{Event, EventKind};
#[doc(inline)]
pub use graph::{
    CompiledGraph, END, Graph, Node, Reducer, Route, RunBuilder, RunHandle, RunOutcome, RunStream,
    START, State,
};
#[doc(inline)]
pub use runtime::{Durability, Interrupt, Runtime, SignalError};

/// Marks an async fn as a graph node.
///
/// The function takes `&mut S` (the state) and optionally `&Context`, and returns `()` or a
/// `Result<(), E>` with `E: Into<loomflow::Error>`. The macro turns the name into a unit
/// value implementing [`Node<S>`]: pass it to [`Graph::node`]. The node is named after the
/// function (override with `#[node(name = "...")]`); the doc comment becomes its description.
/// The original body stays callable as `name::call(state, ctx)`.
///
/// # Examples
///
/// ```
/// use loomflow::prelude::*;
///
/// /// Say hello.
/// #[node(name = "say hello")]
/// async fn greet(state: &mut String, ctx: &Context) -> loomflow::Result<()> {
///     state.push_str(ctx.node());
///     Ok(())
/// }
///
/// assert_eq!(Node::<String>::name(&greet), "say hello");
/// assert_eq!(Node::<String>::description(&greet), Some("Say hello."));
/// ```
pub use loomflow_macros::node;

/// Declares an agent on a struct: the doc comment is its instructions, the attribute its
/// settings; generates `Name::builder()` (an [`AgentBuilder`](agent::AgentBuilder) with
/// everything set) and `Name::agent()` (built).
///
/// Attributes: `model = "..."` (a model string, see [`model::resolve`]), `tools(a, b)` (values
/// implementing [`Tool`](tool::Tool), such as `#[tool]` functions), `max_turns = n`,
/// `timeout_secs = n`, `temperature = x`, `max_tokens = n`, `name = "..."` (default: the
/// struct's name in snake case), `instructions = "..."` (instead of the doc comment),
/// `crate = path`.
///
/// # Examples
///
/// ```
/// use loomflow::prelude::*;
///
/// /// You repeat what you are told.
/// #[agent(model = "echo", max_turns = 3)]
/// struct Parrot;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
/// let parrot = Parrot::agent()?;
/// assert_eq!(parrot.name(), "parrot");
/// assert_eq!(parrot.run("hello").await?.output, "hello");
/// # Ok(()) }
/// ```
pub use loomflow_macros::agent;

/// The common path: `use loomflow::prelude::*;`.
pub mod prelude {
    pub use crate::context::Context;
    pub use crate::graph::{
        BoxFuture, CompiledGraph, END, Graph, Node, Reducer, RunOutcome, START, State,
    };
    pub use crate::runtime::{Durability, Runtime};
    pub use crate::{Error, agent, node};
    pub use serde::{Deserialize, Serialize};
    pub use serde_json::json;
    pub use std::time::Duration;
}

/// Items the macros' generated code refers to. Not public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::graph::{BoxFuture, IntoNodeResult};
    pub use serde;
    pub use serde_json;
    pub use std;
}

/// Headline types are shareable across tasks and threads.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Runtime>();
    assert_send_sync::<Context>();
    assert_send_sync::<CompiledGraph<u64>>();
    assert_send_sync::<Error>();
};
