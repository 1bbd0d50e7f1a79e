//! [`Budget`]: token and cost caps, per run and per user.

use super::stop::BudgetCap;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::model::Usage;

/// Token and cost caps for an agent. A run that reaches a cap stops before its next model
/// turn, keeps its work, and reports `interrupted` with reason `budget:<cap>`.
///
/// Cost is computed from token counts and the prices you give (per million tokens).
///
/// # Examples
///
/// ```
/// use loomflow::agent::Budget;
///
/// let budget = Budget::default()
///     .max_tokens(20_000)                 // per run
///     .max_cost_usd(0.50)                 // per run, at these prices:
///     .prices_per_million(2.50, 10.00)    // input, output
///     .max_tokens_per_user(200_000);      // across all runs of one user
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
    used_by_user: Arc<Mutex<HashMap<String, u64>>>,
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

    /// Caps the tokens one user may spend across every run of this agent.
    pub fn max_tokens_per_user(mut self, tokens: u64) -> Self {
        self.max_tokens_per_user = Some(tokens);
        self
    }

    /// The cost of `usage` at the configured prices.
    #[allow(clippy::cast_precision_loss)] // token counts are far below 2^52
    pub fn cost_usd(&self, usage: &Usage) -> f64 {
        (usage.input_tokens as f64 * self.input_price
            + usage.output_tokens as f64 * self.output_price)
            / 1_000_000.0
    }

    /// The first cap that `usage` (a run's, which cost `cost_usd` at the agent's price
    /// table) or the user's total has reached.
    pub(crate) fn exceeded(
        &self,
        usage: &Usage,
        cost_usd: Option<f64>,
        user: Option<&str>,
    ) -> Option<BudgetCap> {
        if self
            .max_tokens
            .is_some_and(|cap| usage.total_tokens() >= cap)
        {
            return Some(BudgetCap::Tokens);
        }
        let priced_here = self.input_price != 0.0 || self.output_price != 0.0;
        let cost = if priced_here {
            self.cost_usd(usage)
        } else {
            cost_usd.unwrap_or(0.0)
        };
        if self.max_cost_usd.is_some_and(|cap| cost >= cap) {
            return Some(BudgetCap::Cost);
        }
        if let (Some(cap), Some(user)) = (self.max_tokens_per_user, user) {
            let used = self.lock().get(user).copied().unwrap_or(0);
            if used >= cap {
                return Some(BudgetCap::UserTokens);
            }
        }
        None
    }

    /// Adds a turn's usage to its user's total.
    pub(crate) fn record(&self, user: Option<&str>, usage: Usage) {
        if let (Some(_), Some(user)) = (self.max_tokens_per_user, user) {
            *self.lock().entry(user.to_owned()).or_default() += usage.total_tokens();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        crate::sync::lock(&self.used_by_user)
    }
}
