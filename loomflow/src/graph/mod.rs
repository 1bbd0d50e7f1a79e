//! Graphs: the builder, compilation, the superstep executor, merging, and Mermaid.

mod builder;
mod compiled;
mod error;
mod executor;
pub(crate) use executor::ErrorChain;
mod fields;
mod identity;
mod lower;
mod merge;
pub mod mermaid;
pub(crate) mod namespace;
pub(crate) mod node;
pub(crate) mod node_output;
mod run;
pub mod shape;
mod subgraph;
mod topology;
mod validate;

pub use builder::{DEFAULT_RECURSION_LIMIT, Graph, Route};
pub use compiled::CompiledGraph;
pub(crate) use compiled::{EmbeddedSpan, TimeLimit};
pub use error::{GraphError, GraphProblem, RunError};
pub(crate) use identity::fingerprint_of;
pub use merge::{Reducer, WHOLE_STATE};
pub use node::{
    BoxError, BoxFuture, IntoNodeResult, IntoSyncNodeResult, Node, NodeContext, NodeError,
    NodeResult,
};
pub use run::{RunBuilder, RunHandle, RunOutcome, RunStream};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The name of a graph's entry, for edges and branches out of it.
pub const START: &str = "__start__";

/// The name of a graph's exit, for edges and branches into it.
pub const END: &str = "__end__";

/// What a graph's state must be: cloneable (each parallel node gets its own copy),
/// serializable (checkpoints and merges go through JSON), and shareable across tasks.
///
/// The state is what serializes. A field it does not serialize (`#[serde(skip)]`) is a
/// cache for the current step at most: it is carried on by a step in which one node
/// changed the state, and starts afresh (from `Default`) after a step in which several did
/// (their copies are merged through JSON), after a resume and after a recovery.
///
/// Its JSON may nest arrays and objects up to 512 levels deep, less the few a checkpoint
/// wraps it in. A durable store refuses a deeper state: the step that made it fails with
/// [`RunError::Json`], and the thread keeps its last checkpoint.
///
/// Implemented for every type that qualifies.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a graph's state",
    note = "a state must be Clone + Serialize + DeserializeOwned + Send + Sync + 'static; derive Clone, Serialize and Deserialize"
)]
pub trait State: Clone + Serialize + DeserializeOwned + Send + Sync + 'static {}

impl<T: Clone + Serialize + DeserializeOwned + Send + Sync + 'static> State for T {}
