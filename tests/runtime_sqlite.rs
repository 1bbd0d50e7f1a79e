//! The SQLite store on bad input, its schema version, and its durability details.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use loomflow::runtime::{
    Checkpoint, Claim, JournalKey, RunFilter, RunState, RunStatus, SignalPush, SqliteOptions,
    SqliteStore, Store, StoreError, StoredSignal,
};
use loomflow::{END, Graph, Runtime, RuntimeError, START};
use serde_json::json;

/// A fresh database path; removes the file and its WAL companions when dropped.
struct TempDb(PathBuf);

impl TempDb {
    fn new(name: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        Self(std::env::temp_dir().join(format!(
            "loomflow-rt-{name}-{}-{nanos}.db",
            std::process::id()
        )))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.0.display()));
        }
    }
}

/// Asserts an `Open` error that names `path`, and returns its message.
fn open_error(result: Result<SqliteStore, StoreError>, path: &Path) -> String {
    match result {
        Err(StoreError::Open {
            path: named,
            message,
        }) => {
            assert_eq!(
                named,
                path.display().to_string(),
                "the error names the file"
            );
            let shown = StoreError::Open {
                path: named,
                message: message.clone(),
            }
            .to_string();
            assert!(shown.contains(&path.display().to_string()), "{shown}");
            message
        }
        Err(other) => panic!("expected an open error naming the path, got {other:?}"),
        Ok(store) => panic!("expected an open error, opened {store:?}"),
    }
}

fn short_timeout() -> SqliteOptions {
    SqliteOptions::default().busy_timeout(Duration::from_millis(100))
}

/// The schema version `conn`'s file records.
fn schema_version(conn: &rusqlite::Connection) -> i64 {
    conn.query_row("SELECT schema_version FROM meta", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn runtime_sqlite_creates_the_file() {
    let db = TempDb::new("create");
    let runtime = Runtime::sqlite(db.path()).unwrap();
    assert!(db.path().exists());
    drop(runtime);
}

#[test]
fn a_file_that_is_not_a_database_is_refused() {
    let db = TempDb::new("garbage");
    std::fs::write(
        db.path(),
        b"this is not a sqlite database, just some text\n".repeat(200),
    )
    .unwrap();
    let message = open_error(SqliteStore::open(db.path()), db.path());
    assert!(message.contains("not a database"), "{message}");
    // The file is left as it was.
    assert!(
        std::fs::read(db.path())
            .unwrap()
            .starts_with(b"this is not a sqlite database")
    );
}

#[test]
fn runtime_sqlite_reports_a_bad_file_as_a_store_error() {
    let db = TempDb::new("garbage-rt");
    std::fs::write(db.path(), [0xA5u8; 8192]).unwrap();
    match Runtime::sqlite(db.path()) {
        Err(RuntimeError::Store(StoreError::Open { path, .. })) => {
            assert_eq!(path, db.path().display().to_string());
        }
        other => panic!("expected a store open error, got {other:?}"),
    }
}

#[test]
fn a_missing_directory_is_refused() {
    let dir = TempDb::new("no-such-dir");
    let path = dir.path().join("nested").join("journal.db");
    let message = open_error(SqliteStore::open(&path), &path);
    assert!(message.contains("unable to open"), "{message}");
    assert!(!dir.path().exists(), "no directory is created");
}

#[test]
fn a_corrupt_database_is_refused() {
    let db = TempDb::new("corrupt");
    drop(SqliteStore::open(db.path()).unwrap());
    // Keep the 100-byte header (so SQLite sees a database) and smash the schema page.
    let mut bytes = std::fs::read(db.path()).unwrap();
    assert!(
        bytes.len() > 4096,
        "the file holds more than its first page"
    );
    for b in &mut bytes[100..4096] {
        *b = 0x5A;
    }
    std::fs::write(db.path(), &bytes).unwrap();
    let message = open_error(SqliteStore::open(db.path()), db.path());
    assert!(message.contains("malformed"), "{message}");
}

#[test]
fn a_database_locked_by_another_connection_is_refused() {
    let db = TempDb::new("locked");
    drop(SqliteStore::open(db.path()).unwrap());
    let other = rusqlite::Connection::open(db.path()).unwrap();
    other.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let message = open_error(
        SqliteStore::open_with(db.path(), short_timeout()),
        db.path(),
    );
    assert!(message.contains("locked"), "{message}");
    other.execute_batch("COMMIT").unwrap();
    drop(SqliteStore::open_with(db.path(), short_timeout()).unwrap());
}

#[test]
fn a_database_locked_in_rollback_mode_is_refused() {
    // Another program's database, not yet in WAL mode, inside an exclusive transaction:
    // even reading it has to wait.
    let db = TempDb::new("locked-rollback");
    let other = rusqlite::Connection::open(db.path()).unwrap();
    other
        .execute_batch("CREATE TABLE t (x); BEGIN EXCLUSIVE; INSERT INTO t VALUES (1);")
        .unwrap();
    let message = open_error(
        SqliteStore::open_with(db.path(), short_timeout()),
        db.path(),
    );
    assert!(message.contains("locked"), "{message}");
}

#[test]
fn a_newer_schema_is_refused() {
    let db = TempDb::new("newer");
    drop(SqliteStore::open(db.path()).unwrap());
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    conn.execute("UPDATE meta SET schema_version = 999", [])
        .unwrap();
    drop(conn);
    match SqliteStore::open(db.path()) {
        Err(StoreError::NewerSchema {
            path,
            found,
            supported,
        }) => {
            assert_eq!(path, db.path().display().to_string());
            assert_eq!(found, 999);
            assert!(supported < found);
            let message = StoreError::NewerSchema {
                path,
                found,
                supported,
            }
            .to_string();
            assert!(message.contains("999"), "{message}");
        }
        other => panic!("expected NewerSchema, got {other:?}"),
    }
    // The file is untouched: the version is still the newer one.
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    let version = schema_version(&conn);
    assert_eq!(version, 999);
}

/// Opened without migrating, only a store at this version opens, and nothing is changed
/// before that is checked: no file is created, another application's file gets no tables
/// and keeps its journal mode, an older store keeps its version.
#[test]
fn without_migrating_only_a_current_store_opens_and_nothing_else_is_touched() {
    let options = || SqliteOptions::default().migrate(false);
    let missing = TempDb::new("no-migrate-missing");
    match SqliteStore::open_with(missing.path(), options()) {
        Err(StoreError::NotAStore { reason, .. }) => assert_eq!(reason, "no such file"),
        other => panic!("expected NotAStore, got {other:?}"),
    }
    assert!(!missing.path().exists());

    let foreign = TempDb::new("no-migrate-foreign");
    let conn = rusqlite::Connection::open(foreign.path()).unwrap();
    conn.execute_batch("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
        .unwrap();
    drop(conn);
    let before = std::fs::read(foreign.path()).unwrap();
    match SqliteStore::open_with(foreign.path(), options()) {
        Err(error @ StoreError::NotAStore { .. }) => {
            let message = error.to_string();
            assert!(
                message.contains("does not have loomflow's tables"),
                "{message}"
            );
        }
        other => panic!("expected NotAStore, got {other:?}"),
    }
    assert_eq!(std::fs::read(foreign.path()).unwrap(), before);
    // Another application's `meta` table, with a version of its own, is not loomflow's.
    let conn = rusqlite::Connection::open(foreign.path()).unwrap();
    conn.execute_batch("CREATE TABLE meta (schema_version INTEGER); INSERT INTO meta VALUES (3)")
        .unwrap();
    drop(conn);
    let refused = SqliteStore::open_with(foreign.path(), options());
    assert!(
        matches!(refused, Err(StoreError::NotAStore { .. })),
        "{refused:?}"
    );
    // Nor is a file that is not a database at all.
    let text = TempDb::new("no-migrate-text");
    std::fs::write(text.path(), "{\"not\": \"sqlite\"}\n".repeat(200)).unwrap();
    match SqliteStore::open_with(text.path(), options()) {
        Err(StoreError::NotAStore { reason, .. }) => {
            assert_eq!(reason, "the file is not a SQLite database");
        }
        other => panic!("expected NotAStore, got {other:?}"),
    }
    let conn = rusqlite::Connection::open(foreign.path()).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete", "the journal mode is the file's own");
    drop(conn);

    let older = TempDb::new("no-migrate-older");
    drop(SqliteStore::open(older.path()).unwrap());
    let conn = rusqlite::Connection::open(older.path()).unwrap();
    conn.execute("UPDATE meta SET schema_version = 10", [])
        .unwrap();
    drop(conn);
    match SqliteStore::open_with(older.path(), options()) {
        Err(error @ StoreError::OlderSchema { found: 10, .. }) => {
            assert!(error.to_string().contains("older than"), "{error}");
        }
        other => panic!("expected OlderSchema, got {other:?}"),
    }
    let conn = rusqlite::Connection::open(older.path()).unwrap();
    let version = schema_version(&conn);
    assert_eq!(version, 10, "left as it was");
    drop(conn);

    // A current store opens, and works.
    let current = TempDb::new("no-migrate-current");
    drop(SqliteStore::open(current.path()).unwrap());
    let store = SqliteStore::open_with(current.path(), options()).unwrap();
    let runtime = Runtime::builder().store(store).build();
    let runs = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(runtime.runs(&RunFilter::default()))
        .unwrap();
    assert!(runs.is_empty());
}

#[test]
fn the_schema_version_is_recorded_and_reopening_keeps_it() {
    let db = TempDb::new("version");
    drop(SqliteStore::open(db.path()).unwrap());
    drop(SqliteStore::open(db.path()).unwrap());
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    let versions: Vec<i64> = conn
        .prepare("SELECT schema_version FROM meta")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(versions, [12]);
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

/// A version-1 file (a failed run's error inside the checkpoint body) opens as version 2:
/// the error moves to its own column and the rest of the body reads back unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_file_is_migrated() {
    let db = TempDb::new("v1");
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    conn.execute_batch(
        "CREATE TABLE meta (schema_version INTEGER NOT NULL);
         INSERT INTO meta (schema_version) VALUES (1);
         CREATE TABLE checkpoints (id INTEGER PRIMARY KEY AUTOINCREMENT, thread TEXT NOT NULL,
             run INTEGER NOT NULL, namespace TEXT NOT NULL, step INTEGER NOT NULL,
             status TEXT NOT NULL, body TEXT NOT NULL);
         CREATE INDEX checkpoints_by_thread ON checkpoints (thread, namespace, id);
         CREATE TABLE journal (thread TEXT NOT NULL, run INTEGER NOT NULL,
             namespace TEXT NOT NULL, step INTEGER NOT NULL, node TEXT NOT NULL,
             name TEXT NOT NULL, occurrence INTEGER NOT NULL, value TEXT NOT NULL,
             PRIMARY KEY (thread, run, namespace, step, node, name, occurrence)) WITHOUT ROWID;
         CREATE TABLE signals (seq INTEGER PRIMARY KEY AUTOINCREMENT, session TEXT NOT NULL,
             name TEXT NOT NULL, payload TEXT, idempotency_key TEXT,
             sent_at_ms INTEGER NOT NULL, consumed_at_ms INTEGER);
         INSERT INTO checkpoints (thread, run, namespace, step, status, body) VALUES
             ('old', 1, '', 1, 'running', '{\"state\":{\"n\":1},\"next\":[\"a\"]}'),
             ('old', 1, '', 1, 'failed',
              '{\"state\":{\"n\":1},\"next\":[\"a\"],\"error\":\"node a failed\"}');",
    )
    .unwrap();
    drop(conn);

    let store = SqliteStore::open(db.path()).unwrap();
    let rows = store.list_checkpoints("old").await.unwrap();
    assert_eq!(rows.len(), 2);
    for row in &rows {
        assert_eq!(row.body, json!({"state": {"n": 1}, "next": ["a"]}));
    }
    assert_eq!(rows[0].error, None);
    assert_eq!(rows[1].error.as_deref(), Some("node a failed"));
    drop(store);
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    let version = schema_version(&conn);
    assert_eq!(version, 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_2_file_gains_the_runs_table_and_keeps_its_checkpoints() {
    let db = TempDb::new("v2");
    let store = SqliteStore::open(db.path()).unwrap();
    let cp = Checkpoint::new(
        "t",
        1,
        "",
        0,
        RunStatus::Running,
        json!({"state": {"kept": 1}}),
    );
    store.put_checkpoint(cp).await.unwrap();
    drop(store);
    // Take the file back to what version 2 wrote.
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    conn.execute_batch(
        "DROP TABLE runs; DROP INDEX signals_pending; DROP TABLE audit;
         ALTER TABLE meta DROP COLUMN checkpoint_id_floor;
         UPDATE meta SET schema_version = 2;",
    )
    .unwrap();
    drop(conn);

    let store = SqliteStore::open(db.path()).unwrap();
    let latest = store.latest_checkpoint("t", "").await.unwrap().unwrap();
    assert_eq!(latest.state(), &json!({"kept": 1}));
    assert_eq!(
        store.claim("t", "me", u64::MAX / 4, 1).await.unwrap(),
        Claim::Claimed,
        "the runs table is there"
    );
    drop(store);
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    let version = schema_version(&conn);
    assert_eq!(version, 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumed_signals_keep_only_their_key() {
    let db = TempDb::new("consumed");
    let store = SqliteStore::open(db.path()).unwrap();
    // `StoredSignal` is non-exhaustive and has no constructor: build it from JSON.
    let signal = |key: Option<&str>| -> StoredSignal {
        serde_json::from_value(json!({
            "seq": 0,
            "session": "s",
            "name": "go",
            "payload": {"big": "x".repeat(500)},
            "idempotency_key": key,
            "sent_at_ms": 1,
        }))
        .unwrap()
    };
    let SignalPush::Stored(keyed) = store.push_signal(signal(Some("k"))).await.unwrap() else {
        panic!("stored");
    };
    let SignalPush::Stored(plain) = store.push_signal(signal(None)).await.unwrap() else {
        panic!("stored");
    };
    store.take_signal("s", keyed, None).await.unwrap();
    store.take_signal("s", plain, None).await.unwrap();
    assert!(store.pending_signals().await.unwrap().is_empty());
    drop(store);
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    let rows: Vec<(i64, Option<String>, Option<i64>)> = conn
        .prepare("SELECT seq, payload, consumed_at_ms FROM signals")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows.len(), 1, "the unkeyed signal is deleted: {rows:?}");
    assert_eq!(rows[0].0, i64::try_from(keyed).unwrap());
    assert_eq!(rows[0].1, None, "the payload is dropped");
    assert!(rows[0].2.is_some(), "the consumption time is kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_writes_are_committed_when_the_store_is_dropped() {
    let db = TempDb::new("flush");
    let store = Arc::new(SqliteStore::open(db.path()).unwrap());
    // Start many writes and drop the store without awaiting most of them: each is queued
    // when its call returns, and the writer commits the queue before it exits.
    let futures: Vec<_> = (0..200u64)
        .map(|i| {
            store.put_checkpoint(Checkpoint::new(
                "flush",
                1,
                "",
                i,
                RunStatus::Running,
                json!({"state": i}),
            ))
        })
        .collect();
    drop(futures);
    drop(store);
    let store = SqliteStore::open(db.path()).unwrap();
    let steps: Vec<u64> = store
        .list_checkpoints("flush")
        .await
        .unwrap()
        .iter()
        .map(|c| c.step)
        .collect();
    assert_eq!(steps, (0..200).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_does_not_fail_the_writes_grouped_with_it() {
    let db = TempDb::new("group-failure");
    let store = Arc::new(SqliteStore::open(db.path()).unwrap());
    // A trigger makes every write to one thread fail, so groups mix good and bad writes.
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    conn.execute_batch(
        "CREATE TRIGGER refuse_bad BEFORE INSERT ON checkpoints WHEN NEW.thread = 'bad'
         BEGIN SELECT RAISE(ABORT, 'refused by test trigger'); END;",
    )
    .unwrap();
    drop(conn);
    let mut tasks = Vec::new();
    for i in 0..100u64 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            let thread = if i % 10 == 0 { "bad" } else { "good" };
            let result = store
                .put_checkpoint(Checkpoint::new(
                    thread,
                    1,
                    "",
                    i,
                    RunStatus::Running,
                    json!({"state": i}),
                ))
                .await;
            (thread, result)
        }));
    }
    for task in tasks {
        match task.await.unwrap() {
            ("good", result) => {
                result.unwrap();
            }
            (_, Err(StoreError::Write { thread, message })) => {
                assert_eq!(thread, "bad");
                assert!(message.contains("refused by test trigger"), "{message}");
            }
            (_, other) => panic!("expected a write error for thread bad, got {other:?}"),
        }
    }
    assert_eq!(store.list_checkpoints("good").await.unwrap().len(), 90);
    assert!(store.list_checkpoints("bad").await.unwrap().is_empty());
    let key = JournalKey::new("good", 1, "", 0, "n", "s", 0);
    store.put_journal(key.clone(), json!(1)).await.unwrap();
    assert_eq!(store.get_journal(&key).await.unwrap(), Some(json!(1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumed_keys_are_forgotten_after_an_hour_and_not_before() {
    let db = TempDb::new("prune");
    let keyed = |key: &str| -> StoredSignal {
        serde_json::from_value(json!({
            "seq": 0, "session": "s", "name": "go", "payload": 1,
            "idempotency_key": key, "sent_at_ms": 1,
        }))
        .unwrap()
    };
    let store = SqliteStore::open(db.path()).unwrap();
    for key in ["old", "recent"] {
        let SignalPush::Stored(seq) = store.push_signal(keyed(key)).await.unwrap() else {
            panic!("stored");
        };
        store.take_signal("s", seq, None).await.unwrap();
    }
    drop(store);
    // Pretend "old" was consumed two hours ago and "recent" half an hour ago.
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    conn.execute(
        "UPDATE signals SET consumed_at_ms = ?1 WHERE idempotency_key = 'old'",
        [now - 2 * 3_600_000],
    )
    .unwrap();
    conn.execute(
        "UPDATE signals SET consumed_at_ms = ?1 WHERE idempotency_key = 'recent'",
        [now - 1_800_000],
    )
    .unwrap();
    drop(conn);
    // A new store prunes before its first write.
    let store = SqliteStore::open(db.path()).unwrap();
    assert_eq!(
        store.push_signal(keyed("recent")).await.unwrap(),
        SignalPush::Duplicate,
        "a key consumed half an hour ago is remembered"
    );
    assert!(
        matches!(
            store.push_signal(keyed("old")).await.unwrap(),
            SignalPush::Stored(_)
        ),
        "a key consumed two hours ago is forgotten"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_file_share_it() {
    // As two processes would: each store has its own writer, and they take turns at the
    // file's write lock.
    let db = TempDb::new("two");
    let a = Arc::new(SqliteStore::open(db.path()).unwrap());
    let b = Arc::new(SqliteStore::open(db.path()).unwrap());
    let mut tasks = Vec::new();
    for (name, store) in [("a", &a), ("b", &b)] {
        for w in 0..8u64 {
            let store = Arc::clone(store);
            tasks.push(tokio::spawn(async move {
                let thread = format!("{name}-{w}");
                for step in 0..25u64 {
                    store
                        .put_checkpoint(Checkpoint::new(
                            &thread,
                            1,
                            "",
                            step,
                            RunStatus::Running,
                            json!({"state": step}),
                        ))
                        .await
                        .unwrap();
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    for name in ["a", "b"] {
        for w in 0..8 {
            let thread = format!("{name}-{w}");
            // Each store sees what the other wrote.
            for store in [&a, &b] {
                let steps: Vec<u64> = store
                    .list_checkpoints(&thread)
                    .await
                    .unwrap()
                    .iter()
                    .map(|c| c.step)
                    .collect();
                assert_eq!(steps, (0..25).collect::<Vec<_>>(), "{thread}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_share_commits() {
    let db = TempDb::new("grouped");
    let store = Arc::new(SqliteStore::open(db.path()).unwrap()); // synchronous = FULL
    let before = store.commit_stats();
    let tasks: Vec<_> = (0..100u64)
        .map(|w| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                for step in 0..5u64 {
                    store
                        .put_checkpoint(Checkpoint::new(
                            format!("g-{w}"),
                            1,
                            "",
                            step,
                            RunStatus::Running,
                            json!({"state": step}),
                        ))
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let after = store.commit_stats();
    let (writes, commits) = (after.writes - before.writes, after.commits - before.commits);
    assert_eq!(writes, 500, "every write is counted once");
    // While one group waits on its fsync the others queue up behind it; one commit per
    // write would mean no grouping at all.
    assert!(
        commits * 2 <= writes,
        "{writes} writes took {commits} commits"
    );
}

/// A version-3 file (runs rows without the worker's columns) opens as version 4: its rows
/// read back as run records, a running one runnable again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_3_file_gains_the_worker_columns() {
    let db = TempDb::new("v3");
    let store = SqliteStore::open(db.path()).unwrap();
    assert_eq!(
        store.claim("t", "me", u64::MAX / 4, 1).await.unwrap(),
        Claim::Claimed
    );
    let cp = Checkpoint::new("t", 1, "", 0, RunStatus::Running, json!({"state": 1}));
    store
        .put_checkpoint_claimed(cp, "me", u64::MAX / 4)
        .await
        .unwrap();
    drop(store);
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    conn.execute_batch(
        "DROP INDEX runs_recovering; DROP INDEX runs_queued;
         DROP INDEX runs_by_runnable_at; DROP INDEX runs_by_update; DROP INDEX signals_pending;
         ALTER TABLE runs DROP COLUMN graph; ALTER TABLE runs DROP COLUMN fingerprint;
         ALTER TABLE runs DROP COLUMN waiting_on; ALTER TABLE runs DROP COLUMN wake_at_ms;
         ALTER TABLE runs DROP COLUMN runnable_at_ms;
         ALTER TABLE runs DROP COLUMN cancel_requested; ALTER TABLE runs DROP COLUMN error;
         ALTER TABLE runs DROP COLUMN input; DROP TABLE audit; ALTER TABLE meta DROP COLUMN checkpoint_id_floor;
         UPDATE meta SET schema_version = 3;",
    )
    .unwrap();
    drop(conn);

    let store = SqliteStore::open(db.path()).unwrap();
    let record = store.get_run("t").await.unwrap().unwrap();
    assert_eq!(
        (record.state, record.run, record.lease_owner.as_deref()),
        (loomflow::runtime::RunState::Running, 1, Some("me"))
    );
    let all = store
        .list_runs(&loomflow::runtime::RunFilter::new())
        .await
        .unwrap();
    assert_eq!(all.len(), 1);
}

#[tokio::test]
async fn a_version_4_file_gains_the_audit_log() {
    let db = TempDb::new("v4");
    let store = SqliteStore::open(db.path()).unwrap();
    let cp = Checkpoint::new("t", 1, "", 0, RunStatus::Running, json!({"state": 1}));
    store.put_checkpoint(cp).await.unwrap();
    drop(store);
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    conn.execute_batch(
        "DROP TABLE audit; ALTER TABLE meta DROP COLUMN checkpoint_id_floor;
         UPDATE meta SET schema_version = 4;",
    )
    .unwrap();
    drop(conn);

    let store = SqliteStore::open(db.path()).unwrap();
    let latest = store.latest_checkpoint("t", "").await.unwrap().unwrap();
    assert_eq!(latest.state(), &json!(1));
    let entry = loomflow::runtime::AuditEntry::new(
        "t",
        loomflow::runtime::AuditKind::Resume,
        "n#0",
        json!({}),
    );
    store.append_audit(vec![entry]).await.unwrap();
    let log = store
        .audit(&loomflow::runtime::AuditQuery::thread("t"))
        .await
        .unwrap();
    assert_eq!(log.len(), 1);
}

#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Asked {
    answer: Option<String>,
}

/// One node that asks a question and keeps the answer.
fn asks() -> loomflow::CompiledGraph<Asked> {
    use loomflow::prelude::*;
    Graph::new("asks")
        .node_fn("ask", |s: &mut Asked, ctx| {
            Box::pin(async move {
                let answer: String = ctx.interrupt(json!({ "q": "name?" }))?;
                s.answer = Some(answer);
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
        .unwrap()
}

/// At FULL, an interrupt and its resume sync twice: the suspension and the completion. The
/// claims and the input checkpoint commit without a sync of their own, yet are committed:
/// another store on the file reads them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_and_its_resume_sync_only_the_suspension_and_the_completion() {
    let db = TempDb::new("synced");
    let store = Arc::new(SqliteStore::open(db.path()).unwrap()); // synchronous = FULL
    let runtime = Runtime::builder().shared_store(store.clone()).build();
    let graph = asks();

    let before = store.commit_stats();
    let out = graph.invoke(&runtime, "t", Asked::default()).await.unwrap();
    assert_eq!(out.interrupts().len(), 1);
    let suspended = store.commit_stats();
    assert_eq!(
        suspended.synced - before.synced,
        1,
        "{before:?} → {suspended:?}"
    );
    assert!(
        suspended.commits - before.commits > 1,
        "the claim and the input checkpoint are committed too: {before:?} → {suspended:?}"
    );

    // What was committed without a sync is on the file for every connection.
    let other = SqliteStore::open(db.path()).unwrap();
    let steps: Vec<(u64, RunStatus)> = other
        .list_checkpoints("t")
        .await
        .unwrap()
        .iter()
        .map(|c| (c.step, c.status))
        .collect();
    assert_eq!(
        steps,
        [(0, RunStatus::Running), (0, RunStatus::Interrupted)],
        "the input checkpoint, then the suspension"
    );

    let done = graph.resume(&runtime, "t", "Ada").await.unwrap();
    assert_eq!(done.state().answer.as_deref(), Some("Ada"));
    let resumed = store.commit_stats();
    assert_eq!(
        resumed.synced - suspended.synced,
        1,
        "{suspended:?} → {resumed:?}"
    );
    assert!(
        resumed.commits - suspended.commits > 1,
        "the resume's claim too"
    );
}

/// At NORMAL no commit syncs on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_normal_no_commit_syncs() {
    let db = TempDb::new("normal");
    let options = SqliteOptions::default().synchronous(loomflow::runtime::Synchronous::Normal);
    let store = Arc::new(SqliteStore::open_with(db.path(), options).unwrap());
    let runtime = Runtime::builder().shared_store(store.clone()).build();
    let graph = asks();
    graph.invoke(&runtime, "t", Asked::default()).await.unwrap();
    graph.resume(&runtime, "t", "Ada").await.unwrap();
    let stats = store.commit_stats();
    assert!(stats.commits >= 4, "{stats:?}");
    assert_eq!(stats.synced, 0, "{stats:?}");
}

/// At NORMAL a task that finds the writer idle commits its own write; the WAL is still
/// checkpointed (by the writer thread), so it stays near SQLite's 1,000 pages however much
/// is written, and concurrent writers each find all their rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_normal_writes_committed_by_their_callers_still_reach_every_reader_and_the_wal_is_checkpointed()
 {
    let db = TempDb::new("inline");
    let options = SqliteOptions::default().synchronous(loomflow::runtime::Synchronous::Normal);
    let store = Arc::new(SqliteStore::open_with(db.path(), options).unwrap());
    let body = json!({ "state": "x".repeat(1500) }); // a page or so each
    let tasks: Vec<_> = (0..4u64)
        .map(|w| {
            let store = Arc::clone(&store);
            let body = body.clone();
            tokio::spawn(async move {
                for step in 0..1000u64 {
                    let cp = Checkpoint::new(
                        format!("w-{w}"),
                        1,
                        "",
                        step,
                        RunStatus::Running,
                        body.clone(),
                    );
                    store.put_checkpoint(cp).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let wal = std::fs::metadata(format!("{}-wal", db.path().display()))
        .map(|m| m.len())
        .unwrap_or(0);
    // 4,000 writes of a page or more, several pages a commit, took 60 MB of WAL with the
    // checkpoint disabled. Checkpointed, it stays under 12 MB on a quiet machine; a busy one
    // (the whole suite at once) starves the writer thread for a while and it has reached
    // 15 MB, so the bound leaves room for that and still fails without checkpoints.
    assert!(wal < 30 << 20, "the WAL grew to {wal} bytes");
    let other = SqliteStore::open(db.path()).unwrap();
    for w in 0..4 {
        let steps = other
            .list_checkpoints(&format!("w-{w}"))
            .await
            .unwrap()
            .len();
        assert_eq!(steps, 1000, "w-{w}");
    }
    assert_eq!(store.commit_stats().writes, 4000);
}

/// A chain of `nodes` nodes, each adding one.
fn chain(nodes: usize) -> loomflow::CompiledGraph<u64> {
    use loomflow::prelude::*;
    let mut graph = Graph::new("chain").recursion_limit(nodes as u64 + 1);
    for i in 0..nodes {
        graph = graph.node_sync(format!("n{i}"), |n: &mut u64| *n += 1);
    }
    graph = graph.edge(START, "n0").edge(format!("n{}", nodes - 1), END);
    for i in 1..nodes {
        graph = graph.edge(format!("n{}", i - 1), format!("n{i}"));
    }
    graph.compile().unwrap()
}

/// A step that leaves its run's row saying what it said renews the lease only: the writes
/// that name the row's indexed run columns do not grow with the run's steps, and the row
/// still ends up saying where each run stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_that_leave_the_run_row_as_it_was_only_renew_its_lease() {
    let db = TempDb::new("followed");
    let options = SqliteOptions::default().synchronous(loomflow::runtime::Synchronous::Normal);
    let store = Arc::new(SqliteStore::open_with(db.path(), options).unwrap());
    // Counts every UPDATE that names a column a step's row update writes.
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    conn.execute_batch(
        "CREATE TABLE row_writes (thread TEXT NOT NULL);
         CREATE TRIGGER count_row_writes
         AFTER UPDATE OF status, waiting_on, runnable_at_ms ON runs
         BEGIN INSERT INTO row_writes VALUES (new.thread); END;",
    )
    .unwrap();
    let runtime = Runtime::builder().shared_store(store.clone()).build();
    let writes = |thread: &str| -> i64 {
        conn.query_row(
            "SELECT count(*) FROM row_writes WHERE thread = ?1",
            [thread],
            |row| row.get(0),
        )
        .unwrap()
    };

    let short = chain(3);
    let long = chain(30);
    assert_eq!(
        short
            .invoke(&runtime, "short", 0)
            .await
            .unwrap()
            .completed()
            .unwrap(),
        3
    );
    assert_eq!(
        long.invoke(&runtime, "long", 0)
            .await
            .unwrap()
            .completed()
            .unwrap(),
        30
    );
    assert!(
        writes("short") > 0,
        "the first step and the last write the row"
    );
    assert_eq!(
        writes("short"),
        writes("long"),
        "27 more steps, no more writes of the run columns"
    );
    for thread in ["short", "long"] {
        let row = store.get_run(thread).await.unwrap().unwrap();
        assert_eq!(row.state, loomflow::runtime::RunState::Completed, "{row:?}");
        assert_eq!(row.lease_owner, None, "{row:?}");
        assert_eq!(row.graph.as_deref(), Some("chain"), "{row:?}");
    }

    // A new run on the thread writes its row again, and so does a suspension and a resume.
    assert_eq!(
        long.invoke(&runtime, "long", 5)
            .await
            .unwrap()
            .completed()
            .unwrap(),
        35
    );
    assert_eq!(store.get_run("long").await.unwrap().unwrap().run, 2);
    let graph = asks();
    graph
        .invoke(&runtime, "asks", Asked::default())
        .await
        .unwrap();
    let row = store.get_run("asks").await.unwrap().unwrap();
    assert_eq!(
        row.state,
        loomflow::runtime::RunState::Interrupted,
        "{row:?}"
    );
    graph.resume(&runtime, "asks", "Ada").await.unwrap();
    let row = store.get_run("asks").await.unwrap().unwrap();
    assert_eq!(row.state, loomflow::runtime::RunState::Completed, "{row:?}");
}

/// Checkpoint ids are rowids: a new file's commits rewrite no `sqlite_sequence` row (one
/// page less in every commit), and ids still increase across threads and reopenings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_ids_are_rowids_that_only_increase() {
    let db = TempDb::new("rowids");
    let cp = |thread: &str, step| {
        Checkpoint::new(
            thread,
            1,
            "",
            step,
            RunStatus::Running,
            json!({"state": step}),
        )
    };
    let mut ids = Vec::new();
    for round in 0..2 {
        let store = SqliteStore::open(db.path()).unwrap();
        for thread in ["a", "b", "a"] {
            ids.push(store.put_checkpoint(cp(thread, round)).await.unwrap());
        }
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");

    let conn = rusqlite::Connection::open(db.path()).unwrap();
    let sql: String = conn
        .query_row(
            "SELECT sql FROM sqlite_master WHERE name = 'checkpoints'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert!(!sql.contains("AUTOINCREMENT"), "{sql}");
    let sequences: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_sequence WHERE name = 'checkpoints'",
            [],
            |row| row.get(0),
        )
        .unwrap_or(0);
    assert_eq!(sequences, 0);
}

/// Version 6 indexes the pending signals by sequence number: a worker's search for the
/// oldest signal a suspended run waits for reads the pending ones, not every signal kept.
/// A version 5 file gains the index.
#[tokio::test]
async fn a_version_5_file_gains_the_index_of_pending_signals_in_order() {
    let db = TempDb::new("v5");
    drop(SqliteStore::open(db.path()).unwrap());
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    conn.execute_batch(
        "DROP INDEX signals_pending_in_order; ALTER TABLE meta DROP COLUMN checkpoint_id_floor;
         UPDATE meta SET schema_version = 5;",
    )
    .unwrap();
    drop(conn);
    drop(SqliteStore::open(db.path()).unwrap());
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    let version = schema_version(&conn);
    assert_eq!(version, 12);
    let plan: Vec<String> = conn
        .prepare(
            "EXPLAIN QUERY PLAN SELECT seq FROM signals WHERE consumed_at_ms IS NULL
             ORDER BY seq LIMIT 1",
        )
        .unwrap()
        .query_map([], |r| r.get(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        plan.iter()
            .any(|step| step.contains("signals_pending_in_order")),
        "{plan:?}"
    );
}

/// Version 9 indexes the runs a worker carries on first with a queued run claimed before
/// among them (an `Exit` execution's row stays queued): a version 8 file gains it.
#[tokio::test]
async fn a_version_8_file_gains_the_index_of_recovering_runs_with_claimed_queued_ones() {
    let db = TempDb::new("v8");
    drop(SqliteStore::open(db.path()).unwrap());
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    conn.execute_batch(
        "DROP INDEX runs_recovering;
         CREATE INDEX runs_recovering ON runs (updated_at_ms)
             WHERE runnable_at_ms = 0 AND status IS NOT 'queued';
         UPDATE meta SET schema_version = 8;",
    )
    .unwrap();
    drop(conn);
    drop(SqliteStore::open(db.path()).unwrap());
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    let index: String = conn
        .query_row(
            "SELECT sql FROM sqlite_master WHERE name = 'runs_recovering'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    // The claim's own predicate, word for word: SQLite uses a partial index only for a
    // query whose terms it can match to the index's.
    assert!(
        index.contains("WHERE runnable_at_ms = 0 AND (status IS NOT 'queued' OR attempts > 0)"),
        "{index}"
    );
}

/// Version 7 remembers the newest checkpoint id a thread's delete removed, so that the ids
/// are not handed out again. A version 6 file gains it, and a delete then keeps the ids new.
#[tokio::test]
async fn a_version_6_file_gains_the_checkpoint_id_floor() {
    let db = TempDb::new("v6");
    let store = SqliteStore::open(db.path()).unwrap();
    let cp = || Checkpoint::new("t", 1, "", 0, RunStatus::Running, json!({"state": 1}));
    let kept = store.put_checkpoint(cp()).await.unwrap();
    drop(store);
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    conn.execute_batch(
        "ALTER TABLE meta DROP COLUMN checkpoint_id_floor; UPDATE meta SET schema_version = 6;",
    )
    .unwrap();
    drop(conn);

    let store = SqliteStore::open(db.path()).unwrap();
    assert_eq!(store.put_checkpoint(cp()).await.unwrap(), kept + 1);
    assert_eq!(
        store.claim("t", "me", u64::MAX / 4, 1).await.unwrap(),
        Claim::Claimed
    );
    store.delete_thread("t", "me").await.unwrap();
    assert_eq!(store.put_checkpoint(cp()).await.unwrap(), kept + 2);
    drop(store);
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    let (version, floor): (i64, i64) = conn
        .query_row(
            "SELECT schema_version, checkpoint_id_floor FROM meta",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((version, floor), (12, i64::try_from(kept).unwrap() + 1));
    drop(conn);

    // A row is past the floor now: the writer's pruning (on its first commit) clears it,
    // and ids go on from the largest.
    let store = SqliteStore::open(db.path()).unwrap();
    assert_eq!(store.put_checkpoint(cp()).await.unwrap(), kept + 3);
    drop(store);
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    let floor: i64 = conn
        .query_row("SELECT checkpoint_id_floor FROM meta", [], |r| r.get(0))
        .unwrap();
    assert_eq!(floor, 0);
}

/// A file from before the runs table (schema version 2) with a suspended run and a
/// completed one: opened by this version, each thread has the row its checkpoints say, so
/// `run`, `runs` and workers find them, and the suspended one still resumes.
#[tokio::test]
async fn a_file_from_before_the_runs_table_gets_a_row_for_each_run() {
    use loomflow::prelude::*;
    let db = TempDb::new("migrate-v2");
    let graph = Graph::new("asker")
        .node_fn("ask", |answer: &mut String, ctx| {
            Box::pin(async move {
                *answer = ctx.interrupt("what?")?;
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
        .unwrap();
    {
        let runtime = Runtime::sqlite(db.path()).unwrap();
        graph
            .invoke(&runtime, "waiting", String::new())
            .await
            .unwrap();
        graph.invoke(&runtime, "done", String::new()).await.unwrap();
        graph.resume(&runtime, "done", "yes").await.unwrap();
    }
    // What a version 2 file had: no runs table, no audit table, no later indexes.
    rusqlite::Connection::open(db.path())
        .unwrap()
        .execute_batch(
            "DROP TABLE runs; DROP TABLE audit;
             DROP INDEX IF EXISTS signals_pending; DROP INDEX IF EXISTS signals_pending_in_order;
             ALTER TABLE meta DROP COLUMN checkpoint_id_floor;
         UPDATE meta SET schema_version = 2;",
        )
        .unwrap();
    let runtime = Runtime::sqlite(db.path()).unwrap();
    let waiting = runtime.run("waiting").await.unwrap().record;
    assert_eq!(
        (waiting.state, waiting.graph.as_deref()),
        (RunState::Interrupted, Some("asker"))
    );
    assert_eq!(
        runtime.run("done").await.unwrap().record.state,
        RunState::Completed
    );
    assert_eq!(runtime.runs(&RunFilter::default()).await.unwrap().len(), 2);
    let answer = graph
        .resume(&runtime, "waiting", "later")
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(answer, "later");
}

/// A file an early build migrated past version 2 got an empty runs table: opening it fills
/// the rows its threads lack. A thread whose checkpoint cannot be read gets none, and the
/// file opens all the same.
#[tokio::test]
async fn a_later_file_without_run_rows_gets_them_and_a_broken_thread_does_not_stop_it() {
    use loomflow::prelude::*;
    let db = TempDb::new("migrate-gap");
    let graph = Graph::new("counter")
        .node_sync("inc", |n: &mut u32| *n += 1)
        .edge(START, "inc")
        .edge("inc", END)
        .compile()
        .unwrap();
    {
        let runtime = Runtime::sqlite(db.path()).unwrap();
        graph.invoke(&runtime, "kept", 1).await.unwrap();
        graph.invoke(&runtime, "broken", 1).await.unwrap();
        graph.invoke(&runtime, "older", 1).await.unwrap();
    }
    // `older`'s checkpoints as builds before version 4 wrote them: the graph's fingerprint,
    // not its name.
    rusqlite::Connection::open(db.path())
        .unwrap()
        .execute_batch(
            "DELETE FROM runs;
             UPDATE checkpoints SET body = '{' WHERE thread = 'broken';
             UPDATE checkpoints SET body = json_remove(body, '$.graph_name')
                 WHERE thread = 'older';
             UPDATE meta SET schema_version = 7;",
        )
        .unwrap();
    let runtime = Runtime::sqlite(db.path()).unwrap();
    let kept = runtime.run("kept").await.unwrap().record;
    assert_eq!(
        (kept.state, kept.graph.as_deref()),
        (RunState::Completed, Some("counter"))
    );
    assert!(
        runtime.run("broken").await.is_err(),
        "no row for the broken thread"
    );
    let older = runtime.run("older").await.unwrap().record;
    assert_eq!(older.state, RunState::Completed, "{older:?}");
}

/// Upgrading a file whose threads hold checkpoints written outside any run (the store used
/// as a plain checkpointer) makes no run of them: before, every migration gave such a
/// thread a `running` row, which workers never took and which refused a run submitted there.
#[tokio::test]
async fn an_upgrade_makes_no_run_of_checkpoints_written_outside_any_run() {
    let db = TempDb::new("migrate-plain-checkpoints");
    {
        let store = SqliteStore::open(db.path()).unwrap();
        let cp = Checkpoint::new("plain", 1, "", 0, RunStatus::Running, json!({"state": 1}));
        store.put_checkpoint(cp).await.unwrap();
        assert!(store.get_run("plain").await.unwrap().is_none());
    }
    rusqlite::Connection::open(db.path())
        .unwrap()
        .execute("UPDATE meta SET schema_version = 10", [])
        .unwrap();
    let runtime = Runtime::sqlite(db.path()).unwrap();
    assert!(runtime.store().get_run("plain").await.unwrap().is_none());
    runtime.submit("counter", "plain", 1).await.unwrap();
    let row = runtime.run("plain").await.unwrap().record;
    assert_eq!(row.state, RunState::Queued, "{row:?}");
}

/// A lease far past what a store can write (`Duration::MAX`) is bounded to a century: runs
/// start and resume on SQLite as they do in memory, rather than every claim failing.
#[tokio::test]
async fn a_lease_of_any_length_claims_on_sqlite() {
    use loomflow::prelude::*;
    let db = TempDb::new("lease-max");
    let runtime = Runtime::builder()
        .store(SqliteStore::open(db.path()).unwrap())
        .lease(Duration::MAX)
        .build();
    assert_eq!(runtime.lease(), Duration::from_secs(100 * 365 * 24 * 3600));
    let graph = Graph::new("count")
        .node_sync("inc", |n: &mut u32| *n += 1)
        .edge(START, "inc")
        .edge("inc", END)
        .compile()
        .unwrap();
    let done = graph.invoke(&runtime, "t", 1).await.unwrap();
    assert_eq!(done.completed().unwrap(), 2);
    let worker = Worker::builder(&runtime)
        .graph(&graph)
        .lease(Duration::MAX)
        .build();
    runtime.submit("count", "w", 5u32).await.unwrap();
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    assert_eq!(runtime.get_state::<u32>("w").await.unwrap(), Some(6));
}

/// A run row that does not read back names its thread, whichever column is wrong.
#[tokio::test]
async fn a_run_row_that_does_not_read_back_names_its_thread() {
    let db = TempDb::new("corrupt-row");
    let store = SqliteStore::open(db.path()).unwrap();
    store
        .submit_run("ord_7", "refund", serde_json::json!({}), 1_000)
        .await
        .unwrap();
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    conn.execute(
        "UPDATE runs SET attempts = 'many' WHERE thread = 'ord_7'",
        [],
    )
    .unwrap();
    drop(conn);
    let error = store.get_run("ord_7").await.unwrap_err();
    assert!(
        matches!(&error, StoreError::Corrupt { thread, .. } if thread == "ord_7"),
        "{error:?}"
    );
}

/// A checkpoint row with a column SQLite cannot read as its type (text where the step
/// number belongs) is corrupt, naming its thread: not a failure to read that passes, which a
/// worker would try again and again.
#[tokio::test]
async fn a_checkpoint_row_that_does_not_decode_is_corrupt() {
    use loomflow::prelude::*;
    let db = TempDb::new("corrupt-checkpoint");
    let runtime = Runtime::sqlite(db.path()).unwrap();
    let graph = Graph::new("count")
        .node_sync("add", |n: &mut u32| *n += 1)
        .edge(START, "add")
        .edge("add", END)
        .compile()
        .unwrap();
    graph.invoke(&runtime, "ord_8", 1).await.unwrap();
    drop(runtime);
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    conn.execute(
        "UPDATE checkpoints SET step = 'second' WHERE thread = 'ord_8'",
        [],
    )
    .unwrap();
    drop(conn);
    let store = SqliteStore::open(db.path()).unwrap();
    let error = store.list_checkpoints("ord_8").await.unwrap_err();
    assert!(
        matches!(&error, StoreError::Corrupt { thread, .. } if thread == "ord_8"),
        "{error:?}"
    );
}

/// A journal entry whose step is negative (written by hand, or by a broken tool) is a
/// corrupt row, not one filed under step 0 that a fork would copy there.
#[tokio::test]
async fn a_journal_row_with_a_negative_step_is_corrupt() {
    let db = TempDb::new("corrupt-journal");
    let store = SqliteStore::open(db.path()).unwrap();
    let key = JournalKey::new("ord_9", 1, "", 2, "pay", "charge", 0);
    store.put_journal(key, json!("ch_1")).await.unwrap();
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    conn.execute("UPDATE journal SET step = -2 WHERE thread = 'ord_9'", [])
        .unwrap();
    drop(conn);
    let error = store.list_journal("ord_9", 1).await.unwrap_err();
    assert!(
        matches!(&error, StoreError::Corrupt { thread, .. } if thread == "ord_9"),
        "{error:?}"
    );
}

/// Version 10 indexes the consumed signals by when they were consumed: the writer's prune
/// of those kept long enough, once a minute while every write waits, reads them alone, not
/// every signal. A version 9 file gains the index.
#[tokio::test]
async fn a_version_9_file_gains_the_index_of_consumed_signals() {
    let db = TempDb::new("v9");
    drop(SqliteStore::open(db.path()).unwrap());
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    conn.execute_batch("DROP INDEX signals_consumed; UPDATE meta SET schema_version = 9;")
        .unwrap();
    drop(conn);
    drop(SqliteStore::open(db.path()).unwrap());
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    let version = schema_version(&conn);
    assert_eq!(version, 12);
    let plan: Vec<String> = conn
        .prepare(
            "EXPLAIN QUERY PLAN DELETE FROM signals
             WHERE consumed_at_ms IS NOT NULL AND consumed_at_ms < 5",
        )
        .unwrap()
        .query_map([], |r| r.get(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        plan.iter().any(|step| step.contains("signals_consumed")),
        "{plan:?}"
    );
}

/// Version 11 indexes the queued runs a worker claims (a backlog of 100,000 queued runs
/// made each claim sort them all), and a version 10 file gains the index. The claim names
/// its indexes with `INDEXED BY`, which fails to prepare where an index cannot serve the
/// query's predicate: the plans here, of the claim's queries as the store writes them, say
/// that each index serves its own.
#[tokio::test]
async fn a_claims_candidate_queries_read_their_own_indexes() {
    let db = TempDb::new("claim-plans");
    drop(SqliteStore::open(db.path()).unwrap());
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    conn.execute_batch("DROP INDEX runs_queued; UPDATE meta SET schema_version = 10;")
        .unwrap();
    drop(conn);
    drop(SqliteStore::open(db.path()).unwrap());
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    let version = schema_version(&conn);
    assert_eq!(version, 12);
    for (sql, index) in [
        (
            "SELECT thread, updated_at_ms FROM runs INDEXED BY runs_queued
             WHERE runnable_at_ms = 0 AND status = 'queued' AND attempts = 0
               AND (lease_owner IS NULL OR lease_until_ms <= ?1)
               AND graph IN (SELECT value FROM json_each(?2))
             ORDER BY updated_at_ms LIMIT 1",
            "runs_queued",
        ),
        (
            "SELECT thread, 0 FROM runs INDEXED BY runs_recovering
             WHERE runnable_at_ms = 0 AND (status IS NOT 'queued' OR attempts > 0)
               AND (lease_owner IS NULL OR lease_until_ms <= ?1)
               AND graph IN (SELECT value FROM json_each(?2))
             ORDER BY updated_at_ms LIMIT 1",
            "runs_recovering",
        ),
    ] {
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap()
            .query_map(rusqlite::params![0, "[\"g\"]"], |r| r.get(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            plan.iter().any(|step| step.contains(index)),
            "{index}: {plan:?}"
        );
    }
}

/// Version 12 counts a run's lapses (executions in a row that died holding it): a version
/// 11 file gains the column, its runs read back with none, and a worker counts them.
#[tokio::test]
async fn a_version_11_file_gains_the_lapses_of_its_runs() {
    let db = TempDb::new("v11-lapses");
    let store = SqliteStore::open(db.path()).unwrap();
    store
        .submit_run("t", "g", serde_json::json!(1), 10)
        .await
        .unwrap();
    drop(store);
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    conn.execute_batch("ALTER TABLE runs DROP COLUMN lapses; UPDATE meta SET schema_version = 11;")
        .unwrap();
    drop(conn);
    let store = SqliteStore::open(db.path()).unwrap();
    assert_eq!(store.get_run("t").await.unwrap().unwrap().lapses, 0);
    let graphs = ["g".to_owned()];
    store
        .claim_next_run(&graphs, "a", 100, 20, 20)
        .await
        .unwrap()
        .unwrap();
    let taken = store
        .claim_next_run(&graphs, "b", 300, 150, 150)
        .await
        .unwrap();
    assert_eq!(taken.unwrap().record.lapses, 1);
    drop(store);
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    let version = schema_version(&conn);
    assert_eq!(version, 12);
}

/// A PostgreSQL URL handed to `Runtime::sqlite` by mistake (a `DATABASE_URL` switched to
/// PostgreSQL, the code left as it was) fails without printing its password, which SQLite's
/// own message repeated.
#[test]
fn a_url_given_as_a_sqlite_file_is_not_printed_with_its_password() {
    let url = "postgres://app:secretpw@127.0.0.1:1/live/db";
    let error = Runtime::sqlite(url).unwrap_err();
    let text = format!("{error} {error:?} {}", loomflow::ErrorChain(&error));
    assert!(!text.contains("secretpw"), "{text}");
    assert!(text.contains("postgres://…@127.0.0.1:1/live/db"), "{text}");
}

/// One node that adds one to the state.
fn counting() -> loomflow::CompiledGraph<u64> {
    Graph::new("count")
        .node_sync("inc", |n: &mut u64| *n += 1)
        .edge(START, "inc")
        .edge("inc", END)
        .compile()
        .unwrap()
}

/// `Runtime::sqlite("sqlite:…")` opens the file the URL names (it made a file named
/// `sqlite:app.db`, where the command line's `--db sqlite:app.db` reads `app.db`), and
/// `Runtime::open` reads the same forms; a PostgreSQL URL is refused naming what opens it.
#[tokio::test]
async fn a_sqlite_url_names_the_same_file_everywhere() {
    let db = TempDb::new("sqlite-url");
    let path = db.path().display().to_string();
    let graph = counting();
    let runtime = Runtime::sqlite(format!("sqlite:{path}")).unwrap();
    graph.invoke(&runtime, "t", 1).await.unwrap();
    drop(runtime);
    assert!(db.path().exists());
    for url in [format!("sqlite://{path}"), path.clone()] {
        let runtime = Runtime::open(&url).await.unwrap();
        assert_eq!(
            runtime.get_state::<u64>("t").await.unwrap(),
            Some(2),
            "{url}"
        );
    }
    let memory = Runtime::open("memory:").await.unwrap();
    assert_eq!(memory.get_state::<u64>("t").await.unwrap(), None);

    for pg in ["postgres://app:secretpw@db/flows", "host=db dbname=flows"] {
        let error = Runtime::sqlite(pg).unwrap_err().to_string();
        assert!(
            error.contains("Runtime::open or Runtime::postgres"),
            "{error}"
        );
    }
    assert!(!Path::new("host=db dbname=flows").exists());
    let error = Runtime::open("mysql://db/flows")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("postgres://…, sqlite:PATH or memory:"),
        "{error}"
    );
}

/// Processes started together on a fresh file (two worker replicas on a new volume) all
/// open it: SQLite answered a WAL switch that met another one with "database is locked" at
/// once, without waiting out the busy timeout (one open in about fifty failed so).
#[test]
fn stores_opened_together_on_a_fresh_file_all_open() {
    for round in 0..25 {
        let db = TempDb::new(&format!("fresh-race-{round}"));
        let path = db.path().to_path_buf();
        let barrier = Arc::new(std::sync::Barrier::new(4));
        let opens: Vec<_> = (0..4)
            .map(|_| {
                let (path, barrier) = (path.clone(), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    SqliteStore::open(&path).map(drop)
                })
            })
            .collect();
        for open in opens {
            open.join().unwrap().unwrap();
        }
    }
}

/// A store an earlier loomflow made under the literal name `sqlite:…` (it did not read the
/// URL) is still the one `Runtime::sqlite("sqlite:…")` opens: its runs are not stranded
/// behind a new empty file. A name resolved once is not resolved again.
#[tokio::test]
async fn a_file_named_like_a_sqlite_url_is_the_store_it_names() {
    let dir = std::env::temp_dir().join(format!("loomflow-literal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let literal = dir.join("sqlite:app.db");
    let graph = counting();
    let store = SqliteStore::open_with(&literal, SqliteOptions::default()).unwrap();
    graph
        .invoke(&Runtime::with_store(store), "t", 1)
        .await
        .unwrap();
    assert!(literal.exists());

    // Relative names, as an application gives them: read in the directory.
    let again = std::env::current_dir().unwrap();
    std::env::set_current_dir(&dir).unwrap();
    let opened = Runtime::sqlite("sqlite:app.db");
    let made_empty = Path::new("app.db").exists();
    let parsed = loomflow::runtime::StoreUrl::parse("sqlite:sqlite:legacy.db").unwrap();
    let legacy = parsed.open().await.map(drop);
    let stripped_twice = Path::new("legacy.db").exists();
    let made = Path::new("sqlite:legacy.db").exists();
    std::env::set_current_dir(again).unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    let runtime = opened.unwrap();
    assert_eq!(runtime.get_state::<u64>("t").await.unwrap(), Some(2));
    assert!(!made_empty, "a new empty app.db was made beside the store");
    legacy.unwrap();
    assert!(
        made && !stripped_twice,
        "StoreUrl's path was read as a URL again"
    );
}
