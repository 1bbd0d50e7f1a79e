//! [`MemoryError`].

use super::Scope;
use crate::graph::BoxError;

/// Why a memory operation failed. Each variant names the scope or the backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// A scope's id is empty.
    #[error("memory scope {kind} needs a non-empty id")]
    EmptyScope {
        /// `user`, `session` or `agent`.
        kind: &'static str,
    },
    /// A scope's id is longer than a scope id may be
    /// ([`MAX_SCOPE_ID_BYTES`](super::MAX_SCOPE_ID_BYTES)). Named by its kind and length:
    /// the id itself is too long to quote.
    #[error("memory scope {kind}'s id is {bytes} bytes, more than the {limit} a scope id may be")]
    ScopeIdTooLong {
        /// `user`, `session` or `agent`.
        kind: &'static str,
        /// The id's length, in bytes.
        bytes: usize,
        /// The most a scope id may be.
        limit: usize,
    },
    /// The text to remember is empty.
    #[error("nothing to remember for {scope}: the text is empty")]
    EmptyText {
        /// The scope.
        scope: Scope,
    },
    /// A text or a scope's id holds a NUL character, which PostgreSQL does not store in text.
    /// Refused by every backend alike.
    #[error(
        "the {field} of {} holds a NUL character, which memory does not store",
        nul_owner(scope, field)
    )]
    NulCharacter {
        /// The scope.
        scope: Scope,
        /// `text` or `scope id`.
        field: &'static str,
    },
    /// The text to remember is longer than an item may be
    /// ([`MAX_TEXT_BYTES`](super::MAX_TEXT_BYTES)).
    #[error("the text for {scope} is {bytes} bytes, more than the {limit} an item may hold")]
    TextTooLong {
        /// The scope.
        scope: Scope,
        /// The text's length, in bytes.
        bytes: usize,
        /// The most an item may hold.
        limit: usize,
    },
    /// The metadata is not a JSON object (or `null`).
    #[error("metadata for {scope} must be a JSON object, not {found}")]
    BadMetadata {
        /// The scope.
        scope: Scope,
        /// What was given: `an array`, `a string`, ….
        found: String,
    },
    /// The metadata nests arrays and objects deeper than a store reads back.
    #[error("metadata for {scope} nests deeper than {limit} levels")]
    MetadataTooDeep {
        /// The scope.
        scope: Scope,
        /// How deeply metadata may nest.
        limit: usize,
    },
    /// Items to replace are no longer there: forgotten, or merged away by another
    /// consolidation. Nothing was replaced.
    #[error(
        "cannot replace items of {scope}: {} gone (forgotten, or merged by another \
         consolidation); nothing was replaced",
        ids(missing)
    )]
    Gone {
        /// The scope.
        scope: Scope,
        /// The ids that are gone.
        missing: Vec<super::MemoryId>,
    },
    /// The backend failed.
    #[error("{backend} memory failed to {operation}")]
    Backend {
        /// `sqlite` or `postgres`.
        backend: &'static str,
        /// What it was doing: `open`, `remember for user ada`, ….
        operation: String,
        /// The backend's error.
        #[source]
        source: BoxError,
    },
    /// The model's answer to a consolidation is not what was asked for.
    #[error(
        "consolidation of {scope}: the model's answer is not a JSON array of strings ({problem})"
    )]
    BadConsolidation {
        /// The scope.
        scope: Scope,
        /// What is wrong with the answer.
        problem: String,
    },
    /// A consolidation's options make no sense.
    #[error("consolidation of {scope}: {problem}")]
    BadOptions {
        /// The scope.
        scope: Scope,
        /// What is wrong.
        problem: String,
    },
}

/// The scope whose `field` holds a NUL, as an error names it: by its kind alone when the NUL
/// is in its id.
fn nul_owner(scope: &Scope, field: &str) -> String {
    match field {
        "scope id" => format!("a {} scope", scope.kind()),
        _ => scope.to_string(),
    }
}

/// `item 4` or `items 4, 7`.
fn ids(ids: &[super::MemoryId]) -> String {
    let list: Vec<String> = ids.iter().map(ToString::to_string).collect();
    match list.len() {
        1 => format!("item {} is", list[0]),
        _ => format!("items {} are", list.join(", ")),
    }
}

impl MemoryError {
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub(crate) fn backend(
        backend: &'static str,
        operation: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        Self::Backend {
            backend,
            operation: operation.into(),
            source: source.into(),
        }
    }
}
