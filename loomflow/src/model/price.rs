//! [`PriceTable`]: what a model's tokens cost, for a run's `cost_usd`.

use std::collections::HashMap;

use super::Usage;

/// Prices per model, in US dollars per million tokens, from which agents compute what a run
/// cost ([`RunResult::cost_usd`](crate::agent::RunResult::cost_usd)). There is none by
/// default: prices change, and only you know yours.
///
/// A model is looked up by its full name (`openai:gpt-4o`, as
/// [`Model::name`](super::Model::name) gives it), then by the part after the provider
/// (`gpt-4o`).
///
/// # Examples
///
/// ```
/// use loomflow::model::{PriceTable, Usage};
///
/// let prices = PriceTable::new()
///     .model("gpt-4o", 2.50, 10.00)
///     .model("anthropic:claude-sonnet-4-5", 3.00, 15.00);
/// let usage = Usage { input_tokens: 1_000, output_tokens: 200, ..Usage::default() };
/// assert_eq!(prices.cost_usd("openai:gpt-4o", &usage), Some(0.0045));
/// assert_eq!(prices.cost_usd("openai:o3", &usage), None);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
#[must_use]
pub struct PriceTable {
    /// Model name → (input, output) price per million tokens.
    prices: HashMap<String, (f64, f64)>,
}

impl PriceTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// What is wrong with its prices, each naming its model: a price that is negative or not
    /// a number makes every cost meaningless.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut problems: Vec<String> = self
            .prices
            .iter()
            .filter(|(_, (input, output))| {
                ![input, output].iter().all(|p| p.is_finite() && **p >= 0.0)
            })
            .map(|(model, (input, output))| {
                format!(
                    "the prices of model {model} must be numbers, zero or more (input {input}, \
                     output {output})"
                )
            })
            .collect();
        problems.sort();
        problems
    }

    /// Prices `model`: US dollars per million input tokens and per million output tokens.
    pub fn model(mut self, model: impl Into<String>, input: f64, output: f64) -> Self {
        self.prices.insert(model.into(), (input, output));
        self
    }

    /// Whether the table prices nothing.
    pub fn is_empty(&self) -> bool {
        self.prices.is_empty()
    }

    /// What `usage` of `model` cost; `None` when the table has no price for it.
    #[allow(clippy::cast_precision_loss)] // token counts are far below 2^52
    pub fn cost_usd(&self, model: &str, usage: &Usage) -> Option<f64> {
        let bare = model.split_once(':').map_or(model, |(_, bare)| bare);
        let (input, output) = self.prices.get(model).or_else(|| self.prices.get(bare))?;
        Some(
            (usage.input_tokens as f64 * input + usage.output_tokens as f64 * output) / 1_000_000.0,
        )
    }
}
