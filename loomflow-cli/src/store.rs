//! Opening the store named by `--db` (or `LOOMFLOW_DB`).

use loomflow::Runtime;
use loomflow::runtime::{
    MailboxConfig, PostgresOptions, PostgresStore, SqliteOptions, SqliteStore, Store, StoreError,
    StoreUrl,
};

use crate::Failure;

/// How long the process that opens the store lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lifetime {
    /// One command: it reads or writes and exits. It keeps every stored signal it loads:
    /// a signal its mailbox would drop (past the pending bounds, which are the workers' to
    /// set) would be deleted from the store, though nothing was meant to change.
    Command,
    /// `serve`: a process like the workers, with the default pending bounds.
    Server,
}

/// The runtime over the store `db` names: `postgres://…` (or `postgresql://…`), libpq
/// `key=value` pairs (`host=db dbname=flows …`), `sqlite:PATH`, or a path to a SQLite file.
/// No error repeats `db`: a connection string may hold a password.
///
/// Opens only a store at this loomflow's schema, and changes nothing before it has checked
/// so: no table is created in a database that is not one (a wrong path or URL), and an
/// older store is not upgraded behind its workers' backs (after which they would refuse it).
pub(crate) async fn open(db: Option<&str>, lifetime: Lifetime) -> Result<Runtime, Failure> {
    // A value read from a file keeps its newline; an empty one (a placeholder) is none.
    let db = db
        .map(str::trim)
        .filter(|db| !db.is_empty())
        .ok_or_else(|| {
            Failure::usage("no store: pass --db sqlite:PATH (or postgres://…) or set LOOMFLOW_DB")
        })?;
    let signals = match lifetime {
        Lifetime::Command => MailboxConfig::default()
            .pending_signal_ttl(None)
            .max_pending_signal_sessions(None),
        Lifetime::Server => MailboxConfig::default(),
    };
    let path = match StoreUrl::parse(db) {
        Ok(StoreUrl::Postgres(url)) => {
            let options = PostgresOptions::default().migrate(false);
            let store = PostgresStore::connect_with(&url, options)
                .await
                .map_err(loomflow::Error::from)?;
            return Ok(build(store, signals));
        }
        Ok(StoreUrl::Sqlite(path)) => path,
        Ok(_) => {
            return Err(Failure::usage(
                "--db memory: names a store of this process alone: nothing to look at",
            ));
        }
        // The message alone: the string may hold a password.
        Err(StoreError::Open { message, .. }) => {
            return Err(Failure::usage(format!("--db: {message}")));
        }
        Err(other) => return Err(loomflow::Error::from(other).into()),
    };
    let path = path.as_path();
    if !path.exists() {
        // Opening would create an empty file: a typo would look like a store with no runs.
        return Err(Failure::not_found(format!(
            "no SQLite file at {}",
            shown_path(path)
        )));
    }
    if path.is_dir() {
        // SQLite would say "disk I/O error", which sends an operator to the hardware.
        return Err(Failure::not_found(format!(
            "{} is a directory, not a SQLite file",
            shown_path(path)
        )));
    }
    let options = SqliteOptions::default().migrate(false);
    let store = SqliteStore::open_with(path, options).map_err(loomflow::Error::from)?;
    Ok(build(store, signals))
}

fn build(store: impl Store, signals: MailboxConfig) -> Runtime {
    Runtime::builder().store(store).signals(signals).build()
}

/// A path as an error shows it: as it is, unless it looks like it could hold a secret (a
/// `=` or an `@`, as a connection string would).
fn shown_path(path: &std::path::Path) -> String {
    let path = path.display().to_string();
    if path.contains('=') || path.contains('@') {
        "the path --db names (it is not a SQLite file, nor a PostgreSQL connection string)"
            .to_owned()
    } else {
        path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_that_could_hold_a_secret_is_not_shown() {
        let shown = |path: &str| shown_path(std::path::Path::new(path));
        assert_eq!(shown("refunds.db"), "refunds.db");
        assert!(!shown("app:hunter2@db/flows").contains("hunter2"));
        assert!(!shown("user=app password=hunter2").contains("hunter2"));
    }
}
