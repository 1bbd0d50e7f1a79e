//! Writes under a lease, each one statement that begins with the fence (an `UPDATE` that
//! matches the run's row only while the writer holds the lease, and renews it) and writes
//! the rest only from the row it matched: a checkpoint with its row's update and audit
//! entries ([`write_fenced`]), a journal entry ([`write_journal_fenced`]), a signal taken
//! with the entry that records it ([`take_journal_fenced`]). And the release.

use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;

use super::audit::AuditColumns;
use super::error::Fail;
use super::rows::{CheckpointRow, JournalRow, get, kept_text, now_ms, to_u64};
use crate::runtime::store::{RowUpdate, StoreError};

/// The error of a write under `owner`'s claim that found the run no longer held by it.
pub(super) fn lease_lost(thread: &str, owner: &str) -> Fail {
    Fail::Store(StoreError::LeaseLost {
        thread: thread.to_owned(),
        owner: owner.to_owned(),
    })
}

/// Lets `thread` go if `owner` holds it, and says so to listening workers; returns whether
/// it did. A suspended run claimed and let go without a new checkpoint (a recover that
/// found nothing to do, a refused resume) is runnable again only at its wake time, as
/// before the claim; one whose execution stopped half way (`runnable`: see
/// `Store::release_runnable`) at once. One statement.
pub(super) async fn release(
    client: &impl GenericClient,
    thread: &str,
    owner: &str,
    runnable: bool,
) -> Result<bool, Fail> {
    let stmt = client
        .prepare_cached(
            "WITH released AS (
                 UPDATE loomflow_runs SET lease_owner = NULL, lease_until_ms = 0,
                     lapses = 0, updated_at_ms = $3,
                     runnable_at_ms = CASE WHEN $4 AND status IN ('waiting', 'sleeping', 'interrupted')
                                           THEN 0
                                           WHEN status IN ('waiting', 'sleeping', 'interrupted')
                                           THEN wake_at_ms ELSE runnable_at_ms END
                 WHERE thread = $1 AND lease_owner = $2
                 RETURNING 1)
             SELECT pg_notify('loomflow_changes', '') FROM released",
        )
        .await?;
    Ok(client
        .query_opt(&stmt, &[&thread, &owner, &now_ms(), &runnable])
        .await?
        .is_some())
}

/// An `UPDATE`'s `SET` list and the statement's parameters, numbered as they are bound.
struct Assignments<'a> {
    sql: String,
    params: Vec<&'a (dyn ToSql + Sync)>,
}

impl<'a> Assignments<'a> {
    /// Adds `assignment`, whose `?` stands for `value`'s parameter.
    fn bind(&mut self, assignment: &str, value: &'a (dyn ToSql + Sync)) {
        self.params.push(value);
        let number = format!("${}", self.params.len());
        self.add(&assignment.replace('?', &number));
    }

    /// Adds `assignments` as they are.
    fn add(&mut self, assignments: &str) {
        self.sql.push_str(", ");
        self.sql.push_str(assignments);
    }
}

/// The values a [`RowUpdate`] puts in a run's row, as the columns take them.
struct RowColumns {
    state: &'static str,
    waiting_on: Option<Vec<String>>,
    wake_at_ms: Option<i64>,
    runnable_at_ms: Option<i64>,
    unfinished: bool,
    error: Option<String>,
}

impl RowColumns {
    fn of(update: &RowUpdate) -> Self {
        Self {
            state: update.state.as_str(),
            waiting_on: (!update.waiting_on.is_empty()).then(|| update.waiting_on.clone()),
            wake_at_ms: update.wake_at_ms.and_then(|ms| i64::try_from(ms).ok()),
            runnable_at_ms: update
                .runnable_at_ms()
                .and_then(|ms| i64::try_from(ms).ok()),
            unfinished: !update.state.is_finished(),
            error: kept_text(update.error.as_deref()),
        }
    }
}

/// A checkpoint written under a held claim, as one statement. The fence renews the lease,
/// or with no `until_ms` lets it go (as [`release`] does) and notifies the listeners; for
/// a top-level checkpoint it also brings the row to what the checkpoint says (state, waits,
/// wake time, graph, fingerprint, error). The checkpoint and its audit entries are inserted
/// only for a row the fence matched. Returns the checkpoint's id, or `None` when `owner` no
/// longer holds the run and nothing was written.
///
/// A statement is a transaction of its own: this one is a single round trip where
/// `BEGIN`, the fence, the row's update, the release, the notification, the inserts and
/// `COMMIT` were one each.
pub(super) async fn write_fenced(
    client: &impl GenericClient,
    owner: &str,
    until_ms: Option<i64>,
    row: &CheckpointRow,
    update: Option<&RowUpdate>,
) -> Result<Option<u64>, Fail> {
    let now = now_ms();
    let columns = update.map(RowColumns::of);
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&row.thread, &owner, &now];
    params.extend(row.params_after_thread());
    // A step written: progress, the run's lapses start again from 0.
    let mut set = Assignments {
        sql: String::from("updated_at_ms = $3, lapses = 0"),
        params,
    };
    match &until_ms {
        Some(until) => set.bind("lease_until_ms = ?", until),
        None => set.add("lease_owner = NULL, lease_until_ms = 0"),
    }
    match (update, &columns) {
        (Some(update), Some(columns)) => {
            set.add("run = $4, input = NULL");
            set.bind("status = ?", &columns.state);
            set.bind("waiting_on = ?", &columns.waiting_on);
            set.bind("wake_at_ms = ?", &columns.wake_at_ms);
            // Also what a release sets: a suspended run is runnable at its wake time.
            set.bind("runnable_at_ms = ?", &columns.runnable_at_ms);
            set.bind("graph = COALESCE(?, graph)", &update.graph);
            set.bind(
                "fingerprint = COALESCE(?, fingerprint)",
                &update.fingerprint,
            );
            set.bind("error = ?", &columns.error);
            // A request to stop an earlier run (the row's) is not this run's; one made while
            // the row was queued is for the run it queued, which this is.
            set.bind(
                "cancel_requested = cancel_requested AND ? AND (run = $4 OR status = 'queued')",
                &columns.unfinished,
            );
        }
        _ if until_ms.is_none() => set.add(
            "runnable_at_ms = CASE WHEN status IN ('waiting', 'sleeping', 'interrupted')
                                   THEN wake_at_ms ELSE runnable_at_ms END",
        ),
        _ => {}
    }
    let Assignments {
        sql: set,
        mut params,
    } = set;
    let audit = AuditColumns::of(&row.audit);
    let audited = audit.inserted_if_fenced(&mut params);
    let forgotten = row.forgotten_journal("(SELECT thread FROM fenced)");
    // Released: another worker may carry the run on, or wake it later.
    let answer = match until_ms {
        Some(_) => "SELECT id FROM inserted",
        None => "SELECT id, pg_notify('loomflow_changes', '') FROM inserted",
    };
    let stmt = client
        .prepare_cached(&format!(
            "WITH fenced AS (
                 UPDATE loomflow_runs SET {set}
                 WHERE thread = $1 AND lease_owner = $2
                 RETURNING thread
             ), inserted AS (
                 INSERT INTO loomflow_checkpoints
                     (thread, run, namespace, step, status, body, error)
                 SELECT thread, $4, $5, $6, $7, $8, $9 FROM fenced RETURNING id
             ){audited}{forgotten}
             {answer}"
        ))
        .await?;
    client
        .query_opt(&stmt, &params)
        .await?
        .map(|inserted| {
            let id: i64 = get(&inserted, 0, &row.thread)?;
            Ok(to_u64(id, "checkpoint id", &row.thread)?)
        })
        .transpose()
}

/// The fence of a journal write (an entry, a signal taken with its entry): renews the
/// lease, and, as progress, sets the run's lapses back to 0. Parameters `$1` (thread), `$2`
/// (owner), `$3` (lease expiry) and `$4` (now).
const RENEWING_FENCE: &str = "fenced AS (
         UPDATE loomflow_runs SET lease_until_ms = $3, updated_at_ms = $4, lapses = 0
         WHERE thread = $1 AND lease_owner = $2
         RETURNING thread
     )";

/// The insert of a journal entry from the row the fence matched, when `condition` holds
/// (the first value for a key wins): parameters `$5` to `$11`.
fn journal_insert(condition: &str) -> String {
    format!(
        "journaled AS (
             INSERT INTO loomflow_journal
                 (thread, run, namespace, step, node, name, occurrence, value)
             SELECT thread, $5, $6, $7, $8, $9, $10, $11 FROM fenced
             WHERE {condition}
             ON CONFLICT DO NOTHING
             RETURNING 1
         )"
    )
}

/// The parameters of [`RENEWING_FENCE`] and [`journal_insert`], `$1` to `$11`.
fn journal_params<'a>(
    row: &'a JournalRow,
    owner: &'a &'a str,
    until_ms: &'a i64,
    now: &'a i64,
) -> Vec<&'a (dyn ToSql + Sync)> {
    let mut params: Vec<&'a (dyn ToSql + Sync)> = vec![&row.thread, owner, until_ms, now];
    params.extend(row.params_after_thread());
    params
}

/// A journal entry written under a held claim, as one statement: the fence renews the
/// lease, and the entry (unless its key has one already: the first value wins) and, with a
/// new entry, its audit entries are inserted only for a row the fence matched. Returns whether it matched;
/// when it did not, nothing was written.
pub(super) async fn write_journal_fenced(
    client: &impl GenericClient,
    owner: &str,
    until_ms: i64,
    row: &JournalRow,
) -> Result<bool, Fail> {
    let now = now_ms();
    let mut params = journal_params(row, &owner, &until_ms, &now);
    let audit = AuditColumns::of(&row.audit);
    // Only with a new entry: a key that has a value already keeps it, and the entries
    // that describe it (a write repeated, its acknowledgement lost, adds none again).
    let audited = audit.audited(&mut params, "WHERE EXISTS (SELECT 1 FROM journaled)");
    let stmt = client
        .prepare_cached(&format!(
            "WITH {RENEWING_FENCE}, {}{audited}
             SELECT count(*) FROM fenced",
            journal_insert("TRUE")
        ))
        .await?;
    let fenced: i64 = get(&client.query_one(&stmt, &params).await?, 0, &row.thread)?;
    Ok(fenced > 0)
}

/// A signal taken under a held claim, with the journal entry that records its value for
/// the step that waited, as one statement: the fence renews the lease; the signal is taken
/// (its receipt audited, as [`take`](super::signals::take) does) only for a row the fence
/// matched, and the entry is inserted only when the signal was still there. Returns whether
/// the fence matched, and whether the signal was taken.
pub(super) async fn take_journal_fenced(
    client: &impl GenericClient,
    owner: &str,
    until_ms: i64,
    (session, seq): (&str, i64),
    row: &JournalRow,
) -> Result<(bool, bool), Fail> {
    let now = now_ms();
    let detail = format!("{{\"seq\":{seq}}}");
    let mut params = journal_params(row, &owner, &until_ms, &now);
    params.extend([&seq as &(dyn ToSql + Sync), &session, &detail]);
    let stmt = client
        .prepare_cached(&format!(
            "WITH {RENEWING_FENCE}, deleted AS (
                 DELETE FROM loomflow_signals
                 WHERE seq = $12 AND session = $13 AND idempotency_key IS NULL
                   AND EXISTS (SELECT 1 FROM fenced)
                 RETURNING name
             ), consumed AS (
                 UPDATE loomflow_signals SET consumed_at_ms = $4, payload = NULL
                 WHERE seq = $12 AND session = $13 AND idempotency_key IS NOT NULL
                   AND consumed_at_ms IS NULL AND EXISTS (SELECT 1 FROM fenced)
                 RETURNING name
             ), taken AS (
                 SELECT name FROM deleted UNION ALL SELECT name FROM consumed
             ), audited AS (
                 INSERT INTO loomflow_audit (thread, run, at_ms, kind, subject, detail)
                 SELECT $13::TEXT, $5::BIGINT, $4::BIGINT, 'signal_received', name, $14::TEXT
                 FROM taken
             ), {}
             SELECT (SELECT count(*) FROM fenced), (SELECT count(*) FROM taken)",
            journal_insert("EXISTS (SELECT 1 FROM taken)")
        ))
        .await?;
    let counts = client.query_one(&stmt, &params).await?;
    let fenced: i64 = get(&counts, 0, &row.thread)?;
    let taken: i64 = get(&counts, 1, &row.thread)?;
    Ok((fenced > 0, taken > 0))
}
