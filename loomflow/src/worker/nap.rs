//! How long an idle worker naps before it looks again, and what ends a nap early.

use std::time::Duration;

/// The nap: what is `left` of the poll interval, cut to the earliest wake time the worker
/// knows of (`next_wake`, in milliseconds since the Unix epoch, compared with `now`).
///
/// A wake time already past ends the nap at once when a slot is free: the run came due while
/// the worker was looking (after its claims, before this), and nothing else would wake the
/// worker for it before the poll interval is up. With every slot taken there is nothing to
/// claim, and a run ending wakes the worker: `left` is then the whole poll interval, as a
/// pending change in the store cannot be looked at either.
pub(super) fn length(
    left: Duration,
    next_wake: Option<u64>,
    now: u64,
    slot_free: bool,
) -> Duration {
    match next_wake {
        Some(at) if at > now => left.min(Duration::from_millis(at - now)),
        Some(_) if slot_free => Duration::ZERO,
        _ => left,
    }
}

/// The longest a worker waits between looks at a store that keeps failing.
const LONGEST_BACKOFF: Duration = Duration::from_secs(5);

/// The nap after `failures` looks in a row that the store failed: `retry_after`, doubled
/// with each failure after the first, up to [`LONGEST_BACKOFF`] (or `retry_after`, if
/// longer). A store that is down (a database restarting) is not asked, and its failures are
/// not logged, several times a poll interval by every worker, which would hold up its
/// recovery with reconnections.
pub(super) fn after_failures(retry_after: Duration, failures: u32) -> Duration {
    let doubled = retry_after.saturating_mul(1 << failures.saturating_sub(1).min(16));
    doubled.min(LONGEST_BACKOFF.max(retry_after))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_store_is_asked_less_and_less_often() {
        let first = Duration::from_millis(100);
        let naps: Vec<u128> = (1..=8)
            .map(|n| after_failures(first, n).as_millis())
            .collect();
        assert_eq!(naps, [100, 200, 400, 800, 1_600, 3_200, 5_000, 5_000]);
        assert_eq!(after_failures(first, u32::MAX), LONGEST_BACKOFF);
        let long = Duration::from_secs(30);
        assert_eq!(after_failures(long, 3), long, "never above what it was");
    }

    const POLL: Duration = Duration::from_secs(60);

    #[test]
    fn a_worker_with_no_timer_naps_the_poll_interval() {
        assert_eq!(length(POLL, None, 1_000, true), POLL);
    }

    #[test]
    fn a_timer_due_before_the_poll_cuts_the_nap_to_it() {
        assert_eq!(
            length(POLL, Some(1_250), 1_000, true),
            Duration::from_millis(250)
        );
        assert_eq!(length(POLL, Some(1_000 + 120_000), 1_000, true), POLL);
    }

    #[test]
    fn a_run_that_came_due_while_the_worker_looked_ends_the_nap_at_once() {
        assert_eq!(length(POLL, Some(1_000), 1_004, true), Duration::ZERO);
        assert_eq!(length(POLL, Some(1_000), 1_000, true), Duration::ZERO);
    }

    #[test]
    fn with_every_slot_taken_a_past_wake_time_does_not_spin() {
        assert_eq!(length(POLL, Some(1_000), 1_004, false), POLL);
    }
}
