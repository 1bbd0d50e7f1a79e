//! [`StopReason`]: why an agent run stopped before it had an answer.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Which budget cap a run reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BudgetCap {
    /// The run's token cap ([`Budget::max_tokens`](super::Budget::max_tokens)).
    Tokens,
    /// The run's cost cap ([`Budget::max_cost_usd`](super::Budget::max_cost_usd)).
    Cost,
    /// The user's token cap across runs
    /// ([`Budget::max_tokens_per_user`](super::Budget::max_tokens_per_user)).
    UserTokens,
    /// The run's running-time cap, over all its legs
    /// ([`Budget::max_wall_clock`](super::Budget::max_wall_clock)).
    WallClock,
    /// The user's cost cap across runs
    /// ([`Budget::max_cost_usd_per_user`](super::Budget::max_cost_usd_per_user)).
    UserCost,
}

impl BudgetCap {
    fn as_str(self) -> &'static str {
        match self {
            Self::Tokens => "tokens",
            Self::Cost => "cost",
            Self::UserTokens => "user_tokens",
            Self::WallClock => "wall_clock",
            Self::UserCost => "user_cost",
        }
    }
}

/// Why an agent run stopped without an answer: a limit or a budget (the work so far is
/// kept), a final reply that is not a whole answer (cut short by the token limit, or
/// filtered by the provider), or a suspension (see
/// [`RunResult::pending`](super::RunResult::pending)).
///
/// On the wire (checkpoints, JSON results) it keeps its strings: `max_turns_exceeded`,
/// `budget:tokens`, `budget:cost`, `budget:user_tokens`, `budget:wall_clock`,
/// `budget:user_cost`, `suspended`, `guardrail:<name>`, `truncated`, `content_filter`.
///
/// # Examples
///
/// ```
/// use loomflow::agent::{BudgetCap, StopReason};
///
/// assert_eq!(StopReason::Budget(BudgetCap::Cost).to_string(), "budget:cost");
/// assert_eq!("max_turns_exceeded".parse::<StopReason>(), Ok(StopReason::MaxTurns));
/// assert_eq!(serde_json::to_value(StopReason::Suspended)?, "suspended");
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
#[non_exhaustive]
pub enum StopReason {
    /// The run took its turn limit.
    MaxTurns,
    /// The run reached a budget cap.
    Budget(BudgetCap),
    /// The run suspended: it waits for an approval, a signal or an interrupt's answer.
    Suspended,
    /// A [guardrail](super::Guardrail), named here, blocked the prompt, a tool result or
    /// the answer.
    Guardrail(String),
    /// The model's final reply hit its token limit ([`FinishReason::Length`]): the run's
    /// output is that reply, cut short. Raise `max_tokens`, or ask for less.
    ///
    /// [`FinishReason::Length`]: crate::model::FinishReason::Length
    Truncated,
    /// The provider filtered or refused the model's final reply
    /// ([`FinishReason::ContentFilter`]): the run's output is what the reply kept (a
    /// refusal's text, or nothing).
    ///
    /// [`FinishReason::ContentFilter`]: crate::model::FinishReason::ContentFilter
    ContentFilter,
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MaxTurns => f.write_str("max_turns_exceeded"),
            Self::Budget(cap) => write!(f, "budget:{}", cap.as_str()),
            Self::Suspended => f.write_str("suspended"),
            Self::Guardrail(name) => write!(f, "guardrail:{name}"),
            Self::Truncated => f.write_str("truncated"),
            Self::ContentFilter => f.write_str("content_filter"),
        }
    }
}

/// A string that names no [`StopReason`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown stop reason {0:?}")]
pub struct UnknownStopReason(pub String);

impl FromStr for StopReason {
    type Err = UnknownStopReason;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "max_turns_exceeded" => Self::MaxTurns,
            "suspended" => Self::Suspended,
            "truncated" => Self::Truncated,
            "content_filter" => Self::ContentFilter,
            "budget:tokens" => Self::Budget(BudgetCap::Tokens),
            "budget:cost" => Self::Budget(BudgetCap::Cost),
            "budget:user_tokens" => Self::Budget(BudgetCap::UserTokens),
            "budget:wall_clock" => Self::Budget(BudgetCap::WallClock),
            "budget:user_cost" => Self::Budget(BudgetCap::UserCost),
            other => match other.strip_prefix("guardrail:") {
                Some(name) if !name.is_empty() => Self::Guardrail(name.to_owned()),
                _ => return Err(UnknownStopReason(other.to_owned())),
            },
        })
    }
}

impl From<StopReason> for String {
    fn from(reason: StopReason) -> Self {
        reason.to_string()
    }
}

impl TryFrom<String> for StopReason {
    type Error = UnknownStopReason;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_round_trips_through_its_wire_string() {
        for reason in [
            StopReason::MaxTurns,
            StopReason::Suspended,
            StopReason::Budget(BudgetCap::Tokens),
            StopReason::Budget(BudgetCap::Cost),
            StopReason::Budget(BudgetCap::UserTokens),
            StopReason::Guardrail("no_pii".to_owned()),
            StopReason::Budget(BudgetCap::WallClock),
            StopReason::Budget(BudgetCap::UserCost),
            StopReason::Truncated,
            StopReason::ContentFilter,
        ] {
            assert_eq!(reason.to_string().parse::<StopReason>(), Ok(reason));
        }
        assert!("budget:hugs".parse::<StopReason>().is_err());
        assert!("guardrail:".parse::<StopReason>().is_err());
    }
}
