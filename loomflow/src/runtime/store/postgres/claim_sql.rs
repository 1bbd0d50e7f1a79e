//! The statement of a worker's claim on `loomflow_runs`: which run it takes (a waiting run
//! a signal in this process woke, or the longest-waiting run of all), locked with
//! `FOR UPDATE SKIP LOCKED`, and the lease it takes on it, in one statement.

use std::sync::LazyLock;

use super::runs::RUN_COLUMNS;

/// Set by every claim: a suspended run being carried on is runnable at once should its
/// execution die (once its lease runs out), whatever woke it; otherwise a worker killed
/// after consuming the run's signal would leave it waiting for a signal that is gone.
const IN_FLIGHT: &str =
    "runnable_at_ms = CASE WHEN status IN ('waiting', 'sleeping', 'interrupted')
                                        THEN 0 ELSE runnable_at_ms END";

/// Where a worker's claim finds its run, as the `chosen` query of [`claim_sql`]: `$1` is
/// now, `$3` the graphs the worker runs, and `$5` the thread or the due time.
pub(super) enum Choice {
    /// The thread (`$5`), if its run waits for the signal `$6` (waiting, or interrupted: a
    /// resume request comes as a signal), is of one of the graphs, and is free.
    Waiting,
    /// The longest-waiting run the worker should carry on now: one runnable at once (queued,
    /// a lease run out), a timer come due, or one whose awaited signal has arrived,
    /// whichever became runnable first. Rows another worker is claiming are passed over
    /// (`SKIP LOCKED`).
    Next,
}

/// The one statement of a worker's claim: chooses the run ([`Choice`]), locking its row,
/// and takes the lease for `$2` until `$4`. Returns the claimed row ([`RUN_COLUMNS`], then
/// `input`), or no row. Built once per kind, as the statement cache's key.
pub(super) fn claim_sql(choice: Choice) -> &'static str {
    static WAITING: LazyLock<String> = LazyLock::new(|| claim_statement(Choice::Waiting));
    static NEXT: LazyLock<String> = LazyLock::new(|| claim_statement(Choice::Next));
    match choice {
        Choice::Waiting => &WAITING,
        Choice::Next => &NEXT,
    }
}

/// [`claim_sql`], built.
fn claim_statement(choice: Choice) -> String {
    // Runnable at once (`runnable_at_ms` 0): a run whose execution stopped part way (its
    // lease ran out, or it was let go) before anything else, a queued one claimed before
    // included (it wrote nothing: `Durability::Exit`), and a queued run since it was
    // queued. A timer is runnable since it came due, a signalled run since its signal was
    // sent. The earliest of the candidates goes first, so that a backlog of queued runs does
    // not hold up the others until it runs out. The candidate queries are `MATERIALIZED`,
    // so that each runs once, with its lock, before the update reads it; those not chosen
    // are let go at commit.
    let chosen = match choice {
        Choice::Waiting => {
            "chosen AS MATERIALIZED (
                 SELECT thread FROM loomflow_runs
                 WHERE thread = $5 AND status IN ('waiting', 'interrupted')
                   AND (lease_owner IS NULL OR lease_until_ms <= $1)
                   AND graph = ANY($3) AND $6 = ANY(waiting_on)
                 FOR UPDATE)"
        }
        Choice::Next => {
            "recovering AS MATERIALIZED (
                 SELECT thread, 0::bigint AS since FROM loomflow_runs
                 WHERE runnable_at_ms = 0
                   AND (status IS DISTINCT FROM 'queued' OR attempts > 0)
                   AND (lease_owner IS NULL OR lease_until_ms <= $1)
                   AND graph = ANY($3)
                 ORDER BY updated_at_ms LIMIT 1
                 FOR UPDATE SKIP LOCKED),
             queued AS MATERIALIZED (
                 SELECT thread, updated_at_ms AS since FROM loomflow_runs
                 WHERE runnable_at_ms = 0 AND status = 'queued' AND attempts = 0
                   AND (lease_owner IS NULL OR lease_until_ms <= $1)
                   AND graph = ANY($3)
                 ORDER BY updated_at_ms LIMIT 1
                 FOR UPDATE SKIP LOCKED),
             timer AS MATERIALIZED (
                 SELECT thread, runnable_at_ms AS since FROM loomflow_runs
                 WHERE runnable_at_ms > 0 AND runnable_at_ms <= $5
                   AND (lease_owner IS NULL OR lease_until_ms <= $1)
                   AND graph = ANY($3)
                 ORDER BY runnable_at_ms, updated_at_ms LIMIT 1
                 FOR UPDATE SKIP LOCKED),
             signalled AS MATERIALIZED (
                 SELECT r.thread, s.sent_at_ms AS since FROM loomflow_signals s
                     JOIN loomflow_runs r ON r.thread = s.session
                 WHERE s.consumed_at_ms IS NULL AND r.status IN ('waiting', 'interrupted')
                   AND (r.lease_owner IS NULL OR r.lease_until_ms <= $1)
                   AND r.graph = ANY($3)
                   AND s.name = ANY(r.waiting_on)
                 ORDER BY s.seq LIMIT 1
                 FOR UPDATE OF r SKIP LOCKED),
             candidates AS (SELECT * FROM recovering UNION ALL SELECT * FROM queued
                            UNION ALL SELECT * FROM timer UNION ALL SELECT * FROM signalled),
             chosen AS (SELECT thread FROM candidates ORDER BY since LIMIT 1),
             others AS (SELECT pg_notify('loomflow_changes', '') FROM candidates
                        OFFSET 1 LIMIT 1)"
        }
    };
    // The candidates not chosen were locked until this statement committed: a worker
    // claiming at the same moment skipped them, found nothing, and waits. A notification
    // (sent at commit) has it look again. Returned last, so that the row is read as ever.
    let others = match choice {
        Choice::Waiting => "",
        Choice::Next => ", (SELECT count(*) FROM others) AS others",
    };
    format!(
        "WITH {chosen}
         UPDATE loomflow_runs SET lease_owner = $2, lease_until_ms = $4,
             attempts = attempts + 1, updated_at_ms = $1, {IN_FLIGHT},
             lapses = lapses + CASE WHEN lease_owner IS NOT NULL THEN 1 ELSE 0 END
         WHERE thread = (SELECT thread FROM chosen LIMIT 1)
         RETURNING {RUN_COLUMNS}, input{others}"
    )
}
