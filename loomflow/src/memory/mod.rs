//! Long-term memory: short texts an agent remembers across runs and sessions, recalled by
//! full-text search, so no embedding model is needed.
//!
//! A [`Memory`] keeps items under a [`Scope`] (a user, a session or an agent):
//! [`remember`](Memory::remember) stores one, [`recall`](Memory::recall) finds the `k` most
//! relevant to a query within one scope (never another's), [`forget`](Memory::forget) drops
//! one, and [`Consolidation`] merges old items into fewer through a journaled model call.
//!
//! Backends: [`SqliteMemory`] (SQLite FTS5, feature `sqlite`) and `PostgresMemory`
//! (PostgreSQL full-text search, feature `postgres`). An agent built with
//! [`AgentBuilder::memory`](crate::agent::AgentBuilder::memory) recalls into its prompt,
//! within a token budget; [`MemoryOptions`] can give the model `remember` and `recall` tools
//! and extract memories after each run.
//!
//! # Examples
//!
//! ```
//! use loomflow::memory::{Memory, Scope, SqliteMemory};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
//! let memory = SqliteMemory::in_memory()?;
//! let ada = Scope::user("ada");
//! memory.remember(&ada, "Ada drinks her coffee black", json!({ "source": "chat" })).await?;
//! memory.remember(&ada, "Ada lives in Lyon", json!({})).await?;
//! memory.remember(&Scope::user("bob"), "Bob drinks coffee with milk", json!({})).await?;
//!
//! let found = memory.recall(&ada, "how does she take her coffee?", 3).await?;
//! assert_eq!(found.len(), 1);
//! assert_eq!(found[0].text, "Ada drinks her coffee black");
//! # Ok(()) }
//! ```

mod consolidate;
mod error;
mod matching;
mod prompt;
mod text;
mod tools;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod backend;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

pub use consolidate::{Consolidation, ConsolidationReport};
pub use error::MemoryError;
#[cfg(feature = "postgres")]
pub use postgres::PostgresMemory;
pub use prompt::MemoryOptions;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteMemory;

/// The most bytes a remembered text may hold, in every backend: PostgreSQL indexes a text's
/// words in at most 1 MiB, and an item is a fact or a note, not a document.
pub const MAX_TEXT_BYTES: usize = 256 * 1024;

/// The most bytes a scope's id may hold, in every backend: PostgreSQL indexes an item by its
/// scope, in an index entry of at most about 2.7 KB.
pub const MAX_SCOPE_ID_BYTES: usize = 1024;

pub(crate) use prompt::{extraction_request, recall_for_prompt, remember_extracted};
pub(crate) use tools::{memory_tools, memory_user, run_scopes};

use std::sync::Arc;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::graph::BoxFuture;

/// Whose memory an item is: one user's (across sessions), one session's, or one agent's
/// (shared by everyone it serves). Recall never crosses scopes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", content = "id", rename_all = "lowercase")]
pub enum Scope {
    /// A user, by id.
    User(String),
    /// A session (thread), by id.
    Session(String),
    /// An agent, by name.
    Agent(String),
}

impl Scope {
    /// A user's scope.
    pub fn user(id: impl Into<String>) -> Self {
        Self::User(id.into())
    }

    /// A session's scope.
    pub fn session(id: impl Into<String>) -> Self {
        Self::Session(id.into())
    }

    /// An agent's scope.
    pub fn agent(name: impl Into<String>) -> Self {
        Self::Agent(name.into())
    }

    /// `user`, `session` or `agent`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::User(_) => "user",
            Self::Session(_) => "session",
            Self::Agent(_) => "agent",
        }
    }

    /// The user id, session id or agent name.
    pub fn id(&self) -> &str {
        match self {
            Self::User(id) | Self::Session(id) | Self::Agent(id) => id,
        }
    }

    /// Checks that every backend here keeps the scope: its id not blank, not over
    /// [`MAX_SCOPE_ID_BYTES`], and holding no NUL. A [`Memory`] of one's own calls it to
    /// refuse the scopes these refuse, with the same errors.
    ///
    /// # Errors
    ///
    /// [`MemoryError::EmptyScope`], [`MemoryError::ScopeIdTooLong`],
    /// [`MemoryError::NulCharacter`] (in the id).
    pub fn check(&self) -> Result<(), MemoryError> {
        self.checked().map(|_| ())
    }

    /// The scope, [`check`](Self::check)ed.
    pub(crate) fn checked(&self) -> Result<&Self, MemoryError> {
        if self.id().trim().is_empty() {
            return Err(MemoryError::EmptyScope { kind: self.kind() });
        }
        if self.id().len() > MAX_SCOPE_ID_BYTES {
            return Err(MemoryError::ScopeIdTooLong {
                kind: self.kind(),
                bytes: self.id().len(),
                limit: MAX_SCOPE_ID_BYTES,
            });
        }
        if self.id().contains('\0') {
            return Err(MemoryError::NulCharacter {
                scope: self.clone(),
                field: "scope id",
            });
        }
        Ok(self)
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind(), self.id())
    }
}

/// The id a backend gave an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MemoryId(pub i64);

impl std::fmt::Display for MemoryId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// One remembered text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MemoryItem {
    /// Its id.
    pub id: MemoryId,
    /// Whose it is.
    pub scope: Scope,
    /// The text.
    pub text: String,
    /// What the caller attached (a JSON object; `{}` when nothing was).
    pub metadata: Value,
    /// When it was remembered.
    pub created_at: SystemTime,
    /// How well it matched the query of a [`recall`](Memory::recall) (higher is better);
    /// `0` in listings.
    pub score: f64,
}

impl MemoryItem {
    /// An item as a [`Memory`] of one's own returns it from
    /// [`recall`](Memory::recall) or [`list`](Memory::list), with a `score` of 0 (set it
    /// with [`with_score`](Self::with_score)); `metadata` is a JSON object, or `{}`.
    pub fn new(
        id: MemoryId,
        scope: Scope,
        text: impl Into<String>,
        metadata: Value,
        created_at: SystemTime,
    ) -> Self {
        Self {
            id,
            scope,
            text: text.into(),
            metadata,
            created_at,
            score: 0.0,
        }
    }

    /// How well it matched a recall's query (higher is better).
    #[must_use]
    pub fn with_score(mut self, score: f64) -> Self {
        self.score = score;
        self
    }
}

/// Long-term memory: texts kept by [`Scope`], found again by full-text search.
///
/// Object-safe: agents keep an `Arc<dyn Memory>`. Implementations keep scopes apart: no
/// operation on one scope reads or changes another's items.
pub trait Memory: Send + Sync + 'static {
    /// Stores `text` under `scope` with `metadata` (a JSON object, or `null` for none).
    ///
    /// # Errors
    ///
    /// [`MemoryError::EmptyScope`], [`MemoryError::ScopeIdTooLong`],
    /// [`MemoryError::EmptyText`], [`MemoryError::TextTooLong`],
    /// [`MemoryError::NulCharacter`] (in the text or the scope's id),
    /// [`MemoryError::BadMetadata`], [`MemoryError::MetadataTooDeep`], or the backend's
    /// failure.
    fn remember<'a>(
        &'a self,
        scope: &'a Scope,
        text: &'a str,
        metadata: Value,
    ) -> BoxFuture<'a, Result<MemoryId, MemoryError>>;

    /// The at most `k` items of `scope` that best match `query`, best first. The query's
    /// words are matched (stemmed) against the items' words; an item that matches more of
    /// them ranks higher (on SQLite, BM25 also weighs rarer words more, and shorter items;
    /// PostgreSQL's `ts_rank` reads only the item itself, so the order of the same items may
    /// differ between the two); ties go to the newer item. A query without words finds
    /// nothing.
    ///
    /// Common English words (`the`, `is`, `my`, `more`, …, PostgreSQL's English stop words
    /// among them) are left out of a query, so a query of only such words finds nothing, on
    /// every backend alike. Only its first 64 distinct other words are searched: words after
    /// them are ignored, so a very long query can miss what it names at its end.
    ///
    /// # Errors
    ///
    /// [`MemoryError::EmptyScope`], [`MemoryError::ScopeIdTooLong`],
    /// [`MemoryError::NulCharacter`] in the scope's id, or the backend's failure.
    fn recall<'a>(
        &'a self,
        scope: &'a Scope,
        query: &'a str,
        k: usize,
    ) -> BoxFuture<'a, Result<Vec<MemoryItem>, MemoryError>>;

    /// Removes the item `id` of `scope`; `false` when `scope` has no such item.
    ///
    /// # Errors
    ///
    /// [`MemoryError::EmptyScope`], [`MemoryError::ScopeIdTooLong`],
    /// [`MemoryError::NulCharacter`] in the scope's id, or the backend's failure.
    fn forget<'a>(
        &'a self,
        scope: &'a Scope,
        id: MemoryId,
    ) -> BoxFuture<'a, Result<bool, MemoryError>>;

    /// Removes every item of `scope`; returns how many there were.
    ///
    /// # Errors
    ///
    /// [`MemoryError::EmptyScope`], [`MemoryError::ScopeIdTooLong`],
    /// [`MemoryError::NulCharacter`] in the scope's id, or the backend's failure.
    fn forget_all<'a>(&'a self, scope: &'a Scope) -> BoxFuture<'a, Result<u64, MemoryError>>;

    /// How many items `scope` holds.
    ///
    /// # Errors
    ///
    /// [`MemoryError::EmptyScope`], [`MemoryError::ScopeIdTooLong`],
    /// [`MemoryError::NulCharacter`] in the scope's id, or the backend's failure.
    fn count<'a>(&'a self, scope: &'a Scope) -> BoxFuture<'a, Result<u64, MemoryError>>;

    /// The oldest `limit` items of `scope`, oldest first.
    ///
    /// # Errors
    ///
    /// [`MemoryError::EmptyScope`], [`MemoryError::ScopeIdTooLong`],
    /// [`MemoryError::NulCharacter`] in the scope's id, or the backend's failure.
    fn list<'a>(
        &'a self,
        scope: &'a Scope,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<MemoryItem>, MemoryError>>;

    /// Whether `scope` holds an item whose text is `text`, leading and trailing ASCII
    /// whitespace aside and ASCII letters in any case: how a fact already known is told from a new one,
    /// whatever else ranks above it in a [`recall`](Self::recall).
    ///
    /// The default reads every item of `scope` through [`list`](Self::list); the backends
    /// here look it up directly.
    ///
    /// # Errors
    ///
    /// [`MemoryError::EmptyScope`], [`MemoryError::ScopeIdTooLong`],
    /// [`MemoryError::NulCharacter`] in the scope's id, or the backend's failure.
    fn holds_text<'a>(
        &'a self,
        scope: &'a Scope,
        text: &'a str,
    ) -> BoxFuture<'a, Result<bool, MemoryError>> {
        Box::pin(async move {
            let items = self.list(scope, usize::MAX).await?;
            let text = matching::edges_trimmed(text);
            Ok(items
                .iter()
                .any(|i| matching::edges_trimmed(&i.text).eq_ignore_ascii_case(text)))
        })
    }

    /// In one transaction: removes the items `old` of `scope` and stores `texts` in their
    /// place, each with `metadata`, dated as the newest of `old` (so that they keep the
    /// place in time of what they replace; now, when `old` is empty). Returns the new
    /// items' ids, in order.
    ///
    /// # Errors
    ///
    /// [`MemoryError::Gone`] when `scope` no longer holds some of `old` (they were
    /// forgotten, or replaced by another call): what replaces them may repeat what was
    /// forgotten. Otherwise as [`remember`](Self::remember). Nothing changes on error.
    fn replace<'a>(
        &'a self,
        scope: &'a Scope,
        old: &'a [MemoryId],
        texts: &'a [String],
        metadata: Value,
    ) -> BoxFuture<'a, Result<Vec<MemoryId>, MemoryError>>;
}

impl<M: Memory + ?Sized> Memory for Arc<M> {
    fn remember<'a>(
        &'a self,
        scope: &'a Scope,
        text: &'a str,
        metadata: Value,
    ) -> BoxFuture<'a, Result<MemoryId, MemoryError>> {
        (**self).remember(scope, text, metadata)
    }

    fn recall<'a>(
        &'a self,
        scope: &'a Scope,
        query: &'a str,
        k: usize,
    ) -> BoxFuture<'a, Result<Vec<MemoryItem>, MemoryError>> {
        (**self).recall(scope, query, k)
    }

    fn forget<'a>(
        &'a self,
        scope: &'a Scope,
        id: MemoryId,
    ) -> BoxFuture<'a, Result<bool, MemoryError>> {
        (**self).forget(scope, id)
    }

    fn forget_all<'a>(&'a self, scope: &'a Scope) -> BoxFuture<'a, Result<u64, MemoryError>> {
        (**self).forget_all(scope)
    }

    fn count<'a>(&'a self, scope: &'a Scope) -> BoxFuture<'a, Result<u64, MemoryError>> {
        (**self).count(scope)
    }

    fn list<'a>(
        &'a self,
        scope: &'a Scope,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<MemoryItem>, MemoryError>> {
        (**self).list(scope, limit)
    }

    fn holds_text<'a>(
        &'a self,
        scope: &'a Scope,
        text: &'a str,
    ) -> BoxFuture<'a, Result<bool, MemoryError>> {
        (**self).holds_text(scope, text)
    }

    fn replace<'a>(
        &'a self,
        scope: &'a Scope,
        old: &'a [MemoryId],
        texts: &'a [String],
        metadata: Value,
    ) -> BoxFuture<'a, Result<Vec<MemoryId>, MemoryError>> {
        (**self).replace(scope, old, texts, metadata)
    }
}
