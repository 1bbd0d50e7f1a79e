//! Opening the store named by `--db` (or `LOOMFLOW_DB`).

use loomflow::Runtime;
use loomflow::runtime::{
    MailboxConfig, PostgresOptions, PostgresStore, SqliteOptions, SqliteStore, Store,
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
    if is_postgres(db) {
        let options = PostgresOptions::default().migrate(false);
        let store = PostgresStore::connect_with(db, options)
            .await
            .map_err(loomflow::Error::from)?;
        return Ok(build(store, signals));
    }
    let path = db.strip_prefix("sqlite:").unwrap_or(db);
    if let Some((scheme, _)) = path.split_once("://") {
        return Err(Failure::usage(format!(
            "unsupported store {scheme}://…: use sqlite:PATH, postgres://… or key=value pairs"
        )));
    }
    if !std::path::Path::new(path).exists() {
        // Opening would create an empty file: a typo would look like a store with no runs.
        return Err(Failure::not_found(format!(
            "no SQLite file at {}",
            shown_path(path)
        )));
    }
    if std::path::Path::new(path).is_dir() {
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

/// Whether `db` is a PostgreSQL connection string: a URL, or libpq `key=value` pairs (the
/// first of which names a connection keyword; libpq allows spaces around the `=`).
fn is_postgres(db: &str) -> bool {
    /// libpq's connection keywords (PostgreSQL 17).
    const KEYS: &[&str] = &[
        "host",
        "hostaddr",
        "port",
        "dbname",
        "user",
        "password",
        "passfile",
        "require_auth",
        "channel_binding",
        "connect_timeout",
        "client_encoding",
        "options",
        "application_name",
        "fallback_application_name",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
        "replication",
        "gssencmode",
        "sslmode",
        "sslnegotiation",
        "requiressl",
        "sslcompression",
        "sslcert",
        "sslkey",
        "sslpassword",
        "sslcertmode",
        "sslrootcert",
        "sslcrl",
        "sslcrldir",
        "sslsni",
        "requirepeer",
        "ssl_min_protocol_version",
        "ssl_max_protocol_version",
        "krbsrvname",
        "gsslib",
        "gssdelegation",
        "service",
        "target_session_attrs",
        "load_balance_hosts",
    ];
    if db.starts_with("postgres://") || db.starts_with("postgresql://") {
        return true;
    }
    db.split_once('=')
        .is_some_and(|(key, _)| KEYS.contains(&key.trim()))
}

/// A path as an error shows it: as it is, unless it looks like it could hold a secret (a
/// `=` or an `@`, as a connection string would).
fn shown_path(path: &str) -> String {
    if path.contains('=') || path.contains('@') {
        "the path --db names (it is not a SQLite file, nor a PostgreSQL connection string)"
            .to_owned()
    } else {
        path.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_is_a_url_or_libpq_pairs() {
        assert!(is_postgres("postgres://app@db/flows"));
        assert!(is_postgres("postgresql://app@db/flows"));
        assert!(is_postgres(
            "host=db user=app password=hunter2 dbname=flows"
        ));
        assert!(is_postgres("dbname=flows"));
        assert!(is_postgres("keepalives=1 host=db dbname=flows"));
        assert!(is_postgres("target_session_attrs=read-write host=db"));
        assert!(is_postgres("host = db dbname = flows"));
        assert!(!is_postgres("my host=db"));
        assert!(!is_postgres("refunds.db"));
        assert!(!is_postgres("runs=3.db"));
        assert!(!is_postgres("/var/lib/flows/refunds.db"));
    }

    #[test]
    fn a_path_that_could_hold_a_secret_is_not_shown() {
        assert_eq!(shown_path("refunds.db"), "refunds.db");
        assert!(!shown_path("app:hunter2@db/flows").contains("hunter2"));
        assert!(!shown_path("user=app password=hunter2").contains("hunter2"));
    }
}
