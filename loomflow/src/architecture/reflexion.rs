//! [`Reflexion`]: an actor answers, a critic evaluates, the actor revises with every critique
//! so far until the critic accepts.

use crate::agent::{Agent, AgentState};
use crate::architecture::{TeamState, agent_input, decision, directive, record_draft, record_said};
use crate::graph::{CompiledGraph, END, Graph, START};

/// An actor answers the task; a critic (the evaluator) accepts the answer or critiques it;
/// the actor revises with its previous answer and every critique so far in its prompt, the
/// reflections it remembers.
///
/// ```text
/// START → actor → critic ─(ACCEPT, or rounds spent)→ END
///                        ─(critique)→ actor …
/// ```
///
/// The critic is told to reply `ACCEPT` (or `ACCEPT: comment`) or a critique. The run ends
/// with the accepted answer in `output`, or, once the actor has answered `max_rounds` times,
/// with its last answer (`accepted` tells which). `round` counts the actor's answers,
/// `critiques` holds the critic's rejections, oldest first, and `path` alternates `actor`
/// and `critic`.
#[must_use]
pub struct Reflexion {
    /// The graph's name (default `reflexion`): what a worker and `submit` know it by.
    name: String,
    actor: Agent,
    critic: Agent,
    max_rounds: u32,
}

impl std::fmt::Debug for Reflexion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reflexion")
            .field("actor", &self.actor.name())
            .field("critic", &self.critic.name())
            .field("max_rounds", &self.max_rounds)
            .finish_non_exhaustive()
    }
}

/// Whether a critic's reply accepts the answer: its first line is `ACCEPT`, or starts with
/// `ACCEPT:`, ignoring case and the punctuation or markdown around the word.
fn accepts(reply: &str) -> bool {
    directive(reply, "accept").is_some()
}

/// The actor's prompt: the task alone at first, then the task, its last answer and every
/// critique so far.
fn actor_prompt(team: &TeamState) -> String {
    let Some(draft) = &team.draft else {
        return team.task.clone();
    };
    let critiques: Vec<String> = team
        .critiques
        .iter()
        .enumerate()
        .map(|(i, critique)| format!("{}. {critique}", i + 1))
        .collect();
    format!(
        "Task: {}\n\nYour previous answer:\n{draft}\n\nCritiques of your answers so far, oldest first:\n{}\n\nWrite an improved answer that addresses every critique. Reply with the answer only.",
        team.task,
        critiques.join("\n")
    )
}

fn critic_prompt(team: &TeamState) -> String {
    format!(
        "Task: {}\n\nAnswer to evaluate:\n{}\n\nIf the answer does the task fully and correctly, reply `ACCEPT` (or `ACCEPT: <comment>`). Otherwise reply with a critique: what is wrong or missing, and how to fix it.",
        team.task,
        team.draft.as_deref().unwrap_or_default()
    )
}

impl Reflexion {
    /// An actor and the critic that evaluates its answers (they may be the same agent).
    pub fn new(actor: Agent, critic: Agent) -> Self {
        Self {
            name: "reflexion".to_owned(),
            actor,
            critic,
            max_rounds: 3,
        }
    }

    /// Names the team's graph (default `reflexion`): a [`Worker`](crate::Worker) and
    /// [`Runtime::submit`](crate::Runtime::submit) find a graph by its name, so two teams of
    /// this shape on one store need names of their own, or one would run the other's runs.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The most answers the actor gives (default 3); after the last one is critiqued the run
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
        let max_rounds = self.max_rounds;
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
                    if accepts(&text) {
                        team.accepted = true;
                        team.output.clone_from(&team.draft);
                    } else {
                        team.critiques.push(text);
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
    use super::accepts;

    #[test]
    fn accept_is_the_first_word_of_the_first_line() {
        for reply in [
            "ACCEPT",
            "accept.",
            "**ACCEPT**",
            "ACCEPT: clear",
            "ACCEPT\nnice",
        ] {
            assert!(accepts(reply), "{reply}");
        }
        for reply in [
            "Accept the answer? No: the date is wrong",
            "Acceptable, but cite a source",
            "The answer is wrong.\nACCEPT it once fixed",
        ] {
            assert!(!accepts(reply), "{reply}");
        }
    }
}
