//! The statements of a run's lease on SQLite: a claim, a release, and the fence every write
//! under a claim begins with.

use rusqlite::{Connection, OptionalExtension, params};

use super::writer::Outcome;
use crate::runtime::store::Claim;

/// Claims `thread` for `owner` at `now_ms` (a direct claim: a resume, a recover), unless
/// another execution holds it: a new holder counts an attempt, and one taken from an
/// execution whose lease ran out a lapse (see `RunRecord::lapses`).
pub(super) fn claim(
    conn: &Connection,
    thread: &str,
    owner: &str,
    until_ms: i64,
    now_ms: i64,
) -> rusqlite::Result<Outcome> {
    let holder: Option<(Option<String>, i64)> = conn
        .prepare_cached("SELECT lease_owner, lease_until_ms FROM runs WHERE thread = ?1")?
        .query_row([thread], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    match holder {
        None => {
            conn.prepare_cached(
                "INSERT INTO runs (thread, lease_owner, lease_until_ms, attempts, created_at_ms,
                                   updated_at_ms)
                 VALUES (?1, ?2, ?3, 1, ?4, ?4)",
            )?
            .execute(params![thread, owner, until_ms, now_ms])?;
        }
        Some((Some(holder), holder_until)) if holder != owner && holder_until > now_ms => {
            return Ok(Outcome::Claim(Claim::Busy {
                owner: holder,
                until_ms: u64::try_from(holder_until).unwrap_or_default(),
            }));
        }
        Some((holder, _)) => {
            let taken_over = i64::from(holder.as_deref() != Some(owner));
            // Held still by another, whose lease ran out: a lapse.
            let lapsed = i64::from(holder.is_some()) * taken_over;
            conn.prepare_cached(
                "UPDATE runs SET lease_owner = ?2, lease_until_ms = ?3,
                                 attempts = attempts + ?4, updated_at_ms = ?5,
                                 lapses = lapses + ?6,
                                     runnable_at_ms = CASE WHEN status IN ('waiting', 'sleeping', 'interrupted') THEN 0 ELSE runnable_at_ms END
                 WHERE thread = ?1",
            )?
            .execute(params![thread, owner, until_ms, taken_over, now_ms, lapsed])?;
        }
    }
    Ok(Outcome::Claim(Claim::Claimed))
}

/// Lets `thread` go if `owner` holds it: a suspended run let go without a new checkpoint (a
/// recover that found nothing to do, a refused resume) is runnable again at its wake time,
/// as before the claim; one whose execution stopped half way (`runnable`) at once. Nobody
/// lapsed: the run's lapses count from 0 again.
pub(super) fn release(
    conn: &Connection,
    thread: &str,
    owner: &str,
    runnable: bool,
    now_ms: i64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE runs SET lease_owner = NULL, lease_until_ms = 0, lapses = 0, updated_at_ms = ?3,
                         runnable_at_ms = CASE
                             WHEN ?4 AND status IN ('waiting', 'sleeping', 'interrupted') THEN 0
                             WHEN status IN ('waiting', 'sleeping', 'interrupted') THEN wake_at_ms
                             ELSE runnable_at_ms END
         WHERE thread = ?1 AND lease_owner = ?2",
    )?
    .execute(params![thread, owner, now_ms, runnable])?;
    Ok(())
}

/// What a write under a claim is, for its fence.
#[derive(Clone, Copy)]
pub(super) enum Write {
    /// A lease renewed, and nothing else.
    Renewal,
    /// A step, a journal entry, a signal taken: the run's lapses start again from 0.
    Progress,
}

/// Whether `owner` holds `thread`; if so, extends its lease (and, for `Progress`, counts
/// the run's lapses from 0 again).
pub(super) fn fence(
    conn: &Connection,
    (thread, owner): (&str, &str),
    until_ms: i64,
    now_ms: i64,
    write: Write,
) -> rusqlite::Result<bool> {
    let sql = match write {
        Write::Progress => {
            "UPDATE runs SET lease_until_ms = ?3, updated_at_ms = ?4, lapses = 0
             WHERE thread = ?1 AND lease_owner = ?2"
        }
        Write::Renewal => {
            "UPDATE runs SET lease_until_ms = ?3, updated_at_ms = ?4
             WHERE thread = ?1 AND lease_owner = ?2"
        }
    };
    let renewed = conn
        .prepare_cached(sql)?
        .execute(params![thread, owner, until_ms, now_ms])?;
    Ok(renewed > 0)
}
