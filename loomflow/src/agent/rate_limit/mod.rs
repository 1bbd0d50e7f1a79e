//! [`RateLimiter`]: how fast agents' model calls may go, per model and per user, in
//! requests and in tokens a minute.
//!
//! It lives with the agents rather than the models because what it limits is keyed by the
//! run (its user) and has to sit inside the agent's journaled model step: a replayed step
//! neither waits nor takes from a bucket. The model adapters know nothing of users or runs.

mod bucket;
mod call;

pub(super) use call::{call_model, surface};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use bucket::Bucket;

/// Requests and tokens a minute, for one model or one user; see [`RateLimiter`].
///
/// Each figure is a token bucket: it holds up to its burst (by default the per-minute
/// figure itself) and refills continuously at the per-minute rate, so `requests_per_minute(2)`
/// lets two calls through at once, then one every 30 seconds. An unset figure does not limit.
/// Figures below 1 count as 1.
///
/// # Examples
///
/// ```
/// use loomflow::agent::Limits;
///
/// // 500 requests a minute, at most 50 at once; 30,000 tokens a minute.
/// let limits = Limits::new()
///     .requests_per_minute(500)
///     .request_burst(50)
///     .tokens_per_minute(30_000);
/// # let _ = limits;
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct Limits {
    requests_per_minute: Option<u32>,
    tokens_per_minute: Option<u64>,
    request_burst: Option<u32>,
    token_burst: Option<u64>,
}

impl Limits {
    /// No limits yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Model calls a minute.
    pub fn requests_per_minute(mut self, requests: u32) -> Self {
        self.requests_per_minute = Some(requests);
        self
    }

    /// Tokens (input and output) a minute.
    pub fn tokens_per_minute(mut self, tokens: u64) -> Self {
        self.tokens_per_minute = Some(tokens);
        self
    }

    /// The most calls that may go at once after a quiet spell (default: the requests a
    /// minute).
    pub fn request_burst(mut self, requests: u32) -> Self {
        self.request_burst = Some(requests);
        self
    }

    /// The most tokens that may go at once after a quiet spell (default: the tokens a
    /// minute).
    pub fn token_burst(mut self, tokens: u64) -> Self {
        self.token_burst = Some(tokens);
        self
    }

    fn buckets(&self, now: Instant) -> Pair {
        Pair {
            requests: self.requests_per_minute.map(|rpm| {
                let burst = self.request_burst.unwrap_or(rpm);
                Bucket::new(u64::from(rpm), u64::from(burst), now)
            }),
            tokens: self.tokens_per_minute.map(|tpm| {
                let burst = self.token_burst.unwrap_or(tpm);
                Bucket::new(tpm, burst, now)
            }),
        }
    }
}

/// What a model call does when the limiter's buckets do not allow it yet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum RateLimitMode {
    /// Wait until they do (the default): the run slows down and carries on.
    #[default]
    Wait,
    /// Fail the run at once with [`AgentError::RateLimited`](super::AgentError::RateLimited),
    /// which says how long to wait: for a caller that would rather answer "try later" than
    /// hold a request open.
    Fail,
}

/// Token buckets that pace agents' model calls: per model and per user, requests and tokens
/// a minute. Clones share the buckets, so one limiter given to several agents
/// ([`AgentBuilder::rate_limiter`](super::AgentBuilder::rate_limiter)) paces every run of
/// all of them in this process. (It is in memory: processes do not share it.)
///
/// Before each model call the agent takes one request and an estimate of the call's tokens
/// from every bucket that applies: the model's (configured by name, else the
/// [default](Self::default_model), if any) and, for a run with a
/// [user](super::AgentRun::user), that user's own ([`per_user`](Self::per_user)). The
/// estimate is the request's text (messages, tool calls, tool definitions, output schema)
/// at about four bytes a token, plus `max_tokens` when set; once the reply is in, the token
/// buckets are corrected by the actual usage (a failed call gives its estimate back, a reply
/// that reports no usage keeps it); a
/// call estimated at more than a bucket holds waits for a full one. In
/// [`RateLimitMode::Wait`] (the default) a call waits until every bucket allows it; in
/// [`RateLimitMode::Fail`] the run fails instead. Waiting is not strictly first come, first
/// served: whoever finds the buckets ready first goes.
///
/// When the provider answers 429 anyway, the model's bucket is paused for the `retry-after`
/// it sent (or the [backoff](Self::backoff), 1 s by default), so every run sharing the
/// limiter waits too, and the agent tries the call again after the pause, up to
/// [`retries`](Self::retries) times (default 2). A `retry-after` longer than
/// [`max_pause`](Self::max_pause) (60 s by default) fails the call with the provider's error
/// instead. The HTTP adapters retry 429s on their own
/// first ([`RetryPolicy`](crate::model::RetryPolicy)), and other runs learn of the 429 only
/// once the adapter gives up: give the adapter `RetryPolicy::none()` to let the limiter
/// handle them alone.
///
/// The wait happens inside the journaled model step: a run that resumes and replays a model
/// reply neither waits nor spends from a bucket. A call that waited emits
/// [`AgentEvent::RateLimited`](super::AgentEvent::RateLimited) and an `INFO` event.
///
/// Models are found by their full name (`openai:gpt-4o`, as
/// [`Model::name`](crate::model::Model::name) gives it), then by the part after the provider
/// (`gpt-4o`). Each model without a configured name gets buckets of its own from the
/// default limits.
///
/// # Examples
///
/// ```
/// use loomflow::agent::{Agent, Limits, RateLimiter};
/// use loomflow::model::ScriptedModel;
///
/// let limiter = RateLimiter::new()
///     .model("gpt-4o", Limits::new().requests_per_minute(500).tokens_per_minute(30_000))
///     .default_model(Limits::new().requests_per_minute(60))
///     .per_user(Limits::new().requests_per_minute(10));
/// let writer = Agent::builder("You write.")
///     .model(ScriptedModel::new([]))
///     .rate_limiter(limiter.clone())
///     .build();
/// let critic = Agent::builder("You criticise.")
///     .model(ScriptedModel::new([]))
///     .rate_limiter(limiter) // the same buckets
///     .build();
/// # let _ = (writer, critic);
/// ```
#[derive(Clone, Default)]
#[must_use]
pub struct RateLimiter {
    config: Arc<Config>,
    buckets: Arc<Mutex<Buckets>>,
}

#[derive(Clone, Debug)]
struct Config {
    models: HashMap<String, Limits>,
    default_model: Option<Limits>,
    per_user: Option<Limits>,
    mode: RateLimitMode,
    retries: u32,
    backoff: Duration,
    max_pause: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            models: HashMap::new(),
            default_model: None,
            per_user: None,
            mode: RateLimitMode::Wait,
            retries: 2,
            backoff: Duration::from_secs(1),
            max_pause: Duration::from_secs(60),
        }
    }
}

/// Every bucket of a limiter, made the first time a model or user is seen.
#[derive(Default)]
struct Buckets {
    models: HashMap<String, ModelBuckets>,
    users: HashMap<String, Pair>,
    /// How many users' buckets there may be before the full ones (no different from new
    /// ones) are dropped.
    prune_users_at: usize,
}

/// At least this many users' buckets are kept before pruning.
const MIN_PRUNE_AT: usize = 1024;

/// A request bucket and a token bucket, either of them unlimited.
#[derive(Default)]
struct Pair {
    requests: Option<Bucket>,
    tokens: Option<Bucket>,
}

impl Pair {
    /// How long until one request and `tokens` can be taken.
    fn wait(&mut self, tokens: f64, now: Instant) -> Duration {
        let mut wait = Duration::ZERO;
        if let Some(bucket) = &mut self.requests {
            bucket.refill(now);
            wait = wait.max(bucket.wait_for(1.0));
        }
        if let Some(bucket) = &mut self.tokens {
            bucket.refill(now);
            wait = wait.max(bucket.wait_for(tokens));
        }
        wait
    }

    fn take(&mut self, tokens: f64) {
        if let Some(bucket) = &mut self.requests {
            bucket.take(1.0);
        }
        if let Some(bucket) = &mut self.tokens {
            bucket.take(tokens);
        }
    }

    fn adjust_tokens(&mut self, amount: f64, now: Instant) {
        if let Some(bucket) = &mut self.tokens {
            bucket.refill(now);
            bucket.adjust(amount);
        }
    }

    fn is_full(&self, now: Instant) -> bool {
        self.requests.as_ref().is_none_or(|b| b.is_full(now))
            && self.tokens.as_ref().is_none_or(|b| b.is_full(now))
    }
}

/// A model's buckets, and the pause a provider's 429 put on it.
struct ModelBuckets {
    pair: Pair,
    paused_until: Option<Instant>,
}

impl std::fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiter")
            .field("models", &self.config.models)
            .field("default_model", &self.config.default_model)
            .field("per_user", &self.config.per_user)
            .field("mode", &self.config.mode)
            .field("retries", &self.config.retries)
            .field("max_pause", &self.config.max_pause)
            .finish_non_exhaustive()
    }
}

impl RateLimiter {
    /// A limiter that limits nothing until configured. Configure it before cloning it:
    /// clones share buckets, and each keeps the configuration it had when cloned.
    pub fn new() -> Self {
        Self::default()
    }

    /// Limits for the model `model` (`gpt-4o`, or `openai:gpt-4o` to tell providers apart).
    pub fn model(mut self, model: impl Into<String>, limits: Limits) -> Self {
        Arc::make_mut(&mut self.config)
            .models
            .insert(model.into(), limits);
        self
    }

    /// Limits for each model not configured by name: each gets buckets of its own (default:
    /// such models are not limited).
    pub fn default_model(mut self, limits: Limits) -> Self {
        Arc::make_mut(&mut self.config).default_model = Some(limits);
        self
    }

    /// Limits for each user, across models: every user has buckets of their own (default:
    /// none). Runs without a user are not limited per user.
    pub fn per_user(mut self, limits: Limits) -> Self {
        Arc::make_mut(&mut self.config).per_user = Some(limits);
        self
    }

    /// Wait (the default) or fail when a call would have to wait.
    pub fn mode(mut self, mode: RateLimitMode) -> Self {
        Arc::make_mut(&mut self.config).mode = mode;
        self
    }

    /// How many times a model call the provider answered with 429 is tried again, each time
    /// after the pause it set (default 2; 0 fails the run with the provider's error).
    pub fn retries(mut self, retries: u32) -> Self {
        Arc::make_mut(&mut self.config).retries = retries;
        self
    }

    /// How long a model is paused after a 429 that did not say `retry-after` (default 1 s).
    pub fn backoff(mut self, backoff: Duration) -> Self {
        Arc::make_mut(&mut self.config).backoff = backoff;
        self
    }

    /// The longest pause a 429 may set (default 60 s, as the adapters'
    /// [`RetryPolicy::max_retry_after`](crate::model::RetryPolicy::max_retry_after)): a
    /// `retry-after` longer than this (an hourly or daily quota) fails the call with the
    /// provider's error, and pauses nobody.
    pub fn max_pause(mut self, max_pause: Duration) -> Self {
        Arc::make_mut(&mut self.config).max_pause = max_pause;
        self
    }

    /// The key of `model`'s buckets, and their limits.
    fn model_limits(&self, model: &str) -> (String, Option<Limits>) {
        let bare = model.split_once(':').map_or(model, |(_, bare)| bare);
        for name in [model, bare] {
            if let Some(limits) = self.config.models.get(name) {
                return (name.to_owned(), Some(*limits));
            }
        }
        (model.to_owned(), self.config.default_model)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Buckets> {
        crate::sync::lock(&self.buckets)
    }

    /// Takes one request and `tokens` from every bucket for `model` and `user`, waiting
    /// until they allow it; in [`RateLimitMode::Fail`], the wait it would take instead.
    pub(crate) async fn acquire(
        &self,
        model: &str,
        user: Option<&str>,
        tokens: u64,
    ) -> Result<Permit, Duration> {
        let started = Instant::now();
        let (key, limits) = self.model_limits(model);
        let user = user.filter(|_| self.config.per_user.is_some());
        #[allow(clippy::cast_precision_loss)] // token counts are far below 2^52
        let amount = tokens as f64;
        // A call that did not sleep for the buckets waited nothing (their look takes ns).
        let mut slept = false;
        loop {
            let now = Instant::now();
            let wait = self.try_take(&key, limits, user, amount, now);
            if wait.is_zero() {
                return Ok(Permit {
                    limiter: self.clone(),
                    model: key,
                    user: user.map(str::to_owned),
                    tokens: amount,
                    waited: now.saturating_duration_since(started) * u32::from(slept),
                });
            }
            if self.config.mode == RateLimitMode::Fail {
                return Err(wait);
            }
            tokio::time::sleep(wait).await;
            slept = true;
        }
    }

    /// Takes from every bucket if all of them allow it now (returning zero), or returns the
    /// longest wait among those that do not (taking nothing).
    fn try_take(
        &self,
        key: &str,
        limits: Option<Limits>,
        user: Option<&str>,
        tokens: f64,
        now: Instant,
    ) -> Duration {
        let mut buckets = self.lock();
        let Buckets {
            models,
            users,
            prune_users_at,
        } = &mut *buckets;
        let model = models
            .entry(key.to_owned())
            .or_insert_with(|| ModelBuckets {
                pair: limits.map(|l| l.buckets(now)).unwrap_or_default(),
                paused_until: None,
            });
        let mut wait = model.pair.wait(tokens, now);
        if let Some(until) = model.paused_until {
            wait = wait.max(until.saturating_duration_since(now));
        }
        let mut user_pair = None;
        if let (Some(user), Some(per_user)) = (user, self.config.per_user) {
            if !users.contains_key(user) && users.len() >= *prune_users_at {
                users.retain(|_, pair| !pair.is_full(now));
                *prune_users_at = (users.len() * 2).max(MIN_PRUNE_AT);
            }
            let pair = users
                .entry(user.to_owned())
                .or_insert_with(|| per_user.buckets(now));
            wait = wait.max(pair.wait(tokens, now));
            user_pair = Some(pair);
        }
        if wait.is_zero() {
            model.pair.take(tokens);
            if let Some(pair) = user_pair {
                pair.take(tokens);
            }
        }
        wait
    }

    /// Pauses `model`'s calls for `pause` (a provider's 429): every run sharing the limiter
    /// waits for it.
    pub(crate) fn pause(&self, model: &str, pause: Duration) {
        let (key, limits) = self.model_limits(model);
        let now = Instant::now();
        // A pause too long for the clock (a `backoff` of `Duration::MAX`): a year is as long.
        let year = Duration::from_secs(365 * 86_400);
        let until = (now.checked_add(pause)).unwrap_or_else(|| now + year);
        let mut buckets = self.lock();
        let model = buckets.models.entry(key).or_insert_with(|| ModelBuckets {
            pair: limits.map(|l| l.buckets(now)).unwrap_or_default(),
            paused_until: None,
        });
        model.paused_until = Some(model.paused_until.map_or(until, |old| old.max(until)));
    }
}

/// What [`RateLimiter::acquire`] took; [`settle`](Permit::settle) it with the call's actual
/// tokens.
pub(crate) struct Permit {
    limiter: RateLimiter,
    model: String,
    user: Option<String>,
    tokens: f64,
    waited: Duration,
}

impl Permit {
    /// How long the call waited for the buckets.
    pub(crate) fn waited(&self) -> Duration {
        self.waited
    }

    /// Corrects the token buckets from the estimate taken to the tokens `used`.
    pub(crate) fn settle(self, used: u64) {
        #[allow(clippy::cast_precision_loss)] // token counts are far below 2^52
        let correction = self.tokens - used as f64;
        if correction == 0.0 {
            return;
        }
        let now = Instant::now();
        let mut buckets = self.limiter.lock();
        if let Some(model) = buckets.models.get_mut(&self.model) {
            model.pair.adjust_tokens(correction, now);
        }
        if let Some(pair) = self.user.and_then(|u| buckets.users.get_mut(&u)) {
            pair.adjust_tokens(correction, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// Whether `waited` is `expected`, give or take the timer's millisecond.
    fn about(waited: Duration, expected: Duration) -> bool {
        waited.abs_diff(expected) <= Duration::from_millis(2)
    }

    #[tokio::test(start_paused = true)]
    async fn the_third_call_of_two_a_minute_waits_half_a_minute() {
        let limiter = RateLimiter::new().model("gpt-4o", Limits::new().requests_per_minute(2));
        let shared = limiter.clone();
        let start = Instant::now();
        for _ in 0..2 {
            let permit = limiter.acquire("openai:gpt-4o", None, 10).await.unwrap();
            assert_eq!(permit.waited(), Duration::ZERO);
        }
        let permit = shared.acquire("openai:gpt-4o", None, 10).await.unwrap();
        assert!(about(permit.waited(), secs(30)), "{:?}", permit.waited());
        assert!(about(start.elapsed(), secs(30)));
        // Another model is not limited (no default).
        let other = limiter.acquire("openai:o3", None, 10).await.unwrap();
        assert_eq!(other.waited(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn each_unnamed_model_has_its_own_default_buckets() {
        let limiter = RateLimiter::new().default_model(Limits::new().requests_per_minute(1));
        assert!(limiter.acquire("a", None, 0).await.is_ok());
        let b = limiter.acquire("b", None, 0).await.unwrap();
        assert_eq!(b.waited(), Duration::ZERO);
        let a = limiter.acquire("a", None, 0).await.unwrap();
        assert!(about(a.waited(), secs(60)), "{:?}", a.waited());
    }

    #[tokio::test(start_paused = true)]
    async fn users_have_buckets_of_their_own_and_runs_without_one_are_free() {
        let limiter = RateLimiter::new()
            .per_user(Limits::new().requests_per_minute(1))
            .mode(RateLimitMode::Fail);
        assert!(limiter.acquire("m", Some("ann"), 0).await.is_ok());
        let refused = limiter.acquire("m", Some("ann"), 0).await.err().unwrap();
        assert!(about(refused, secs(60)), "{refused:?}");
        assert!(limiter.acquire("m", Some("bob"), 0).await.is_ok());
        assert!(limiter.acquire("m", None, 0).await.is_ok());
        assert!(limiter.acquire("m", None, 0).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn the_actual_usage_corrects_the_estimate() {
        let limiter = RateLimiter::new()
            .model("m", Limits::new().tokens_per_minute(600))
            .mode(RateLimitMode::Fail);
        // Estimated 100, used 900: 300 of debt, at 10 a second.
        let permit = limiter.acquire("m", None, 100).await.unwrap();
        permit.settle(900);
        let refused = limiter.acquire("m", None, 100).await.err().unwrap();
        assert!(about(refused, secs(40)), "{refused:?}");
        // Estimated 600, used 0 (a failed call): all of it back.
        let limiter = RateLimiter::new()
            .model("m", Limits::new().tokens_per_minute(600))
            .mode(RateLimitMode::Fail);
        limiter.acquire("m", None, 600).await.unwrap().settle(0);
        assert!(limiter.acquire("m", None, 600).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_pause_holds_every_caller_of_the_model_and_only_that_model() {
        let limiter = RateLimiter::new();
        limiter.pause("openai:gpt-4o", secs(5));
        limiter.pause("openai:gpt-4o", secs(2)); // a shorter pause does not cut it short
        let other = limiter.acquire("openai:o3", None, 0).await.unwrap();
        assert_eq!(other.waited(), Duration::ZERO);
        let permit = limiter.acquire("openai:gpt-4o", None, 0).await.unwrap();
        assert!(about(permit.waited(), secs(5)), "{:?}", permit.waited());
        let again = limiter.acquire("openai:gpt-4o", None, 0).await.unwrap();
        assert_eq!(again.waited(), Duration::ZERO, "the pause is over");
    }

    #[test]
    fn a_pause_too_long_for_the_clock_does_not_panic() {
        let limiter = RateLimiter::new().mode(RateLimitMode::Fail);
        limiter.pause("m", Duration::MAX);
        assert!(limiter.try_take("m", None, None, 0.0, Instant::now()) > secs(86_400));
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_callers_go_one_by_one_as_the_bucket_refills() {
        let limiter = RateLimiter::new().model("m", Limits::new().requests_per_minute(2));
        let start = Instant::now();
        let waits = futures_util::future::join_all((0..5).map(|_| {
            let limiter = limiter.clone();
            async move {
                limiter.acquire("m", None, 0).await.unwrap();
                start.elapsed()
            }
        }))
        .await;
        let mut waits: Vec<u64> = waits.iter().map(Duration::as_secs).collect();
        waits.sort_unstable();
        assert_eq!(waits, [0, 0, 30, 60, 90]);
    }

    #[test]
    fn users_full_again_are_pruned() {
        let limiter = RateLimiter::new().per_user(Limits::new().requests_per_minute(60));
        let now = Instant::now();
        for n in 0..MIN_PRUNE_AT {
            limiter.try_take("m", None, Some(&format!("u{n}")), 0.0, now);
        }
        assert_eq!(limiter.lock().users.len(), MIN_PRUNE_AT);
        // A minute later all are full again: the next new user prunes them.
        let later = now + secs(60);
        limiter.try_take("m", None, Some("new"), 0.0, later);
        assert_eq!(limiter.lock().users.len(), 1);
    }
}
