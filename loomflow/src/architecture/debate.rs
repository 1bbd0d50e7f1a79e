//! [`Debate`]: debaters argue in turn over a number of rounds, then a judge decides.

use crate::agent::{Agent, AgentState};
use crate::architecture::{TeamState, agent_input, compile_checked, record_said, too_few};
use crate::graph::{CompiledGraph, END, Graph, START};
use crate::model::Message;

/// Debaters argue over the task in turn for a number of rounds, each seeing the task and the
/// debate so far; then a judge reads the whole debate and decides. The judge's answer is the
/// output.
///
/// ```text
/// START → a → b ─(rounds left)→ a …
///               ─(last round)→ judge → END
/// ```
///
/// Each argument joins `messages` as `name: argument`; `round` counts the rounds in which
/// every debater spoke; `path` lists the debaters in turn, then `judge`.
#[must_use]
pub struct Debate {
    /// The graph's name (default `debate`): what a worker and `submit` know it by.
    name: String,
    judge: Agent,
    debaters: Vec<(String, Agent)>,
    rounds: u32,
}

impl std::fmt::Debug for Debate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Debate")
            .field("judge", &self.judge.name())
            .field(
                "debaters",
                &self
                    .debaters
                    .iter()
                    .map(|(name, _)| name.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("rounds", &self.rounds)
            .finish_non_exhaustive()
    }
}

/// The debate so far: every argument after the task, in order.
fn transcript(team: &TeamState) -> String {
    let said: Vec<&str> = team.messages.iter().skip(1).map(Message::text).collect();
    if said.is_empty() {
        "(nothing yet: you open the debate)".to_owned()
    } else {
        said.join("\n\n")
    }
}

impl Debate {
    /// A debate that `judge` decides; add at least two debaters.
    pub fn new(judge: Agent) -> Self {
        Self {
            name: "debate".to_owned(),
            judge,
            debaters: Vec::new(),
            rounds: 2,
        }
    }

    /// Names the team's graph (default `debate`): a [`Worker`](crate::Worker) and
    /// [`Runtime::submit`](crate::Runtime::submit) find a graph by its name, so two teams of
    /// this shape on one store need names of their own, or one would run the other's runs.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Adds a debater; debaters speak in the order they were added.
    pub fn debater(mut self, name: impl Into<String>, agent: Agent) -> Self {
        self.debaters.push((name.into(), agent));
        self
    }

    /// How many times each debater speaks (default 2). 0 counts as 1.
    pub fn rounds(mut self, rounds: u32) -> Self {
        self.rounds = rounds.max(1);
        self
    }

    /// Builds the graph.
    ///
    /// # Errors
    ///
    /// A [`GraphError`](crate::GraphError) listing every problem found: fewer than two
    /// debaters ([`TooFewMembers`](crate::graph::GraphProblem::TooFewMembers)), and debater
    /// names that clash with each other or with `judge`
    /// ([`DuplicateNode`](crate::graph::GraphProblem::DuplicateNode)).
    pub fn build(self) -> crate::Result<CompiledGraph<TeamState>> {
        let problems: Vec<_> = too_few("debaters", 2, self.debaters.len())
            .into_iter()
            .collect();
        let name = self.name.clone();
        compile_checked(&name, self.graph(), problems)
    }

    /// The graph, wired whatever the number of debaters so that `compile` finds the other
    /// problems.
    fn graph(self) -> Graph<TeamState> {
        let rounds = self.rounds;
        let names: Vec<String> = self.debaters.iter().map(|(name, _)| name.clone()).collect();
        let everyone = names.join(", ");
        let turns = names.len() as u64 * u64::from(rounds);
        let mut graph = Graph::new(self.name.clone()).recursion_limit(turns + 2);
        for (i, (name, agent)) in self.debaters.into_iter().enumerate() {
            let closes_round = i + 1 == names.len();
            let everyone = everyone.clone();
            let speaker = name.clone();
            graph = graph.subgraph(
                name.clone(),
                agent.graph().clone(),
                move |team: &TeamState| {
                    agent_input(team, format!(
                        "Task: {}\n\nYou are {speaker}, one of the debaters ({everyone}); this is round {} of {rounds}.\n\nThe debate so far:\n\n{}\n\nGive your argument: your answer to the task and why, answering the other debaters' points. Reply with your argument only.",
                        team.task,
                        team.round + 1,
                        transcript(team)
                    ))
                },
                move |team: &mut TeamState, state: AgentState| {
                    record_said(team, &name, &state);
                    if closes_round {
                        team.round += 1;
                    }
                },
            );
        }
        graph = graph
            .subgraph(
                "judge",
                self.judge.graph().clone(),
                move |team: &TeamState| {
                    agent_input(team, format!(
                        "Task: {}\n\nThe debaters ({everyone}) argued over {rounds} rounds:\n\n{}\n\nYou are the judge. Weigh the arguments and decide: reply with the final answer to the task, and briefly why.",
                        team.task,
                        transcript(team)
                    ))
                },
                |team: &mut TeamState, state: AgentState| {
                    let text = record_said(team, "judge", &state);
                    team.output = Some(text);
                },
            )
            .edge("judge", END);
        let (Some(first), Some(last)) = (names.first().cloned(), names.last().cloned()) else {
            return graph.edge(START, "judge");
        };
        graph = graph.edge(START, first.clone());
        for pair in names.windows(2) {
            if let [from, to] = pair {
                graph = graph.edge(from.clone(), to.clone());
            }
        }
        let again = first.clone();
        graph.branch(
            last,
            [first, "judge".to_owned()],
            move |team: &TeamState| {
                if team.round < rounds {
                    again.clone()
                } else {
                    "judge".to_owned()
                }
            },
        )
    }
}
