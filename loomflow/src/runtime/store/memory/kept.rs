//! A checkpoint as the memory store keeps it: a smaller row than [`Checkpoint`], since a run
//! keeps one per step. The thread is the key it is filed under, and what travels only with
//! a write (audit entries, what the run waits on) is not kept.

use serde_json::Value;

use crate::runtime::store::unserialized::Unserialized;
use crate::runtime::store::{Checkpoint, RunStatus, StoreError};

#[derive(Debug, Clone)]
pub(super) struct Kept {
    pub(super) id: u64,
    run: u64,
    step: u64,
    pub(super) status: RunStatus,
    body: Body,
    /// A subgraph's namespace and a failed run's error, boxed together: a 56-byte row where
    /// boxed strings inline made 80, for fields most rows leave empty.
    rest: Option<Box<Rest>>,
}

#[derive(Debug, Clone)]
struct Rest {
    namespace: Box<str>,
    error: Option<Box<str>>,
}

/// The body as written, or the executor's snapshot to build it from when it is read.
#[derive(Debug, Clone)]
enum Body {
    Built(Box<Value>),
    Unbuilt(Unserialized),
}

impl Kept {
    /// Keeps `checkpoint`, filed under `id`.
    #[inline(always)]
    pub(super) fn new(checkpoint: Checkpoint, id: u64) -> Self {
        let body = match checkpoint.unserialized {
            Some(snapshot) => Body::Unbuilt(snapshot),
            None => Body::Built(Box::new(checkpoint.body)),
        };
        let plain = checkpoint.namespace.is_empty() && checkpoint.error.is_none();
        Self {
            id,
            run: checkpoint.run,
            step: checkpoint.step,
            status: checkpoint.status,
            body,
            rest: (!plain).then(|| {
                Box::new(Rest {
                    namespace: checkpoint.namespace.into_boxed_str(),
                    error: checkpoint.error.map(String::into_boxed_str),
                })
            }),
        }
    }

    /// The namespace it was written in: empty for the top-level graph.
    pub(super) fn namespace(&self) -> &str {
        self.rest.as_deref().map_or("", |rest| &rest.namespace)
    }

    /// The run it belongs to.
    pub(super) fn run(&self) -> u64 {
        self.run
    }

    /// For an interrupted checkpoint, the step it suspended in (run, namespace, step): what
    /// that step journaled before it suspended, a fork of it replays.
    pub(super) fn suspended_in(&self) -> Option<(u64, &str, u64)> {
        (self.status == RunStatus::Interrupted).then(|| (self.run, self.namespace(), self.step + 1))
    }

    /// Whether it keeps the graph's name and description (a run's first checkpoint does).
    pub(super) fn described(&self) -> bool {
        match &self.body {
            Body::Built(body) => body.get("graph_name").is_some(),
            Body::Unbuilt(Unserialized(snapshot)) => snapshot.graph_name().is_some(),
        }
    }

    /// The checkpoint of `thread` it keeps, its body perhaps not built.
    pub(super) fn checkpoint(&self, thread: &str) -> Checkpoint {
        let body = match &self.body {
            Body::Built(body) => Value::clone(body),
            Body::Unbuilt(_) => Value::Null,
        };
        let mut checkpoint = Checkpoint::new(
            thread,
            self.run,
            self.namespace(),
            self.step,
            self.status,
            body,
        );
        checkpoint.id = self.id;
        checkpoint.error = (self.rest.as_deref())
            .and_then(|rest| rest.error.as_deref())
            .map(str::to_owned);
        if let Body::Unbuilt(snapshot) = &self.body {
            checkpoint.unserialized = Some(snapshot.clone());
        }
        checkpoint
    }

    /// The checkpoint of `thread` it keeps, its body built, as the store hands it out.
    ///
    /// # Errors
    ///
    /// [`StoreError::Corrupt`] when the state does not serialize.
    pub(super) fn serialized(&self, thread: &str) -> Result<Checkpoint, StoreError> {
        self.checkpoint(thread).serialized()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run keeps a row per step: their size is what a long run's memory grows by.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_kept_row_is_56_bytes() {
        assert_eq!(std::mem::size_of::<Kept>(), 56);
    }
}
