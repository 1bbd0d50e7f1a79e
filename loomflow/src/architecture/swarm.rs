//! [`Swarm`]: agents hand the conversation to each other through handoff tools.

use crate::agent::{Agent, AgentState, is_retry_note};
use crate::architecture::{
    Member, TeamState, agent_input, compile_checked, member_answer, too_few,
};
use crate::graph::{CompiledGraph, END, Graph, GraphProblem, START};
use crate::model::Role;

/// Agents that pass the conversation along: each gets a `transfer_to_<name>` tool for every
/// other agent. The active agent is part of the checkpointed state (`TeamState::next`), so a
/// resumed run carries on with the agent that had the conversation; the agent that answered
/// stays active, so a next turn (the final state, a new user message pushed onto its
/// `messages`, invoked again) goes to it rather than to the first agent.
///
/// A reply that calls several handoff tools hands off to the first that succeeds; the
/// others' results tell the model they were not taken. An agent's permission policy allows
/// its handoffs whatever its default (they act on nothing but the conversation), unless it
/// has a rule for the handoff's own name (`transfer_to_billing`) or a router deciding it.
///
/// ```text
/// START ─(active)→ a ─(handoff)→ b ─(answer)→ END
/// ```
#[must_use]
pub struct Swarm {
    /// The graph's name (default `swarm`): what a worker and `submit` know it by.
    name: String,
    agents: Vec<Member>,
    start: Option<String>,
}

impl std::fmt::Debug for Swarm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Swarm")
            .field(
                "agents",
                &self
                    .agents
                    .iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("start", &self.start)
            .finish_non_exhaustive()
    }
}

impl Default for Swarm {
    fn default() -> Self {
        Self::new()
    }
}

impl Swarm {
    /// An empty swarm.
    pub fn new() -> Self {
        Self {
            name: "swarm".to_owned(),
            agents: Vec::new(),
            start: None,
        }
    }

    /// Names the team's graph (default `swarm`): a [`Worker`](crate::Worker) and
    /// [`Runtime::submit`](crate::Runtime::submit) find a graph by its name, so two teams of
    /// this shape on one store need names of their own, or one would run the other's runs.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Adds an agent; `description` tells the others when to hand off to it.
    pub fn agent(
        mut self,
        name: impl Into<String>,
        description: impl Into<String>,
        agent: Agent,
    ) -> Self {
        self.agents.push(Member {
            name: name.into(),
            description: description.into(),
            agent,
        });
        self
    }

    /// The agent that takes the first turn (default: the first added); `build` fails when
    /// no agent has this name.
    pub fn start_with(mut self, name: impl Into<String>) -> Self {
        self.start = Some(name.into());
        self
    }

    /// Builds the graph.
    ///
    /// # Errors
    ///
    /// A [`GraphError`](crate::GraphError) listing every problem found: names that clash,
    /// no agents ([`GraphProblem::TooFewMembers`]), and a [`start_with`](Self::start_with)
    /// naming no agent ([`GraphProblem::UnknownNode`]). Before those, and alone:
    /// [`AgentError::Invalid`](crate::agent::AgentError::Invalid) when two agents' handoff
    /// tools would have one name (`billing team` and `billing_team`).
    pub fn build(self) -> crate::Result<CompiledGraph<TeamState>> {
        let names: Vec<String> = self.agents.iter().map(|a| a.name.clone()).collect();
        let mut problems: Vec<_> = too_few("agents", 1, names.len()).into_iter().collect();
        if let Some(start) = self.start.as_ref().filter(|start| !names.contains(start)) {
            problems.push(GraphProblem::UnknownNode {
                name: start.clone(),
                context: "start_with".to_owned(),
            });
        }
        let first = self
            .start
            .clone()
            .or_else(|| names.first().cloned())
            .unwrap_or_default();
        let mut targets = names.clone();
        targets.push(END.to_owned());
        let mut graph =
            Graph::new(self.name.clone()).branch(START, names.clone(), move |team: &TeamState| {
                team.next.clone().unwrap_or_else(|| first.clone())
            });
        for member in &self.agents {
            let others: Vec<(String, String)> = self
                .agents
                .iter()
                .filter(|a| a.name != member.name)
                .map(|a| (a.name.clone(), a.description.clone()))
                .collect();
            let agent = member.agent.with_handoffs(&member.name, &others)?;
            let name = member.name.clone();
            graph = graph
                .subgraph(
                    member.name.clone(),
                    agent.graph().clone(),
                    |team: &TeamState| {
                        let mut state = agent_input(team, &team.task);
                        state.messages = team.messages.clone().into();
                        // This turn begins at the conversation's last user message (not
                        // an output schema's retry note): what the member's memory
                        // extraction reads, for this turn's user.
                        let turn = (team.messages.iter())
                            .rposition(|m| m.role() == Role::User && !is_retry_note(m));
                        state.run_start = turn.unwrap_or(0);
                        state
                    },
                    move |team: &mut TeamState, state: AgentState| {
                        team.path.push(name.clone());
                        // The agent that answered stays the active one: a next turn on the
                        // conversation (its state, a new message) goes to it.
                        match &state.handoff {
                            Some(target) => {
                                team.next = Some(target.clone());
                                team.output = None;
                            }
                            None => {
                                team.next = Some(name.clone());
                                team.output = Some(member_answer(team, &name, &state));
                            }
                        }
                        team.messages = state.messages.into_vec();
                    },
                )
                .branch(
                    member.name.clone(),
                    targets.clone(),
                    |team: &TeamState| match (&team.output, &team.next) {
                        (None, Some(next)) => next.clone(),
                        _ => END.to_owned(),
                    },
                );
        }
        compile_checked(&self.name, graph, problems)
    }
}
