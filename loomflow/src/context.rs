//! [`Context`]: what a node knows about its run, and how it talks to the world.

use std::sync::Arc;

use serde::Serialize;
use tokio::sync::mpsc::UnboundedSender;

use crate::event::{Event, EventKind};
use crate::runtime::Runtime;

/// What every node of one run shares.
pub(crate) struct RunShared {
    pub(crate) thread: Arc<str>,
    pub(crate) runtime: Runtime,
    /// Where stream events go; `None` when nobody listens.
    pub(crate) events: Option<UnboundedSender<Event>>,
    /// Empty for the top-level graph; `parent/child` inside subgraphs.
    pub(crate) namespace: Arc<str>,
}

impl RunShared {
    /// Sends an event to the stream, if there is one. The node name is prefixed with the
    /// namespace so that events from inside subgraphs say where they come from.
    pub(crate) fn emit(&self, step: u64, node: Option<&str>, kind: EventKind) {
        if let Some(events) = &self.events {
            let node = node.map(|n| {
                if self.namespace.is_empty() {
                    n.to_owned()
                } else {
                    format!("{}/{n}", self.namespace)
                }
            });
            // A closed receiver means the listener went away; the run carries on regardless.
            let _ = events.send(Event::new(step, node, kind));
        }
    }
}

/// A node's handle on its run: identity, events, and (through the runtime) the world.
///
/// The executor makes one per node per superstep and passes it by reference.
pub struct Context {
    pub(crate) run: Arc<RunShared>,
    pub(crate) node: Arc<str>,
    pub(crate) step: u64,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("thread", &self.run.thread)
            .field("node", &self.node)
            .field("step", &self.step)
            .finish_non_exhaustive()
    }
}

impl Context {
    pub(crate) fn new(run: Arc<RunShared>, node: Arc<str>, step: u64) -> Self {
        Self { run, node, step }
    }

    /// The thread (session) the run belongs to.
    pub fn thread(&self) -> &str {
        &self.run.thread
    }

    /// The running node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The superstep, counted from 1.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The checkpoint namespace: empty at the top level, `parent/child` inside subgraphs.
    pub fn namespace(&self) -> &str {
        &self.run.namespace
    }

    /// The runtime the run is on.
    pub fn runtime(&self) -> &Runtime {
        &self.run.runtime
    }

    /// Surfaces a custom event on the run's stream and to `tracing`.
    ///
    /// A payload that cannot be serialized is sent as `null` and logged.
    ///
    /// # Examples
    ///
    /// ```
    /// use loomflow::prelude::*;
    ///
    /// #[node]
    /// async fn fetch(state: &mut Vec<u32>, ctx: &Context) -> loomflow::Result<()> {
    ///     ctx.emit("progress", json!({ "done": state.len() }));
    ///     Ok(())
    /// }
    ///
    /// let graph = Graph::new("g").node(fetch).edge(START, "fetch").edge("fetch", END);
    /// # let _ = graph;
    /// ```
    pub fn emit(&self, name: impl Into<String>, data: impl Serialize) {
        let name = name.into();
        let data = serde_json::to_value(data).unwrap_or_else(|error| {
            tracing::warn!(node = %self.node, event = %name, %error, "event payload did not serialize");
            serde_json::Value::Null
        });
        tracing::debug!(node = %self.node, step = self.step, event = %name, %data, "custom event");
        self.run.emit(
            self.step,
            Some(&self.node),
            EventKind::Custom { name, data },
        );
    }
}
