//! The writer's connection, and how a group of writes is committed on it.
//!
//! One [`Committer`] per store, behind a lock: the writer thread commits with it, and so, at
//! [`Synchronous::Normal`], does a caller who finds it free (see `Writer::submit`). Either
//! way a group is every write queued so far, in order, committed in one transaction.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, TryRecvError};
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::Connection;

use super::Synchronous;
use super::followed::Followed;
use super::rows::{corrupt, undecodable};
use super::writer::{Counters, Op, Outcome, Request};
use crate::runtime::store::StoreError;

/// The most requests committed together; bounds the time any one of them waits.
const MAX_GROUP: usize = 1024;

/// A consumed signal's idempotency key is kept at least this long.
const KEEP_CONSUMED_MS: i64 = crate::runtime::store::records::CONSUMED_KEY_KEPT_MS as i64;

/// How often the writer deletes consumed signals older than [`KEEP_CONSUMED_MS`].
const PRUNE_EVERY_MS: i64 = 60_000;

/// How many pages the WAL may hold before the writer thread checkpoints it into the
/// database: a little under SQLite's default of 1,000, as the thread checkpoints a moment
/// after the WAL passes it. SQLite's automatic checkpoint is replaced (by the WAL hook
/// below), so that a commit made by a caller never runs one.
const CHECKPOINT_AT_PAGES: i32 = 800;

std::thread_local! {
    /// The pages in the WAL after the last commit on this thread, as SQLite's WAL hook
    /// reports them (it runs within the commit, on the committing thread).
    static WAL_PAGES: Cell<i32> = const { Cell::new(0) };
}

/// The WAL hook: notes the WAL's size, and checkpoints nothing.
fn note_wal_pages(_: &rusqlite::hooks::Wal, pages: std::ffi::c_int) -> rusqlite::Result<()> {
    WAL_PAGES.with(|noted| noted.set(pages));
    Ok(())
}

/// The writer's connection, what is queued for it, and the `synchronous` level it is at.
///
/// At [`Synchronous::Full`], a group whose writes record no work (`Op::needs_sync`) is
/// committed at `NORMAL`: SQLite's level is per connection and read at each commit. In WAL
/// mode the next commit at `FULL` syncs the log up to its own end, taking the unsynced
/// commits before it to the disk as well.
pub(super) struct Committer {
    conn: Connection,
    queue: mpsc::Receiver<Request>,
    /// Whether the store syncs each commit at all.
    full: bool,
    /// Whether the connection is at `FULL` now.
    at_full: bool,
    last_prune: i64,
    /// The pages in the WAL after the last commit.
    wal_pages: i32,
    /// What the last step under each held claim made its run's row say.
    followed: Followed,
}

impl Committer {
    pub(super) fn new(
        conn: Connection,
        sync: Synchronous,
        queue: mpsc::Receiver<Request>,
    ) -> rusqlite::Result<Self> {
        conn.wal_hook(Some(note_wal_pages));
        let full = sync == Synchronous::Full;
        Ok(Self {
            conn,
            queue,
            full,
            at_full: full,
            last_prune: i64::MIN,
            wal_pages: 0,
            followed: Followed::default(),
        })
    }

    /// Moves what is queued into `group`, up to [`MAX_GROUP`]; `false` once the queue is
    /// closed and empty.
    pub(super) fn take_queued(&self, group: &mut Vec<Request>) -> bool {
        while group.len() < MAX_GROUP {
            match self.queue.try_recv() {
                Ok(request) => group.push(request),
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => return false,
            }
        }
        true
    }

    /// Commits every write queued, in groups, answering each; `false` once the queue is
    /// closed (everything in it committed).
    ///
    /// The WAL is checkpointed between two groups once it is due: under writes that keep
    /// coming the queue may never empty, and the WAL would grow without end.
    pub(super) fn commit_queued(&mut self, counters: &Counters) -> bool {
        let mut group = Vec::new();
        loop {
            let open = self.take_queued(&mut group);
            if group.is_empty() {
                return open;
            }
            self.commit_group(&mut group, counters);
            if self.checkpoint_due() {
                self.checkpoint();
            }
        }
    }

    /// Commits `group` and answers every request in it, leaving it empty.
    ///
    /// A write that fails (a constraint, a trigger) is answered with its error and the group
    /// is run again without it, so it does not take the others down; a failure of the
    /// transaction itself (the disk, a lock held past the busy timeout) is every write's.
    pub(super) fn commit_group(&mut self, group: &mut Vec<Request>, counters: &Counters) {
        let now = now_ms();
        if now.saturating_sub(self.last_prune) >= PRUNE_EVERY_MS {
            self.last_prune = now;
            prune(&self.conn, now);
        }
        while !group.is_empty() {
            let synced = self.prepare(group);
            let committed = commit(&self.conn, &mut self.followed, group, now);
            if committed.is_err() {
                // Rolled back: what was noted in the group may not have been written.
                self.followed.forget_all();
            }
            match committed {
                Ok(outcomes) => {
                    let writes = outcomes.len() as u64;
                    counters.commits.fetch_add(1, Ordering::Relaxed);
                    counters.writes.fetch_add(writes, Ordering::Relaxed);
                    if synced {
                        counters.synced.fetch_add(1, Ordering::Relaxed);
                    }
                    self.wal_pages = WAL_PAGES.with(Cell::get);
                    for (request, outcome) in group.drain(..).zip(outcomes) {
                        // The caller may have stopped waiting; its write is committed anyway.
                        let _ = request.reply.send(Ok(outcome));
                    }
                }
                Err(Failure::Op(index, error)) => {
                    let request = group.remove(index);
                    let _ = request.reply.send(Err(write_error(&request.op, &error)));
                }
                Err(Failure::Transaction(error)) => {
                    for request in group.drain(..) {
                        let _ = request.reply.send(Err(write_error(&request.op, &error)));
                    }
                }
            }
        }
        // A rollback that failed left its transaction open, and with it this connection's
        // hold on the file's write lock: other connections would wait on it until the next
        // group. Tried again now; the next group tries once more before it begins.
        if !self.conn.is_autocommit()
            && let Err(error) = self.conn.execute_batch("ROLLBACK")
        {
            tracing::warn!(%error, "rolling back a failed group failed again");
        }
    }

    /// Whether the WAL has grown past [`CHECKPOINT_AT_PAGES`].
    pub(super) fn checkpoint_due(&self) -> bool {
        self.wal_pages >= CHECKPOINT_AT_PAGES
    }

    /// Copies the WAL into the database as far as readers allow (`PASSIVE`: it waits for
    /// nobody). Best effort: a failure is logged, and the next one catches up.
    pub(super) fn checkpoint(&mut self) {
        self.wal_pages = 0;
        let result = self
            .conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        if let Err(error) = result {
            tracing::warn!(%error, "checkpointing the WAL failed");
        }
    }

    /// Sets the level for the next commit; whether that commit syncs.
    fn prepare(&mut self, group: &[Request]) -> bool {
        let sync = self.full && group.iter().any(|request| request.op.needs_sync());
        if self.full && sync != self.at_full {
            let level = if sync { "FULL" } else { "NORMAL" };
            match self.conn.pragma_update(None, "synchronous", level) {
                Ok(()) => self.at_full = sync,
                // Left as it was: at FULL, the commit syncs anyway.
                Err(error) => tracing::warn!(%error, level, "could not set the sync level"),
            }
        }
        self.at_full
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn write_error(op: &Op, error: &rusqlite::Error) -> StoreError {
    if let Some(wrong) = undecodable(error) {
        return corrupt(op.thread(), wrong);
    }
    StoreError::Write {
        thread: op.thread().to_owned(),
        message: error.to_string(),
    }
}

/// Why a group did not commit.
enum Failure {
    /// The write at this index failed.
    Op(usize, rusqlite::Error),
    /// Beginning or committing the transaction failed.
    Transaction(rusqlite::Error),
}

/// Runs the group's writes in one transaction and commits it: one fsync for them all.
///
/// `BEGIN` and `COMMIT` are prepared once and kept, like every other statement: parsing them
/// again for each group costs about what binding a checkpoint's row does.
fn commit(
    conn: &Connection,
    followed: &mut Followed,
    group: &[Request],
    now_ms: i64,
) -> Result<Vec<Outcome>, Failure> {
    let statement = |sql: &str| {
        conn.prepare_cached(sql)
            .and_then(|mut stmt| stmt.execute([]))
            .map(drop)
    };
    if !conn.is_autocommit() {
        // The rollback of a group that failed before failed too, and left its transaction
        // open: ended now, or this group and every one after it would fail to begin.
        conn.execute_batch("ROLLBACK")
            .map_err(Failure::Transaction)?;
    }
    statement("BEGIN IMMEDIATE").map_err(Failure::Transaction)?;
    let applied = group
        .iter()
        .enumerate()
        .map(|(i, request)| {
            request.op.apply(conn, followed, now_ms).map_err(|e| {
                if concerns_one_write(&e) {
                    Failure::Op(i, e)
                } else {
                    Failure::Transaction(e)
                }
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .and_then(|outcomes| {
            statement("COMMIT").map_err(Failure::Transaction)?;
            Ok(outcomes)
        });
    if applied.is_err() && !conn.is_autocommit() {
        // Nothing of the group is kept; a failed rollback is tried again before the next
        // group begins.
        if let Err(error) = conn.execute_batch("ROLLBACK") {
            tracing::warn!(%error, "rolling back a failed group failed");
        }
    }
    applied
}

/// Whether an error is about the write that hit it (a constraint, a trigger, a value too
/// big) rather than about the database (the disk is full, an I/O error, a lock): only the
/// former is worth retrying the group without that write.
fn concerns_one_write(error: &rusqlite::Error) -> bool {
    match error {
        rusqlite::Error::SqliteFailure(e, _) => matches!(
            e.code,
            rusqlite::ErrorCode::ConstraintViolation
                | rusqlite::ErrorCode::TooBig
                | rusqlite::ErrorCode::TypeMismatch
        ),
        _ => true, // errors rusqlite raises itself are about the statement's values
    }
}

/// Forgets consumed signals whose key has been remembered long enough. Best effort: a
/// failure is logged and retried at the next prune.
fn prune(conn: &Connection, now_ms: i64) {
    let result = conn
        .prepare_cached(
            "DELETE FROM signals WHERE consumed_at_ms IS NOT NULL AND consumed_at_ms < ?1",
        )
        .and_then(|mut stmt| stmt.execute([now_ms.saturating_sub(KEEP_CONSUMED_MS)]));
    if let Err(error) = result {
        tracing::warn!(%error, "pruning consumed signals failed");
    }
    // Once a checkpoint is past the floor a delete left, new ids are past it without it, and
    // inserts no longer look for the largest id (see `schema.rs`).
    let result = conn
        .prepare_cached(
            "UPDATE meta SET checkpoint_id_floor = 0
             WHERE checkpoint_id_floor <> 0
               AND checkpoint_id_floor < (SELECT max(id) FROM checkpoints)",
        )
        .and_then(|mut stmt| stmt.execute([]));
    if let Err(error) = result {
        tracing::warn!(%error, "clearing the checkpoint id floor failed");
    }
}

#[cfg(test)]
mod tests {
    use super::super::SqliteOptions;
    use super::super::schema;
    use super::super::writer::JournalRow;
    use super::*;

    /// A journal write of about 1 KiB; four fill a page.
    fn write(occurrence: i64) -> Request {
        let row = JournalRow {
            thread: "wal".into(),
            run: 1,
            namespace: String::new(),
            step: 1,
            node: "n".into(),
            name: "step".into(),
            occurrence,
            value: "x".repeat(1000),
            audit: Vec::new(),
        };
        let (reply, _) = tokio::sync::oneshot::channel();
        Request {
            op: Op::PutJournal(row),
            reply,
        }
    }

    /// A transaction a failed rollback left open is ended before the next group begins:
    /// the writer does not fail every write after it until the store is opened again.
    #[test]
    fn a_transaction_a_failed_rollback_left_open_does_not_stop_the_next_group() {
        let path = std::env::temp_dir().join(format!("loomflow-open-{}.db", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let conn = schema::open_writer(&path, &SqliteOptions::default()).expect("opens");
        // What a failed group and its failed rollback leave: an open transaction, with the
        // group's write in it.
        conn.execute_batch("BEGIN IMMEDIATE").expect("begins");
        let mut followed = Followed::default();
        let left_over = write(0).op.apply(&conn, &mut followed, 1);
        assert!(left_over.is_ok(), "the failed group's write");
        let outcomes = commit(&conn, &mut followed, &[write(1)], 2);
        let kept: i64 = conn
            .query_row("SELECT count(*) FROM journal", [], |row| row.get(0))
            .expect("counts");
        drop(conn);
        let _ = std::fs::remove_file(&path);
        assert!(outcomes.is_ok(), "the next group failed to begin");
        assert_eq!(
            kept, 1,
            "only the group committed after the rollback is kept"
        );
    }

    #[test]
    fn a_queue_that_never_empties_still_has_its_wal_checkpointed() {
        let path = std::env::temp_dir().join(format!("loomflow-wal-{}.db", std::process::id()));
        let wal = path.with_extension("db-wal");
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(&wal);
        let conn = schema::open_writer(&path, &SqliteOptions::default()).expect("opens");
        let (tx, queue) = mpsc::channel();
        let mut committer = Committer::new(conn, Synchronous::Normal, queue).expect("hooks");
        // Ten full groups, about 3,000 pages in all, queued before the writer looks: for it,
        // the queue never empties.
        let writes = 10 * MAX_GROUP as i64;
        for occurrence in 0..writes {
            tx.send(write(occurrence)).expect("queued");
        }
        assert!(committer.commit_queued(&Counters::default()));
        let wal_pages = std::fs::metadata(&wal).expect("a WAL").len() / 4096;
        let kept: i64 = committer
            .conn
            .query_row("SELECT count(*) FROM journal", [], |row| row.get(0))
            .expect("counts");
        drop(committer);
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(&wal);
        assert_eq!(kept, writes);
        // Checkpointed once past 800 pages, the WAL starts over: it never holds much more
        // than that and a group. Without the checkpoints it holds every page written.
        assert!(wal_pages < 1_500, "the WAL grew to {wal_pages} pages");
    }
}
