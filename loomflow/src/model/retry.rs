//! Retries with exponential backoff and full jitter, honouring `retry-after`.

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::ModelError;

/// When and how often a failed model call is tried again.
///
/// Connection failures, timeouts, 408, 409, 429 and 5xx answers are retried (see
/// [`ModelError::is_retryable`]). Attempt `n` (counting from 1) waits a random time between
/// zero and `min(max_backoff, initial_backoff · 2ⁿ⁻¹)` ("full jitter"), unless the provider sent
/// `retry-after` (with a 429 or a 5xx; in seconds, as an HTTP date, or as `retry-after-ms`):
/// then it waits exactly that long, or gives up when that is longer than `max_retry_after`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use loomflow::model::RetryPolicy;
///
/// let policy = RetryPolicy::default()
///     .max_attempts(5)
///     .initial_backoff(Duration::from_millis(200));
/// assert_eq!(policy.max_attempts, 5);
/// assert!(RetryPolicy::none().max_attempts == 1);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Attempts in all, the first included (at least 1).
    pub max_attempts: u32,
    /// The backoff ceiling of the first retry.
    pub initial_backoff: Duration,
    /// The largest backoff ceiling.
    pub max_backoff: Duration,
    /// The longest `retry-after` that is waited for; a longer one fails the call at once.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// One attempt, no retries.
    pub fn none() -> Self {
        Self {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// Sets the number of attempts (values below 1 count as 1).
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Sets the first retry's backoff ceiling.
    #[must_use]
    pub fn initial_backoff(mut self, backoff: Duration) -> Self {
        self.initial_backoff = backoff;
        self
    }

    /// Sets the largest backoff ceiling.
    #[must_use]
    pub fn max_backoff(mut self, backoff: Duration) -> Self {
        self.max_backoff = backoff;
        self
    }

    /// Sets the longest `retry-after` waited for.
    #[must_use]
    pub fn max_retry_after(mut self, wait: Duration) -> Self {
        self.max_retry_after = wait;
        self
    }

    /// The backoff ceiling after failed attempt `attempt` (1-based).
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 1u32
            .checked_shl(attempt.saturating_sub(1).min(31))
            .unwrap_or(u32::MAX);
        self.initial_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }

    /// How long to wait after failed attempt `attempt` (1-based) with this error, or `None`
    /// when the call should not be tried again.
    pub fn delay(&self, attempt: u32, error: &ModelError) -> Option<Duration> {
        self.delay_if(attempt, error, error.is_retryable())
    }

    /// [`delay`](Self::delay), with whether `error` may be retried decided by the caller.
    fn delay_if(&self, attempt: u32, error: &ModelError, retryable: bool) -> Option<Duration> {
        if attempt >= self.max_attempts || !retryable {
            return None;
        }
        match error.retry_after() {
            Some(wait) if wait > self.max_retry_after => None,
            Some(wait) => Some(wait),
            None => Some(self.ceiling(attempt).mul_f64(jitter())),
        }
    }
}

/// A uniform number in `[0, 1)`, from the standard library's randomly keyed hasher.
fn jitter() -> f64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// Runs `attempt` until it succeeds, fails for good, or the policy's attempts run out. An
/// attempt that streams reads up to the reply's first content: a stream cut before it is
/// retried too.
#[cfg_attr(
    not(any(feature = "openai", feature = "anthropic")),
    allow(dead_code) // only the HTTP adapters retry
)]
pub(crate) async fn with_retry<T, F, Fut>(
    policy: &RetryPolicy,
    provider: &str,
    model: &str,
    mut attempt: F,
) -> Result<T, ModelError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ModelError>>,
{
    let mut n = 1;
    loop {
        match attempt().await {
            Ok(value) => return Ok(value),
            Err(error) => {
                // The attempts here read a stream up to its first content: one cut before it
                // (the connection broke after the 200) gave the caller nothing, and is tried
                // again as a broken connection is.
                let cut = matches!(error, ModelError::StreamCut { .. });
                let Some(delay) = policy.delay_if(n, &error, cut || error.is_retryable()) else {
                    return Err(error);
                };
                tracing::warn!(
                    provider,
                    model,
                    attempt = n,
                    delay_ms = delay.as_millis() as u64,
                    error = %error,
                    "model call failed; retrying"
                );
                tokio::time::sleep(delay).await;
                n += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    fn server_error() -> ModelError {
        ModelError::Server {
            provider: "p".into(),
            model: "m".into(),
            status: 503,
            retry_after: None,
            message: String::new(),
        }
    }

    #[test]
    fn backoff_grows_exponentially_up_to_the_cap_with_full_jitter() {
        let policy = RetryPolicy::default()
            .max_attempts(20)
            .initial_backoff(Duration::from_millis(100))
            .max_backoff(Duration::from_secs(1));
        assert_eq!(policy.ceiling(1), Duration::from_millis(100));
        assert_eq!(policy.ceiling(3), Duration::from_millis(400));
        assert_eq!(policy.ceiling(10), Duration::from_secs(1));
        assert_eq!(policy.ceiling(u32::MAX), Duration::from_secs(1));
        let delays: Vec<_> = (0..200)
            .map(|_| policy.delay(3, &server_error()).unwrap())
            .collect();
        assert!(delays.iter().all(|d| *d <= Duration::from_millis(400)));
        assert!(delays.iter().any(|d| *d < Duration::from_millis(200)));
        assert!(delays.iter().any(|d| *d > Duration::from_millis(200)));
    }

    #[test]
    fn retry_after_is_honoured_and_capped() {
        let policy = RetryPolicy::default();
        let limited = |secs| ModelError::RateLimited {
            provider: "p".into(),
            model: "m".into(),
            retry_after: Some(Duration::from_secs(secs)),
            message: String::new(),
        };
        assert_eq!(policy.delay(1, &limited(7)), Some(Duration::from_secs(7)));
        assert_eq!(policy.delay(1, &limited(600)), None);
        assert_eq!(policy.delay(3, &limited(1)), None, "attempts exhausted");
        let auth = ModelError::Authentication {
            provider: "p".into(),
            model: "m".into(),
            status: 401,
            message: String::new(),
        };
        assert_eq!(policy.delay(1, &auth), None);
    }

    #[tokio::test(start_paused = true)]
    async fn with_retry_stops_after_max_attempts() {
        let calls = AtomicU32::new(0);
        let policy = RetryPolicy::default().max_attempts(4);
        let result: Result<(), _> = with_retry(&policy, "p", "m", || {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(server_error()) }
        })
        .await;
        assert!(matches!(result, Err(ModelError::Server { .. })));
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn with_retry_returns_the_first_success() {
        let calls = AtomicU32::new(0);
        let result = with_retry(&RetryPolicy::default(), "p", "m", || {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move { if n == 0 { Err(server_error()) } else { Ok(n) } }
        })
        .await;
        assert_eq!(result.unwrap(), 1);
    }
}
