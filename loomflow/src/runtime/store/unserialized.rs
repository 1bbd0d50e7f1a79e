//! Checkpoints whose body is not built as a tree of values: for a store that keeps
//! checkpoints in memory, the executor hands over a copy of the run's state instead of its
//! JSON, and the body is built only if someone reads the checkpoint (most never are), so a
//! step costs a copy of what it changed rather than a JSON tree of everything. For a store
//! that writes JSON text, the executor hands over that text, serialized straight from its
//! snapshot ([`JsonBody`]).

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

/// What builds a checkpoint's body on demand: the executor's snapshot, owned.
pub(crate) trait SnapshotSource: Send + Sync {
    /// The body, exactly as it would have been written.
    fn body(&self) -> serde_json::Result<Value>;
    /// The body as JSON text, as a store writes it.
    #[cfg(any(feature = "sqlite", feature = "postgres", test))]
    fn body_json(&self) -> serde_json::Result<String> {
        crate::json_depth::to_string(&self.body()?)
    }
    /// The graph's fingerprint (`graph` in the body), shared with the compiled graph.
    fn fingerprint(&self) -> &Arc<str>;
    /// The graph's name, when the body keeps it (`graph_name`), shared likewise.
    fn graph_name(&self) -> Option<&Arc<str>>;
    /// The snapshot itself, for the executor to read back without building the body.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// A checkpoint's body, still unbuilt. Two are equal when they are the same snapshot.
#[derive(Clone)]
pub(crate) struct Unserialized(pub(crate) Arc<dyn SnapshotSource>);

impl fmt::Debug for Unserialized {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Unserialized")
    }
}

impl PartialEq for Unserialized {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// A body serialized already, for a store that writes JSON text: written straight from the
/// executor's snapshot, with no tree of values in between. Read back as a value only when
/// something asks for the body before the store has written it.
pub(crate) struct JsonBody {
    text: String,
    fingerprint: Arc<str>,
    graph_name: Option<Arc<str>>,
}

impl JsonBody {
    /// `text`, the body of a snapshot of the graph `fingerprint` (named `graph_name` when
    /// the body keeps its name).
    pub(crate) fn new(text: String, fingerprint: &Arc<str>, graph_name: Option<&Arc<str>>) -> Self {
        Self {
            text,
            fingerprint: Arc::clone(fingerprint),
            graph_name: graph_name.cloned(),
        }
    }
}

impl SnapshotSource for JsonBody {
    fn body(&self) -> serde_json::Result<Value> {
        crate::json_depth::from_str(&self.text)
    }

    #[cfg(any(feature = "sqlite", feature = "postgres", test))]
    fn body_json(&self) -> serde_json::Result<String> {
        Ok(self.text.clone())
    }

    fn fingerprint(&self) -> &Arc<str> {
        &self.fingerprint
    }

    fn graph_name(&self) -> Option<&Arc<str>> {
        self.graph_name.as_ref()
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
