//! The store's settings ([`PostgresOptions`]).

use std::time::Duration;

#[cfg(doc)]
use super::{PostgresStore, Store, StoreError};

/// Settings for [`PostgresStore::connect_with`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use loomflow::runtime::PostgresOptions;
///
/// let options = PostgresOptions::default()
///     .pool_size(32)
///     .connect_timeout(Duration::from_secs(3))
///     .notifications(false);
/// assert_eq!(options.pool_size, 32);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PostgresOptions {
    /// The most connections the store keeps open at once (its pool); operations beyond it
    /// wait for a free one. Default 16; at least 1 is used. The change listener (see
    /// [`notifications`](Self::notifications)) uses one more, outside the pool.
    pub pool_size: usize,
    /// How long to wait for the server when opening a connection before failing. Default
    /// 10 s.
    pub connect_timeout: Duration,
    /// Whether to keep a connection that `LISTEN`s for changes other processes commit, so
    /// that [`Store::change_counter`] can tell a worker there is nothing new without a
    /// query. Without it the counter is `None` and workers query the store at every poll
    /// interval. Default `true`.
    pub notifications: bool,
    /// Whether connecting may create loomflow's tables in a database without them, and
    /// bring an older schema up to this version. Default `true`. With `false` only a store
    /// at this version opens: a database without loomflow's tables
    /// ([`StoreError::NotAStore`]) and an older schema ([`StoreError::OlderSchema`]) are
    /// refused and left as they are. For tools that look at a store the application owns
    /// (the `loomflow` command line connects so).
    pub migrate: bool,
    /// How many checkpoints a thread keeps: `None` (the default) keeps every one; `Some(n)`
    /// cuts a thread down to about its newest `n` after a run completes, fails, is cancelled
    /// or suspends, as [`SqliteOptions::retention`](crate::runtime::SqliteOptions::retention)
    /// does (read there what is kept whatever its age). The cut is its own statement after
    /// the write: a failure of it is logged, and the next such write tries again.
    pub retention: Option<usize>,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            pool_size: 16,
            connect_timeout: Duration::from_secs(10),
            notifications: true,
            migrate: true,
            retention: None,
        }
    }
}

impl PostgresOptions {
    /// Sets [`pool_size`](Self::pool_size).
    #[must_use]
    pub fn pool_size(mut self, pool_size: usize) -> Self {
        self.pool_size = pool_size;
        self
    }

    /// Sets [`connect_timeout`](Self::connect_timeout).
    #[must_use]
    pub fn connect_timeout(mut self, connect_timeout: Duration) -> Self {
        self.connect_timeout = connect_timeout;
        self
    }

    /// Sets [`notifications`](Self::notifications).
    #[must_use]
    pub fn notifications(mut self, notifications: bool) -> Self {
        self.notifications = notifications;
        self
    }

    /// Sets [`migrate`](Self::migrate).
    #[must_use]
    pub fn migrate(mut self, migrate: bool) -> Self {
        self.migrate = migrate;
        self
    }

    /// Sets [`retention`](Self::retention).
    #[must_use]
    pub fn retention(mut self, checkpoints: Option<usize>) -> Self {
        self.retention = checkpoints;
        self
    }
}
