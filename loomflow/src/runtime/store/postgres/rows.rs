//! Converting between rows and the store's types: PostgreSQL integers are signed
//! (`BIGINT`), values are JSON text, and a row that does not decode is reported as corrupt,
//! naming its thread.

use crate::runtime::store::audit::AuditRow;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_postgres::Row;
use tokio_postgres::types::{FromSql, ToSql};

use crate::runtime::store::{Checkpoint, JournalKey, RunStatus, StoreError};

/// `BIGINT` columns are signed 64-bit.
pub(super) fn to_i64(value: u64, what: &str, thread: &str) -> Result<i64, StoreError> {
    // Refused: it would be again, and a write failure would be tried again and again.
    i64::try_from(value).map_err(|_| StoreError::Refused {
        thread: thread.to_owned(),
        message: format!("{what} {value} is too large for PostgreSQL"),
    })
}

/// A `BIGINT` read back; negative only in a row something else wrote.
pub(super) fn to_u64(value: i64, what: &str, thread: &str) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| corrupt(thread, format!("negative {what} {value}")))
}

/// Free text (an error message) as PostgreSQL keeps it: its `TEXT` cannot hold a NUL
/// character, which becomes U+FFFD, the character that stands for one that cannot be shown.
pub(super) fn kept_text(text: Option<&str>) -> Option<String> {
    text.map(|text| text.replace('\0', "\u{FFFD}"))
}

/// JSON text, as stored. Text rather than `jsonb`: the body must come back exactly as it
/// went in, and `jsonb` refuses some valid JSON (a `\u0000` in a string).
/// A value as stored JSON text; one the store does not keep (nested past
/// [`MAX_DEPTH`](crate::json_depth::MAX_DEPTH) levels) is refused, as it would be again.
pub(super) fn to_json(value: &impl Serialize, thread: &str) -> Result<String, StoreError> {
    crate::json_depth::to_string(value).map_err(|e| StoreError::Refused {
        thread: thread.to_owned(),
        message: e.to_string(),
    })
}

pub(super) fn from_json<T: DeserializeOwned + Send>(
    text: &str,
    thread: &str,
    what: impl std::fmt::Display,
) -> Result<T, StoreError> {
    crate::json_depth::from_str(text).map_err(|e| corrupt(thread, format!("{what}: {e}")))
}

pub(super) fn corrupt(thread: &str, message: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        thread: thread.to_owned(),
        message: message.to_string(),
    }
}

/// Column `index` of `row`, or a corrupt row.
pub(super) fn get<'r, T: FromSql<'r>>(
    row: &'r Row,
    index: usize,
    thread: &str,
) -> Result<T, StoreError> {
    row.try_get(index).map_err(|e| {
        let column = row.columns().get(index).map_or("?", |c| c.name());
        corrupt(thread, format!("column {column}: {e}"))
    })
}

/// The clock the store stamps rows with (consumption, lease renewals) when the caller
/// gives none, in milliseconds since the Unix epoch.
pub(super) fn now_ms() -> i64 {
    i64::try_from(crate::runtime::clock::now_ms()).unwrap_or(i64::MAX)
}

/// Columns: id, run, namespace, step, status, body, error.
pub(super) const CHECKPOINT_COLUMNS: &str = "id, run, namespace, step, status, body, error";

/// Decodes a row of [`CHECKPOINT_COLUMNS`].
pub(super) fn checkpoint_from_row(row: &Row, thread: &str) -> Result<Checkpoint, StoreError> {
    let id: i64 = get(row, 0, thread)?;
    let body: &str = get(row, 5, thread)?;
    Ok(Checkpoint {
        id: to_u64(id, "checkpoint id", thread)?,
        thread: thread.to_owned(),
        run: to_u64(get(row, 1, thread)?, "run", thread)?,
        namespace: get(row, 2, thread)?,
        step: to_u64(get(row, 3, thread)?, "step", thread)?,
        status: RunStatus::parse_stored(get(row, 4, thread)?, thread)?,
        body: from_json(body, thread, format_args!("checkpoint {id}"))?,
        error: get(row, 6, thread)?,
        audit: Vec::new(),
        unserialized: None,
        start_only: false,
        waits: None,
    })
}

/// A checkpoint, ready for its row.
pub(super) struct CheckpointRow {
    pub(super) thread: String,
    pub(super) run: i64,
    pub(super) namespace: String,
    pub(super) step: i64,
    pub(super) status: &'static str,
    pub(super) body: String,
    pub(super) error: Option<String>,
    /// Audit entries written with it.
    pub(super) audit: Vec<AuditRow>,
    /// Whether it ends its run for good (see `Checkpoint::ends_run`).
    ends_run: bool,
    /// Whether its write may cut its thread down (see `retention::cuts`).
    cuts: bool,
}

impl CheckpointRow {
    /// The clause of its write that deletes the journal of `thread` (the SQL naming it: a
    /// parameter, or the fenced row's) when it ends its run for good (see
    /// `Checkpoint::ends_run`). Empty for any other checkpoint.
    pub(super) fn forgotten_journal(&self, thread: &str) -> String {
        match self.ends_run {
            true => {
                // What the step of an interrupted checkpoint journaled before it suspended
                // stays, for a fork of it to replay.
                format!(
                    ", forgotten AS (DELETE FROM loomflow_journal j WHERE j.thread = {thread}
                         AND NOT EXISTS (
                             SELECT 1 FROM loomflow_checkpoints c
                             WHERE c.thread = j.thread AND c.run = j.run
                               AND c.namespace = j.namespace AND c.step + 1 = j.step
                               AND c.status = 'interrupted'))"
                )
            }
            false => String::new(),
        }
    }

    /// Whether its write may cut its thread down to the store's retention.
    pub(super) fn cuts(&self) -> bool {
        self.cuts
    }

    /// Its columns after `thread`, in the table's order (`run` to `error`), as a
    /// statement's parameters.
    pub(super) fn params_after_thread(&self) -> [&(dyn ToSql + Sync); 6] {
        [
            &self.run,
            &self.namespace,
            &self.step,
            &self.status,
            &self.body,
            &self.error,
        ]
    }

    pub(super) fn new(checkpoint: &Checkpoint) -> Result<Self, StoreError> {
        let thread = &checkpoint.thread;
        Ok(Self {
            run: to_i64(checkpoint.run, "run", thread)?,
            step: to_i64(checkpoint.step, "step", thread)?,
            status: checkpoint.status.as_str(),
            body: checkpoint.body_json()?,
            thread: thread.clone(),
            namespace: checkpoint.namespace.clone(),
            error: kept_text(checkpoint.error.as_deref()),
            audit: AuditRow::all(&checkpoint.audit)?,
            ends_run: checkpoint.ends_run(),
            cuts: crate::runtime::store::retention::cuts(checkpoint),
        })
    }
}

/// A journal entry, ready for its row.
pub(super) struct JournalRow {
    pub(super) thread: String,
    pub(super) run: i64,
    pub(super) namespace: String,
    pub(super) step: i64,
    pub(super) node: String,
    pub(super) name: String,
    pub(super) occurrence: i64,
    pub(super) value: String,
    /// Audit entries written with it (a tool call's).
    pub(super) audit: Vec<AuditRow>,
}

impl JournalRow {
    /// Its columns after `thread`, in the table's order (`run` to `value`), as a
    /// statement's parameters.
    pub(super) fn params_after_thread(&self) -> [&(dyn ToSql + Sync); 7] {
        [
            &self.run,
            &self.namespace,
            &self.step,
            &self.node,
            &self.name,
            &self.occurrence,
            &self.value,
        ]
    }

    pub(super) fn new(key: JournalKey, value: &serde_json::Value) -> Result<Self, StoreError> {
        Ok(Self {
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
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn values_past_bigint_are_refused_naming_the_thread() {
        assert!(matches!(
            to_i64(u64::MAX, "step", "t"),
            Err(StoreError::Refused { thread, message }) if thread == "t" && message.contains("step")
        ));
        assert!(matches!(
            to_u64(-1, "run", "t"),
            Err(StoreError::Corrupt { .. })
        ));
    }
}
