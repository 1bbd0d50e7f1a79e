//! Signals: stored until consumed; a consumed signal with an idempotency key keeps its row
//! (payload dropped) for an hour, so that a retried send is still recognised.

use std::sync::atomic::Ordering;

use deadpool_postgres::GenericClient;
use serde_json::Value;
use tokio_postgres::types::ToSql;

use super::PostgresStore;
use super::error::Fail;
use super::rows::{JournalRow, from_json, get, kept_text, now_ms, to_i64, to_json, to_u64};
use crate::runtime::store::audit::AuditRow;
use crate::runtime::store::{AuditKind, JournalKey, SignalPush, StoreError, StoredSignal};

/// The transaction-level advisory lock every signal insert holds until it commits:
/// "loomsign" in ASCII.
///
/// Sequence numbers come from an identity column, handed out when a row is inserted, not
/// when it commits: without the lock, signal 11 could commit (and a worker read it and
/// move its high-water mark past it) before signal 10 does, and `signals_after` would never
/// return 10. Holding the lock from taking a number until the commit is visible makes
/// sequence order the order in which signals become visible, as SQLite's single writer
/// does. It serializes the commits of signal sends (not of anything else).
const SIGNAL_ORDER_LOCK: i64 = 0x6c6f_6f6d_7369_676e;

/// A consumed signal's idempotency key is kept at least this long.
const KEEP_CONSUMED_MS: i64 = crate::runtime::store::records::CONSUMED_KEY_KEPT_MS as i64;

/// How often a store deletes consumed signals older than [`KEEP_CONSUMED_MS`].
const PRUNE_EVERY_MS: i64 = 60_000;

/// The clauses that consume signal `$1` of session `$2` at `$3`, auditing its receipt by
/// run `$4` with detail `$5`: without a key nothing needs remembering and the row goes;
/// with one, the row stays (payload dropped) until pruned.
macro_rules! take_clauses {
    () => {
        "WITH deleted AS (
             DELETE FROM loomflow_signals
             WHERE seq = $1 AND session = $2 AND idempotency_key IS NULL
             RETURNING name
         ), consumed AS (
             UPDATE loomflow_signals SET consumed_at_ms = $3, payload = NULL
             WHERE seq = $1 AND session = $2 AND idempotency_key IS NOT NULL
               AND consumed_at_ms IS NULL
             RETURNING name
         ), audited AS (
             INSERT INTO loomflow_audit (thread, run, at_ms, kind, subject, detail)
             SELECT $2::TEXT, $4::BIGINT, $3::BIGINT, 'signal_received', name, $5::TEXT
             FROM (SELECT name FROM deleted UNION ALL SELECT name FROM consumed) AS taken
             RETURNING 1
         )"
    };
}

/// The `take_clauses`, and the count of signals taken.
const TAKE: &str = concat!(take_clauses!(), " SELECT count(*) FROM audited");

/// [`TAKE`], with a journal entry (`$6` to `$13`) inserted whether or not the signal was
/// still pending, unless its key has one already.
const TAKE_AND_JOURNAL: &str = concat!(
    take_clauses!(),
    ", journaled AS (
         INSERT INTO loomflow_journal
             (thread, run, namespace, step, node, name, occurrence, value)
         VALUES ($6, $7, $8, $9, $10, $11, $12, $13)
         ON CONFLICT DO NOTHING
     )
     SELECT count(*) FROM audited"
);

/// Consumes a pending signal, auditing its receipt by `run` (0 outside one), and records
/// `journal` if given; returns whether the signal was still pending.
///
/// One statement. Two consumers racing for one row are ordered by its row lock, and the
/// second finds it gone or consumed.
pub(super) async fn take(
    client: &impl GenericClient,
    session: &str,
    seq: i64,
    now_ms: i64,
    journal: Option<&JournalRow>,
) -> Result<bool, Fail> {
    let detail = format!("{{\"seq\":{seq}}}");
    let run = journal.map_or(0, |row| row.run);
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&seq, &session, &now_ms, &run, &detail];
    let stmt = match journal {
        None => client.prepare_cached(TAKE).await?,
        Some(row) => {
            params.push(&row.thread);
            params.extend(row.params_after_thread());
            client.prepare_cached(TAKE_AND_JOURNAL).await?
        }
    };
    let row = client.query_one(&stmt, &params).await?;
    let taken: i64 = get(&row, 0, session)?;
    Ok(taken > 0)
}

impl PostgresStore {
    pub(super) async fn store_signal(
        &self,
        signal: StoredSignal,
    ) -> Result<SignalPush, StoreError> {
        let session = signal.session.clone();
        async {
            let payload = to_json(&signal.payload, &signal.session)?;
            let sent_at_ms = to_i64(signal.sent_at_ms, "sent_at_ms", &signal.session)?;
            let client = self.client().await?;
            self.prune_now_and_then(&client).await;
            // One statement: the order lock, then the signal's number and row, its
            // `signal_sent` audit row, and the notification. A duplicate (its key seen
            // already) inserts nothing and returns no row.
            let stmt = client
                .prepare_cached(
                    "WITH ordered AS MATERIALIZED (SELECT pg_advisory_xact_lock($6)),
                     inserted AS (
                         INSERT INTO loomflow_signals
                             (session, name, payload, idempotency_key, sent_at_ms)
                         SELECT $1, $2, $3, $4, $5 FROM ordered
                         ON CONFLICT DO NOTHING RETURNING seq),
                     audited AS (
                         INSERT INTO loomflow_audit
                             (thread, run, at_ms, kind, subject, actor, detail)
                         SELECT $1, 0, $5, $8, $2, $9, '{\"seq\":' || seq || $7
                         FROM inserted)
                     SELECT seq, pg_notify('loomflow_changes', '') FROM inserted",
                )
                .await?;
            let after_seq =
                AuditRow::signal_sent_after_seq(&payload, signal.idempotency_key.as_deref());
            let sent_by = crate::runtime::store::audit::sent_by(&signal.name, &signal.payload);
            // As every audit row's text here: `TEXT` holds no NUL.
            let sent_by = kept_text(sent_by.as_deref());
            let inserted = client
                .query_opt(
                    &stmt,
                    &[
                        &signal.session,
                        &signal.name,
                        &payload,
                        &signal.idempotency_key,
                        &sent_at_ms,
                        &SIGNAL_ORDER_LOCK,
                        &after_seq,
                        &AuditKind::SignalSent.as_str(),
                        &sent_by,
                    ],
                )
                .await?;
            let Some(row) = inserted else {
                return Ok(SignalPush::Duplicate);
            };
            let seq = to_u64(
                get(&row, 0, &signal.session)?,
                "signal sequence number",
                &session,
            )?;
            Ok(SignalPush::Stored(seq))
        }
        .await
        .map_err(|e: Fail| e.write(&session))
    }

    /// `take_signal`: journals `journal` whether or not the signal was still pending (a
    /// node that received it gets it again when it re-runs), in the same statement.
    pub(super) async fn consume_signal(
        &self,
        session: &str,
        seq: u64,
        journal: Option<(JournalKey, Value)>,
    ) -> Result<(), StoreError> {
        async {
            let seq = to_i64(seq, "signal sequence number", session)?;
            let journal = journal
                .map(|(key, value)| JournalRow::new(key, &value))
                .transpose()?;
            let client = self.client().await?;
            take(&client, session, seq, now_ms(), journal.as_ref()).await?;
            Ok(())
        }
        .await
        .map_err(|e: Fail| e.write(session))
    }

    /// `discard_signal`: removed as a take removes it, in one statement, with no entry
    /// saying it was received.
    pub(super) async fn discard(&self, session: &str, seq: u64) -> Result<(), StoreError> {
        async {
            let seq = to_i64(seq, "signal sequence number", session)?;
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(
                    "WITH deleted AS (
                         DELETE FROM loomflow_signals
                         WHERE seq = $1 AND session = $2 AND idempotency_key IS NULL
                     )
                     UPDATE loomflow_signals SET consumed_at_ms = $3, payload = NULL
                     WHERE seq = $1 AND session = $2 AND idempotency_key IS NOT NULL
                       AND consumed_at_ms IS NULL",
                )
                .await?;
            client.execute(&stmt, &[&seq, &session, &now_ms()]).await?;
            Ok(())
        }
        .await
        .map_err(|e: Fail| e.write(session))
    }

    /// `try_take_signal`.
    pub(super) async fn consume_if_pending(
        &self,
        session: &str,
        seq: u64,
    ) -> Result<bool, StoreError> {
        async {
            let seq = to_i64(seq, "signal sequence number", session)?;
            let client = self.client().await?;
            take(&client, session, seq, now_ms(), None).await
        }
        .await
        .map_err(|e: Fail| e.write(session))
    }

    pub(super) async fn stored_signals_after(
        &self,
        seq: u64,
    ) -> Result<Vec<StoredSignal>, StoreError> {
        const LABEL: &str = "(pending signals)";
        let after = i64::try_from(seq).unwrap_or(i64::MAX);
        async {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(
                    "SELECT seq, session, name, payload, idempotency_key, sent_at_ms
                     FROM loomflow_signals
                     WHERE seq > $1 AND consumed_at_ms IS NULL ORDER BY seq",
                )
                .await?;
            let rows = client.query(&stmt, &[&after]).await?;
            let signals = rows
                .iter()
                .map(signal_from_row)
                .collect::<Result<Vec<_>, StoreError>>()?;
            Ok(signals)
        }
        .await
        .map_err(|e: Fail| e.read(LABEL))
    }

    /// `oldest_signal`.
    pub(super) async fn stored_oldest_signal(
        &self,
        session: &str,
        name: &str,
    ) -> Result<Option<StoredSignal>, StoreError> {
        async {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(
                    "SELECT seq, session, name, payload, idempotency_key, sent_at_ms
                     FROM loomflow_signals
                     WHERE session = $1 AND name = $2 AND consumed_at_ms IS NULL
                     ORDER BY seq LIMIT 1",
                )
                .await?;
            let row = client.query_opt(&stmt, &[&session, &name]).await?;
            Ok(row.as_ref().map(signal_from_row).transpose()?)
        }
        .await
        .map_err(|e: Fail| e.read(session))
    }

    /// `signal_key_seen`: a row with the key, pending or consumed and not yet pruned.
    pub(super) async fn stored_signal_key_seen(
        &self,
        session: &str,
        name: &str,
        key: &str,
    ) -> Result<bool, StoreError> {
        async {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM loomflow_signals
                     WHERE session = $1 AND name = $2 AND idempotency_key = $3)",
                )
                .await?;
            let row = client.query_one(&stmt, &[&session, &name, &key]).await?;
            Ok(row.try_get(0)?)
        }
        .await
        .map_err(|e: Fail| e.read(session))
    }

    /// Drops the pending signals sent before `sent_before_ms` to sessions with no unfinished
    /// run, but those of `spare`, in one statement: those without an idempotency key are
    /// deleted, the others kept as consumed (payload dropped) until pruned, as a take keeps
    /// them. A signal consumed meanwhile is left as it is.
    pub(super) async fn prune_pending(
        &self,
        sent_before_ms: u64,
        spare: &[String],
    ) -> Result<u64, StoreError> {
        async {
            let before = i64::try_from(sent_before_ms).unwrap_or(i64::MAX);
            let now = now_ms();
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(
                    "WITH orphans AS (
                         SELECT seq FROM loomflow_signals s
                         WHERE consumed_at_ms IS NULL AND sent_at_ms < $1
                           AND NOT (session = ANY($3))
                           AND NOT EXISTS (
                               SELECT 1 FROM loomflow_runs r
                               WHERE r.thread = s.session
                                 AND (r.lease_owner IS NOT NULL
                                      OR r.status NOT IN ('completed', 'failed', 'cancelled')))
                     ), deleted AS (
                         DELETE FROM loomflow_signals
                         WHERE seq IN (SELECT seq FROM orphans) AND idempotency_key IS NULL
                           AND consumed_at_ms IS NULL
                         RETURNING 1
                     ), consumed AS (
                         UPDATE loomflow_signals SET consumed_at_ms = $2, payload = NULL
                         WHERE seq IN (SELECT seq FROM orphans) AND idempotency_key IS NOT NULL
                           AND consumed_at_ms IS NULL
                         RETURNING 1
                     )
                     SELECT (SELECT count(*) FROM deleted) + (SELECT count(*) FROM consumed)",
                )
                .await?;
            let row = client.query_one(&stmt, &[&before, &now, &spare]).await?;
            let dropped: i64 = get(&row, 0, "(signals)")?;
            Ok(to_u64(dropped, "signals dropped", "(signals)")?)
        }
        .await
        .map_err(|e: Fail| e.write("(signals)"))
    }

    /// Forgets consumed signals whose key has been remembered long enough, at most once a
    /// minute per store. Best effort: a failure is logged and retried a minute later.
    async fn prune_now_and_then(&self, client: &impl GenericClient) {
        let now = now_ms();
        let last = self.last_prune.load(Ordering::Relaxed);
        if now.saturating_sub(last) < PRUNE_EVERY_MS
            || self
                .last_prune
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let cutoff = now.saturating_sub(KEEP_CONSUMED_MS);
        let result = client
            .execute(
                "DELETE FROM loomflow_signals
                 WHERE consumed_at_ms IS NOT NULL AND consumed_at_ms < $1",
                &[&cutoff],
            )
            .await;
        if let Err(error) = result {
            tracing::warn!(error = %super::error::chain(&error), "pruning consumed signals failed");
        }
    }
}

/// A signal from a row of `seq, session, name, payload, idempotency_key, sent_at_ms`.
fn signal_from_row(row: &tokio_postgres::Row) -> Result<StoredSignal, StoreError> {
    let session: String = get(row, 1, "(pending signals)")?;
    let seq: i64 = get(row, 0, &session)?;
    let name: String = get(row, 2, &session)?;
    let payload: Option<&str> = get(row, 3, &session)?;
    Ok(StoredSignal {
        seq: to_u64(seq, "signal sequence number", &session)?,
        payload: from_json(
            payload.unwrap_or_default(),
            &session,
            format_args!("signal {seq} ({name})"),
        )?,
        idempotency_key: get(row, 4, &session)?,
        sent_at_ms: to_u64(get(row, 5, &session)?, "sent_at_ms", &session)?,
        session,
        name,
    })
}
