//! The in-memory store's audit log: a bounded queue, oldest first.

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::super::audit::{Given, LaterDetail};
use super::super::{AuditEntry, AuditKind, AuditQuery, StoreError};
use crate::json_text::{TEXT_DEPTH, fits as fits_text};

/// How many audit entries a [`MemoryStore`](super::MemoryStore) keeps: past this, the oldest
/// are dropped (a batch at a time), as a long-lived process would otherwise keep them all.
pub const DEFAULT_RETAINED_AUDIT_ENTRIES: usize = 100_000;

#[derive(Debug, Default)]
pub(super) struct AuditLog {
    entries: VecDeque<KeptEntry>,
    next_id: u64,
}

/// An entry as the log keeps it: its strings boxed (its thread's name shared with the
/// thread's slot when a run wrote it), and a small detail as JSON text rather than a tree
/// of values: a detail map (`{"node": …, "value": …}`) takes a 632-byte node as values and
/// a few dozen bytes as text; the log keeps up to 100,000 entries, and every suspension and
/// resume adds one. A resume's detail is kept as its parts, the node and the value. The
/// detail is built or read back when the log is queried.
#[derive(Debug)]
struct KeptEntry {
    id: u64,
    run: u64,
    at_ms: u64,
    kind: AuditKind,
    thread: Arc<str>,
    subject: Box<str>,
    actor: Option<Box<str>>,
    detail: Detail,
}

/// An entry's detail as the log keeps it.
#[derive(Debug)]
enum Detail {
    /// An empty object: the detail of most interrupts.
    Empty,
    /// As JSON text: a small detail, where a tree of values costs most over its text.
    Text(Box<str>),
    /// As it came: a large detail (a signal's payload, a tool's result), which would take
    /// its text's time to write under the store's lock, or one nested deeper than JSON text
    /// reads back (serde_json stops at 128 levels).
    Value(Box<Value>),
    /// A resume's value given to an interrupt, with its node, as the run made it: built
    /// into a detail when the log is read.
    Given(Box<Given>),
}

/// How large a detail kept as text may be, in bytes of text (roughly: the walk that checks
/// counts a little over).
const TEXT_ROOM: usize = 1024;

impl Detail {
    fn of(detail: Value) -> Self {
        // No detail reads back as an empty object, as from the durable stores.
        if detail.is_null() || detail.as_object().is_some_and(Map::is_empty) {
            return Self::Empty;
        }
        let mut room = TEXT_ROOM;
        if !fits_text(&detail, TEXT_DEPTH, &mut room) {
            return Self::Value(Box::new(detail));
        }
        // A value always serializes: its map keys are strings.
        Self::Text(crate::json_text::boxed(&detail).unwrap_or_default())
    }
}

impl KeptEntry {
    /// Keeps `entry` under `id`; one that names no thread is `thread`'s, one that says no
    /// time happened at `now_ms`, when that is known.
    fn new(entry: AuditEntry, id: u64, thread: Option<&Arc<str>>, now_ms: u64) -> Self {
        let thread = match thread {
            Some(thread) if entry.thread.is_empty() => Arc::clone(thread),
            _ => Arc::from(entry.thread),
        };
        Self {
            id,
            run: entry.run,
            at_ms: if entry.at_ms == 0 && now_ms > 0 {
                now_ms
            } else {
                entry.at_ms
            },
            kind: entry.kind,
            thread,
            subject: entry.subject.into_boxed_str(),
            actor: entry.actor.map(String::into_boxed_str),
            detail: match entry.later {
                Some(LaterDetail::Text(text)) => Detail::Text(text),
                Some(LaterDetail::Given(given)) => Detail::Given(given),
                None => Detail::of(entry.detail),
            },
        }
    }

    /// The entry as the store hands it out.
    fn entry(&self) -> Result<AuditEntry, StoreError> {
        let detail = match &self.detail {
            Detail::Empty => Value::Object(Map::new()),
            Detail::Text(text) => {
                crate::json_depth::from_str(text).map_err(|e| StoreError::Corrupt {
                    thread: self.thread.to_string(),
                    message: format!("audit entry {}: {e}", self.id),
                })?
            }
            Detail::Value(value) => Value::clone(value),
            Detail::Given(given) => given.to_value(),
        };
        Ok(AuditEntry {
            id: self.id,
            thread: self.thread.to_string(),
            run: self.run,
            at_ms: self.at_ms,
            kind: self.kind,
            subject: self.subject.to_string(),
            actor: self.actor.as_deref().map(str::to_owned),
            detail,
            later: None,
        })
    }
}

impl AuditLog {
    pub(super) fn append(&mut self, entries: impl IntoIterator<Item = AuditEntry>) {
        self.append_for(entries, None, 0);
    }

    /// Appends `entries`, written under a run's claim at `now_ms` (0: not known, and left
    /// as they are); those that name no thread (a run's) are `thread`'s, those that say no
    /// time happened at the write.
    pub(super) fn append_for(
        &mut self,
        entries: impl IntoIterator<Item = AuditEntry>,
        thread: Option<&Arc<str>>,
        now_ms: u64,
    ) {
        for entry in entries {
            self.next_id += 1;
            let kept = KeptEntry::new(entry, self.next_id, thread, now_ms);
            self.entries.push_back(kept);
        }
        let limit = DEFAULT_RETAINED_AUDIT_ENTRIES;
        if self.entries.len() > limit + limit / 10 {
            let excess = self.entries.len() - limit;
            self.entries.drain(..excess);
        }
    }

    pub(super) fn query(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>, StoreError> {
        let start = self.entries.partition_point(|e| e.id <= query.after_id);
        let selected = self.entries.range(start..);
        let selected = selected.filter(|e| query.selects(e.id, &e.thread, e.kind));
        let limit = query.limit.unwrap_or(usize::MAX);
        selected.take(limit).map(KeptEntry::entry).collect()
    }

    pub(super) fn prune(&mut self, before_ms: u64) -> u64 {
        let before = self.entries.len();
        self.entries.retain(|e| e.at_ms >= before_ms);
        (before - self.entries.len()) as u64
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    #[test]
    fn entries_read_back_as_they_were_appended() {
        let mut log = AuditLog::default();
        // Floats that JSON text reads back exactly only with serde_json's `float_roundtrip`.
        let value = json!({"n": 1.5, "small": 0.000_216_599_397_130_613_38,
                           "large": 1_859_062_658_947_177.0, "big": u64::MAX, "s": "é\n"});
        let resume = AuditEntry::new(
            "t",
            AuditKind::Resume,
            "ask#0",
            json!({"node": "ask", "value": value}),
        )
        .run(3)
        .at_ms(7);
        let interrupt = AuditEntry::new("t", AuditKind::Interrupt, "ask#0", json!({}));
        let other = AuditEntry::new("u", AuditKind::ToolCall, "search", Value::Null)
            .actor(Some("bob".to_owned()));
        let deep = (0..200).fold(json!("core"), |inner, _| json!([inner]));
        let sent = AuditEntry::new("t", AuditKind::SignalSent, "go", json!({"payload": deep}));
        let written = [resume, interrupt, other, sent];
        log.append(written.clone());

        let read = log.query(&AuditQuery::all()).unwrap();
        let ids: Vec<u64> = read.iter().map(|e| e.id).collect();
        assert_eq!(ids, [1, 2, 3, 4]);
        for (mut written, read) in written.into_iter().zip(read) {
            written.id = read.id;
            // No detail reads back as an empty object, as from the durable stores.
            if written.detail.is_null() {
                written.detail = json!({});
            }
            assert_eq!(written, read);
        }
        let of_t = log.query(&AuditQuery::thread("t").after_id(1)).unwrap();
        assert_eq!(of_t.iter().map(|e| e.id).collect::<Vec<_>>(), [2, 4]);
        let kind = log
            .query(&AuditQuery::all().kind(AuditKind::ToolCall))
            .unwrap();
        assert_eq!(kind.iter().map(|e| e.id).collect::<Vec<_>>(), [3]);
        let first = log.query(&AuditQuery::thread("t").limit(1)).unwrap();
        assert_eq!(first.iter().map(|e| e.id).collect::<Vec<_>>(), [1]);

        // Pruned by time: only the resume, written at 7 ms, is older than 8 ms.
        assert_eq!(log.prune(8), 1);
        let left = log.query(&AuditQuery::all()).unwrap();
        assert_eq!(left.iter().map(|e| e.id).collect::<Vec<_>>(), [2, 3, 4]);
    }

    /// A resume's value kept with its node reads back as the detail a durable store
    /// writes for it, and as the same entry written with that detail.
    #[test]
    fn a_given_value_reads_back_as_its_detail() {
        let mut log = AuditLog::default();
        let thread: Arc<str> = Arc::from("t");
        for value in [json!("v1"), json!(1.5), json!(null), json!(u64::MAX)] {
            let mut given = AuditEntry::given("", "ask#0", "ask", value.clone());
            let detail = json!({"node": "ask", "value": value});
            log.append_for([given.clone()], Some(&thread), 9);
            let read = log.query(&AuditQuery::all()).unwrap().pop().unwrap();
            assert_eq!(read.detail, detail);
            assert_eq!(
                (&*read.thread, read.at_ms, read.kind),
                ("t", 9, AuditKind::Resume)
            );
            given.build_detail();
            assert_eq!(given.detail, detail);
            assert_eq!(given.later, None);
        }
    }

    #[test]
    fn a_detail_too_deep_or_too_large_for_text_is_kept_as_it_came() {
        let shallow = (0..TEXT_DEPTH).fold(json!(1), |inner, _| json!([inner]));
        assert!(matches!(Detail::of(shallow), Detail::Text(_)));
        let deep = (0..=TEXT_DEPTH).fold(json!(1), |inner, _| json!([inner]));
        assert!(matches!(Detail::of(deep), Detail::Value(_)));
        let small = json!({"payload": "x".repeat(TEXT_ROOM / 2)});
        assert!(matches!(Detail::of(small), Detail::Text(_)));
        let large = json!({"payload": "x".repeat(TEXT_ROOM)});
        assert!(matches!(Detail::of(large), Detail::Value(_)));
        let many = json!({"payload": vec![1; TEXT_ROOM]});
        assert!(matches!(Detail::of(many), Detail::Value(_)));
        assert!(matches!(Detail::of(json!({})), Detail::Empty));
        assert!(matches!(Detail::of(Value::Null), Detail::Empty));
        assert!(matches!(Detail::of(json!([])), Detail::Text(_)));
    }

    /// What the log keeps of an entry, besides its text: what a long-lived process holds
    /// for each of the entries it keeps.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_kept_entry_is_104_bytes() {
        assert_eq!(std::mem::size_of::<KeptEntry>(), 104);
    }
}
