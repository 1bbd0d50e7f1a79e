//! Why a store operation failed.

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store could not be opened.
    #[error("cannot open store at {path}: {message}")]
    Open {
        /// The file or connection string (without secrets).
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The file was written by a newer version of loomflow.
    #[error("store at {path} has schema version {found}; this loomflow supports up to {supported}")]
    NewerSchema {
        /// The file.
        path: String,
        /// The version found.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// Opened without migrating (`SqliteOptions::migrate` or `PostgresOptions::migrate` set
    /// to `false`): there is no loomflow store there (no such file, or none of loomflow's
    /// tables).
    #[error("no loomflow store at {path}: {reason}")]
    NotAStore {
        /// The file or server.
        path: String,
        /// What was found instead.
        reason: String,
    },
    /// Opened without migrating: the store was written by an older loomflow, whose schema
    /// this one would upgrade. Left as it is; opening it with migrations on (as the
    /// application's own runtime does) upgrades it.
    #[error(
        "store at {path} has schema version {found}, older than this loomflow's {supported}; \
         left as it is (opening it with migrations on upgrades it)"
    )]
    OlderSchema {
        /// The file or server.
        path: String,
        /// The version found.
        found: i64,
        /// The version this build writes.
        supported: i64,
    },
    /// The backend failed to write.
    #[error("store write failed for thread {thread}: {message}")]
    Write {
        /// The thread (or session) concerned.
        thread: String,
        /// What the backend said.
        message: String,
    },
    /// The backend failed to read.
    #[error("store read failed for thread {thread}: {message}")]
    Read {
        /// The thread (or session) concerned.
        thread: String,
        /// What the backend said.
        message: String,
    },
    /// A stored row did not decode.
    #[error("stored row for thread {thread} is corrupt: {message}")]
    Corrupt {
        /// The thread concerned.
        thread: String,
        /// What did not decode.
        message: String,
    },
    /// The store refused what it was asked to keep, and would refuse it again: not a
    /// failure of the store, but of the value (PostgreSQL's text cannot hold a NUL
    /// character, its indexes take names of at most about 2.7 KB; a state whose `Serialize`
    /// fails). A run whose write is refused fails, rather than being let go to be tried
    /// again, and again.
    #[error("store refused to keep what was written for thread {thread}: {message}")]
    Refused {
        /// The thread (or session) concerned.
        thread: String,
        /// Why.
        message: String,
    },
    /// The store was closed.
    #[error("store is closed")]
    Closed,
    /// A write under a claim found that `owner` no longer holds the thread's lease (it
    /// expired and another execution claimed the run, or it was released): nothing was
    /// written.
    #[error("lease on thread {thread} was lost by {owner}; nothing was written")]
    LeaseLost {
        /// The thread.
        thread: String,
        /// The execution that lost it.
        owner: String,
    },
    /// The store does not offer the operation (a store outside loomflow that keeps the
    /// trait's default for it).
    #[error("the store does not support {operation} (thread {thread})")]
    Unsupported {
        /// What was asked, as the [`Store`](super::Store) method is named.
        operation: &'static str,
        /// The thread it was asked for.
        thread: String,
    },
}

impl StoreError {
    /// Whether the store failed in passing (a read or a write that failed, a closed store):
    /// not the fault of what was asked, which a later attempt may do.
    pub(crate) fn is_passing(&self) -> bool {
        matches!(self, Self::Write { .. } | Self::Read { .. } | Self::Closed)
    }

    /// A copy of a failure in passing ([`is_passing`](Self::is_passing)); `None` for any
    /// other.
    pub(crate) fn passing_copy(&self) -> Option<Self> {
        match self {
            Self::Write { thread, message } => Some(Self::Write {
                thread: thread.clone(),
                message: message.clone(),
            }),
            Self::Read { thread, message } => Some(Self::Read {
                thread: thread.clone(),
                message: message.clone(),
            }),
            Self::Closed => Some(Self::Closed),
            _ => None,
        }
    }
}
