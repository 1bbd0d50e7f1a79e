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

/// The wall clock a runtime's timers use (`ctx.sleep`, `ctx.sleep_until`).
///
/// Timers are stored as wall-clock times so that any process can tell when one is due; tests
/// swap in a [`ManualClock`] to move time without waiting.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// Now.
    fn now(&self) -> SystemTime;
}

/// The system's clock: the default.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock that moves only when told to: for tests of timers.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use loomflow::runtime::{Clock, ManualClock};
///
/// let clock = ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_000));
/// clock.advance(Duration::from_secs(60));
/// assert_eq!(clock.now(), UNIX_EPOCH + Duration::from_secs(1_060));
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
}

impl<C: Clock> Clock for std::sync::Arc<C> {
    fn now(&self) -> SystemTime {
        (**self).now()
    }
}
