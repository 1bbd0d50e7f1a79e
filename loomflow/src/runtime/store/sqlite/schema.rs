//! Opening a database file: connection settings, the schema version and its migrations.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior};

use super::{SqliteOptions, Synchronous};
use crate::runtime::store::{StoreError, StoreUrl};

/// The schema this build writes. Bump it and append to [`MIGRATIONS`] together.
pub(super) const SCHEMA_VERSION: i64 = 12;

/// `MIGRATIONS[v]` takes a file from version `v` to `v + 1`; version 0 is an empty file.
///
/// Rows are kept compact (the budget is 1 KiB of disk per suspended run): the fields that
/// queries filter on are columns, the executor's snapshot is one opaque JSON `body`, and the
/// journal is a `WITHOUT ROWID` table so its key is stored once.
///
/// Checkpoint ids are rowids, not `AUTOINCREMENT`, which would rewrite `sqlite_sequence` (one
/// more page) in every commit. A new row's rowid is one past the largest left, so only a
/// thread's delete could make an id come back, when it removes the newest rows. It then sets
/// `meta.checkpoint_id_floor` to the newest id it removes, and while that floor is not 0 an
/// insert takes an id past both it and the largest id left. The writer's periodic pruning
/// sets it back to 0 once a row is past it. Files created before this keep `AUTOINCREMENT`;
/// both read and write alike.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [
    // 0 -> 1
    "CREATE TABLE meta (schema_version INTEGER NOT NULL);
     INSERT INTO meta (schema_version) VALUES (0);
     CREATE TABLE checkpoints (
         id INTEGER PRIMARY KEY,
         thread TEXT NOT NULL,
         run INTEGER NOT NULL,
         namespace TEXT NOT NULL,
         step INTEGER NOT NULL,
         status TEXT NOT NULL,
         body TEXT NOT NULL
     );
     CREATE INDEX checkpoints_by_thread ON checkpoints (thread, namespace, id);
     CREATE TABLE journal (
         thread TEXT NOT NULL,
         run INTEGER NOT NULL,
         namespace TEXT NOT NULL,
         step INTEGER NOT NULL,
         node TEXT NOT NULL,
         name TEXT NOT NULL,
         occurrence INTEGER NOT NULL,
         value TEXT NOT NULL,
         PRIMARY KEY (thread, run, namespace, step, node, name, occurrence)
     ) WITHOUT ROWID;
     CREATE TABLE signals (
         seq INTEGER PRIMARY KEY AUTOINCREMENT,
         session TEXT NOT NULL,
         name TEXT NOT NULL,
         payload TEXT,
         idempotency_key TEXT,
         sent_at_ms INTEGER NOT NULL,
         consumed_at_ms INTEGER
     );
     CREATE UNIQUE INDEX signals_by_key ON signals (session, name, idempotency_key)
         WHERE idempotency_key IS NOT NULL;",
    // 1 -> 2: a failed run's error leaves the body for a column of its own, so that the
    // body is only the executor's snapshot.
    "ALTER TABLE checkpoints ADD COLUMN error TEXT;
     UPDATE checkpoints
        SET error = json_extract(body, '$.error'), body = json_remove(body, '$.error')
      WHERE json_type(body, '$.error') IS NOT NULL;",
    // 2 -> 3: the runs table and its leases (`runs.rs`).
    super::runs::MIGRATION,
    // 3 -> 4: what workers and run queries need on each run row (`runs.rs`).
    super::run_rows::MIGRATION_WORKER,
    // 4 -> 5: the audit log (`audit.rs`).
    super::audit::MIGRATION,
    // 5 -> 6: the pending signals in the order workers read them (`run_rows.rs`).
    super::run_rows::MIGRATION_PENDING_IN_ORDER,
    // 6 -> 7: the largest checkpoint id a thread's delete removed (`housekeeping.rs`).
    "ALTER TABLE meta ADD COLUMN checkpoint_id_floor INTEGER NOT NULL DEFAULT 0;",
    // 7 -> 8: the runs a worker carries on before the queued ones (`run_rows.rs`).
    super::run_rows::MIGRATION_RECOVERING,
    // 8 -> 9: those, a queued run claimed before included (`run_rows.rs`).
    super::run_rows::MIGRATION_RECOVERING_QUEUED,
    // 9 -> 10: the consumed signals the writer forgets once their key is old enough.
    super::run_rows::MIGRATION_CONSUMED,
    // 10 -> 11: the queued runs a worker claims, oldest first (`run_rows.rs`).
    super::run_rows::MIGRATION_QUEUED,
    // 11 -> 12: the executions in a row that lost a run's lease (`RunRecord::lapses`).
    "ALTER TABLE runs ADD COLUMN lapses INTEGER NOT NULL DEFAULT 0;",
];

fn open_error(path: &Path, error: impl std::fmt::Display) -> StoreError {
    let raw = path.display().to_string();
    let path = shown(path);
    StoreError::Open {
        // SQLite's own message may quote the path as it was given.
        message: error.to_string().replace(&raw, &path),
        path,
    }
}

/// `path` as errors show it: without the credentials of a URL given by mistake
/// (`Runtime::sqlite` handed a `postgres://user:password@host/db`), which an error would
/// otherwise print, and which nobody's log should keep.
pub(super) fn shown(path: &Path) -> String {
    crate::runtime::store::url::shown(&path.display().to_string())
}

/// The file `path` names: a `sqlite:` URL (`sqlite:app.db`, `sqlite:///srv/app.db`) is read
/// as [`StoreUrl`] reads it, where SQLite would make a file of that name, unless a file of
/// that very name exists (an earlier loomflow made it so: it is the store); a PostgreSQL
/// connection string (a URL or libpq pairs) and `:memory:` are refused, naming what opens
/// them.
pub(super) fn file_named(path: &Path) -> Result<PathBuf, StoreError> {
    let Some(text) = path.to_str() else {
        return Ok(path.to_path_buf());
    };
    if crate::runtime::store::url::is_postgres(text) {
        return Err(StoreError::Open {
            path: shown(path),
            message: "this names a PostgreSQL database, not a SQLite file: open it with \
                      Runtime::open or Runtime::postgres"
                .to_owned(),
        });
    }
    let url = text
        .get(..7)
        .is_some_and(|head| head.eq_ignore_ascii_case("sqlite:"));
    if !(url || text.contains("://") || text == ":memory:") || (url && path.exists()) {
        return Ok(path.to_path_buf());
    }
    match StoreUrl::parse(text)? {
        StoreUrl::Sqlite(file) => Ok(file),
        _ => Err(StoreError::Open {
            path: shown(path),
            message: "this names the in-memory store, not a SQLite file: open it with \
                      Runtime::open or Runtime::in_memory"
                .to_owned(),
        }),
    }
}

/// Opens a connection with the store's settings. `create` is false for read connections,
/// which open the file the writer already created.
fn connect(path: &Path, options: &SqliteOptions, create: bool) -> Result<Connection, StoreError> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let conn = Connection::open_with_flags(path, flags).map_err(|e| open_error(path, e))?;
    conn.busy_timeout(options.busy_timeout)
        .map_err(|e| open_error(path, e))?;
    let sync = match options.synchronous {
        Synchronous::Normal => "NORMAL",
        Synchronous::Full => "FULL",
    };
    conn.pragma_update(None, "synchronous", sync)
        .map_err(|e| open_error(path, e))?;
    Ok(conn)
}

/// Opens (creating if needed) the writer's connection: WAL mode, schema checked and migrated.
/// Without [`SqliteOptions::migrate`], opens only a store at this version, and changes
/// nothing before it has checked that.
pub(super) fn open_writer(path: &Path, options: &SqliteOptions) -> Result<Connection, StoreError> {
    if !options.migrate && !path.exists() {
        return Err(StoreError::NotAStore {
            path: shown(path),
            reason: "no such file".to_owned(),
        });
    }
    if !options.migrate {
        check_current(path, options)?;
    }
    let mut conn = connect(path, options, options.migrate)?;
    // The first statement that reads the file: a file that is not a database, or one that
    // is locked past the busy timeout, fails here.
    let mode = wal_mode(&conn, options.busy_timeout).map_err(|e| open_error(path, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(open_error(
            path,
            format!("could not switch to WAL mode (journal mode is {mode})"),
        ));
    }
    migrate(&mut conn, path)?;
    Ok(conn)
}

/// Switches the file to WAL mode, and says the mode it is in. SQLite answers a switch that
/// meets another connection switching a new file at the same moment (two workers started
/// together on a fresh volume) with "database is locked" at once, without its busy handler:
/// tried again here until `busy_timeout` has passed.
fn wal_mode(conn: &Connection, busy_timeout: Duration) -> rusqlite::Result<String> {
    let started = std::time::Instant::now();
    let mut nap = Duration::from_millis(2);
    loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0)) {
            Err(e)
                if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                    && started.elapsed() < busy_timeout =>
            {
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(100));
            }
            mode => return mode,
        }
    }
}

/// Opens a read connection on a file [`open_writer`] has prepared.
pub(super) fn open_reader(path: &Path, options: &SqliteOptions) -> Result<Connection, StoreError> {
    let conn = connect(path, options, false)?;
    conn.pragma_update(None, "query_only", true)
        .map_err(|e| open_error(path, e))?;
    Ok(conn)
}

/// Refuses a file that is not a loomflow store at [`SCHEMA_VERSION`]; only reads. A store
/// has the tables its first version made (another application's file may well have a
/// `meta` table of its own).
fn check_current(path: &Path, options: &SqliteOptions) -> Result<(), StoreError> {
    let not_a_store = |reason: &str| StoreError::NotAStore {
        path: shown(path),
        reason: reason.to_owned(),
    };
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| open_error(path, e))?;
    conn.busy_timeout(options.busy_timeout)
        .map_err(|e| open_error(path, e))?;
    let tables: rusqlite::Result<i64> = conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table'
             AND name IN ('meta', 'checkpoints', 'journal', 'signals')",
        [],
        |row| row.get(0),
    );
    match tables {
        Ok(4) => {}
        Ok(_) => return Err(not_a_store("the file does not have loomflow's tables")),
        Err(rusqlite::Error::SqliteFailure(e, _))
            if e.code == rusqlite::ErrorCode::NotADatabase =>
        {
            return Err(not_a_store("the file is not a SQLite database"));
        }
        Err(e) => return Err(open_error(path, e)),
    }
    let found = schema_version(&conn, path)?
        .ok_or_else(|| not_a_store("the file does not have loomflow's tables"))?;
    match found.cmp(&SCHEMA_VERSION) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Less => Err(StoreError::OlderSchema {
            path: shown(path),
            found,
            supported: SCHEMA_VERSION,
        }),
        std::cmp::Ordering::Greater => Err(StoreError::NewerSchema {
            path: shown(path),
            found,
            supported: SCHEMA_VERSION,
        }),
    }
}

/// The file's schema version; `None` when it has no `meta` table (a new file, or not
/// loomflow's).
fn schema_version(conn: &Connection, path: &Path) -> Result<Option<i64>, StoreError> {
    let has_meta: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta')",
            [],
            |row| row.get(0),
        )
        .map_err(|e| open_error(path, e))?;
    if !has_meta {
        return Ok(None);
    }
    conn.query_row("SELECT schema_version FROM meta", [], |row| row.get(0))
        .optional()
        .map_err(|e| open_error(path, e))?
        .ok_or_else(|| open_error(path, "the meta table has no schema version"))
        .map(Some)
}

/// Brings the file to [`SCHEMA_VERSION`], or refuses a newer one. Takes the write lock, so
/// a file another connection keeps locked past the busy timeout is reported as such.
fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| open_error(path, e))?;
    let found = schema_version(&tx, path)?.unwrap_or(0);
    if found > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            path: shown(path),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    let from = usize::try_from(found)
        .map_err(|_| open_error(path, format!("invalid schema version {found}")))?;
    if from == MIGRATIONS.len() {
        return Ok(()); // dropping the transaction ends it; nothing was written
    }
    for (version, migration) in MIGRATIONS.iter().enumerate().skip(from) {
        if adds_a_column_there(&tx, migration).map_err(|e| open_error(path, e))? {
            continue;
        }
        tx.execute_batch(migration).map_err(|e| {
            open_error(
                path,
                format!("migration to schema version {}: {e}", version + 1),
            )
        })?;
    }
    // A file from before the runs table (version 2 or older) has runs but no rows for
    // them: each thread gets the row its newest checkpoint says, once the table is whole.
    // So does a file of a later version an early build migrated (it made the table empty):
    // every migration fills what is missing, and finds nothing to do in a file without gaps;
    // there, only a run's (a graph's, whose first checkpoint carries its fingerprint): a
    // thread of checkpoints written outside any run (`Store::put_checkpoint`) is no run.
    if from >= 1 {
        super::backfill::backfill(&tx, from).map_err(|e| open_error(path, e))?;
    }
    tx.execute("UPDATE meta SET schema_version = ?1", [SCHEMA_VERSION])
        .map_err(|e| open_error(path, e))?;
    tx.commit().map_err(|e| open_error(path, e))
}

/// Whether `migration` only adds a column (`ALTER TABLE t ADD COLUMN c …;`) that the table
/// has already: a file whose version was set back (by hand, or by a test making an older
/// file out of a new one) is migrated again without failing on it.
fn adds_a_column_there(conn: &Connection, migration: &str) -> rusqlite::Result<bool> {
    let words: Vec<&str> = migration.split_whitespace().collect();
    let (["ALTER", "TABLE", table, "ADD", "COLUMN", column, ..], 1) =
        (words.as_slice(), migration.matches(';').count())
    else {
        return Ok(false);
    };
    conn.query_row(
        "SELECT count(*) FROM pragma_table_info(?1) WHERE name = ?2",
        [table, column],
        |row| row.get::<_, i64>(0),
    )
    .map(|found| found > 0)
}

/// How long a writer waits for another connection's lock before giving up, by default.
pub(super) const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);
