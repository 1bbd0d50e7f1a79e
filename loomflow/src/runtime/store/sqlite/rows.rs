//! Converting between rows and the store's types: SQLite integers are signed, values are
//! JSON text, and a row that does not decode is reported as corrupt, naming its thread.

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::Serialize;
use serde_json::Value;

use super::writer::{CheckpointRow, JournalRow, Outcome};
use crate::runtime::store::audit::AuditRow;
use crate::runtime::store::{
    Checkpoint, JournalKey, RunRecord, RunState, RunStatus, StoreError, StoredSignal,
};

/// SQLite integers are signed 64-bit.
pub(super) fn to_i64(value: u64, what: &str, thread: &str) -> Result<i64, StoreError> {
    // Refused: it would be again, and a write failure would be tried again and again.
    i64::try_from(value).map_err(|_| StoreError::Refused {
        thread: thread.to_owned(),
        message: format!("{what} {value} is too large for SQLite"),
    })
}

/// A value as stored JSON text; one the store does not keep (nested past
/// [`MAX_DEPTH`](crate::json_depth::MAX_DEPTH) levels) is refused, as it would be again.
pub(super) fn to_json(value: &impl Serialize, thread: &str) -> Result<String, StoreError> {
    crate::json_depth::to_string(value).map_err(|e| StoreError::Refused {
        thread: thread.to_owned(),
        message: e.to_string(),
    })
}

pub(super) fn journal_row(key: JournalKey, value: &Value) -> Result<JournalRow, StoreError> {
    Ok(JournalRow {
        run: to_i64(key.run, "run", &key.thread)?,
        step: to_i64(key.step, "step", &key.thread)?,
        value: to_json(value, &key.thread)?,
        occurrence: i64::from(key.occurrence),
        thread: key.thread,
        namespace: key.namespace,
        node: key.node,
        name: key.name,
        audit: Vec::new(),
    })
}

pub(super) fn corrupt(thread: &str, message: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        thread: thread.to_owned(),
        message: message.to_string(),
    }
}

/// A column SQLite handed back that does not decode as the type it is read as (text where a
/// number belongs, a number out of range): the row is corrupt, and reading it again would
/// give the same, so it is not a failure that passes. What is wrong with it, if so.
pub(super) fn undecodable(error: &rusqlite::Error) -> Option<String> {
    use rusqlite::Error;
    match error {
        Error::InvalidColumnType(_, column, found) => Some(format!(
            "column {column} holds {found}, not the type it is read as"
        )),
        Error::FromSqlConversionFailure(column, found, source) => Some(format!(
            "column {column} ({found}) does not read as its type: {source}"
        )),
        Error::IntegralValueOutOfRange(column, value) => {
            Some(format!("column {column} holds {value}, out of range"))
        }
        Error::Utf8Error(..) => Some("a text column is not UTF-8".to_owned()),
        _ => None,
    }
}

pub(super) fn to_u64(value: i64, what: &str, thread: &str) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| corrupt(thread, format!("negative {what} {value}")))
}

/// Columns: id, run, namespace, step, status, body, error.
pub(super) const CHECKPOINT_COLUMNS: &str = "id, run, namespace, step, status, body, error";

/// Decodes a row of [`CHECKPOINT_COLUMNS`]. The outer error is SQLite's, the inner a row
/// that does not decode.
pub(super) fn checkpoint_from_row(
    row: &Row<'_>,
    thread: &str,
) -> rusqlite::Result<Result<Checkpoint, StoreError>> {
    let id: i64 = row.get(0)?;
    let run: i64 = row.get(1)?;
    let namespace: String = row.get(2)?;
    let step: i64 = row.get(3)?;
    let status: String = row.get(4)?;
    let body: String = row.get(5)?;
    let error: Option<String> = row.get(6)?;
    Ok((|| {
        let body = crate::json_depth::from_str(&body)
            .map_err(|e| corrupt(thread, format!("checkpoint {id}: {e}")))?;
        Ok(Checkpoint {
            id: to_u64(id, "checkpoint id", thread)?,
            thread: thread.to_owned(),
            run: to_u64(run, "run", thread)?,
            namespace,
            step: to_u64(step, "step", thread)?,
            status: RunStatus::parse_stored(&status, thread)?,
            body,
            error,
            audit: Vec::new(),
            unserialized: None,
            start_only: false,
            waits: None,
        })
    })())
}

/// Flips `Option<Result<T>>` (a row that may be absent and may not decode).
pub(super) fn transpose<T>(row: Option<Result<T, StoreError>>) -> Result<Option<T>, StoreError> {
    row.transpose()
}

/// A checkpoint's row: the columns queries filter on, the error, and the body.
pub(super) fn checkpoint_row(
    checkpoint: &Checkpoint,
    retention: Option<usize>,
) -> Result<CheckpointRow, StoreError> {
    Ok(CheckpointRow {
        run: to_i64(checkpoint.run, "run", &checkpoint.thread)?,
        step: to_i64(checkpoint.step, "step", &checkpoint.thread)?,
        status: checkpoint.status.as_str(),
        body: checkpoint.body_json()?,
        thread: checkpoint.thread.clone(),
        namespace: checkpoint.namespace.clone(),
        error: checkpoint.error.clone(),
        audit: AuditRow::all(&checkpoint.audit)?,
        needs_sync: !checkpoint.start_only,
        ends_run: checkpoint.ends_run(),
        retain: retention.filter(|_| crate::runtime::store::retention::cuts(checkpoint)),
    })
}

/// The writer answered with the result of another kind of write: a bug, reported rather
/// than panicked on.
pub(super) fn unexpected(thread: &str, outcome: &Outcome) -> StoreError {
    StoreError::Write {
        thread: thread.to_owned(),
        message: format!("the writer thread answered {outcome:?}"),
    }
}

/// The journal entry under `key`, if written (a run or step past `i64` names none).
pub(super) fn read_journal(
    conn: &Connection,
    key: &JournalKey,
) -> rusqlite::Result<Result<Option<Value>, StoreError>> {
    let (Ok(run), Ok(step)) = (i64::try_from(key.run), i64::try_from(key.step)) else {
        return Ok(Ok(None));
    };
    let value: Option<String> = conn
        .prepare_cached(
            "SELECT value FROM journal WHERE thread = ?1 AND run = ?2 AND namespace = ?3
             AND step = ?4 AND node = ?5 AND name = ?6 AND occurrence = ?7",
        )?
        .query_row(
            params![
                key.thread,
                run,
                key.namespace,
                step,
                key.node,
                key.name,
                key.occurrence
            ],
            |row| row.get(0),
        )
        .optional()?;
    Ok(value
        .map(|v| {
            crate::json_depth::from_str(&v)
                .map_err(|e| corrupt(&key.thread, format!("journal entry {}: {e}", key.name)))
        })
        .transpose())
}

/// The journal entries of run `run` of `thread`, every namespace.
pub(super) fn list_journal(
    conn: &Connection,
    thread: &str,
    run: u64,
) -> rusqlite::Result<Result<Vec<(JournalKey, Value)>, StoreError>> {
    let Ok(stored_run) = i64::try_from(run) else {
        return Ok(Ok(Vec::new()));
    };
    let mut stmt = conn.prepare_cached(
        "SELECT namespace, step, node, name, occurrence, value FROM journal
         WHERE thread = ?1 AND run = ?2",
    )?;
    let rows = stmt.query_map(params![thread, stored_run], |row| {
        let (namespace, step): (String, i64) = (row.get(0)?, row.get(1)?);
        let (node, name): (String, String) = (row.get(2)?, row.get(3)?);
        let occurrence: i64 = row.get(4)?;
        Ok((
            namespace,
            step,
            node,
            name,
            occurrence,
            row.get::<_, String>(5)?,
        ))
    })?;
    let mut entries = Vec::new();
    for row in rows {
        let (namespace, step, node, name, occurrence, value) = row?;
        // A negative step, or an occurrence past `u32`, is a corrupt row, as on PostgreSQL.
        let step = match to_u64(step, "journal step", thread) {
            Ok(step) => step,
            Err(error) => return Ok(Err(error)),
        };
        let Ok(occurrence) = u32::try_from(occurrence) else {
            let message = format!("journal occurrence {occurrence} out of range");
            return Ok(Err(corrupt(thread, message)));
        };
        let key = JournalKey::new(thread, run, namespace, step, node, name, occurrence);
        match crate::json_depth::from_str(&value) {
            Ok(value) => entries.push((key, value)),
            Err(e) => {
                let message = format!("journal entry {}: {e}", key.name);
                return Ok(Err(corrupt(thread, message)));
            }
        }
    }
    Ok(Ok(entries))
}

/// The newest checkpoint of `thread` in `namespace`.
pub(super) fn read_latest_checkpoint(
    conn: &Connection,
    thread: &str,
    namespace: &str,
) -> rusqlite::Result<Result<Option<Checkpoint>, StoreError>> {
    conn.prepare_cached(&format!(
        "SELECT {CHECKPOINT_COLUMNS} FROM checkpoints
         WHERE thread = ?1 AND namespace = ?2 ORDER BY id DESC LIMIT 1"
    ))?
    .query_row(params![thread, namespace], |row| {
        checkpoint_from_row(row, thread)
    })
    .optional()
    .map(transpose)
}

/// Checkpoint `id` of `thread`.
pub(super) fn read_checkpoint(
    conn: &Connection,
    thread: &str,
    id: i64,
) -> rusqlite::Result<Result<Option<Checkpoint>, StoreError>> {
    conn.prepare_cached(&format!(
        "SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE id = ?1 AND thread = ?2"
    ))?
    .query_row(params![id, thread], |row| checkpoint_from_row(row, thread))
    .optional()
    .map(transpose)
}

/// Every checkpoint of `thread`, oldest first.
pub(super) fn read_checkpoints(
    conn: &Connection,
    thread: &str,
) -> rusqlite::Result<Result<Vec<Checkpoint>, StoreError>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE thread = ?1 ORDER BY id"
    ))?;
    let rows = stmt
        .query_map([thread], |row| checkpoint_from_row(row, thread))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows.into_iter().collect())
}

/// The pending signals stored after sequence number `after`, in order.
pub(super) fn read_signals_after(
    conn: &Connection,
    after: i64,
) -> rusqlite::Result<Result<Vec<StoredSignal>, StoreError>> {
    let mut stmt = conn.prepare_cached(
        "SELECT seq, session, name, payload, idempotency_key, sent_at_ms FROM signals
         WHERE seq > ?1 AND consumed_at_ms IS NULL ORDER BY seq",
    )?;
    let rows = stmt
        .query_map([after], signal_from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows.into_iter().collect())
}

/// The oldest unconsumed signal `name` of `session` (see `Store::oldest_signal`).
pub(super) fn read_oldest_signal(
    conn: &Connection,
    session: &str,
    name: &str,
) -> rusqlite::Result<Result<Option<StoredSignal>, StoreError>> {
    conn.prepare_cached(
        "SELECT seq, session, name, payload, idempotency_key, sent_at_ms FROM signals
         WHERE session = ?1 AND name = ?2 AND consumed_at_ms IS NULL ORDER BY seq LIMIT 1",
    )?
    .query_row([session, name], signal_from_row)
    .optional()
    .map(Option::transpose)
}

/// Whether a signal row keeps the key: pending, or consumed and not yet pruned.
pub(super) fn read_signal_key_seen(
    conn: &Connection,
    (session, name, key): (&str, &str, &str),
) -> rusqlite::Result<Result<bool, StoreError>> {
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM signals
         WHERE session = ?1 AND name = ?2 AND idempotency_key = ?3)",
    )?
    .query_row([session, name, key], |row| row.get(0))
    .map(Ok)
}

/// A signal from a row of `seq, session, name, payload, idempotency_key, sent_at_ms`.
fn signal_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Result<StoredSignal, StoreError>> {
    let seq: i64 = row.get(0)?;
    let session: String = row.get(1)?;
    let name: String = row.get(2)?;
    let payload: Option<String> = row.get(3)?;
    let idempotency_key: Option<String> = row.get(4)?;
    let sent_at_ms: i64 = row.get(5)?;
    Ok((|| {
        let payload = payload.unwrap_or_default();
        Ok(StoredSignal {
            seq: to_u64(seq, "signal sequence number", &session)?,
            payload: crate::json_depth::from_str(&payload)
                .map_err(|e| corrupt(&session, format!("signal {seq} ({name}): {e}")))?,
            sent_at_ms: to_u64(sent_at_ms, "sent_at_ms", &session)?,
            session,
            name,
            idempotency_key,
        })
    })())
}

/// Decodes a row of [`RUN_COLUMNS`](super::run_rows::RUN_COLUMNS). The outer error is SQLite's, the inner a row that
/// does not decode.
pub(super) fn record_from_row(row: &rusqlite::Row<'_>) -> Result<RunRecord, StoreError> {
    let read = || -> rusqlite::Result<_> {
        Ok((
            row.get::<_, String>(0)?,
            row.get::<_, i64>(1)?,
            row.get::<_, Option<String>>(2)?,
            row.get::<_, Option<String>>(3)?,
            row.get::<_, String>(4)?,
            row.get::<_, Option<String>>(5)?,
            row.get::<_, Option<i64>>(6)?,
            row.get::<_, Option<String>>(7)?,
            row.get::<_, i64>(8)?,
            row.get::<_, i64>(9)?,
            row.get::<_, bool>(10)?,
            row.get::<_, Option<String>>(11)?,
            (row.get::<_, i64>(12)?, row.get::<_, i64>(13)?),
            row.get::<_, i64>(14)?,
        ))
    };
    let (
        thread,
        run,
        graph,
        fingerprint,
        status,
        waiting_on,
        wake_at_ms,
        lease_owner,
        lease_until_ms,
        attempts,
        cancel_requested,
        error,
        (created_at_ms, updated_at_ms),
        lapses,
    ) = read().map_err(|e| {
        // The row's thread, when that much of it reads, names it.
        let thread = row.get::<_, String>(0);
        corrupt(thread.as_deref().unwrap_or("(runs)"), e)
    })?;
    let state = RunState::parse(&status)
        .ok_or_else(|| corrupt(&thread, format!("unknown run state {status:?}")))?;
    let waiting_on = match waiting_on {
        Some(names) => crate::json_depth::from_str(&names)
            .map_err(|e| corrupt(&thread, format!("waiting_on of the run: {e}")))?,
        None => Vec::new(),
    };
    Ok(RunRecord {
        run: to_u64(run, "run", &thread)?,
        graph,
        fingerprint,
        state,
        waiting_on,
        wake_at_ms: wake_at_ms
            .map(|ms| to_u64(ms, "wake time", &thread))
            .transpose()?,
        lease_owner,
        lease_until_ms: to_u64(lease_until_ms.max(0), "lease expiry", &thread)?,
        attempts: to_u64(attempts, "attempts", &thread)?,
        lapses: to_u64(lapses, "lapses", &thread)?,
        cancel_requested,
        error,
        created_at_ms: to_u64(created_at_ms, "creation time", &thread)?,
        updated_at_ms: to_u64(updated_at_ms, "update time", &thread)?,
        thread,
    })
}
