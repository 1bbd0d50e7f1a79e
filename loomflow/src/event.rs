//! Events a run surfaces on its stream.

use serde::Serialize;
use serde_json::Value;

/// One observable moment in a run, yielded by [`CompiledGraph::stream`](crate::CompiledGraph::stream).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Event {
    /// The superstep (from 1) the event belongs to; 0 for run-level events before the first step.
    pub step: u64,
    /// The node it concerns, if any (`parent/child` for nodes inside a subgraph).
    pub node: Option<String>,
    /// What happened.
    pub kind: EventKind,
}

/// The kinds of [`Event`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// A node started.
    NodeStart,
    /// A node finished successfully.
    NodeEnd,
    /// A superstep finished and its changes were merged.
    Step {
        /// The nodes that ran in it, in declaration order.
        nodes: Vec<String>,
    },
    /// Something a backend did inside a node: a model's streamed chunk, a tool call or its
    /// result, a permission decision. `data["type"]` says which.
    Backend {
        /// The event, as JSON with a `type` field.
        data: Value,
    },
    /// A custom event from [`Context::emit`](crate::Context::emit).
    Custom {
        /// The event's name.
        name: String,
        /// Its payload.
        data: Value,
    },
    /// A node suspended the run to ask for a value.
    Interrupt {
        /// The interrupt's id, for `resume`.
        id: String,
        /// What the node asked.
        payload: Value,
    },
    /// A node is waiting for a signal.
    Wait {
        /// The signal's name.
        signal: String,
        /// The wait's timeout, if any, in milliseconds.
        timeout_ms: Option<u64>,
    },
    /// The run completed.
    Done,
    /// The run failed.
    Error {
        /// The error, rendered with its sources.
        message: String,
    },
}

impl Event {
    pub(crate) fn new(step: u64, node: Option<String>, kind: EventKind) -> Self {
        Self { step, node, kind }
    }
}
