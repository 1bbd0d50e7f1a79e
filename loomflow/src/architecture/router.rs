//! [`Router`]: one classification step sends the task to one worker.

use crate::agent::{Agent, AgentState};
use crate::architecture::{
    Member, TeamState, agent_input, compile_checked, decision, marked_if_stopped, member_answer,
    named_member, roster, too_few,
};
use crate::graph::{CompiledGraph, END, Graph, START};
use crate::model::Message;

/// Sends a task to the one worker a classifier agent picks.
///
/// ```text
/// START → router ─(worker name)→ worker → END
/// ```
///
/// The classifier is told the workers' names and descriptions and answers with a name. A
/// reply that is more than a name picks the worker it names as a whole word (`The
/// rewriter.` picks `rewriter`, not `writer`); a reply that names no worker, or two, fails
/// the run with an error quoting it. A classifier stopped before it answered (a guardrail,
/// a budget, its turn limit, a cut or filtered reply) fails the run with
/// [`AgentError::Undecided`](crate::agent::AgentError::Undecided), naming it and why.
#[must_use]
pub struct Router {
    /// The graph's name (default `router`): what a worker and `submit` know it by.
    name: String,
    classifier: Agent,
    workers: Vec<Member>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("classifier", &self.classifier.name())
            .field(
                "workers",
                &self
                    .workers
                    .iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Router {
    /// A router whose classification step is `classifier`.
    pub fn new(classifier: Agent) -> Self {
        Self {
            name: "router".to_owned(),
            classifier,
            workers: Vec::new(),
        }
    }

    /// Names the team's graph (default `router`): a [`Worker`](crate::Worker) and
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

    /// Builds the graph.
    ///
    /// # Errors
    ///
    /// A [`GraphError`](crate::GraphError) listing every problem found: no worker
    /// ([`TooFewMembers`](crate::graph::GraphProblem::TooFewMembers)), and worker names that
    /// clash (with each other or with `router`).
    pub fn build(self) -> crate::Result<CompiledGraph<TeamState>> {
        let roster = roster(&self.workers);
        let workers = self.workers.clone();
        let names: Vec<String> = self.workers.iter().map(|w| w.name.clone()).collect();
        let classifier = self.classifier.name().to_owned();
        let problems: Vec<_> = too_few("workers", 1, names.len()).into_iter().collect();
        let mut graph = Graph::new(self.name.clone())
            .subgraph_checked(
                "router",
                self.classifier.graph().clone(),
                move |team: &TeamState| {
                    agent_input(team, format!(
                        "Task: {}\n\nWorkers:\n{roster}\n\nAnswer with the name of the one worker best suited to the task, and nothing else.",
                        team.task
                    ))
                },
                move |team: &mut TeamState, state: AgentState| {
                    let said = decision(&classifier, &state)?;
                    team.path.push("router".to_owned());
                    team.next = Some(named_member(&classifier, &workers, &said, &said)?);
                    Ok(())
                },
            )
            .edge(START, "router")
            .branch("router", names, |team: &TeamState| {
                team.next.clone().unwrap_or_default()
            });
        for worker in self.workers {
            let name = worker.name.clone();
            graph = graph
                .subgraph(
                    worker.name.clone(),
                    worker.agent.graph().clone(),
                    |team: &TeamState| agent_input(team, &team.task),
                    move |team: &mut TeamState, state: AgentState| {
                        let text = member_answer(team, &name, &state);
                        team.path.push(name.clone());
                        let said = marked_if_stopped(&name, &state, &text);
                        team.messages.push(Message::assistant(said));
                        team.output = Some(text);
                    },
                )
                .edge(worker.name, END);
        }
        compile_checked(&self.name, graph, problems)
    }
}
