//! [`ActorCritic`]: an actor proposes, a critic scores the proposal, the actor tries again
//! with the latest feedback until the score is high enough.

use crate::agent::{Agent, AgentState};
use crate::architecture::{TeamState, agent_input, decision, record_draft, record_said};
use crate::graph::{CompiledGraph, END, Graph, START};

/// An actor proposes an answer; a critic scores it from 0 to 10 with feedback; a score at
/// or above the threshold accepts the proposal, a lower one sends the actor back with its
/// proposal and the latest feedback (only the latest: see [`Reflexion`](super::Reflexion)
/// for a memory of every critique).
///
/// ```text
/// START → actor → critic ─(score ≥ threshold, or rounds spent)→ END
///                        ─(score < threshold)→ actor …
/// ```
///
/// The critic is told to reply `SCORE: <0-10>` on its first line, then its feedback. The
/// score is read from the first line that starts with `SCORE:` (any case; markdown around it
/// is ignored, a fraction is dropped: `SCORE: 7.5/10` reads as 7); the rest of the reply is
/// the feedback. **A reply without a readable score (none, or above 10) counts as score 0,
/// and its whole text is the feedback.**
///
/// The run ends with the accepted proposal in `output`, or, once the actor has proposed
/// `max_rounds` times, with its last proposal (`accepted` tells which). `score` holds the
/// latest score, `critiques` the feedback on each rejected proposal, oldest first, `round`
/// the number of proposals, and `path` alternates `actor` and `critic`.
#[must_use]
pub struct ActorCritic {
    /// The graph's name (default `actor_critic`): what a worker and `submit` know it by.
    name: String,
    actor: Agent,
    critic: Agent,
    threshold: u8,
    max_rounds: u32,
}

impl std::fmt::Debug for ActorCritic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActorCritic")
            .field("actor", &self.actor.name())
            .field("critic", &self.critic.name())
            .field("threshold", &self.threshold)
            .field("max_rounds", &self.max_rounds)
            .finish_non_exhaustive()
    }
}

/// A critic's reply read as a score and feedback; no score when no line starts with
/// `SCORE: n` for n from 0 to 10.
fn parse_score(reply: &str) -> (Option<u8>, String) {
    let mut score = None;
    let mut feedback = Vec::new();
    for line in reply.lines() {
        if score.is_none()
            && let Some((n, rest)) = score_line(line)
        {
            score = Some(n);
            feedback.push(rest);
            continue;
        }
        feedback.push(line);
    }
    (score, feedback.join("\n").trim().to_owned())
}

/// `SCORE: n…` → `(n, what follows it)`, the `/10` and a fraction dropped.
fn score_line(line: &str) -> Option<(u8, &str)> {
    let line = line.trim_start_matches(|c: char| !c.is_alphanumeric());
    let head = line.get(..5)?;
    if !head.eq_ignore_ascii_case("score") {
        return None;
    }
    let markup = |c: char| c.is_whitespace() || c == '*' || c == '_';
    let rest = line
        .get(5..)?
        .trim_start_matches(markup)
        .strip_prefix(':')?
        .trim_start_matches(markup);
    let after = rest.trim_start_matches(|c: char| c.is_ascii_digit());
    let score: u8 = rest.get(..rest.len() - after.len())?.parse().ok()?;
    if score > 10 {
        return None;
    }
    let after = match after.strip_prefix('.') {
        Some(fraction) if fraction.starts_with(|c: char| c.is_ascii_digit()) => {
            fraction.trim_start_matches(|c: char| c.is_ascii_digit())
        }
        _ => after,
    };
    let after = after.strip_prefix("/10").unwrap_or(after);
    Some((
        score,
        after.trim_start_matches(|c: char| !c.is_alphanumeric()),
    ))
}

/// The actor's prompt: the task alone at first, then the task, its last proposal, the score
/// and the latest feedback.
fn actor_prompt(team: &TeamState) -> String {
    let Some(draft) = &team.draft else {
        return team.task.clone();
    };
    format!(
        "Task: {}\n\nYour previous proposal:\n{draft}\n\nA critic scored it {}/10 and said:\n{}\n\nPropose an improved answer. Reply with the answer only.",
        team.task,
        team.score.unwrap_or_default(),
        team.critiques.last().map_or("", String::as_str)
    )
}

fn critic_prompt(team: &TeamState) -> String {
    format!(
        "Task: {}\n\nProposal:\n{}\n\nScore the proposal from 0 (useless) to 10 (perfect). Reply with `SCORE: <0-10>` on the first line, then your feedback: what to improve.",
        team.task,
        team.draft.as_deref().unwrap_or_default()
    )
}

impl ActorCritic {
    /// An actor and the critic that scores its proposals (they may be the same agent).
    pub fn new(actor: Agent, critic: Agent) -> Self {
        Self {
            name: "actor_critic".to_owned(),
            actor,
            critic,
            threshold: 8,
            max_rounds: 3,
        }
    }

    /// Names the team's graph (default `actor_critic`): a [`Worker`](crate::Worker) and
    /// [`Runtime::submit`](crate::Runtime::submit) find a graph by its name, so two teams of
    /// this shape on one store need names of their own, or one would run the other's runs.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The lowest score that accepts a proposal (default 8). Above 10, nothing is accepted
    /// and the run always ends after `max_rounds`.
    pub fn threshold(mut self, score: u8) -> Self {
        self.threshold = score;
        self
    }

    /// The most proposals the actor makes (default 3); after the last one is scored the run
    /// ends with it, accepted or not. 0 counts as 1.
    pub fn max_rounds(mut self, rounds: u32) -> Self {
        self.max_rounds = rounds.max(1);
        self
    }

    /// Builds the graph.
    ///
    /// # Errors
    ///
    /// Never in practice; the graph's shape is fixed.
    pub fn build(self) -> crate::Result<CompiledGraph<TeamState>> {
        let (threshold, max_rounds) = (self.threshold, self.max_rounds);
        let critic = self.critic.name().to_owned();
        Ok(Graph::new(self.name.clone())
            .recursion_limit(2 * u64::from(max_rounds) + 1)
            .subgraph(
                "actor",
                self.actor.graph().clone(),
                |team: &TeamState| agent_input(team, actor_prompt(team)),
                record_draft,
            )
            // The critic decides whether the team goes on: a blocked, cut or partial reply
            // fails its node rather than being read as a verdict.
            .subgraph_checked(
                "critic",
                self.critic.graph().clone(),
                |team: &TeamState| agent_input(team, critic_prompt(team)),
                move |team: &mut TeamState, state: AgentState| {
                    decision(&critic, &state)?;
                    let text = record_said(team, "critic", &state);
                    let (score, feedback) = parse_score(&text);
                    let score = score.unwrap_or(0);
                    team.score = Some(score);
                    if score >= threshold {
                        team.accepted = true;
                        team.output.clone_from(&team.draft);
                    } else {
                        team.critiques.push(feedback);
                        if team.round >= max_rounds {
                            team.output.clone_from(&team.draft);
                        }
                    }
                    Ok(())
                },
            )
            .edge(START, "actor")
            .edge("actor", "critic")
            .branch("critic", ["actor", END], |team: &TeamState| {
                if team.output.is_some() { END } else { "actor" }
            })
            .compile()?)
    }
}

#[cfg(test)]
mod tests {
    use super::parse_score;

    #[test]
    fn the_score_line_gives_the_score_and_the_rest_is_feedback() {
        let cases = [
            ("SCORE: 7\nAdd an example.", Some(7), "Add an example."),
            ("score: 10", Some(10), ""),
            ("**Score:** 6/10 - too long", Some(6), "too long"),
            ("**SCORE**: 3", Some(3), ""),
            ("SCORE: 7.5\nclose", Some(7), "close"),
            ("Looks fine.\nSCORE: 9", Some(9), "Looks fine."),
            ("SCORE: 11\nway off scale", None, "SCORE: 11\nway off scale"),
            ("SCORE: high\nvague", None, "SCORE: high\nvague"),
            ("Pretty good overall.", None, "Pretty good overall."),
            ("Scoring aside: 9", None, "Scoring aside: 9"),
        ];
        for (reply, score, feedback) in cases {
            assert_eq!(parse_score(reply), (score, feedback.to_owned()), "{reply}");
        }
    }
}
