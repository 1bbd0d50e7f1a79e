//! The in-memory store's audit log: a bounded queue, oldest first.

use std::collections::VecDeque;

use super::super::{AuditEntry, AuditQuery};

/// How many audit entries a [`MemoryStore`](super::MemoryStore) keeps: past this, the oldest
/// are dropped (a batch at a time), as a long-lived process would otherwise keep them all.
pub const DEFAULT_RETAINED_AUDIT_ENTRIES: usize = 100_000;

#[derive(Debug, Default)]
pub(super) struct AuditLog {
    entries: VecDeque<AuditEntry>,
    next_id: u64,
}

impl AuditLog {
    pub(super) fn append(&mut self, entries: impl IntoIterator<Item = AuditEntry>) {
        for mut entry in entries {
            self.next_id += 1;
            entry.id = self.next_id;
            self.entries.push_back(entry);
        }
        let limit = DEFAULT_RETAINED_AUDIT_ENTRIES;
        if self.entries.len() > limit + limit / 10 {
            let excess = self.entries.len() - limit;
            self.entries.drain(..excess);
        }
    }

    pub(super) fn query(&self, query: &AuditQuery) -> Vec<AuditEntry> {
        let start = self.entries.partition_point(|e| e.id <= query.after_id);
        let selected = self.entries.range(start..).filter(|e| query.matches(e));
        match query.limit {
            Some(limit) => selected.take(limit).cloned().collect(),
            None => selected.cloned().collect(),
        }
    }

    pub(super) fn prune(&mut self, before_ms: u64) -> u64 {
        let before = self.entries.len();
        self.entries.retain(|e| e.at_ms >= before_ms);
        (before - self.entries.len()) as u64
    }
}
