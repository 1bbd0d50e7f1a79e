//! [`PlanAndExecute`]: plan, execute the steps with a worker, re-plan until done.

use crate::agent::{Agent, AgentState};
use crate::architecture::{
    TeamState, agent_input, decision, directive, marked_if_stopped, member_answer, stop_note,
};
use crate::graph::{CompiledGraph, END, Graph, START};
use crate::model::Message;

/// A planner writes steps, an executor carries them out one by one, and a replanner either
/// declares the task done or writes the steps that remain.
///
/// ```text
/// START → planner → executor ─(steps left)→ executor
///                             ─(none left)→ replanner ─(DONE)→ END
///                                                     ─(new steps)→ executor
///                             ─(max_steps run, steps left)→ END
/// ```
///
/// The replanner ends the run with `DONE: answer` (or `Done.`, `**DONE**`: case, punctuation
/// and markdown around the word do not matter); the answer is the team's `output`, or, when
/// it gives none, the last step's result. `done` holds the steps carried out with their
/// results, and `plan` the steps still to do. Steps are read one a line, a list marker
/// (`1.`, `2)`, `-`, `*`) and the space after it taken off. `messages` is the team's
/// transcript: the task, then `planner: <plan>`, `executor: <result>` for each step
/// (marked when the executor's run stopped before it answered), and `replanner: <reply>`.
#[must_use]
pub struct PlanAndExecute {
    /// The graph's name (default `plan_and_execute`): what a worker and `submit` know it by.
    name: String,
    planner: Agent,
    executor: Agent,
    replanner: Agent,
    max_steps: u64,
}

impl std::fmt::Debug for PlanAndExecute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanAndExecute")
            .field("planner", &self.planner.name())
            .field("executor", &self.executor.name())
            .field("replanner", &self.replanner.name())
            .field("max_steps", &self.max_steps)
            .finish_non_exhaustive()
    }
}

/// The steps of a plan: one a line, without a list marker (`1.`, `2)`, `-`, `*`, `+`, `•`)
/// in front. Only a marker followed by a space is one: `3 emails to draft`, `2FA for
/// admins` and `1.5 kg flour` are steps as they are written.
fn steps(text: &str) -> Vec<String> {
    text.lines()
        .map(|line| without_marker(line.trim()).to_owned())
        .filter(|line| !line.is_empty())
        .collect()
}

fn without_marker(line: &str) -> &str {
    let digits = line.len() - line.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let marker = match line[digits..].chars().next() {
        Some('.' | ')') if digits > 0 => digits + 1,
        Some(c @ ('-' | '*' | '+' | '•')) if digits == 0 => c.len_utf8(),
        _ => return line,
    };
    match line[marker..].chars().next() {
        Some(c) if c.is_whitespace() => line[marker..].trim_start(),
        None => "",
        Some(_) => line,
    }
}

/// The last step's result: the answer when the replanner gives none.
fn last_result(team: &TeamState) -> Option<String> {
    team.done.last().map(|(_, result)| result.clone())
}

fn progress(team: &TeamState) -> String {
    if team.done.is_empty() {
        return "(nothing yet)".to_owned();
    }
    team.done
        .iter()
        .map(|(step, result)| format!("- {step}: {result}"))
        .collect::<Vec<_>>()
        .join("\n")
}

impl PlanAndExecute {
    /// A team of three agents (they may be the same agent).
    pub fn new(planner: Agent, executor: Agent, replanner: Agent) -> Self {
        Self {
            name: "plan_and_execute".to_owned(),
            planner,
            executor,
            replanner,
            max_steps: 20,
        }
    }

    /// Names the team's graph (default `plan_and_execute`): a [`Worker`](crate::Worker) and
    /// [`Runtime::submit`](crate::Runtime::submit) find a graph by its name, so two teams of
    /// this shape on one store need names of their own, or one would run the other's runs.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The most steps the executor carries out in a run, over every plan (default 20); 0
    /// counts as 1.
    ///
    /// Once it has carried out that many with steps still to do, the run ends cleanly,
    /// without error and without asking the replanner: `output` is the last step's result,
    /// `done` holds every step carried out and `plan` the steps left undone. When the last
    /// allowed step ends the plan, the replanner still runs: its `DONE` answer is the output,
    /// and the steps it writes instead are left in `plan`, the last result the output.
    pub fn max_steps(mut self, steps: u64) -> Self {
        self.max_steps = steps.max(1);
        self
    }

    /// Builds the graph.
    ///
    /// # Errors
    ///
    /// Never in practice; the graph's shape is fixed.
    pub fn build(self) -> crate::Result<CompiledGraph<TeamState>> {
        let max_steps = usize::try_from(self.max_steps).unwrap_or(usize::MAX);
        let (planner, replanner) = (
            self.planner.name().to_owned(),
            self.replanner.name().to_owned(),
        );
        Ok(Graph::new(self.name.clone())
            // A backstop only: `max_steps` ends the run first (planner, the replanner when
            // the plan had no steps, then at most one replanner per step).
            .recursion_limit(self.max_steps.saturating_mul(2).saturating_add(2))
            // The planner and the replanner decide what the team does next: a blocked, cut
            // or partial reply fails their node rather than being taken for a plan.
            .subgraph_checked(
                "planner",
                self.planner.graph().clone(),
                |team: &TeamState| {
                    agent_input(team, format!(
                        "Task: {}\n\nWrite a short plan to do it: one step per line, nothing else.",
                        team.task
                    ))
                },
                move |team: &mut TeamState, state: AgentState| {
                    let text = decision(&planner, &state)?;
                    team.plan = steps(&text);
                    team.path.push("planner".to_owned());
                    team.messages.push(Message::assistant(format!("planner: {text}")));
                    Ok(())
                },
            )
            .subgraph(
                "executor",
                self.executor.graph().clone(),
                |team: &TeamState| {
                    let step = team.plan.first().cloned().unwrap_or_default();
                    agent_input(team, format!(
                        "Task: {}\n\nDone so far:\n{}\n\nDo this step now and report the result: {step}",
                        team.task,
                        progress(team)
                    ))
                },
                move |team: &mut TeamState, state: AgentState| {
                    team.path.push("executor".to_owned());
                    if !team.plan.is_empty() {
                        let step = team.plan.remove(0);
                        let result = member_answer(team, "executor", &state);
                        let said = match &state.stopped {
                            Some(_) => marked_if_stopped("executor", &state, &result),
                            None => format!("executor: {result}"),
                        };
                        team.messages.push(Message::assistant(said));
                        // The replanner reads the step as cut short, not as done.
                        let step = match stop_note(&state) {
                            Some(note) => format!("{step} ({note})"),
                            None => step,
                        };
                        team.done.push((step, result));
                    }
                    if !team.plan.is_empty() && team.done.len() >= max_steps {
                        team.output = last_result(team);
                    }
                },
            )
            .subgraph_checked(
                "replanner",
                self.replanner.graph().clone(),
                |team: &TeamState| {
                    agent_input(team, format!(
                        "Task: {}\n\nDone so far:\n{}\n\nIf the task is complete, reply `DONE: <final answer>`. Otherwise reply with the remaining steps, one per line.",
                        team.task,
                        progress(team)
                    ))
                },
                move |team: &mut TeamState, state: AgentState| {
                    let text = decision(&replanner, &state)?;
                    team.path.push("replanner".to_owned());
                    team.messages.push(Message::assistant(format!("replanner: {text}")));
                    match directive(&text, "done") {
                        Some(rest) if !rest.is_empty() => team.output = Some(rest),
                        // A bare `DONE`: the last result is the answer.
                        Some(_) => team.output = last_result(team),
                        None => {
                            team.plan = steps(&text);
                            // No steps left to do, or no steps allowed: the last result is
                            // the answer.
                            if team.plan.is_empty() || team.done.len() >= max_steps {
                                team.output = last_result(team);
                            }
                        }
                    }
                    Ok(())
                },
            )
            .edge(START, "planner")
            // A plan with no steps (a blank reply) goes to the replanner, which sees nothing
            // done: the executor is not asked to do an empty step.
            .branch("planner", ["executor", "replanner"], |team: &TeamState| {
                if team.plan.is_empty() { "replanner" } else { "executor" }
            })
            .branch("executor", ["executor", "replanner", END], |team: &TeamState| {
                if team.plan.is_empty() {
                    "replanner"
                } else if team.output.is_some() {
                    END
                } else {
                    "executor"
                }
            })
            .branch("replanner", ["executor", END], |team: &TeamState| {
                if team.output.is_some() || team.plan.is_empty() { END } else { "executor" }
            })
            .compile()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_marker_goes_and_the_steps_own_words_stay() {
        let plan = "1. Draft the email\n2) Send it\n- check replies\n* file them\n\
                    \u{2022} archive\n3 emails to draft\n2FA for admins\n1.5 kg flour\n\
                    -5 degrees outside\n10.\n  \n";
        assert_eq!(
            steps(plan),
            [
                "Draft the email",
                "Send it",
                "check replies",
                "file them",
                "archive",
                "3 emails to draft",
                "2FA for admins",
                "1.5 kg flour",
                "-5 degrees outside",
            ]
        );
    }
}
