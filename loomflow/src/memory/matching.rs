//! What every backend shares in matching texts and ordering what they found: the same
//! whitespace set aside, the same order across scopes.

use super::MemoryItem;

/// The whitespace [`Memory::holds_text`](super::Memory::holds_text) sets aside at either
/// end of a text: ASCII's (space, tab, line feed, vertical tab, form feed, carriage
/// return), the same set in Rust and in each backend's SQL.
pub(crate) const EDGE_WHITESPACE: [char; 6] = [' ', '\t', '\n', '\x0b', '\x0c', '\r'];

/// `text` without [`EDGE_WHITESPACE`] at either end.
pub(crate) fn edges_trimmed(text: &str) -> &str {
    text.trim_matches(EDGE_WHITESPACE)
}

/// Puts what several scopes' recalls found in one order: the best score first, and of
/// equal scores the newer item, as within one scope (ties do not go by scope).
pub(crate) fn rank_across_scopes(found: &mut [MemoryItem]) {
    found.sort_by(|a, b| {
        (b.score.total_cmp(&a.score))
            .then(b.created_at.cmp(&a.created_at))
            .then(b.id.0.cmp(&a.id.0))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn of_equal_scores_the_newer_item_ranks_first_whatever_its_scope() {
        use std::time::{Duration, UNIX_EPOCH};
        let item = |scope: crate::memory::Scope, id, secs, score| MemoryItem {
            id: crate::memory::MemoryId(id),
            scope,
            text: String::new(),
            metadata: serde_json::Value::Null,
            created_at: UNIX_EPOCH + Duration::from_secs(secs),
            score,
        };
        let mut found = vec![
            item(crate::memory::Scope::user("ada"), 1, 10, 2.0),
            item(crate::memory::Scope::user("ada"), 2, 30, 1.0),
            item(crate::memory::Scope::session("s"), 3, 20, 2.0),
        ];
        rank_across_scopes(&mut found);
        let ids: Vec<i64> = found.iter().map(|i| i.id.0).collect();
        assert_eq!(ids, [3, 1, 2]);
    }
}
