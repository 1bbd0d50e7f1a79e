//! The token bucket: a level that refills at a steady rate up to a capacity.

use std::time::Duration;

use tokio::time::Instant;

/// Shortfalls smaller than this are rounding, not a reason to wait: a waiter that slept for
/// exactly the computed time may find the level a hair below what it needs.
const ROUNDING: f64 = 1e-6;

/// A token bucket. Taking more than the level allows only when the bucket holds enough, but
/// the level may go below zero afterwards (a correction after the fact, or a single ask larger
/// than the capacity): that debt is paid back by the refill before anyone else gets through.
#[derive(Clone, Debug)]
pub(super) struct Bucket {
    capacity: f64,
    per_second: f64,
    level: f64,
    updated: Instant,
}

impl Bucket {
    /// A full bucket that refills `per_minute` units a minute, continuously, up to `capacity`.
    pub(super) fn new(per_minute: u64, capacity: u64, now: Instant) -> Self {
        #[allow(clippy::cast_precision_loss)] // limits are far below 2^52
        let (per_minute, capacity) = (per_minute.max(1) as f64, capacity.max(1) as f64);
        Self {
            capacity,
            per_second: per_minute / 60.0,
            level: capacity,
            updated: now,
        }
    }

    /// Adds what flowed in since the last refill.
    pub(super) fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.level = (self.level + elapsed * self.per_second).min(self.capacity);
        self.updated = self.updated.max(now);
    }

    /// How long until `amount` can be taken (zero: now). An amount larger than the capacity
    /// needs a full bucket, so that it is not refused for ever.
    pub(super) fn wait_for(&self, amount: f64) -> Duration {
        let need = amount.min(self.capacity);
        let short = need - self.level;
        if short <= ROUNDING {
            Duration::ZERO
        } else {
            // A debt no clock could pay back (a server that reported absurd usage) waits
            // as long as a `Duration` can say, rather than overflowing it.
            Duration::try_from_secs_f64(short / self.per_second).unwrap_or(Duration::MAX)
        }
    }

    /// Takes `amount` (after [`wait_for`](Self::wait_for) said zero).
    pub(super) fn take(&mut self, amount: f64) {
        self.level -= amount;
    }

    /// Corrects the level by `amount`: positive gives back what an estimate took too much,
    /// negative takes what it took too little. Never past the capacity.
    pub(super) fn adjust(&mut self, amount: f64) {
        self.level = (self.level + amount).min(self.capacity);
    }

    /// Whether the bucket is full at `now`, and so no different from a new one.
    pub(super) fn is_full(&self, now: Instant) -> bool {
        let mut probe = self.clone();
        probe.refill(now);
        probe.level >= probe.capacity - ROUNDING
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    fn close(a: Duration, b: Duration) -> bool {
        a.abs_diff(b) < Duration::from_millis(1)
    }

    /// A debt past what a `Duration` can say (a server reported absurd usage) waits as long
    /// as it can: it does not panic.
    #[test]
    fn an_absurd_debt_waits_without_panicking() {
        let mut bucket = Bucket::new(1, 1, Instant::now());
        #[allow(clippy::cast_precision_loss)]
        bucket.adjust(-(u64::MAX as f64));
        assert_eq!(bucket.wait_for(1.0), Duration::MAX);
    }

    #[test]
    fn a_new_bucket_is_full_and_empties_by_what_is_taken() {
        let now = Instant::now();
        let mut bucket = Bucket::new(60, 60, now);
        assert_eq!(bucket.wait_for(60.0), Duration::ZERO);
        bucket.take(59.0);
        assert_eq!(bucket.wait_for(1.0), Duration::ZERO);
        bucket.take(1.0);
        // 60 a minute is one a second
        assert!(close(bucket.wait_for(1.0), secs(1.0)));
        assert!(close(bucket.wait_for(30.0), secs(30.0)));
    }

    #[test]
    fn the_refill_is_continuous_and_stops_at_the_capacity() {
        let start = Instant::now();
        let mut bucket = Bucket::new(2, 2, start);
        bucket.take(2.0);
        // two a minute: one every 30 s
        assert!(close(bucket.wait_for(1.0), secs(30.0)));
        bucket.refill(start + secs(15.0));
        assert!(close(bucket.wait_for(1.0), secs(15.0)));
        bucket.refill(start + secs(30.0));
        assert_eq!(bucket.wait_for(1.0), Duration::ZERO);
        bucket.refill(start + secs(3600.0));
        assert!(bucket.is_full(start + secs(3600.0)));
        assert_eq!(bucket.wait_for(2.0), Duration::ZERO);
        bucket.take(2.0);
        assert!(
            !bucket.wait_for(0.5).is_zero(),
            "the hour did not store more than 2"
        );
    }

    #[test]
    fn a_burst_is_the_capacity_and_the_rate_stays_per_minute() {
        let start = Instant::now();
        let mut bucket = Bucket::new(60, 10, start);
        assert_eq!(bucket.wait_for(10.0), Duration::ZERO);
        bucket.take(10.0);
        assert!(close(bucket.wait_for(10.0), secs(10.0)));
    }

    #[test]
    fn an_ask_larger_than_the_capacity_needs_a_full_bucket_and_leaves_a_debt() {
        let start = Instant::now();
        let mut bucket = Bucket::new(600, 600, start);
        assert_eq!(bucket.wait_for(1_000.0), Duration::ZERO, "full: it goes");
        bucket.take(1_000.0); // level -400
        // 10 a second: 400 of debt and 1 more is 40.1 s
        assert!(close(bucket.wait_for(1.0), secs(40.1)));
        assert!(
            close(bucket.wait_for(1_000.0), secs(100.0)),
            "a full bucket again"
        );
    }

    #[test]
    fn corrections_give_back_up_to_the_capacity_or_take_more() {
        let start = Instant::now();
        let mut bucket = Bucket::new(60, 60, start);
        bucket.take(50.0);
        bucket.adjust(100.0);
        assert!(bucket.is_full(start));
        bucket.take(10.0);
        bucket.adjust(-80.0); // used 90 where 10 were estimated
        assert!(close(bucket.wait_for(1.0), secs(31.0)));
    }

    #[test]
    fn time_going_backwards_changes_nothing() {
        let start = Instant::now();
        let mut bucket = Bucket::new(60, 60, start + secs(10.0));
        bucket.take(60.0);
        bucket.refill(start);
        assert!(close(bucket.wait_for(1.0), secs(1.0)));
    }

    #[test]
    fn zero_limits_count_as_one() {
        let mut bucket = Bucket::new(0, 0, Instant::now());
        assert_eq!(bucket.wait_for(1.0), Duration::ZERO);
        bucket.take(1.0);
        assert!(close(bucket.wait_for(1.0), secs(60.0)));
    }
}
