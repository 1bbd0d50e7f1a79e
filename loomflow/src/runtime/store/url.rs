//! A store named by one string, as a deployment's configuration names it
//! (`DATABASE_URL=postgres://…`): what [`Runtime::open`](crate::Runtime::open) and the
//! command line's `--db` read.

use std::path::PathBuf;
use std::sync::Arc;

use super::{MemoryStore, Store, StoreError};

/// Where a store is, as a URL (or a path) names it. Parse one with [`StoreUrl::parse`] (or
/// `str::parse`), open it with [`open`](Self::open).
///
/// | written | store |
/// | --- | --- |
/// | `postgres://…`, `postgresql://…`, libpq `host=db dbname=flows …` | PostgreSQL (feature `postgres`) |
/// | `sqlite:PATH`, `sqlite://PATH`, or a path | the SQLite file at `PATH` (feature `sqlite`) |
/// | `sqlite:///abs/app.db` | the SQLite file at `/abs/app.db` |
/// | `memory:` | a new in-memory store, which nothing outside the process sees |
///
/// Its `Debug` and every error leave a PostgreSQL URL's credentials out.
///
/// # Examples
///
/// ```
/// use loomflow::runtime::StoreUrl;
///
/// assert_eq!(StoreUrl::parse("sqlite:data/app.db")?, StoreUrl::Sqlite("data/app.db".into()));
/// assert_eq!(StoreUrl::parse("sqlite://data/app.db")?, StoreUrl::Sqlite("data/app.db".into()));
/// assert_eq!(StoreUrl::parse("sqlite:///srv/app.db")?, StoreUrl::Sqlite("/srv/app.db".into()));
/// assert!(matches!(StoreUrl::parse("postgres://app@db/flows")?, StoreUrl::Postgres(_)));
/// assert!(StoreUrl::parse("mysql://db/flows").is_err());
/// # Ok::<(), loomflow::runtime::StoreError>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreUrl {
    /// A PostgreSQL connection string: a URL or libpq `key=value` pairs.
    Postgres(String),
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A new in-memory store.
    Memory,
}

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Postgres(url) => f.debug_tuple("Postgres").field(&shown(url)).finish(),
            Self::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            Self::Memory => f.write_str("Memory"),
        }
    }
}

impl std::str::FromStr for StoreUrl {
    type Err = StoreError;

    fn from_str(text: &str) -> Result<Self, StoreError> {
        Self::parse(text)
    }
}

impl StoreUrl {
    /// Reads `text` (see the table above).
    ///
    /// # Errors
    ///
    /// [`StoreError::Open`] for an empty string, a URL of another scheme (`mysql://…`), a
    /// `sqlite:` URL with a query (`?mode=rwc`, which would become part of the file's name)
    /// and `sqlite::memory:` (each connection of the store would see a database of its
    /// own: write `memory:`).
    pub fn parse(text: &str) -> Result<Self, StoreError> {
        let refused = |message: &str| StoreError::Open {
            path: shown(text),
            message: message.to_owned(),
        };
        if text.trim().is_empty() {
            return Err(refused("no store named (the string is empty)"));
        }
        if is_postgres(text) {
            return Ok(Self::Postgres(text.to_owned()));
        }
        if text.eq_ignore_ascii_case("memory:") {
            return Ok(Self::Memory);
        }
        if text == ":memory:" {
            return Err(refused(
                "an in-memory SQLite database is one per connection: write memory: for the \
                 in-memory store",
            ));
        }
        let path = match after(text, "sqlite://") {
            Some(at) => &text[at..],
            None => match after(text, "sqlite:") {
                Some(at) => &text[at..],
                None if text.contains("://") => {
                    return Err(refused(
                        "not a store loomflow opens: write postgres://…, sqlite:PATH or memory:",
                    ));
                }
                None => return Ok(Self::Sqlite(PathBuf::from(text))),
            },
        };
        if path.is_empty() {
            return Err(refused("the sqlite: URL names no file"));
        }
        if path == ":memory:" {
            return Err(refused(
                "an in-memory SQLite database is one per connection: write memory: for the \
                 in-memory store",
            ));
        }
        if path.contains('?') {
            return Err(refused(
                "a sqlite: URL's query (?mode=…) is not read: give the file's path alone",
            ));
        }
        Ok(Self::Sqlite(PathBuf::from(path)))
    }

    /// Opens the store, creating it (a SQLite file, PostgreSQL's tables) or migrating it as
    /// [`SqliteStore::open`](super::SqliteStore::open) and
    /// [`PostgresStore::connect`](super::PostgresStore::connect) do. Async: connecting to
    /// PostgreSQL talks to the server (call it within a Tokio runtime).
    ///
    /// # Errors
    ///
    /// As those; [`StoreError::Open`] for a store whose cargo feature is off in this build.
    pub async fn open(&self) -> Result<Arc<dyn Store>, StoreError> {
        match self {
            Self::Memory => Ok(Arc::new(MemoryStore::new())),
            #[cfg(feature = "sqlite")]
            Self::Sqlite(path) => Ok(Arc::new(super::SqliteStore::open_file(
                path,
                &super::SqliteOptions::default(),
            )?)),
            #[cfg(not(feature = "sqlite"))]
            Self::Sqlite(path) => Err(StoreError::Open {
                path: path.display().to_string(),
                message: "this build of loomflow has no SQLite store (its `sqlite` feature is off)"
                    .to_owned(),
            }),
            #[cfg(feature = "postgres")]
            Self::Postgres(url) => Ok(Arc::new(super::PostgresStore::connect(url).await?)),
            #[cfg(not(feature = "postgres"))]
            Self::Postgres(url) => Err(StoreError::Open {
                path: shown(url),
                message: "this build of loomflow has no PostgreSQL store: turn on its \
                          `postgres` feature"
                    .to_owned(),
            }),
        }
    }
}

/// Whether `text` is a PostgreSQL connection string: a URL, or libpq `key=value` pairs (the
/// first of which names a connection keyword; libpq allows spaces around the `=`).
pub(crate) fn is_postgres(text: &str) -> bool {
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
    if after(text, "postgres://").is_some() || after(text, "postgresql://").is_some() {
        return true;
    }
    text.split_once('=')
        .is_some_and(|(key, _)| KEYS.contains(&key.trim()))
}

/// A store's URL or path as errors show it: without the credentials a URL may hold
/// (`postgres://user:password@host/db` is `postgres://…@host/db`; a password may hold a `/`,
/// and the user info runs to the last `@`), without its query (`?password=…`), and libpq
/// pairs not at all, as any of them may be a password.
pub(crate) fn shown(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return if is_postgres(text) {
            "(libpq key=value pairs)".to_owned()
        } else {
            text.to_owned()
        };
    };
    let (rest, query) = match rest.split_once('?') {
        Some((rest, _)) => (rest, "?…"),
        None => (rest, ""),
    };
    match rest.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://…@{host}{query}"),
        None => format!("{scheme}://{rest}{query}"),
    }
}

/// `text` after `prefix`, whatever the case of its letters (`SQLITE:app.db`).
fn after(text: &str, prefix: &str) -> Option<usize> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix).then_some(prefix.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_form_names_its_store() {
        let sqlite = |p: &str| Some(StoreUrl::Sqlite(PathBuf::from(p)));
        assert_eq!(StoreUrl::parse("app.db").ok(), sqlite("app.db"));
        assert_eq!(StoreUrl::parse("sqlite:app.db").ok(), sqlite("app.db"));
        assert_eq!(
            StoreUrl::parse("sqlite://data/app.db").ok(),
            sqlite("data/app.db")
        );
        assert_eq!(
            StoreUrl::parse("sqlite:///srv/app.db").ok(),
            sqlite("/srv/app.db")
        );
        assert_eq!(
            StoreUrl::parse("sqlite:/srv/app.db").ok(),
            sqlite("/srv/app.db")
        );
        assert_eq!(StoreUrl::parse("memory:").ok(), Some(StoreUrl::Memory));
        assert_eq!(StoreUrl::parse("MEMORY:").ok(), Some(StoreUrl::Memory));
        assert_eq!(StoreUrl::parse("SQLite:app.db").ok(), sqlite("app.db"));
        assert!(StoreUrl::parse(":memory:").is_err());
        for pg in [
            "postgres://a@h/d",
            "postgresql://h/d",
            "host=db dbname=flows",
        ] {
            assert_eq!(
                StoreUrl::parse(pg).ok(),
                Some(StoreUrl::Postgres(pg.to_owned()))
            );
        }
    }

    #[test]
    fn postgres_is_a_url_or_libpq_pairs() {
        for pg in [
            "postgresql://app@db/flows",
            "host=db user=app password=hunter2 dbname=flows",
            "dbname=flows",
            "keepalives=1 host=db dbname=flows",
            "target_session_attrs=read-write host=db",
            "host = db dbname = flows",
        ] {
            assert!(is_postgres(pg), "{pg}");
        }
        for file in [
            "my host=db",
            "refunds.db",
            "runs=3.db",
            "/var/lib/flows/refunds.db",
        ] {
            assert!(!is_postgres(file), "{file}");
        }
    }

    #[test]
    fn what_would_open_the_wrong_file_is_refused_without_credentials() {
        for (text, said) in [
            ("", "empty"),
            ("sqlite:", "names no file"),
            ("sqlite::memory:", "write memory:"),
            ("sqlite:app.db?mode=rwc", "query"),
            (
                "mysql://root:hunter2@db/flows",
                "not a store loomflow opens",
            ),
        ] {
            let error = StoreUrl::parse(text).unwrap_err().to_string();
            assert!(error.contains(said), "{text}: {error}");
            assert!(!error.contains("hunter2"), "{error}");
        }
        let debug = format!("{:?}", StoreUrl::parse("postgres://app:hunter2@db/flows"));
        assert!(
            !debug.contains("hunter2") && debug.contains("@db/flows"),
            "{debug}"
        );
        assert_eq!(shown("host=db password=hunter2"), "(libpq key=value pairs)");
        for url in [
            "postgres://app@db/flows?password=hunter2",
            "postgresql:///flows?host=/run/pg&user=app&password=hunter2",
            "postgres://app:hun/ter2@db/flows",
            "mysql://root:hunter2@db/flows",
        ] {
            let debug = format!("{:?} {}", StoreUrl::parse(url), shown(url));
            assert!(
                !debug.contains("hunter2") && !debug.contains("ter2"),
                "{debug}"
            );
        }
        assert_eq!(
            shown("postgres://a:b/c@db:5432/flows?x=1"),
            "postgres://…@db:5432/flows?…"
        );
    }
}
