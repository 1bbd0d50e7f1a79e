//! The server a store connects to: its connection string parsed, and a description of it
//! that is safe to print (no password), for every error that names the store.

use std::str::FromStr;

use tokio_postgres::config::Host;

use crate::runtime::store::StoreError;

/// A parsed connection string and how errors show it.
#[derive(Clone)]
pub(super) struct Target {
    pub(super) config: tokio_postgres::Config,
    /// `postgres://user@host:port/dbname`, never with the password.
    pub(super) shown: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl Target {
    /// Parses a URL (`postgres://user:password@host:port/dbname?option=value`) or a
    /// key/value string (`host=... user=... dbname=...`), as libpq does.
    ///
    /// # Errors
    ///
    /// [`StoreError::Open`] for a string that does not parse; it does not repeat the
    /// string, which may hold a password.
    pub(super) fn parse(url: &str) -> Result<Self, StoreError> {
        let config = tokio_postgres::Config::from_str(url).map_err(|e| StoreError::Open {
            path: "(unparsable PostgreSQL connection string)".to_owned(),
            message: super::error::chain(&e),
        })?;
        let shown = show(&config);
        Ok(Self { config, shown })
    }

    /// `message` with the password, should it appear, replaced by `***`.
    pub(super) fn scrub(&self, message: String) -> String {
        match self.config.get_password() {
            Some(password) if !password.is_empty() => {
                let password = String::from_utf8_lossy(password);
                message.replace(password.as_ref(), "***")
            }
            _ => message,
        }
    }

    /// A [`StoreError::Open`] naming this server.
    pub(super) fn open_error(&self, message: impl std::fmt::Display) -> StoreError {
        StoreError::Open {
            path: self.shown.clone(),
            message: self.scrub(message.to_string()),
        }
    }

    /// What a first connection that failed is: the database named does not exist (the
    /// server says `3D000`) is no store there ([`StoreError::NotAStore`]) for a caller that
    /// does not migrate (the command line), and an open error that says to create it for
    /// one that does (loomflow creates tables, not databases); anything else, as it is.
    pub(super) fn connect_error(
        &self,
        error: &deadpool_postgres::PoolError,
        migrate: bool,
    ) -> StoreError {
        let missing = match error {
            deadpool_postgres::PoolError::Backend(error) => {
                error.code() == Some(&tokio_postgres::error::SqlState::INVALID_CATALOG_NAME)
            }
            _ => false,
        };
        // Without one named, the server takes the user's name for the database's.
        let name = (self.config.get_dbname())
            .or(self.config.get_user())
            .unwrap_or_default();
        match (missing, migrate) {
            (true, false) => StoreError::NotAStore {
                path: self.shown.clone(),
                reason: format!("the server has no database {name}"),
            },
            (true, true) => self.open_error(format!(
                "the server has no database {name}: create it first (`createdb {name}`, or \
                 `CREATE DATABASE {name}`); loomflow creates its tables, not the database"
            )),
            (false, _) => self.open_error(super::error::chain(error)),
        }
    }
}

/// The connection string as a URL without its password (or any other option: they may
/// carry secrets too).
fn show(config: &tokio_postgres::Config) -> String {
    let user = config
        .get_user()
        .map(|user| format!("{user}@"))
        .unwrap_or_default();
    let ports = config.get_ports();
    let hosts = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let name = match host {
                // A host with an `@` is a password's tail whose `@` was not percent-encoded
                // (`user:se@cret@host`): not shown, and said how to write it.
                Host::Tcp(name) => match name.rsplit_once('@') {
                    Some((_, host)) => format!("…@{host}"),
                    None => name.clone(),
                },
                Host::Unix(path) => path.display().to_string(),
            };
            // One port for every host, or one per host, as libpq allows.
            match ports.get(i).or_else(|| ports.first()) {
                Some(port) => format!("{name}:{port}"),
                None => name,
            }
        })
        .collect::<Vec<_>>()
        .join(",");
    let dbname = config.get_dbname().unwrap_or_default();
    let raw_at = match hosts.contains("…@") {
        true => " (percent-encode an @ in a password: %40)",
        false => "",
    };
    format!("postgres://{user}{hosts}/{dbname}{raw_at}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn urls_are_shown_without_their_password() {
        let target =
            Target::parse("postgres://app:hunter2@db.example:6543/runs?application_name=x")
                .unwrap();
        assert_eq!(target.shown, "postgres://app@db.example:6543/runs");
        assert_eq!(format!("{target:?}"), target.shown);
    }

    /// A password whose `@` was not percent-encoded reads as part of the host: its tail is
    /// not shown, and the way to write it is.
    #[test]
    fn a_password_with_a_raw_at_does_not_show_its_tail() {
        let target = Target::parse("postgres://app:sec@ret@db.example:6543/runs").unwrap();
        assert!(!target.shown.contains("ret"), "{}", target.shown);
        assert!(target.shown.contains("…@db.example"), "{}", target.shown);
        assert!(target.shown.contains("%40"), "{}", target.shown);
    }

    #[test]
    fn key_value_strings_are_shown_without_their_password() {
        let target =
            Target::parse("host=/tmp port=5433 user=ops password='hunter 2' dbname=flows").unwrap();
        assert_eq!(target.shown, "postgres://ops@/tmp:5433/flows");
        assert_eq!(
            target.scrub("auth failed for hunter 2".to_owned()),
            "auth failed for ***"
        );
    }

    #[test]
    fn an_unparsable_string_is_not_repeated() {
        let Err(StoreError::Open { path, message }) =
            Target::parse("postgres://app:hunter2@db:notaport/x")
        else {
            panic!("a bad port must not parse")
        };
        let shown = format!("{path} {message}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(message.contains("invalid"), "{message}");
    }
}
