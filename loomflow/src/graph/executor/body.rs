//! A snapshot's body: built as a JSON value, or written straight to JSON text for a store
//! that writes text.

use serde::Serialize;
use serde_json::Value;

use super::checkpoint::SnapshotRef;
use crate::graph::State;

impl<S: State> SnapshotRef<'_, S> {
    /// The checkpoint body, in the shape [`Snapshot`](super::checkpoint::Snapshot) reads.
    /// Built by hand rather than derived: a checkpoint is written after every superstep,
    /// and this spares a temporary list of names.
    fn to_body(&self) -> serde_json::Result<Value> {
        let mut body = serde_json::Map::new();
        body.insert("state".to_owned(), serde_json::to_value(self.state)?);
        if !self.next.is_empty() {
            let names = self
                .next
                .iter()
                .map(|&i| Value::from(&*self.g.nodes[i].name));
            let next = names.collect();
            body.insert("next".to_owned(), Value::Array(next));
        }
        if !self.joins.is_empty() {
            body.insert("joins".to_owned(), serde_json::to_value(self.joins)?);
        }
        if !self.pending_writes.is_empty() {
            let writes = serde_json::to_value(self.pending_writes)?;
            body.insert("pending_writes".to_owned(), writes);
        }
        if !self.interrupts.is_empty() {
            let interrupts = serde_json::to_value(self.interrupts)?;
            body.insert("interrupts".to_owned(), interrupts);
        }
        if let Some(values) = self.resume_values {
            body.insert("resume_values".to_owned(), serde_json::to_value(values)?);
        }
        body.insert("graph".to_owned(), Value::from(&*self.g.fingerprint));
        if self.describe {
            let description = serde_json::to_value(&self.g.description)?;
            body.insert("graph_description".to_owned(), description);
            body.insert("graph_name".to_owned(), Value::from(&*self.g.name));
        }
        Ok(Value::Object(body))
    }
}

/// A snapshot's body as JSON text, serialized straight from what the executor holds: the
/// JSON of [`body_of`]'s value, without building that value. Its keys come in the same
/// order; a struct inside (the state, an interrupt) keeps its fields in declaration order,
/// where a value sorts them.
pub(super) struct BodyJson<'a, 'b, S> {
    pub(super) snapshot: &'b SnapshotRef<'a, S>,
    pub(super) trace: Option<&'b str>,
}

impl<S: State> Serialize for BodyJson<'_, '_, S> {
    fn serialize<Z: serde::Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        use serde::ser::SerializeMap;

        let s = self.snapshot;
        let mut body = serializer.serialize_map(None)?;
        // In the order a JSON object built as a value keeps its keys: sorted.
        body.serialize_entry("graph", &*s.g.fingerprint)?;
        if s.describe {
            body.serialize_entry("graph_description", &s.g.description)?;
            body.serialize_entry("graph_name", &*s.g.name)?;
        }
        if !s.interrupts.is_empty() {
            body.serialize_entry("interrupts", s.interrupts)?;
        }
        if !s.joins.is_empty() {
            body.serialize_entry("joins", s.joins)?;
        }
        if !s.next.is_empty() {
            let names = s.next.iter().map(|&i| &*s.g.nodes[i].name);
            body.serialize_entry("next", &Names(std::cell::Cell::new(Some(names))))?;
        }
        if !s.pending_writes.is_empty() {
            body.serialize_entry("pending_writes", s.pending_writes)?;
        }
        if let Some(values) = s.resume_values {
            body.serialize_entry("resume_values", values)?;
        }
        body.serialize_entry("state", s.state)?;
        if let Some(trace) = self.trace {
            body.serialize_entry("trace", trace)?;
        }
        body.end()
    }
}

/// Node names, serialized as a list without collecting them first.
struct Names<I>(std::cell::Cell<Option<I>>);

impl<'n, I: Iterator<Item = &'n str>> Serialize for Names<I> {
    fn serialize<Z: serde::Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        serializer.collect_seq(self.0.take().into_iter().flatten())
    }
}

/// A snapshot's body, with the execution's `traceparent` when it has one.
pub(super) fn body_of<S: State>(
    snapshot: &SnapshotRef<'_, S>,
    trace: Option<&str>,
) -> serde_json::Result<Value> {
    let mut body = snapshot.to_body()?;
    if let (Some(trace), Value::Object(fields)) = (trace, &mut body) {
        fields.insert("trace".to_owned(), Value::from(trace));
    }
    Ok(body)
}
