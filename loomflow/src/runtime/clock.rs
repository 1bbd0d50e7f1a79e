//! [`Clock`]: where a runtime reads the time that timers compare against.

use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `time` in milliseconds since the Unix epoch, as stored (0 before the epoch).
pub(crate) fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Now, by the system clock, in milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    unix_ms(SystemTime::now())
}

/// Stands in for a wait longer than a time can hold: about thirty years.
const FAR: Duration = Duration::from_secs(30 * 365 * 24 * 3_600);

/// The instant `wait` from now on tokio's clock, or [`FAR`] from now when that is past what
/// an instant holds: a timeout of `Duration::MAX` means "no timeout", not a panic.
pub(crate) fn instant_after(wait: Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_add(wait).unwrap_or_else(|| now + FAR)
}

/// The time `wait` after `now`, or [`FAR`] after it when that is past what a time holds
/// (`ctx.sleep(Duration::MAX)`, a wait's timeout of `Duration::MAX`).
pub(crate) fn time_after(now: SystemTime, wait: Duration) -> SystemTime {
    now.checked_add(wait).unwrap_or_else(|| now + FAR)
}

/// The time `ms` milliseconds after the Unix epoch, as stored times are read; [`FAR`] from
/// now when that is past what a time holds (on Windows, for an absurd stored value): still
/// in the future, as the stored time was.
pub(crate) fn from_unix_ms(ms: u64) -> SystemTime {
    let after = UNIX_EPOCH.checked_add(Duration::from_millis(ms));
    after.unwrap_or_else(|| time_after(SystemTime::now(), FAR))
}

/// The wall clock a runtime's timers use (`ctx.sleep`, `ctx.sleep_until`).
///
/// Timers are stored as wall-clock times so that any process can tell when one is due; tests
/// swap in a [`ManualClock`] to move time without waiting.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// Now.
    fn now(&self) -> SystemTime;

    /// How often a wait in memory (`ctx.sleep`, a timed `wait_for_signal` run without a
    /// worker) reads this clock again, for a clock that jumps: such a wait ends once the
    /// clock passes its time, or once as much real time went by, whichever comes first.
    /// `None`, the default: the clock moves with real time, and a wait sleeps its time out.
    fn tick(&self) -> Option<Duration> {
        None
    }
}

/// The system's clock: the default.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock that moves only when told to: for tests of timers. Give the runtime an `Arc` of
/// it and keep a clone, to move it while the runtime reads it.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::{Duration, UNIX_EPOCH};
/// use loomflow::Runtime;
/// use loomflow::runtime::ManualClock;
///
/// let clock = Arc::new(ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_000)));
/// let runtime = Runtime::builder().clock(Arc::clone(&clock)).build();
/// clock.advance(Duration::from_secs(60));
/// assert_eq!(runtime.now(), UNIX_EPOCH + Duration::from_secs(1_060));
/// ```
#[derive(Debug)]
pub struct ManualClock(Mutex<SystemTime>);

impl ManualClock {
    /// A clock that reads `start` until moved.
    pub fn new(start: SystemTime) -> Self {
        Self(Mutex::new(start))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let mut now = crate::sync::lock(&self.0);
        *now += by;
    }

    /// Sets the clock.
    pub fn set(&self, to: SystemTime) {
        *crate::sync::lock(&self.0) = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        *crate::sync::lock(&self.0)
    }

    /// A wait in memory reads it every 20 ms: moved past the wait's time, it ends the wait.
    fn tick(&self) -> Option<Duration> {
        Some(Duration::from_millis(20))
    }
}

impl<C: Clock> Clock for std::sync::Arc<C> {
    fn now(&self) -> SystemTime {
        (**self).now()
    }

    fn tick(&self) -> Option<Duration> {
        (**self).tick()
    }
}

/// A wait in memory for a time by a runtime's clock: it is over once the clock reads that
/// time, or once the real time it had left when it began went by, whichever comes first (a
/// [`ManualClock`] moved ahead ends it; one left alone does not hold it forever).
pub(crate) struct ClockWait {
    until_ms: u64,
    real_end: tokio::time::Instant,
}

impl ClockWait {
    /// A wait until `until_ms` by `clock`, from now.
    pub(crate) fn new(clock: &dyn Clock, until_ms: u64) -> Self {
        let left = until_ms.saturating_sub(unix_ms(clock.now()));
        Self {
            until_ms,
            real_end: instant_after(Duration::from_millis(left)),
        }
    }

    /// What is left of it.
    pub(crate) fn left(&self, clock: &dyn Clock) -> Duration {
        let by_clock = Duration::from_millis(self.until_ms.saturating_sub(unix_ms(clock.now())));
        let real = self
            .real_end
            .saturating_duration_since(tokio::time::Instant::now());
        by_clock.min(real)
    }

    /// How long to sleep before looking again: what is left, at most the clock's tick (1 ms
    /// at least, so that a clock whose tick is zero does not spin).
    pub(crate) fn nap(&self, clock: &dyn Clock) -> Duration {
        let left = self.left(clock);
        let tick = clock.tick().map(|tick| tick.max(Duration::from_millis(1)));
        tick.map_or(left, |tick| tick.min(left))
    }
}

/// Shows a time as UTC, `2025-06-01T12:00:30.123Z`: in error messages, and wherever runs
/// are shown to people.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use loomflow::runtime::Utc;
///
/// let at = UNIX_EPOCH + Duration::from_millis(1_748_779_230_123);
/// assert_eq!(Utc(at).to_string(), "2025-06-01T12:00:30.123Z");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Utc(pub SystemTime);

impl Utc {
    /// The time `ms` milliseconds after the Unix epoch.
    pub fn from_ms(ms: u64) -> Self {
        Self(from_unix_ms(ms))
    }
}

impl std::fmt::Display for Utc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Ok(since) = self.0.duration_since(UNIX_EPOCH) else {
            return write!(f, "{:?}", self.0);
        };
        let secs = since.as_secs();
        let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
        let rem = secs % 86_400;
        // Days to a civil date (Howard Hinnant's algorithm).
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
            rem / 3_600,
            rem % 3_600 / 60,
            rem % 60,
            since.subsec_millis()
        )
    }
}

#[cfg(test)]
mod utc_tests {
    use super::Utc;

    #[test]
    fn times_show_as_utc() {
        let at = |ms: u64| Utc::from_ms(ms).to_string();
        assert_eq!(at(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(at(1_748_779_230_123), "2025-06-01T12:00:30.123Z");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored time reads back as that time; one past what a time holds is still in the
    /// future, not thirty years after the epoch.
    #[test]
    fn a_stored_time_far_out_stays_in_the_future() {
        assert_eq!(
            from_unix_ms(1_500),
            UNIX_EPOCH + Duration::from_millis(1_500)
        );
        assert!(from_unix_ms(u64::MAX) > SystemTime::now() + Duration::from_secs(3_600));
    }

    /// A clock whose tick is zero.
    #[derive(Debug)]
    struct Eager(ManualClock);

    impl Clock for Eager {
        fn now(&self) -> SystemTime {
            self.0.now()
        }

        fn tick(&self) -> Option<Duration> {
            Some(Duration::ZERO)
        }
    }

    /// A wait naps at most its clock's tick, and at least a millisecond (a zero tick would
    /// spin); it is over by the clock, or by the real time it had.
    #[tokio::test(start_paused = true)]
    async fn a_clock_wait_naps_a_tick_and_ends_by_the_clock_or_real_time() {
        let start = UNIX_EPOCH + Duration::from_secs(1_000);
        let clock = ManualClock::new(start);
        let wait = ClockWait::new(&clock, unix_ms(start) + 60_000);
        assert_eq!(wait.nap(&clock), Duration::from_millis(20));
        assert_eq!(
            wait.nap(&SystemClock),
            Duration::ZERO,
            "past by the system's clock"
        );
        let eager = Eager(ManualClock::new(start));
        assert_eq!(wait.nap(&eager), Duration::from_millis(1));
        clock.advance(Duration::from_secs(59));
        assert_eq!(wait.left(&clock), Duration::from_secs(1));
        clock.advance(Duration::from_secs(1));
        assert!(wait.left(&clock).is_zero(), "over by the clock");
        let unmoved = ManualClock::new(start);
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(wait.left(&unmoved).is_zero(), "over by real time");
    }
}
