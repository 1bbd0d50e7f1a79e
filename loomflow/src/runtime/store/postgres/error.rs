//! What can go wrong inside one operation, before it is reported as a [`StoreError`] naming
//! the thread it concerned.

use deadpool_postgres::PoolError;

use crate::runtime::store::StoreError;

/// A failure inside an operation.
#[derive(Debug)]
pub(super) enum Fail {
    /// The server (or the connection to it) failed a statement.
    Db(tokio_postgres::Error),
    /// No connection could be had from the pool.
    Pool(PoolError),
    /// Already a store error: a value that does not fit, a row that does not decode, a
    /// lost lease.
    Store(StoreError),
}

impl From<tokio_postgres::Error> for Fail {
    fn from(error: tokio_postgres::Error) -> Self {
        Self::Db(error)
    }
}

impl From<PoolError> for Fail {
    fn from(error: PoolError) -> Self {
        Self::Pool(error)
    }
}

impl From<StoreError> for Fail {
    fn from(error: StoreError) -> Self {
        Self::Store(error)
    }
}

impl Fail {
    /// As a failed write concerning `thread` (a thread or a session): refused when the
    /// server refused the values themselves (see [`refused`]).
    pub(super) fn write(self, thread: &str) -> StoreError {
        if let Self::Db(error) = &self
            && refused(error)
        {
            return StoreError::Refused {
                thread: thread.to_owned(),
                message: db_message(error),
            };
        }
        self.into_store(thread, |thread, message| StoreError::Write {
            thread,
            message,
        })
    }

    /// As a failed read concerning `thread`. A value the server refuses to compare (a NUL
    /// in a name looked up) is [`StoreError::Refused`], as for a write: asking again gives
    /// the same answer, so it is no passing failure to retry.
    pub(super) fn read(self, thread: &str) -> StoreError {
        if let Self::Db(error) = &self
            && refused(error)
        {
            return StoreError::Refused {
                thread: thread.to_owned(),
                message: db_message(error),
            };
        }
        self.into_store(thread, |thread, message| StoreError::Read {
            thread,
            message,
        })
    }

    fn into_store(
        self,
        thread: &str,
        make: impl FnOnce(String, String) -> StoreError,
    ) -> StoreError {
        match self {
            Self::Store(error) => error,
            Self::Pool(PoolError::Closed) => StoreError::Closed,
            Self::Pool(error) => make(thread.to_owned(), chain(&error)),
            Self::Db(error) => make(thread.to_owned(), db_message(&error)),
        }
    }
}

/// Whether the server refused the values a statement carried, as it would again: a data
/// exception (SQLSTATE class 22: a NUL in text, a number out of range) or a limit of the
/// server's (class 54: an index entry too large, a name longer than an index takes).
fn refused(error: &tokio_postgres::Error) -> bool {
    let Some(db) = error.as_db_error() else {
        return false;
    };
    refused_by(db.code().code(), db.file())
}

/// [`refused`], from the error's SQLSTATE and the server's source file that raised it. A
/// full NOTIFY queue (54000 from `async.c`: a session that listens and never reads holds it
/// up) passes once that session moves on: a write that notifies is tried again, not refused.
fn refused_by(code: &str, file: Option<&str>) -> bool {
    match code.get(..2) {
        Some("22") => true,
        Some("54") => file != Some("async.c"),
        _ => false,
    }
}

/// What the server said, and for text it cannot keep, why: its `TEXT` cannot hold a NUL
/// character, which a thread, a session, a name or a key then holds.
fn db_message(error: &tokio_postgres::Error) -> String {
    let message = chain(error);
    match error.code() {
        Some(&tokio_postgres::error::SqlState::CHARACTER_NOT_IN_REPERTOIRE) => format!(
            "PostgreSQL cannot keep a NUL character in text (a thread, session, name or key \
             holds one): {message}"
        ),
        _ => message,
    }
}

/// An error and its sources on one line: tokio-postgres says "db error" and keeps the
/// server's message in the source.
pub(super) fn chain(error: &dyn std::error::Error) -> String {
    crate::error_chain::ErrorChain(error)
        .to_string()
        .replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::refused_by;

    /// Values the server would refuse again are refused; a full NOTIFY queue passes.
    #[test]
    fn a_full_notify_queue_is_not_a_refused_value() {
        assert!(refused_by("22021", Some("mbutils.c")), "a NUL in text");
        assert!(
            refused_by("54000", Some("nbtutils.c")),
            "an index entry too large"
        );
        assert!(
            !refused_by("54000", Some("async.c")),
            "the NOTIFY queue is full"
        );
        assert!(!refused_by("40001", None), "a serialization failure");
    }
}
