//! Checkpoints whose body is not built yet: for a store that keeps checkpoints in memory,
//! the executor hands over a copy of the run's state instead of its JSON, and the body is
//! built only if someone reads the checkpoint. Most checkpoints are never read, so a step
//! costs a copy of what it changed rather than a JSON tree of everything.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

/// What builds a checkpoint's body on demand: the executor's snapshot, owned.
pub(crate) trait SnapshotSource: Send + Sync {
    /// The body, exactly as it would have been written.
    fn body(&self) -> serde_json::Result<Value>;
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
