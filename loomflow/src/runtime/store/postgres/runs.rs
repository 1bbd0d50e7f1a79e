//! The `loomflow_runs` table: one row per thread for its current run, with the lease that
//! lets at most one execution at a time carry it on, and the writes made under that lease.
//!
//! Each operation is one statement, which is one transaction and one round trip to the
//! server. Only a refusal reads the row in a second statement: a claim of a held thread, a
//! submit while the run is active (which queues again should the run have been let go
//! meanwhile), a cancel with nothing to cancel. A write under a lease is one statement
//! ([`write_fenced`] for a checkpoint, [`write_journal_fenced`] for a journal entry,
//! [`take_journal_fenced`] for a signal taken with its entry). It begins, in a `WITH`
//! clause, with the fence: an `UPDATE` of the run's row that matches only while
//! the writer holds the lease, which renews the lease and keeps the row locked until the
//! statement commits, so no other process can claim the run between the check and the
//! write. Everything else the statement writes is made only from the row the fence
//! matched; when it matched nothing, the write answers [`StoreError::LeaseLost`] having
//! written nothing.
//!
//! Workers claim runs with one statement that chooses the run with `SELECT ... FOR UPDATE
//! SKIP LOCKED` in a `WITH` clause and takes its lease in the `UPDATE` that follows: a row
//! another worker is claiming is passed over rather than waited for, and a row claimed and
//! committed since the query began is checked again against the lease condition
//! (PostgreSQL re-reads a row it locks), so two workers never claim one run. Finishing,
//! releasing, queuing and asking to cancel a run notify listening runtimes (`pg_notify`)
//! in the statement that makes the change.

use deadpool_postgres::GenericClient;
use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio_postgres::Row;

use super::PostgresStore;
use super::claim_sql::{Choice, claim_sql};
use super::error::Fail;
use super::fenced::{lease_lost, release, take_journal_fenced, write_fenced, write_journal_fenced};
use super::rows::{
    CheckpointRow, JournalRow, corrupt, from_json, get, kept_text, now_ms, to_i64, to_u64,
};
use crate::runtime::store::audit::AuditRow;
use crate::runtime::store::{
    AuditEntry, Checkpoint, Claim, ClaimedRun, JournalKey, RowUpdate, RunFilter, RunRecord,
    RunState, StoreError,
};

/// The columns [`record_from_row`] reads, in order.
pub(super) const RUN_COLUMNS: &str =
    "thread, run, graph, fingerprint, status, waiting_on, wake_at_ms,
    lease_owner, lease_until_ms, attempts, cancel_requested, error, created_at_ms,
    updated_at_ms, lapses";

/// Decodes a row of [`RUN_COLUMNS`].
pub(super) fn record_from_row(row: &Row) -> Result<RunRecord, StoreError> {
    let thread: String = get(row, 0, "(runs)")?;
    let t = thread.as_str();
    let status: &str = get(row, 4, t)?;
    let state = RunState::parse(status)
        .ok_or_else(|| corrupt(t, format!("unknown run state {status:?}")))?;
    let waiting_on: Option<Vec<String>> = get(row, 5, t)?;
    let wake_at_ms: Option<i64> = get(row, 6, t)?;
    let lease_until_ms: i64 = get(row, 8, t)?;
    Ok(RunRecord {
        run: to_u64(get(row, 1, t)?, "run", t)?,
        graph: get(row, 2, t)?,
        fingerprint: get(row, 3, t)?,
        state,
        waiting_on: waiting_on.unwrap_or_default(),
        wake_at_ms: wake_at_ms
            .map(|ms| to_u64(ms, "wake time", t))
            .transpose()?,
        lease_owner: get(row, 7, t)?,
        lease_until_ms: to_u64(lease_until_ms.max(0), "lease expiry", t)?,
        attempts: to_u64(get(row, 9, t)?, "attempts", t)?,
        lapses: to_u64(get(row, 14, t)?, "lapses", t)?,
        cancel_requested: get(row, 10, t)?,
        error: get(row, 11, t)?,
        created_at_ms: to_u64(get(row, 12, t)?, "creation time", t)?,
        updated_at_ms: to_u64(get(row, 13, t)?, "update time", t)?,
        thread,
    })
}

/// How many times a claim, or a submit, is tried when the run's holder or state changes
/// under it.
pub(super) const CLAIM_TRIES: usize = 5;

/// `thread`'s row; `None` when it has none or never ran.
async fn read_record(
    client: &impl GenericClient,
    thread: &str,
    lock: bool,
) -> Result<Option<RunRecord>, Fail> {
    let sql = format!(
        "SELECT {RUN_COLUMNS} FROM loomflow_runs WHERE thread = $1 AND status IS NOT NULL{}",
        if lock { " FOR UPDATE" } else { "" }
    );
    let stmt = client.prepare_cached(&sql).await?;
    let row = client.query_opt(&stmt, &[&thread]).await?;
    Ok(row.map(|row| record_from_row(&row)).transpose()?)
}

/// `release`, on a connection of `pool`: a free function, so that it can run in a task of
/// its own (see `PostgresStore::release`).
pub(super) async fn release_thread(
    pool: deadpool_postgres::Pool,
    thread: String,
    owner: String,
    runnable: bool,
) -> Result<(), StoreError> {
    async {
        let client = pool.get().await?;
        release(&client, &thread, &owner, runnable).await?;
        Ok(())
    }
    .await
    .map_err(|e: Fail| e.write(&thread))
}

/// `write` on a task of its own when a Tokio runtime is at hand: it goes on if the caller's
/// future is dropped.
fn sent_now<'a>(
    thread: &'a str,
    write: impl Future<Output = Result<(), StoreError>> + Send + 'static,
) -> BoxFuture<'a, Result<(), StoreError>> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            let task = handle.spawn(write);
            Box::pin(async move {
                task.await.unwrap_or_else(|e| {
                    Err(StoreError::Write {
                        thread: thread.to_owned(),
                        message: format!("the write did not finish: {e}"),
                    })
                })
            })
        }
        Err(_) => Box::pin(write),
    }
}

/// Records the run of `thread` as over (`state`, with `error`) if `owner` holds it.
async fn finish_thread(
    pool: deadpool_postgres::Pool,
    thread: String,
    owner: String,
    state: RunState,
    error: Option<String>,
) -> Result<(), StoreError> {
    async {
        let client = pool.get().await?;
        let stmt = client
            .prepare_cached(
                "WITH finished AS (
                     UPDATE loomflow_runs SET status = $3, error = $4,
                         runnable_at_ms = NULL, wake_at_ms = NULL, waiting_on = NULL,
                         input = NULL, cancel_requested = FALSE, lease_owner = NULL,
                         lease_until_ms = 0, lapses = 0, updated_at_ms = $5
                     WHERE thread = $1 AND lease_owner = $2
                     RETURNING 1)
                 SELECT pg_notify('loomflow_changes', '') FROM finished",
            )
            .await?;
        let finished = client
            .query_opt(
                &stmt,
                &[
                    &thread,
                    &owner,
                    &state.as_str(),
                    &kept_text(error.as_deref()),
                    &now_ms(),
                ],
            )
            .await?;
        if finished.is_none() {
            return Err(lease_lost(&thread, &owner));
        }
        Ok(())
    }
    .await
    .map_err(|e: Fail| e.write(&thread))
}

impl PostgresStore {
    /// `Store::release` (or with `runnable`, `Store::release_runnable`), sent when called,
    /// not when first polled, as the SQLite store queues its writes: an execution dropped
    /// mid-way (its task aborted) releases its claim by polling this once and dropping it,
    /// and the release must happen all the same rather than leave the run to wait for its
    /// lease to expire.
    pub(super) fn let_go<'a>(
        &self,
        thread: &'a str,
        owner: &str,
        runnable: bool,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let release = release_thread(
            self.pool.clone(),
            thread.to_owned(),
            owner.to_owned(),
            runnable,
        );
        sent_now(thread, release)
    }

    pub(super) async fn claim_thread(
        &self,
        thread: &str,
        owner: &str,
        lease_until_ms: u64,
        now_ms: u64,
    ) -> Result<Claim, StoreError> {
        async {
            let until = to_i64(lease_until_ms, "lease expiry", thread)?;
            let now = to_i64(now_ms, "time", thread)?;
            let client = self.client().await?;
            // One statement: a thread without a row gets one, held by `owner`; a row that
            // nobody holds, that `owner` holds, or whose lease ran out is taken (the
            // conflict locks it, so two claimers of one row take turns). A claim taken
            // over from someone else, or from nobody, counts an attempt.
            let take = client
                .prepare_cached(
                    "INSERT INTO loomflow_runs AS r (thread, lease_owner, lease_until_ms,
                                                     attempts, created_at_ms, updated_at_ms)
                     VALUES ($1, $2, $3, 1, $4, $4)
                     ON CONFLICT (thread) DO UPDATE SET
                         lease_owner = $2, lease_until_ms = $3, updated_at_ms = $4,
                         attempts = r.attempts
                             + CASE WHEN r.lease_owner IS DISTINCT FROM $2 THEN 1 ELSE 0 END,
                         lapses = r.lapses
                             + CASE WHEN r.lease_owner <> $2 THEN 1 ELSE 0 END,
                         runnable_at_ms = CASE WHEN r.status IN ('waiting', 'sleeping',
                                                                 'interrupted')
                                               THEN 0 ELSE r.runnable_at_ms END
                     WHERE r.lease_owner IS NULL OR r.lease_owner = $2
                        OR r.lease_until_ms <= $4
                     RETURNING 1",
                )
                .await?;
            let holder = client
                .prepare_cached(
                    "SELECT lease_owner, lease_until_ms FROM loomflow_runs WHERE thread = $1",
                )
                .await?;
            // The holder may let go between the two statements: then the claim is tried
            // again, a few times at most.
            for _ in 0..CLAIM_TRIES {
                if client
                    .query_opt(&take, &[&thread, &owner, &until, &now])
                    .await?
                    .is_some()
                {
                    return Ok(Claim::Claimed);
                }
                let Some(row) = client.query_opt(&holder, &[&thread]).await? else {
                    continue;
                };
                let holder: Option<String> = get(&row, 0, thread)?;
                let holder_until: i64 = get(&row, 1, thread)?;
                if let Some(holder) = holder
                    && holder != owner
                    && holder_until > now
                {
                    return Ok(Claim::Busy {
                        owner: holder,
                        until_ms: u64::try_from(holder_until).unwrap_or_default(),
                    });
                }
            }
            Err(Fail::Store(StoreError::Write {
                thread: thread.to_owned(),
                message: format!("the run changed hands {CLAIM_TRIES} times during a claim"),
            }))
        }
        .await
        .map_err(|e: Fail| e.write(thread))
    }

    pub(super) async fn renew_thread(
        &self,
        thread: &str,
        owner: &str,
        lease_until_ms: u64,
    ) -> Result<(), StoreError> {
        async {
            let until = to_i64(lease_until_ms, "lease expiry", thread)?;
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(
                    "UPDATE loomflow_runs SET lease_until_ms = $3, updated_at_ms = $4
                     WHERE thread = $1 AND lease_owner = $2",
                )
                .await?;
            let renewed = client
                .execute(&stmt, &[&thread, &owner, &until, &now_ms()])
                .await?;
            if renewed == 0 {
                return Err(lease_lost(thread, owner));
            }
            Ok(())
        }
        .await
        .map_err(|e: Fail| e.write(thread))
    }

    /// `put_checkpoint_claimed`, or with no `lease_until_ms` `put_checkpoint_and_release`.
    pub(super) async fn checkpoint_fenced(
        &self,
        checkpoint: Checkpoint,
        owner: &str,
        lease_until_ms: Option<u64>,
    ) -> Result<u64, StoreError> {
        let thread = &checkpoint.thread;
        async {
            let row = CheckpointRow::new(&checkpoint)?;
            let until = lease_until_ms
                .map(|until| to_i64(until, "lease expiry", thread))
                .transpose()?;
            let update = checkpoint
                .namespace
                .is_empty()
                .then(|| RowUpdate::of(&checkpoint));
            let client = self.client().await?;
            let id = write_fenced(&client, owner, until, &row, update.as_ref())
                .await?
                .ok_or_else(|| lease_lost(thread, owner))?;
            drop(client);
            if row.cuts() {
                self.cut(thread).await;
            }
            Ok(id)
        }
        .await
        .map_err(|e: Fail| e.write(thread))
    }

    pub(super) async fn journal_fenced(
        &self,
        key: JournalKey,
        value: Value,
        audit: &[AuditEntry],
        owner: &str,
        lease_until_ms: u64,
    ) -> Result<(), StoreError> {
        let thread = key.thread.clone();
        async {
            let until = to_i64(lease_until_ms, "lease expiry", &thread)?;
            let mut row = JournalRow::new(key, &value)?;
            row.audit = AuditRow::all(audit)?;
            let client = self.client().await?;
            if write_journal_fenced(&client, owner, until, &row).await? {
                Ok(())
            } else {
                Err(lease_lost(&thread, owner))
            }
        }
        .await
        .map_err(|e: Fail| e.write(&thread))
    }

    pub(super) async fn take_fenced(
        &self,
        session: &str,
        seq: u64,
        (key, value): (JournalKey, Value),
        owner: &str,
        lease_until_ms: u64,
    ) -> Result<bool, StoreError> {
        let thread = key.thread.clone();
        async {
            let seq = to_i64(seq, "signal sequence number", session)?;
            let until = to_i64(lease_until_ms, "lease expiry", &thread)?;
            let row = JournalRow::new(key, &value)?;
            let client = self.client().await?;
            match take_journal_fenced(&client, owner, until, (session, seq), &row).await? {
                (true, taken) => Ok(taken),
                (false, _) => Err(lease_lost(&thread, owner)),
            }
        }
        .await
        .map_err(|e: Fail| e.write(&thread))
    }

    /// With a thread and the signal sent to it, `claim_waiting_run`; without,
    /// `claim_next_run`.
    pub(super) async fn claim_runnable(
        &self,
        waiting: Option<(&str, &str)>,
        graphs: &[String],
        owner: &str,
        lease_until_ms: u64,
        (now_ms, due_ms): (u64, u64),
    ) -> Result<Option<ClaimedRun>, StoreError> {
        let label = waiting.map_or("(next run)", |(thread, _)| thread);
        async {
            let until = to_i64(lease_until_ms, "lease expiry", label)?;
            let now = to_i64(now_ms, "time", label)?;
            let due = to_i64(due_ms, "time", label)?;
            let client = self.client().await?;
            let row = match waiting {
                Some((thread, signal)) => {
                    let stmt = client.prepare_cached(claim_sql(Choice::Waiting)).await?;
                    client
                        .query_opt(&stmt, &[&now, &owner, &graphs, &until, &thread, &signal])
                        .await?
                }
                None => {
                    let stmt = client.prepare_cached(claim_sql(Choice::Next)).await?;
                    client
                        .query_opt(&stmt, &[&now, &owner, &graphs, &until, &due])
                        .await?
                }
            };
            let Some(row) = row else {
                return Ok(None);
            };
            let record = record_from_row(&row)?;
            let input: Option<&str> = get(&row, 15, &record.thread)?;
            let input = input
                .map(|text| from_json(text, &record.thread, "input of the run"))
                .transpose()?;
            Ok(Some(ClaimedRun { record, input }))
        }
        .await
        .map_err(|e: Fail| e.write(label))
    }

    pub(super) async fn read_run(&self, thread: &str) -> Result<Option<RunRecord>, StoreError> {
        async {
            let client = self.client().await?;
            read_record(&client, thread, false).await
        }
        .await
        .map_err(|e| e.read(thread))
    }

    pub(super) async fn query_runs(
        &self,
        filter: &RunFilter,
    ) -> Result<Vec<RunRecord>, StoreError> {
        const LABEL: &str = "(runs)";
        let limit = filter.limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX));
        let before = filter
            .updated_before_ms
            .map(|ms| i64::try_from(ms).unwrap_or(i64::MAX));
        let state = filter.state.map(RunState::as_str);
        let after = filter.after.as_ref().map(|c| {
            let ms = i64::try_from(c.updated_at_ms).unwrap_or(i64::MAX);
            (ms, &c.thread)
        });
        async {
            let client = self.client().await?;
            // Ties are broken by the thread's bytes (`COLLATE "C"`), as SQLite does, not by
            // the database's locale.
            let stmt = client
                .prepare_cached(&format!(
                    "SELECT {RUN_COLUMNS} FROM loomflow_runs
                     WHERE status IS NOT NULL
                       AND ($1::text IS NULL OR status = $1::text)
                       AND ($2::text IS NULL OR graph = $2::text)
                       AND ($3::bigint IS NULL OR updated_at_ms < $3::bigint)
                       AND ($5::bigint IS NULL OR updated_at_ms < $5::bigint
                            OR (updated_at_ms = $5::bigint
                                AND thread COLLATE \"C\" > $6::text COLLATE \"C\"))
                     ORDER BY updated_at_ms DESC, thread COLLATE \"C\" LIMIT $4::bigint"
                ))
                .await?;
            let after_ms = after.as_ref().map(|(ms, _)| *ms);
            let after_thread = after.as_ref().map(|(_, thread)| thread.as_str());
            let rows = client
                .query(
                    &stmt,
                    &[
                        &state,
                        &filter.graph,
                        &before,
                        &limit,
                        &after_ms,
                        &after_thread,
                    ],
                )
                .await?;
            Ok(rows
                .iter()
                .map(record_from_row)
                .collect::<Result<Vec<_>, _>>()?)
        }
        .await
        .map_err(|e: Fail| e.read(LABEL))
    }

    pub(super) async fn cancel(
        &self,
        thread: &str,
        now_ms: u64,
    ) -> Result<Option<RunRecord>, StoreError> {
        async {
            let now = to_i64(now_ms, "time", thread)?;
            let client = self.client().await?;
            // The row as the request left it; when there was nothing to cancel, the row as
            // it is, read by a second statement (a read in the first would see the row as
            // it was when that statement began, not a finish that it waited for). The
            // notification tells a process executing the run to read its row now rather
            // than at its next heartbeat.
            let stmt = client
                .prepare_cached(&format!(
                    "WITH asked AS (
                         UPDATE loomflow_runs SET cancel_requested = TRUE, updated_at_ms = $2
                         WHERE thread = $1 AND status IN ('queued', 'running', 'waiting',
                                                          'sleeping', 'interrupted')
                         RETURNING {RUN_COLUMNS})
                     SELECT *, pg_notify('loomflow_changes', '') FROM asked"
                ))
                .await?;
            let Some(row) = client.query_opt(&stmt, &[&thread, &now]).await? else {
                return read_record(&client, thread, false).await;
            };
            Ok(Some(record_from_row(&row)?))
        }
        .await
        .map_err(|e: Fail| e.write(thread))
    }

    /// `Store::finish_run`, sent when called, as [`let_go`](Self::let_go) is: a run's task
    /// aborted while it records the run as failed (its stream dropped at the error event)
    /// records it all the same, rather than leave a failed run to be run again.
    pub(super) fn finish<'a>(
        &self,
        thread: &'a str,
        owner: &str,
        state: RunState,
        error: Option<String>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let finish = finish_thread(
            self.pool.clone(),
            thread.to_owned(),
            owner.to_owned(),
            state,
            error,
        );
        sent_now(thread, finish)
    }

    pub(super) async fn next_wake(
        &self,
        graphs: &[String],
        due_ms: u64,
    ) -> Result<Option<u64>, StoreError> {
        const LABEL: &str = "(runs)";
        let due = i64::try_from(due_ms).unwrap_or(i64::MAX);
        async {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(
                    "SELECT MIN(runnable_at_ms) FROM loomflow_runs
                     WHERE runnable_at_ms > $1 AND graph = ANY($2)",
                )
                .await?;
            let row = client.query_one(&stmt, &[&due, &graphs]).await?;
            let next: Option<i64> = get(&row, 0, LABEL)?;
            Ok(next.and_then(|ms| u64::try_from(ms).ok()))
        }
        .await
        .map_err(|e: Fail| e.read(LABEL))
    }
}
