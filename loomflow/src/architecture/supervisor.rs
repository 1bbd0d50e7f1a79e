//! [`Supervisor`]: a supervisor agent picks the next worker, or finishes.

use crate::agent::{Agent, AgentState};
use crate::architecture::{
    Member, TeamState, agent_input, compile_checked, decision, directive, named_member,
    record_said, roster, split_at_member, too_few,
};
use crate::graph::{CompiledGraph, END, Graph, START};
use crate::model::Message;

/// A supervisor agent delegates to workers, one at a time, until it declares the task done.
///
/// ```text
/// START → supervisor ─(worker)→ worker → supervisor …
///                    ─(FINISH)→ END
/// ```
///
/// The supervisor sees the task, the workers and the results so far, and answers
/// `worker: instruction` or `FINISH: final answer`. The worker is the one named, as a whole
/// word, before the colon (`the rewriter: polish it` picks `rewriter`, not `writer`; a worker
/// named with a colon, `team:a: check it`, is read whole); a directive that names no
/// worker, or two, fails the run with an error quoting it. A bare
/// `FINISH` makes the last worker's answer the output (none when no worker ran). A worker
/// reads its instruction, the task, and what the team has so far (each worker's answer,
/// named), so that one can build on another's. A
/// supervisor stopped before it answered (a guardrail, a budget, its turn limit, a cut or
/// filtered reply) fails the run with
/// [`AgentError::Undecided`](crate::agent::AgentError::Undecided), naming it and why.
#[must_use]
pub struct Supervisor {
    /// The graph's name (default `supervisor`): what a worker and `submit` know it by.
    name: String,
    supervisor: Agent,
    workers: Vec<Member>,
    max_rounds: u64,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("supervisor", &self.supervisor.name())
            .field(
                "workers",
                &self
                    .workers
                    .iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("max_rounds", &self.max_rounds)
            .finish_non_exhaustive()
    }
}

impl Supervisor {
    /// A team led by `supervisor`.
    pub fn new(supervisor: Agent) -> Self {
        Self {
            name: "supervisor".to_owned(),
            supervisor,
            workers: Vec::new(),
            max_rounds: 10,
        }
    }

    /// Names the team's graph (default `supervisor`): a [`Worker`](crate::Worker) and
    /// [`Runtime::submit`](crate::Runtime::submit) find a graph by its name, so two teams of
    /// this shape on one store need names of their own, or one would run the other's runs.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Adds a worker.
    pub fn worker(
        mut self,
        name: impl Into<String>,
        description: impl Into<String>,
        agent: Agent,
    ) -> Self {
        self.workers.push(Member {
            name: name.into(),
            description: description.into(),
            agent,
        });
        self
    }

    /// The most delegations in a run (default 10): one more fails the run, the supervisor's
    /// node failing with [`AgentError::MaxRounds`](crate::agent::AgentError::MaxRounds)
    /// (the source of [`RunError::NodeFailed`](crate::RunError::NodeFailed)). They are counted over
    /// the whole run (in [`TeamState::round`]): a worker that waits for an approval, or a
    /// run recovered after a crash, carries on with the count it had.
    pub fn max_rounds(mut self, rounds: u64) -> Self {
        self.max_rounds = rounds;
        self
    }

    /// Builds the graph.
    ///
    /// # Errors
    ///
    /// A [`GraphError`](crate::GraphError) listing every problem found: no worker
    /// ([`TooFewMembers`](crate::graph::GraphProblem::TooFewMembers)), and worker names that
    /// clash ([`DuplicateNode`](crate::graph::GraphProblem::DuplicateNode)).
    pub fn build(self) -> crate::Result<CompiledGraph<TeamState>> {
        let problems: Vec<_> = too_few("workers", 1, self.workers.len())
            .into_iter()
            .collect();
        let roster = roster(&self.workers);
        let workers = self.workers.clone();
        let mut targets: Vec<String> = self.workers.iter().map(|w| w.name.clone()).collect();
        targets.push(END.to_owned());
        // A round is two supersteps (the supervisor, then a worker), and the supervisor has
        // the last word: the limit of one execution, which the count of rounds below
        // carries over resumes.
        let max_rounds = self.max_rounds;
        let boss = self.supervisor.name().to_owned();
        let limit = max_rounds.saturating_mul(2).saturating_add(1);
        let mut graph = Graph::new(self.name.clone())
            .recursion_limit(limit)
            .subgraph_checked(
                "supervisor",
                self.supervisor.graph().clone(),
                move |team: &TeamState| {
                    let progress: Vec<&str> = team.messages.iter().skip(1).map(Message::text).collect();
                    agent_input(team, format!(
                        "Task: {}\n\nWorkers:\n{roster}\n\nProgress so far:\n{}\n\nReply with one line: `<worker>: <instruction>` to delegate, or `FINISH: <final answer>` when the task is done.",
                        team.task,
                        if progress.is_empty() { "(nothing yet)".to_owned() } else { progress.join("\n") }
                    ))
                },
                move |team: &mut TeamState, state: AgentState| {
                    let text = decision(&boss, &state)?;
                    if let Some(rest) = directive(&text, "finish") {
                        // A bare `FINISH`: the last worker's answer is the output.
                        team.output = if rest.is_empty() { team.draft.clone() } else { Some(rest) };
                        team.next = None;
                    } else {
                        let (head, rest) = split_at_member(&text, &workers);
                        let member = named_member(&boss, &workers, &head, &text)?;
                        if u64::from(team.round) >= max_rounds {
                            return Err(crate::agent::AgentError::MaxRounds {
                                agent: boss.clone(),
                                max_rounds,
                            }
                            .into());
                        }
                        team.round = team.round.saturating_add(1);
                        team.next = Some(member);
                        team.instruction = Some(rest);
                    }
                    team.path.push("supervisor".to_owned());
                    Ok(())
                },
            )
            .edge(START, "supervisor")
            .branch("supervisor", targets, |team: &TeamState| {
                team.next.clone().unwrap_or_else(|| END.to_owned())
            });
        for worker in self.workers {
            let name = worker.name.clone();
            graph = graph
                .subgraph(
                    worker.name.clone(),
                    worker.agent.graph().clone(),
                    |team: &TeamState| {
                        let instruction = team.instruction.clone().filter(|i| !i.is_empty());
                        let mut input = match instruction {
                            Some(instruction) => {
                                format!("{instruction}\n\n(Overall task: {})", team.task)
                            }
                            None => team.task.clone(),
                        };
                        // What the others found, for an instruction that builds on it.
                        let so_far: Vec<&str> =
                            team.messages.iter().skip(1).map(Message::text).collect();
                        if !so_far.is_empty() {
                            input.push_str("\n\nWhat the team has so far:\n");
                            input.push_str(&so_far.join("\n"));
                        }
                        agent_input(team, input)
                    },
                    move |team: &mut TeamState, state: AgentState| {
                        let said = record_said(team, &name, &state);
                        team.draft = Some(said);
                        team.next = None;
                        team.instruction = None;
                    },
                )
                .edge(worker.name, "supervisor");
        }
        compile_checked(&self.name, graph, problems)
    }
}
