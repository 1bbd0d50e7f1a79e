//! [`Budget`]: token, cost and running-time caps, per run and per user.

use super::AgentState;
use super::stop::BudgetCap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::model::Usage;

/// Token, cost and running-time caps for an agent. A run that reaches a cap stops before its
/// next model turn, keeps its work, and reports `interrupted` with reason `budget:<cap>`.
///
/// Cost is computed from token counts and the prices you give (per million tokens), or
/// without those, at the agent's [price table](crate::agent::AgentBuilder::prices).
///
/// The per-user caps count every run of the agent (and of its clones) for that user in
/// this process: they are kept in memory, not in the store, so another process or a
/// restart starts from zero. The totals belong to the budget and are shared by its
/// clones: one budget cloned into several agents caps a user over all of them together;
/// give each agent a budget built on its own to cap it apart. A call is counted when it is made: a reply replayed from the
/// journal (a run resumed or recovered) was counted the first time.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use loomflow::agent::Budget;
///
/// let budget = Budget::default()
///     .max_tokens(20_000)                         // per run
///     .max_cost_usd(0.50)                         // per run, at these prices:
///     .prices_per_million(2.50, 10.00)            // input, output
///     .max_wall_clock(Duration::from_secs(300))   // per run, running time over all its legs
///     .max_tokens_per_user(200_000)               // across all runs of one user
///     .max_cost_usd_per_user(5.00);               // likewise
/// # let _ = budget;
/// ```
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct Budget {
    max_tokens: Option<u64>,
    max_cost_usd: Option<f64>,
    input_price: f64,
    output_price: f64,
    max_tokens_per_user: Option<u64>,
    max_wall_clock: Option<Duration>,
    max_cost_usd_per_user: Option<f64>,
    used_by_user: Arc<Mutex<HashMap<String, UserSpend>>>,
}

/// What one user's runs have spent so far.
#[derive(Clone, Copy, Debug, Default)]
struct UserSpend {
    tokens: u64,
    cost_usd: f64,
}

impl Budget {
    /// Caps the tokens (input + output) of one run.
    pub fn max_tokens(mut self, tokens: u64) -> Self {
        self.max_tokens = Some(tokens);
        self
    }

    /// Caps the cost of one run, in US dollars, at the prices set with
    /// [`prices_per_million`](Self::prices_per_million), or without those, at the agent's
    /// [price table](crate::agent::AgentBuilder::prices).
    pub fn max_cost_usd(mut self, usd: f64) -> Self {
        self.max_cost_usd = Some(usd);
        self
    }

    /// Prices in US dollars per million input and output tokens.
    pub fn prices_per_million(mut self, input: f64, output: f64) -> Self {
        self.input_price = input;
        self.output_price = output;
        self
    }

    /// Caps the tokens one user may spend across every run of this budget's agents (in this
    /// process).
    pub fn max_tokens_per_user(mut self, tokens: u64) -> Self {
        self.max_tokens_per_user = Some(tokens);
        self
    }

    /// Caps the cost, in US dollars, one user may run up across every run of this budget's
    /// agents (in this process), priced as for [`max_cost_usd`](Self::max_cost_usd). With no prices
    /// here or on the agent, the agent's `build` refuses a cost cap; it warns when its price
    /// table has no price for the agent's model (which then costs nothing).
    pub fn max_cost_usd_per_user(mut self, usd: f64) -> Self {
        self.max_cost_usd_per_user = Some(usd);
        self
    }

    /// Caps the time one run spends running, added up over all its legs: a run suspended
    /// for days waiting for an approval has used only the time before and after. The calls
    /// of a tools step that finished before another call suspended count too: the step
    /// journals the time each of its executions ran (one small journal entry a tools step,
    /// only with this cap). It is checked before each model turn (a long tool call can go
    /// past it; the run stops at the next turn), and the run's
    /// [`running_ms`](super::AgentState::running_ms) keeps the count.
    ///
    /// Unlike [`AgentBuilder::timeout`](super::AgentBuilder::timeout), which cancels one
    /// call of `run` or `resume` with an error wherever it is, this stops the run cleanly
    /// with reason `budget:wall_clock` and keeps its work.
    pub fn max_wall_clock(mut self, limit: Duration) -> Self {
        self.max_wall_clock = Some(limit);
        self
    }

    /// What is wrong with its caps and prices, each naming its field: a cap or a price that
    /// is negative or not a number never stops a run, or stops every one, and so does a cap
    /// of zero (often meant as "no cap": leave the cap out for that).
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        // A cap must be more than zero; a price may be zero (a model that costs nothing).
        let usd = [
            ("budget.max_cost_usd", self.max_cost_usd, true),
            (
                "budget.max_cost_usd_per_user",
                self.max_cost_usd_per_user,
                true,
            ),
            ("budget input price", Some(self.input_price), false),
            ("budget output price", Some(self.output_price), false),
        ];
        for (field, value, cap) in usd {
            let Some(value) = value else { continue };
            if cap && !(value.is_finite() && value > 0.0) {
                problems.push(format!(
                    "{field} must be a number more than zero (not {value}); leave it out for \
                     no cap"
                ));
            } else if !(value.is_finite() && value >= 0.0) {
                problems.push(format!(
                    "{field} must be a number, zero or more (not {value})"
                ));
            }
        }
        let tokens = [
            ("budget.max_tokens", self.max_tokens),
            ("budget.max_tokens_per_user", self.max_tokens_per_user),
        ];
        for (field, _) in tokens.iter().filter(|(_, cap)| *cap == Some(0)) {
            problems.push(format!(
                "{field} must be at least 1; leave it out for no cap"
            ));
        }
        // Every run would stop at once, as a config file's `max_wall_clock = 0` is refused.
        if self.max_wall_clock.is_some_and(|limit| limit.is_zero()) {
            problems.push("budget.max_wall_clock must be more than zero".to_owned());
        }
        problems
    }

    /// Whether it caps the run's running time: only then does a tools node that suspends
    /// carry its time over to the leg that resumes it (see [`carry_leg`]).
    pub(crate) fn caps_wall_clock(&self) -> bool {
        self.max_wall_clock.is_some()
    }

    /// The cost of `usage` at the configured prices.
    #[allow(clippy::cast_precision_loss)] // token counts are far below 2^52
    pub fn cost_usd(&self, usage: &Usage) -> f64 {
        (usage.input_tokens as f64 * self.input_price
            + usage.output_tokens as f64 * self.output_price)
            / 1_000_000.0
    }

    /// Whether it caps a cost, a run's or a user's.
    pub(crate) fn caps_cost(&self) -> bool {
        self.max_cost_usd.is_some() || self.max_cost_usd_per_user.is_some()
    }

    /// Whether this budget has prices of its own (else the agent's price table counts).
    pub(crate) fn priced_here(&self) -> bool {
        self.input_price != 0.0 || self.output_price != 0.0
    }

    /// The first cap that `state`'s run (its usage, its cost at the agent's price table, its
    /// running time) or its user's totals have reached.
    pub(crate) fn exceeded(&self, state: &AgentState) -> Option<BudgetCap> {
        let usage = &state.usage;
        if self
            .max_tokens
            .is_some_and(|cap| usage.total_tokens() >= cap)
        {
            return Some(BudgetCap::Tokens);
        }
        let cost = if self.priced_here() {
            self.cost_usd(usage)
        } else {
            state.cost_usd.unwrap_or(0.0)
        };
        if self.max_cost_usd.is_some_and(|cap| cost >= cap) {
            return Some(BudgetCap::Cost);
        }
        if self
            .max_wall_clock
            .is_some_and(|cap| Duration::from_millis(state.running_ms) >= cap)
        {
            return Some(BudgetCap::WallClock);
        }
        let user = state.user.as_deref()?;
        let spent = self.lock().get(user).copied().unwrap_or_default();
        if self
            .max_tokens_per_user
            .is_some_and(|cap| spent.tokens >= cap)
        {
            return Some(BudgetCap::UserTokens);
        }
        if self
            .max_cost_usd_per_user
            .is_some_and(|cap| spent.cost_usd >= cap)
        {
            return Some(BudgetCap::UserCost);
        }
        None
    }

    /// Adds a turn's usage, which cost `cost_usd` at the agent's price table, to its user's
    /// totals.
    pub(crate) fn record(&self, user: Option<&str>, usage: Usage, cost_usd: Option<f64>) {
        let per_user = self.max_tokens_per_user.is_some() || self.max_cost_usd_per_user.is_some();
        let Some(user) = user.filter(|_| per_user) else {
            return;
        };
        let cost = if self.priced_here() {
            self.cost_usd(&usage)
        } else {
            cost_usd.unwrap_or(0.0)
        };
        let mut spent = self.lock();
        let spent = spent.entry(user.to_owned()).or_default();
        spent.tokens = spent.tokens.saturating_add(usage.total_tokens());
        spent.cost_usd += cost;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, UserSpend>> {
        crate::sync::lock(&self.used_by_user)
    }
}

/// What the earlier executions of this tools step spent running, in ms, and records this
/// one's `this_leg_ms` for the executions after it.
///
/// A tools node that suspends (a call waits for approval) loses its state, the time it ran
/// included, and runs again when resumed: the calls that finished replay from the journal
/// in no time. Each execution journals the time it ran, one entry after another under one
/// name; the next replays them (they are recorded) and adds them up, then records its own.
pub(crate) async fn carry_leg(ctx: &crate::Context, this_leg_ms: u64) -> crate::Result<u64> {
    let mut earlier: u64 = 0;
    loop {
        let ran = Ran::default();
        let ms: u64 = ctx
            .step("budget:tools_leg", || async {
                ran.mark();
                Ok::<_, crate::Error>(this_leg_ms)
            })
            .await?;
        if ran.happened() {
            return Ok(earlier);
        }
        earlier = earlier.saturating_add(ms);
    }
}

/// Whether a journaled step's closure ran in this execution, rather than its result being
/// replayed from the journal: what a replayed call spent was charged to its user when it
/// ran, so only a call that ran now is [recorded](Budget::record).
#[derive(Debug, Default)]
pub(crate) struct Ran(AtomicBool);

impl Ran {
    /// Called from inside the step's closure.
    pub(crate) fn mark(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub(crate) fn happened(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// A point on the monotonic clock up to which a run's running time was counted in this leg
/// ([`AgentState::running_ms`]); kept in the state but not checkpointed. It is not part of
/// the state's value: any two compare equal.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RunningMark(Option<tokio::time::Instant>);

impl PartialEq for RunningMark {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl RunningMark {
    /// `counted` milliseconds plus the whole milliseconds since the mark, which moves on by
    /// as much (the remainder counts next time). Without a mark (a new leg), sets one.
    pub(crate) fn advance(&mut self, counted: u64) -> u64 {
        let now = tokio::time::Instant::now();
        let Some(mark) = self.0 else {
            self.0 = Some(now);
            return counted;
        };
        let elapsed = now.saturating_duration_since(mark);
        let whole = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        self.0 = Some(mark + Duration::from_millis(whole));
        counted.saturating_add(whole)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            ..Usage::default()
        }
    }

    fn state_of(user: &str) -> AgentState {
        AgentState {
            user: Some(user.to_owned()),
            ..AgentState::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn running_time_counts_within_a_leg_and_restarts_counting_in_the_next() {
        let budget = Budget::default().max_wall_clock(Duration::from_secs(15));
        let mut state = AgentState::default();
        state.count_running_time(); // the leg starts
        tokio::time::sleep(Duration::from_millis(10_400)).await;
        state.count_running_time();
        assert_eq!(state.running_ms, 10_400);
        assert_eq!(budget.exceeded(&state), None);
        // Checkpointed and resumed an hour later: the hour is not counted.
        let mut resumed: AgentState =
            serde_json::from_value(serde_json::to_value(&state).unwrap()).unwrap();
        tokio::time::sleep(Duration::from_secs(3_600)).await;
        resumed.count_running_time();
        assert_eq!(resumed.running_ms, 10_400);
        tokio::time::sleep(Duration::from_millis(4_600)).await;
        resumed.count_running_time();
        assert_eq!(resumed.running_ms, 15_000);
        assert_eq!(budget.exceeded(&resumed), Some(BudgetCap::WallClock));
    }

    #[tokio::test(start_paused = true)]
    async fn fractions_of_a_millisecond_are_not_lost() {
        let mut state = AgentState::default();
        state.count_running_time();
        for _ in 0..10 {
            tokio::time::advance(Duration::from_micros(500)).await;
            state.count_running_time();
        }
        assert_eq!(state.running_ms, 5);
    }

    #[test]
    fn running_time_is_checkpointed_only_once_there_is_some() {
        let json = serde_json::to_value(AgentState::default()).unwrap();
        assert!(json.get("running_ms").is_none(), "{json}");
        let old: AgentState = serde_json::from_value(json).unwrap();
        assert_eq!(old.running_ms, 0);
    }

    #[test]
    fn a_users_cost_adds_up_at_the_budgets_prices_or_else_the_agents() {
        // At the budget's own prices: 1M input tokens at $1.
        let budget = Budget::default()
            .prices_per_million(1.0, 0.0)
            .max_cost_usd_per_user(2.0);
        budget.record(Some("a"), usage(1_000_000, 0), Some(99.0));
        assert_eq!(budget.exceeded(&state_of("a")), None);
        budget.record(Some("a"), usage(1_000_000, 0), None);
        assert_eq!(budget.exceeded(&state_of("a")), Some(BudgetCap::UserCost));
        assert_eq!(budget.exceeded(&state_of("b")), None);
        assert_eq!(budget.exceeded(&AgentState::default()), None, "no user");
        // At the agent's table: the cost the turn was given.
        let budget = Budget::default().max_cost_usd_per_user(0.5);
        budget.record(Some("a"), usage(10, 10), Some(0.25));
        budget.record(Some("a"), usage(10, 10), None); // not priced: free
        assert_eq!(budget.exceeded(&state_of("a")), None);
        budget.record(Some("a"), usage(10, 10), Some(0.25));
        assert_eq!(budget.exceeded(&state_of("a")), Some(BudgetCap::UserCost));
    }

    #[test]
    fn clones_share_the_users_totals() {
        let budget = Budget::default().max_tokens_per_user(100);
        budget.clone().record(Some("a"), usage(60, 40), None);
        assert_eq!(budget.exceeded(&state_of("a")), Some(BudgetCap::UserTokens));
    }
}
