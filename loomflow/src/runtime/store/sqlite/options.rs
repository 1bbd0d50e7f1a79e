//! The store's settings ([`SqliteOptions`], [`Synchronous`]) and what it counts
//! ([`CommitStats`]).

use std::time::Duration;

use super::schema;

/// How hard SQLite works to get each commit onto the disk (its `synchronous` setting).
///
/// In WAL mode both settings keep the file consistent through a crash of the process or of
/// the machine; they differ in what a power loss or OS crash may take back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Synchronous {
    /// No fsync per commit, only at WAL checkpoints. A commit survives the process crashing,
    /// but a power loss or OS crash may roll back the last commits (never corrupting the
    /// file). Much faster.
    Normal,
    /// An fsync per commit (per group of commits: see [`SqliteStore`](super::SqliteStore)). A
    /// commit that returned survives a power loss, except those that record no work of a
    /// run: claims, lease renewals, releases and a run's input. Those commit as under
    /// `Normal`, and the next synced commit takes them to the disk; a power loss that takes
    /// one back loses nothing a run did (see [`SqliteStore`](super::SqliteStore)). The
    /// default.
    #[default]
    Full,
}

/// Settings for [`SqliteStore::open_with`](super::SqliteStore::open_with).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use loomflow::runtime::{SqliteOptions, Synchronous};
///
/// let options = SqliteOptions::default()
///     .synchronous(Synchronous::Normal)
///     .busy_timeout(Duration::from_millis(500));
/// assert_eq!(options.synchronous, Synchronous::Normal);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// How hard each commit works to reach the disk. Default [`Synchronous::Full`].
    pub synchronous: Synchronous,
    /// How long to wait for a lock held by another connection (another process on the same
    /// file) before failing. Default 5 s.
    pub busy_timeout: Duration,
    /// How many read connections (each with its own thread) serve reads. Default 2; at
    /// least 1 is used.
    pub read_connections: usize,
    /// Whether opening may create the file and loomflow's tables, and bring an older schema
    /// up to this version. Default `true`. With `false` only a store at this version opens:
    /// a missing file, one without loomflow's tables ([`StoreError::NotAStore`]) and an older
    /// schema ([`StoreError::OlderSchema`]) are refused and left as they are. For tools that
    /// look at a store the application owns (the `loomflow` command line opens it so).
    ///
    /// [`StoreError::NotAStore`]: crate::runtime::StoreError::NotAStore
    /// [`StoreError::OlderSchema`]: crate::runtime::StoreError::OlderSchema
    pub migrate: bool,
    /// How many checkpoints a thread keeps: `None` (the default) keeps every one, the whole
    /// history; `Some(n)` cuts a thread down to about its newest `n` as a run completes,
    /// fails, is cancelled or suspends, once it holds half as many again. Kept whatever their
    /// age, as the memory store keeps them
    /// ([Retention](crate::runtime::MemoryStore#retention)): the newest `n` suspensions with
    /// the subgraph rows a fork from each takes along (and what their steps journaled), the
    /// rows that name the graph of a run with a row kept (its first, and the first after a
    /// change of its graph), and what the newest run's resume or `recover` reads. A thread
    /// that checkpoints a growing state each run (an agent's conversation) then takes space
    /// in proportion to its state, not to the square of its runs. What goes is gone:
    /// [`list_checkpoints`](crate::Runtime::list_checkpoints) lists the rows kept, and a
    /// [`fork`](crate::Runtime::fork) from one that went fails with `UnknownCheckpoint`. Each
    /// process on a file cuts the threads it writes by its own setting.
    pub retention: Option<usize>,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            synchronous: Synchronous::default(),
            busy_timeout: schema::DEFAULT_BUSY_TIMEOUT,
            read_connections: 2,
            migrate: true,
            retention: None,
        }
    }
}

impl SqliteOptions {
    /// Sets [`synchronous`](Self::synchronous).
    #[must_use]
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// Sets [`busy_timeout`](Self::busy_timeout).
    #[must_use]
    pub fn busy_timeout(mut self, busy_timeout: Duration) -> Self {
        self.busy_timeout = busy_timeout;
        self
    }

    /// Sets [`read_connections`](Self::read_connections).
    #[must_use]
    pub fn read_connections(mut self, read_connections: usize) -> Self {
        self.read_connections = read_connections;
        self
    }

    /// Sets [`migrate`](Self::migrate).
    #[must_use]
    pub fn migrate(mut self, migrate: bool) -> Self {
        self.migrate = migrate;
        self
    }

    /// Sets [`retention`](Self::retention): `Some(100)` keeps about the newest hundred
    /// checkpoints of each thread, as the memory store does by default.
    #[must_use]
    pub fn retention(mut self, checkpoints: Option<usize>) -> Self {
        self.retention = checkpoints;
        self
    }
}

/// Writes and commits counted by
/// [`SqliteStore::commit_stats`](super::SqliteStore::commit_stats).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CommitStats {
    /// Writes committed (checkpoints, journal entries, signals stored or taken).
    pub writes: u64,
    /// Transactions committed; each holds one or more writes.
    pub commits: u64,
    /// Transactions committed with an fsync of their own: at [`Synchronous::Full`], those
    /// holding a write that records work (see [`SqliteStore`](super::SqliteStore)); at
    /// [`Synchronous::Normal`], none.
    pub synced: u64,
}
