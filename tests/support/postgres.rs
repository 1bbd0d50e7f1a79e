//! A fresh PostgreSQL database for each test, on the server `LOOMFLOW_PG_URL` names
//! (`.ci/postgres` starts one; `.ci/run` exports the variable), dropped when the test ends.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};

/// A database `loomflow_test_<pid>_<n>`; dropping it drops the database (closing whatever
/// connections are left on it).
pub(crate) struct TempPgDb {
    admin: String,
    name: String,
    /// The connection string of the new database.
    pub(crate) url: String,
}

impl TempPgDb {
    /// A new database, or `None` (after saying the test was skipped) when
    /// `LOOMFLOW_PG_URL` is not set.
    pub(crate) async fn create(what: &str) -> Option<Self> {
        Self::create_with(what, "").await
    }

    /// [`create`](Self::create), the database made `WITH` these settings
    /// (`ENCODING 'LATIN1' …`).
    pub(crate) async fn create_with(what: &str, with: &str) -> Option<Self> {
        let Ok(admin) = std::env::var("LOOMFLOW_PG_URL") else {
            println!("skipped: PostgreSQL {what} (set LOOMFLOW_PG_URL, or run .ci/run)");
            return None;
        };
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "loomflow_test_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let client = connect(&admin).await;
        // One statement each: neither may run inside a transaction, which several
        // statements in one query string are.
        for sql in [
            format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            format!("CREATE DATABASE {name} {with}"),
        ] {
            client
                .batch_execute(&sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        }
        let url = with_dbname(&admin, &name);
        Some(Self { admin, name, url })
    }

    /// Runs `sql` on the test database, outside any store.
    pub(crate) async fn execute(&self, sql: &str) {
        connect(&self.url)
            .await
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }
}

impl Drop for TempPgDb {
    fn drop(&mut self) {
        // Drop cannot await: a thread of its own runs a small runtime for the statement.
        let (admin, name) = (self.admin.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                connect(&admin)
                    .await
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("could not drop test database {}: {dropped:?}", self.name);
        }
    }
}

/// A plain tokio-postgres connection, driven by a task of the current runtime.
pub(crate) async fn connect(url: &str) -> tokio_postgres::Client {
    let mut config: tokio_postgres::Config = url
        .parse()
        .unwrap_or_else(|e| panic!("not a connection string: {e:?}"));
    // Probed while idle, as the store's own connections are: a test that reads the keepalive
    // timers of the connections this process opened meanwhile may find this one among them.
    config.keepalives_idle(std::time::Duration::from_secs(30));
    let (client, connection) = config
        .connect(tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the test server: {e:?}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// `url` with its database replaced by `dbname`, for a URL or a `key=value` string.
pub(crate) fn with_dbname(url: &str, dbname: &str) -> String {
    for scheme in ["postgres://", "postgresql://"] {
        if let Some(rest) = url.strip_prefix(scheme) {
            let (base, query) = match rest.split_once('?') {
                Some((base, query)) => (base, format!("?{query}")),
                None => (rest, String::new()),
            };
            let authority = base
                .split_once('/')
                .map_or(base, |(authority, _)| authority);
            return format!("{scheme}{authority}/{dbname}{query}");
        }
    }
    // In a key=value string a later key wins.
    format!("{url} dbname={dbname}")
}
