//! Run rows as workers and people use them: submitting, finding the run a worker should
//! carry on, reading and listing rows, and the row following each top-level checkpoint.
//! The lease itself, and the writes made under it, are in `runs.rs`.

use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use super::SqliteStore;
use super::rows::{corrupt, record_from_row, to_i64, to_json};
use super::runs::{RunOp, done};
use super::writer::Outcome;
use crate::runtime::store::{
    ClaimedRun, RowUpdate, RunFilter, RunRecord, RunState, StoreError, Submitted,
};
use futures_util::future::BoxFuture;

/// Migration step 3 -> 4: what workers and run queries need. `status` becomes a
/// [`RunState`] word; `runnable_at_ms` is when a worker may carry the run on without a
/// signal (0 for queued and running runs, the wake time of a suspended one, NULL for a
/// finished one), indexed so that finding work reads only runnable rows. Rows suspended
/// before this version stay `interrupted` with no wake time: `recover` carries them on.
pub(super) const MIGRATION_WORKER: &str = "
    ALTER TABLE runs ADD COLUMN graph TEXT;
    ALTER TABLE runs ADD COLUMN fingerprint TEXT;
    ALTER TABLE runs ADD COLUMN waiting_on TEXT;
    ALTER TABLE runs ADD COLUMN wake_at_ms INTEGER;
    ALTER TABLE runs ADD COLUMN runnable_at_ms INTEGER;
    ALTER TABLE runs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE runs ADD COLUMN error TEXT;
    ALTER TABLE runs ADD COLUMN input TEXT;
    UPDATE runs SET runnable_at_ms = 0 WHERE status = 'running';
    CREATE INDEX runs_by_runnable_at ON runs (runnable_at_ms) WHERE runnable_at_ms IS NOT NULL;
    CREATE INDEX runs_by_update ON runs (updated_at_ms);
    CREATE INDEX signals_pending ON signals (session, name) WHERE consumed_at_ms IS NULL;";

/// Migration step 5 -> 6: the pending signals by sequence number. A worker with nothing
/// due looks for the oldest pending signal that a suspended run waits for; without this
/// index SQLite reads every signal row in order, consumed ones too (those with an
/// idempotency key are kept for an hour), on every poll.
pub(super) const MIGRATION_PENDING_IN_ORDER: &str = "
    CREATE INDEX IF NOT EXISTS signals_pending_in_order ON signals (seq)
        WHERE consumed_at_ms IS NULL;";

/// Migration step 7 -> 8: the runs whose execution stopped part way, which a worker carries
/// on before the queued backlog. Without it, finding one reads every queued row.
pub(super) const MIGRATION_RECOVERING: &str = "
    CREATE INDEX IF NOT EXISTS runs_recovering ON runs (updated_at_ms)
        WHERE runnable_at_ms = 0 AND status IS NOT 'queued';";

/// Migration step 8 -> 9: those runs, a queued one claimed before included (an execution
/// in `Durability::Exit` writes nothing until it ends, and its row stays queued). The
/// predicate is the claim's own, for SQLite to use the index for it.
pub(super) const MIGRATION_RECOVERING_QUEUED: &str = "
    DROP INDEX IF EXISTS runs_recovering;
    CREATE INDEX runs_recovering ON runs (updated_at_ms)
        WHERE runnable_at_ms = 0 AND (status IS NOT 'queued' OR attempts > 0);";

/// Migration step 9 -> 10: the consumed signals by when they were consumed. The writer
/// forgets those whose idempotency key was kept long enough once a minute, outside any
/// group, while every write waits: without it, that reads every signal row.
pub(super) const MIGRATION_CONSUMED: &str = "
    CREATE INDEX IF NOT EXISTS signals_consumed ON signals (consumed_at_ms)
        WHERE consumed_at_ms IS NOT NULL;";

/// Migration step 10 -> 11: the queued runs never claimed, oldest first, under the claim's
/// own predicate. The claim names it, and the recovering runs' index, with `INDEXED BY`:
/// SQLite chose the index of `runnable_at_ms` instead and sorted every queued row, each
/// claim (20 ms a claim with 100,000 queued).
pub(super) const MIGRATION_QUEUED: &str = "
    CREATE INDEX IF NOT EXISTS runs_queued ON runs (updated_at_ms)
        WHERE runnable_at_ms = 0 AND status = 'queued' AND attempts = 0;";

/// The columns [`record_from_row`] reads, in order.
pub(super) const RUN_COLUMNS: &str =
    "thread, run, graph, fingerprint, status, waiting_on, wake_at_ms,
    lease_owner, lease_until_ms, attempts, cancel_requested, error, created_at_ms,
    updated_at_ms, lapses";

/// [`RUN_COLUMNS`] as a submit reads them: a row with no status (claimed, never written)
/// reads as running.
const ACTIVE_COLUMNS: &str =
    "thread, run, graph, fingerprint, COALESCE(status, 'running'), waiting_on, wake_at_ms,
    lease_owner, lease_until_ms, attempts, cancel_requested, error, created_at_ms,
    updated_at_ms, lapses";

/// The columns of a run's row a checkpoint decides that need converting: the signals it
/// waits on (JSON), its wake time and when it is runnable.
fn row_columns(update: &RowUpdate) -> (Option<String>, Option<i64>, Option<i64>) {
    let waiting_on = (!update.waiting_on.is_empty())
        .then(|| serde_json::to_string(&update.waiting_on).unwrap_or_default());
    let wake = update.wake_at_ms.and_then(|ms| i64::try_from(ms).ok());
    let runnable = update
        .runnable_at_ms()
        .and_then(|ms| i64::try_from(ms).ok());
    (waiting_on, wake, runnable)
}

/// Makes `thread`'s row follow a top-level checkpoint of run `run`.
pub(super) fn follow(
    conn: &Connection,
    thread: &str,
    run: i64,
    update: &RowUpdate,
) -> rusqlite::Result<()> {
    let (waiting_on, wake, runnable) = row_columns(update);
    conn.prepare_cached(
        "UPDATE runs SET run = ?2, status = ?3, waiting_on = ?4, wake_at_ms = ?5,
                         runnable_at_ms = ?6, graph = COALESCE(?7, graph),
                         fingerprint = COALESCE(?8, fingerprint), error = ?9, input = NULL,
                         cancel_requested = cancel_requested AND ?10
                                            AND (run = ?2 OR status = 'queued')
         WHERE thread = ?1",
    )?
    .execute(params![
        thread,
        run,
        update.state.as_str(),
        waiting_on,
        wake,
        runnable,
        update.graph,
        update.fingerprint,
        update.error,
        !update.state.is_finished(),
    ])?;
    Ok(())
}

/// What the lease fence and [`follow`] do together, in one statement: when `owner`
/// holds `thread`, extends its lease and makes the row follow the checkpoint of run `run`.
/// Returns whether `owner` held it. A step's checkpoint does both, and one UPDATE of the
/// row costs about as much as the checkpoint's INSERT.
pub(super) fn fence_and_follow(
    conn: &Connection,
    thread: &str,
    owner: &str,
    until_ms: i64,
    now_ms: i64,
    run: i64,
    update: &RowUpdate,
) -> rusqlite::Result<bool> {
    let (waiting_on, wake, runnable) = row_columns(update);
    let changed = conn
        .prepare_cached(
            "UPDATE runs SET lease_until_ms = ?11, updated_at_ms = ?12,
                             run = ?2, status = ?3, waiting_on = ?4, wake_at_ms = ?5,
                             runnable_at_ms = ?6, graph = COALESCE(?7, graph),
                             fingerprint = COALESCE(?8, fingerprint), error = ?9,
                             input = NULL, cancel_requested = cancel_requested AND ?10
                                                           AND (run = ?2 OR status = 'queued'),
                             lapses = 0
             WHERE thread = ?1 AND lease_owner = ?13",
        )?
        .execute(params![
            thread,
            run,
            update.state.as_str(),
            waiting_on,
            wake,
            runnable,
            update.graph,
            update.fingerprint,
            update.error,
            !update.state.is_finished(),
            until_ms,
            now_ms,
            owner,
        ])?;
    Ok(changed > 0)
}

pub(super) fn submit(
    conn: &Connection,
    thread: &str,
    graph: &str,
    input: &str,
    now_ms: i64,
) -> rusqlite::Result<Outcome> {
    // A row an execution claimed and has not written to yet has no status: it reads as
    // running, and refuses the submit while the claim holds.
    let row = conn
        .prepare_cached(&format!(
            "SELECT {ACTIVE_COLUMNS}, status IS NOT NULL FROM runs WHERE thread = ?1"
        ))?
        .query_row([thread], |row| {
            Ok((record_from_row(row), row.get::<_, bool>(15)?))
        })
        .optional()?;
    if let Some((record, written)) = row {
        let record = match record {
            Ok(record) => record,
            Err(e) => return Ok(Outcome::Submitted(Box::new(Err(e)))),
        };
        let held = record.lease_owner.is_some()
            && i64::try_from(record.lease_until_ms).unwrap_or(i64::MAX) > now_ms;
        if (written && !record.state.is_finished()) || held {
            return Ok(Outcome::Submitted(Box::new(Ok(Submitted::Active(
                Box::new(record),
            )))));
        }
    }
    conn.prepare_cached(
        "INSERT INTO runs (thread, status, graph, input, runnable_at_ms, created_at_ms,
                           updated_at_ms)
         VALUES (?1, 'queued', ?2, ?3, 0, ?4, ?4)
         ON CONFLICT (thread) DO UPDATE SET
             status = 'queued', graph = ?2, input = ?3, runnable_at_ms = 0, fingerprint = NULL,
             waiting_on = NULL, wake_at_ms = NULL, cancel_requested = 0, error = NULL,
             lease_owner = NULL, lease_until_ms = 0, attempts = 0, lapses = 0, created_at_ms = ?4,
             updated_at_ms = ?4",
    )?
    .execute(params![thread, graph, input, now_ms])?;
    Ok(Outcome::Submitted(Box::new(Ok(Submitted::Queued))))
}

/// The longest-waiting run a worker should carry on now, if any.
pub(super) fn next_runnable(
    conn: &Connection,
    graphs: &str,
    now_ms: i64,
    due_ms: i64,
) -> rusqlite::Result<Option<String>> {
    // Runnable at once (`runnable_at_ms` 0): a run whose execution stopped part way (its
    // lease ran out, or it was let go) before anything else, a queued one claimed before
    // included (it wrote nothing: `Durability::Exit`); a queued run since it was queued; a
    // timer since it came due, a signalled run since its signal was sent. The earliest
    // candidate goes first: a backlog of queued runs does not hold up the others until it
    // runs out.
    let recovering = candidate(
        conn,
        "SELECT thread, 0 FROM runs INDEXED BY runs_recovering
         WHERE runnable_at_ms = 0 AND (status IS NOT 'queued' OR attempts > 0)
           AND (lease_owner IS NULL OR lease_until_ms <= ?1)
           AND graph IN (SELECT value FROM json_each(?2))
         ORDER BY updated_at_ms LIMIT 1",
        params![now_ms, graphs],
    )?;
    let queued = candidate(
        conn,
        "SELECT thread, updated_at_ms FROM runs INDEXED BY runs_queued
         WHERE runnable_at_ms = 0 AND status = 'queued' AND attempts = 0
           AND (lease_owner IS NULL OR lease_until_ms <= ?1)
           AND graph IN (SELECT value FROM json_each(?2))
         ORDER BY updated_at_ms LIMIT 1",
        params![now_ms, graphs],
    )?;
    let timer = candidate(
        conn,
        "SELECT thread, runnable_at_ms FROM runs
         WHERE runnable_at_ms > 0 AND runnable_at_ms <= ?2
           AND (lease_owner IS NULL OR lease_until_ms <= ?1)
           AND graph IN (SELECT value FROM json_each(?3))
         ORDER BY runnable_at_ms, updated_at_ms LIMIT 1",
        params![now_ms, due_ms, graphs],
    )?;
    let signalled = candidate(
        conn,
        "SELECT r.thread, s.sent_at_ms FROM signals s JOIN runs r ON r.thread = s.session
         WHERE s.consumed_at_ms IS NULL AND r.status IN ('waiting', 'interrupted')
           AND (r.lease_owner IS NULL OR r.lease_until_ms <= ?1)
           AND r.graph IN (SELECT value FROM json_each(?2))
           AND EXISTS (SELECT 1 FROM json_each(r.waiting_on) w WHERE w.value = s.name)
         ORDER BY s.seq LIMIT 1",
        params![now_ms, graphs],
    )?;
    let candidates = [recovering, queued, timer, signalled].into_iter().flatten();
    Ok(candidates
        .min_by_key(|(_, since)| *since)
        .map(|(thread, _)| thread))
}

/// The run `sql` chooses, with the time it became runnable (its two columns).
fn candidate(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> rusqlite::Result<Option<(String, i64)>> {
    conn.prepare_cached(sql)?
        .query_row(params, |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()
}

/// `thread`, if its run waits for the signal `signal`, is of one of `graphs`, and is free.
pub(super) fn waiting_run(
    conn: &Connection,
    (thread, signal): (&str, &str),
    graphs: &str,
    now_ms: i64,
) -> rusqlite::Result<Option<String>> {
    conn.prepare_cached(
        "SELECT thread FROM runs
         WHERE thread = ?1 AND status IN ('waiting', 'interrupted')
           AND (lease_owner IS NULL OR lease_until_ms <= ?2)
           AND graph IN (SELECT value FROM json_each(?3))
           AND EXISTS (SELECT 1 FROM json_each(waiting_on) w WHERE w.value = ?4)",
    )?
    .query_row(params![thread, now_ms, graphs, signal], |row| row.get(0))
    .optional()
}

/// `thread`'s row; `None` when it has none or never ran.
pub(super) fn read_record(
    conn: &Connection,
    thread: &str,
) -> rusqlite::Result<Option<Result<RunRecord, StoreError>>> {
    conn.prepare_cached(&format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE thread = ?1 AND status IS NOT NULL"
    ))?
    .query_row([thread], |row| Ok(record_from_row(row)))
    .optional()
}

fn graph_list(graphs: &[String], thread: &str) -> Result<String, StoreError> {
    to_json(&graphs, thread)
}

type Decoded<T> = Result<T, StoreError>;

fn runnable(outcome: Outcome) -> Result<Decoded<Option<ClaimedRun>>, Outcome> {
    match outcome {
        Outcome::Runnable(claimed) => Ok((|| {
            let Some((record, input)) = *claimed else {
                return Ok(None);
            };
            let record = record?;
            let input = input
                .map(|text| {
                    crate::json_depth::from_str(&text)
                        .map_err(|e| corrupt(&record.thread, format!("input of the run: {e}")))
                })
                .transpose()?;
            Ok(Some(ClaimedRun { record, input }))
        })()),
        other => Err(other),
    }
}

/// Flattens a row that was read but may not decode.
fn decoded<'a, T: Send + 'a>(
    read: BoxFuture<'a, Result<Decoded<T>, StoreError>>,
) -> BoxFuture<'a, Result<T, StoreError>> {
    Box::pin(async move { read.await? })
}

impl SqliteStore {
    pub(super) fn submit<'a>(
        &'a self,
        thread: &'a str,
        graph: &'a str,
        input: &Value,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Submitted, StoreError>> {
        let op = (|| {
            Ok(RunOp::Submit {
                thread: thread.to_owned(),
                graph: graph.to_owned(),
                input: to_json(input, thread)?,
                now_ms: to_i64(now_ms, "time", thread)?,
            })
        })();
        decoded(
            self.run_op(thread.to_owned(), None, op, |outcome| match outcome {
                Outcome::Submitted(submitted) => Ok(*submitted),
                other => Err(other),
            }),
        )
    }

    /// With a thread and the signal sent to it, `claim_waiting_run`; without,
    /// `claim_next_run`.
    pub(super) fn claim_runnable<'a>(
        &'a self,
        waiting: Option<(&'a str, &'a str)>,
        graphs: &'a [String],
        owner: &'a str,
        lease_until_ms: u64,
        (now_ms, due_ms): (u64, u64),
    ) -> BoxFuture<'a, Result<Option<ClaimedRun>, StoreError>> {
        let label = waiting.map_or("(next run)", |(thread, _)| thread);
        let op = (|| {
            Ok(RunOp::ClaimRunnable {
                waiting: waiting.map(|(thread, signal)| (thread.to_owned(), signal.to_owned())),
                graphs: graph_list(graphs, label)?,
                owner: owner.to_owned(),
                until_ms: to_i64(lease_until_ms, "lease expiry", label)?,
                now_ms: to_i64(now_ms, "time", label)?,
                due_ms: to_i64(due_ms, "time", label)?,
            })
        })();
        decoded(self.run_op(label.to_owned(), None, op, runnable))
    }

    pub(super) fn request_cancel_run<'a>(
        &'a self,
        thread: &'a str,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Option<RunRecord>, StoreError>> {
        let op = (|| {
            Ok(RunOp::RequestCancel {
                thread: thread.to_owned(),
                now_ms: to_i64(now_ms, "time", thread)?,
            })
        })();
        decoded(
            self.run_op(thread.to_owned(), None, op, |outcome| match outcome {
                Outcome::Record(record) => Ok(record.transpose()),
                other => Err(other),
            }),
        )
    }

    pub(super) fn finish<'a>(
        &'a self,
        thread: &'a str,
        owner: &'a str,
        state: RunState,
        error: Option<String>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let op = Ok(RunOp::Finish {
            thread: thread.to_owned(),
            owner: owner.to_owned(),
            state,
            error,
        });
        self.run_op(thread.to_owned(), Some(owner.to_owned()), op, done)
    }

    pub(super) fn read_run<'a>(
        &'a self,
        thread: &'a str,
    ) -> BoxFuture<'a, Result<Option<RunRecord>, StoreError>> {
        let owned = thread.to_owned();
        self.read(thread, move |conn| {
            Ok(read_record(conn, &owned)?.transpose())
        })
    }

    /// Those of `threads` whose row asks to stop, in one read: the threads go in as a JSON
    /// array, which SQLite's `json_each` lists.
    pub(super) fn read_cancels<'a>(
        &'a self,
        threads: &'a [Arc<str>],
    ) -> BoxFuture<'a, Result<Vec<Arc<str>>, StoreError>> {
        // A list of strings always serializes.
        let names: Vec<&str> = threads.iter().map(|thread| &**thread).collect();
        let listed = serde_json::to_string(&names).unwrap_or_else(|_| "[]".to_owned());
        let threads = threads.to_vec();
        self.read("(runs)", move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT thread FROM runs
                 WHERE cancel_requested AND status IS NOT NULL
                   AND thread IN (SELECT value FROM json_each(?1))",
            )?;
            let asked = stmt
                .query_map(params![listed], |row| row.get::<_, String>(0))?
                .collect::<rusqlite::Result<std::collections::HashSet<String>>>()?;
            // The callers' own names back, rather than new copies of them.
            Ok(Ok(threads
                .into_iter()
                .filter(|thread| asked.contains(&**thread))
                .collect()))
        })
    }

    pub(super) fn query_runs<'a>(
        &'a self,
        filter: &RunFilter,
    ) -> BoxFuture<'a, Result<Vec<RunRecord>, StoreError>> {
        let filter = filter.clone();
        self.read("(runs)", move |conn| {
            let limit = filter
                .limit
                .map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
            let before = filter
                .updated_before_ms
                .map(|ms| i64::try_from(ms).unwrap_or(i64::MAX));
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {RUN_COLUMNS} FROM runs
                 WHERE status IS NOT NULL
                   AND (?1 IS NULL OR status = ?1)
                   AND (?2 IS NULL OR graph = ?2)
                   AND (?3 IS NULL OR updated_at_ms < ?3)
                   AND (?5 IS NULL OR updated_at_ms < ?5
                        OR (updated_at_ms = ?5 AND thread > ?6))
                 ORDER BY updated_at_ms DESC, thread LIMIT ?4"
            ))?;
            let (after_ms, after_thread) = match &filter.after {
                Some(c) => (
                    Some(i64::try_from(c.updated_at_ms).unwrap_or(i64::MAX)),
                    Some(c.thread.as_str()),
                ),
                None => (None, None),
            };
            let rows = stmt
                .query_map(
                    params![
                        filter.state.map(RunState::as_str),
                        filter.graph,
                        before,
                        limit,
                        after_ms,
                        after_thread
                    ],
                    |row| Ok(record_from_row(row)),
                )?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows.into_iter().collect())
        })
    }

    pub(super) fn next_wake<'a>(
        &'a self,
        graphs: &'a [String],
        due_ms: u64,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        let graphs = graph_list(graphs, "(runs)");
        let due = i64::try_from(due_ms).unwrap_or(i64::MAX);
        self.read("(runs)", move |conn| {
            let graphs = match graphs {
                Ok(graphs) => graphs,
                Err(e) => return Ok(Err(e)),
            };
            let next: Option<i64> = conn
                .prepare_cached(
                    "SELECT MIN(runnable_at_ms) FROM runs
                     WHERE runnable_at_ms > ?1 AND graph IN (SELECT value FROM json_each(?2))",
                )?
                .query_row(params![due, graphs], |row| row.get(0))?;
            Ok(Ok(next.and_then(|ms| u64::try_from(ms).ok())))
        })
    }
}
