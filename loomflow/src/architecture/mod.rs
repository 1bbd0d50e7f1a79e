//! Multi-agent shapes, built as graphs over agents: [`Router`], [`Supervisor`], [`Swarm`],
//! [`PlanAndExecute`], [`Reflexion`], [`Debate`], [`ActorCritic`].
//!
//! Each builder returns a [`CompiledGraph<TeamState>`](crate::CompiledGraph) whose nodes run
//! agents (as subgraphs, each under its own checkpoint namespace), so a shape checkpoints,
//! streams, renders to Mermaid and composes like any other graph. Run one with
//! [`TeamState::new`] as input; `path` records which agents ran, in order.
//!
//! The coordinating agents speak small text protocols, described in their instructions:
//! a router answers with a worker's name; a supervisor with `worker: instruction` or
//! `FINISH: answer`; a planner with one step per line; a replanner with `DONE: answer` or
//! new steps; a reflexion critic with `ACCEPT` or a critique; an actor-critic critic with
//! `SCORE: n` and feedback. Debaters and judges answer in prose.

mod actor_critic;
mod debate;
mod plan;
mod reflexion;
mod router;
mod supervisor;
mod swarm;

pub use actor_critic::ActorCritic;
pub use debate::Debate;
pub use plan::PlanAndExecute;
pub use reflexion::Reflexion;
pub use router::Router;
pub use supervisor::Supervisor;
pub use swarm::Swarm;

mod directive;
pub(crate) use directive::{directive, split_at_member};

use serde::{Deserialize, Serialize};

use crate::agent::{Agent, AgentState};
use crate::graph::{CompiledGraph, Graph, GraphError, GraphProblem, NodeError};
use crate::model::Message;

/// The state a multi-agent shape runs on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TeamState {
    /// The task the team was given.
    pub task: String,
    /// The team's shared transcript: the task, then each agent's contribution.
    pub messages: Vec<Message>,
    /// The agent chosen to act next (router, supervisor), or the active agent (swarm).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// What the supervisor asked the next worker to do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instruction: Option<String>,
    /// Steps still to execute (plan-and-execute).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plan: Vec<String>,
    /// Steps executed, with their results (plan-and-execute).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub done: Vec<(String, String)>,
    /// Rounds completed: the actor's answers (reflexion, actor-critic), rounds in which
    /// every debater spoke (debate), or delegations made (supervisor).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub round: u32,
    /// The actor's latest answer (reflexion, actor-critic), or the last worker's
    /// (supervisor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft: Option<String>,
    /// The critic's critiques of the answers it rejected, oldest first: its whole reply
    /// (reflexion) or its feedback without the score (actor-critic).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub critiques: Vec<String>,
    /// The critic's latest score, from 0 to 10 (actor-critic).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<u8>,
    /// Whether the critic accepted the answer in `output`; `false` when the rounds ran out
    /// first (reflexion, actor-critic).
    #[serde(default, skip_serializing_if = "is_false")]
    pub accepted: bool,
    /// The agents that ran, in order.
    pub path: Vec<String>,
    /// The team's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// The members whose runs stopped before they answered on their own (a turn limit, a
    /// budget, a guardrail, a cut or filtered reply), each with why, oldest first: what
    /// they gave the team (in the transcript, or as its output) is partial, or empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stopped: Vec<(String, crate::agent::StopReason)>,
    /// The user the team works for: each agent's run acts for them, so their budgets, rate
    /// limits, permissions and remembered approvals apply (see [`with_user`](Self::with_user)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

impl TeamState {
    /// A team state for a task.
    pub fn new(task: impl Into<String>) -> Self {
        let task = task.into();
        Self {
            messages: vec![Message::user(&task)],
            task,
            ..Self::default()
        }
    }

    /// The team works for `user`: every agent's run acts for them, as
    /// [`AgentRun::user`](crate::agent::AgentRun::user) makes a single agent's.
    #[must_use]
    pub fn with_user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }
}

/// The state an agent of the team starts a run on: `prompt`, acting for the team's user.
pub(crate) fn agent_input(team: &TeamState, prompt: impl Into<String>) -> AgentState {
    let mut state = AgentState::new(prompt);
    state.user.clone_from(&team.user);
    state
}

// serde's `skip_serializing_if` passes a reference.
fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A named agent with a description its coordinator reads.
#[derive(Clone, Debug)]
pub(crate) struct Member {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) agent: Agent,
}

pub(crate) fn roster(members: &[Member]) -> String {
    members
        .iter()
        .map(|m| format!("- {}: {}", m.name, m.description))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The problem of a team with `found` members in `role`, fewer than `min`, if it has.
pub(crate) fn too_few(role: &str, min: usize, found: usize) -> Option<GraphProblem> {
    (found < min).then(|| GraphProblem::TooFewMembers {
        role: role.to_owned(),
        min,
        found,
    })
}

/// Compiles the shape `name`'s graph; the problems the shape found itself come first in the
/// error, then every one `compile` finds.
pub(crate) fn compile_checked(
    name: &str,
    graph: Graph<TeamState>,
    mut problems: Vec<GraphProblem>,
) -> crate::Result<CompiledGraph<TeamState>> {
    match graph.compile() {
        Ok(graph) if problems.is_empty() => Ok(graph),
        Ok(_) => Err(GraphError::Invalid {
            graph: name.to_owned(),
            problems,
        }
        .into()),
        Err(error) => {
            problems.extend_from_slice(error.problems());
            Err(GraphError::Invalid {
                graph: name.to_owned(),
                problems,
            }
            .into())
        }
    }
}

/// The final text of an agent run, by the rules of
/// [`RunResult::output`](crate::agent::RunResult::output): a run a guardrail stopped has no
/// answer (empty, never an earlier, unchecked text); a cut or filtered reply is that reply,
/// even empty; otherwise the answer, or this run's answer so far when it stopped first.
///
/// The team shapes read their agents' answers through this, so a worker's blocked answer
/// does not become the team's output. A worker's answer so far (one stopped by its turn
/// limit or a budget) is the one its output guardrails passed when it stopped, as a
/// single agent's is.
pub(crate) fn answer(state: &AgentState) -> String {
    crate::agent::stopped_output(state).unwrap_or_else(|| state.answer())
}

/// A coordinator's decision (a router's classifier, a supervisor): its answer, unless it
/// stopped before giving one, which fails its node with [`AgentError::Undecided`]: the team
/// would route on a blocked, cut or partial reply.
///
/// [`AgentError::Undecided`]: crate::agent::AgentError::Undecided
pub(crate) fn decision(agent: &str, state: &AgentState) -> Result<String, NodeError> {
    match &state.stopped {
        Some(reason) => Err(crate::agent::AgentError::Undecided {
            agent: agent.to_owned(),
            reason: reason.clone(),
        }
        .into()),
        None => Ok(answer(state)),
    }
}

/// The member of `members` that `said` names, by the name the team knows it by; a team's
/// coordinator `agent` that names none fails its node with [`AgentError::NoSuchMember`],
/// one that names several with [`AgentError::AmbiguousMember`]. The error quotes `reply`,
/// the coordinator's whole reply, of which `said` is the part that names the member.
///
/// [`AgentError::NoSuchMember`]: crate::agent::AgentError::NoSuchMember
/// [`AgentError::AmbiguousMember`]: crate::agent::AgentError::AmbiguousMember
pub(crate) fn named_member(
    agent: &str,
    members: &[Member],
    said: &str,
    reply: &str,
) -> Result<String, NodeError> {
    let names = |members: &[&Member]| members.iter().map(|m| m.name.clone()).collect();
    match members_named(members, said)[..] {
        [member] => Ok(member.name.clone()),
        [] => Err(crate::agent::AgentError::NoSuchMember {
            agent: agent.to_owned(),
            reply: reply.to_owned(),
            members: names(&members.iter().collect::<Vec<_>>()),
        }
        .into()),
        ref several => Err(crate::agent::AgentError::AmbiguousMember {
            agent: agent.to_owned(),
            reply: reply.to_owned(),
            named: names(several),
        }
        .into()),
    }
}

/// Files an actor's answer as the draft of a new round (reflexion, actor-critic).
pub(crate) fn record_draft(team: &mut TeamState, state: AgentState) {
    let text = record_said(team, "actor", &state);
    team.round += 1;
    team.draft = Some(text);
}

/// Files what the agent `name` said in the team's path and transcript (marked when its run
/// stopped before it answered on its own); returns it.
pub(crate) fn record_said(team: &mut TeamState, name: &str, state: &AgentState) -> String {
    let text = member_answer(team, name, state);
    team.path.push(name.to_owned());
    let said = match &state.stopped {
        Some(_) => marked_if_stopped(name, state, &text),
        None => format!("{name}: {text}"),
    };
    team.messages.push(Message::assistant(said));
    text
}

/// `text`, what the agent `name` said, marked as such when its run stopped before it
/// answered on its own (`billing (stopped: max_turns_exceeded): …`), with the tool calls it
/// made (`…; its tool calls: lookup, refund`): a coordinator told only that it stopped would
/// ask for the same work again, and a refund made would be made twice.
pub(crate) fn marked_if_stopped(name: &str, state: &AgentState, text: &str) -> String {
    match stop_note(state) {
        Some(note) => format!("{name} ({note}): {text}"),
        None => text.to_owned(),
    }
}

/// Why `state`'s run stopped before it answered on its own, with the tool calls it made
/// (`stopped: max_turns_exceeded; its tool calls: lookup, refund`); `None` when it did not
/// stop.
pub(crate) fn stop_note(state: &AgentState) -> Option<String> {
    let reason = state.stopped.as_ref()?;
    let calls = tool_calls_made(state);
    Some(match calls.is_empty() {
        true => format!("stopped: {reason}"),
        false => format!("stopped: {reason}; its tool calls: {}", calls.join(", ")),
    })
}

/// The tool calls `state`'s run made that have a result, in order, as `name` or `name
/// (failed)`: names and outcomes only, as a result's text has not passed the member's
/// output guardrails; the first [`LISTED_CALLS`], then how many more. A call is named by
/// the nearest reply before its result that made it (models reuse ids across turns).
fn tool_calls_made(state: &AgentState) -> Vec<String> {
    let messages: Vec<&Message> = state.messages.iter().skip(state.run_start).collect();
    let mut made = Vec::new();
    for (at, message) in messages.iter().enumerate() {
        let Message::Tool(result) = message else {
            continue;
        };
        let before = messages.iter().take(at).rev();
        let name = before
            .flat_map(|m| m.tool_calls())
            .find(|call| call.id == result.call_id)
            .map_or("a tool", |call| call.name.as_str());
        made.push(match result.is_error {
            true => format!("{name} (failed)"),
            false => name.to_owned(),
        });
    }
    if made.len() > LISTED_CALLS {
        let more = made.len() - LISTED_CALLS;
        made.truncate(LISTED_CALLS);
        made.push(format!("{more} more"));
    }
    made
}

/// How many of a stopped member's tool calls its mark lists.
const LISTED_CALLS: usize = 20;

/// The member `name`'s answer ([`answer`]), noted in `team.stopped` when its run stopped
/// before it answered on its own.
pub(crate) fn member_answer(team: &mut TeamState, name: &str, state: &AgentState) -> String {
    if let Some(reason) = &state.stopped {
        team.stopped.push((name.to_owned(), reason.clone()));
    }
    answer(state)
}

/// Whether `c` may be part of a member's name as a coordinator writes it: a name matches a
/// reply only where the characters around it are not.
fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-'
}

/// Where `name` (lowercase) occurs in `said` (lowercase) as a whole word: byte spans.
fn whole_word_spans(said: &str, name: &str) -> Vec<(usize, usize)> {
    said.match_indices(name)
        .map(|(start, _)| (start, start + name.len()))
        .filter(|&(start, end)| {
            let before = said[..start].chars().next_back();
            let after = said[end..].chars().next();
            !before.is_some_and(is_name_char) && !after.is_some_and(is_name_char)
        })
        .collect()
}

/// The members a coordinator's reply names, ignoring case, quotes and punctuation around
/// it: one, none, or several (an ambiguous reply).
///
/// A reply that is not just a name is searched for members' names as whole words (`The
/// rewriter.` names `rewriter`, not `writer`); a name inside a longer one that also matched
/// (`tech` in `tech support`) does not count.
fn members_named<'a>(members: &'a [Member], said: &str) -> Vec<&'a Member> {
    // Quotes and markdown around the reply only: a name may begin or end with punctuation
    // of its own (`C#`, `.NET`, `C++`).
    let quoted = |c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '*' | '_');
    let said = said.trim_matches(quoted).to_lowercase();
    // A sentence's end only: trimming every mark would make `C++.` the member `c`.
    let cleaned = said.trim_end_matches(['.', ',', '!', '?', ':', ';']);
    let exact = |text: &str| members.iter().find(|m| m.name.to_lowercase() == text);
    if let Some(exact) = exact(&said).or_else(|| exact(cleaned)) {
        return vec![exact];
    }
    let found: Vec<(&Member, (usize, usize))> = members
        .iter()
        .flat_map(|m| {
            whole_word_spans(&said, &m.name.to_lowercase())
                .into_iter()
                .map(move |span| (m, span))
        })
        .collect();
    let inside_longer = |&(start, end): &(usize, usize)| {
        found
            .iter()
            .any(|&(_, (s, e))| s <= start && end <= e && e - s > end - start)
    };
    let mut named: Vec<&Member> = Vec::new();
    for (member, _) in found.iter().filter(|(_, span)| !inside_longer(span)) {
        if !named.iter().any(|m| m.name == member.name) {
            named.push(member);
        }
    }
    named
}

#[cfg(test)]
mod tests {
    use super::{Member, members_named, split_at_member};
    use crate::agent::Agent;

    /// A stopped member's calls are named by the reply that made each (a model that reuses
    /// `call_0` every turn included), by name and outcome only, and at most twenty.
    #[test]
    fn a_stopped_members_calls_are_named_by_the_reply_that_made_them() {
        use crate::agent::{AgentState, StopReason};
        use crate::model::{Message, ToolCall};
        let call = |name: &str| ToolCall::new("call_0", name, serde_json::json!({}));
        let mut state = AgentState::new("refund order 7");
        state
            .messages
            .push(Message::assistant_tool_calls(vec![call("refund")]));
        state
            .messages
            .push(Message::tool_result("call_0", "refunded 4111 1111"));
        state
            .messages
            .push(Message::assistant_tool_calls(vec![call("lookup")]));
        state
            .messages
            .push(Message::tool_error("call_0", "not found"));
        state.stopped = Some(StopReason::MaxTurns);
        let note = super::stop_note(&state).unwrap();
        assert_eq!(
            note,
            "stopped: max_turns_exceeded; its tool calls: refund, lookup (failed)"
        );
        for _ in 0..30 {
            state
                .messages
                .push(Message::assistant_tool_calls(vec![call("ping")]));
            state.messages.push(Message::tool_result("call_0", "pong"));
        }
        let note = super::stop_note(&state).unwrap();
        assert!(note.ends_with("ping, 12 more"), "{note}");
        assert!(!note.contains("4111"), "{note}");
    }

    /// Members of those names, for the tests of how replies name them.
    pub(super) fn members(names: &[&str]) -> Vec<Member> {
        names
            .iter()
            .map(|name| Member {
                name: (*name).to_owned(),
                description: String::new(),
                agent: Agent::builder("x")
                    .model(crate::model::ScriptedModel::new([]))
                    .build()
                    .unwrap(),
            })
            .collect()
    }

    fn named<'a>(members: &'a [Member], said: &str) -> Option<&'a str> {
        match members_named(members, said)[..] {
            [one] => Some(one.name.as_str()),
            _ => None,
        }
    }

    #[test]
    fn a_member_is_named_by_a_whole_word_the_longest_that_matches() {
        let team = members(&["writer", "rewriter", "tech", "tech support", "billing-eu"]);
        assert_eq!(named(&team, "Writer."), Some("writer"));
        assert_eq!(named(&team, "The rewriter."), Some("rewriter"));
        assert_eq!(named(&team, "send it to `writer` please"), Some("writer"));
        assert_eq!(named(&team, "Tech support, I think"), Some("tech support"));
        assert_eq!(named(&team, "the tech team"), Some("tech"));
        assert_eq!(named(&team, "writer or rewriter"), None);
        assert_eq!(named(&team, "the writer, the writer"), Some("writer"));
        assert_eq!(named(&team, "billing"), None);
        assert_eq!(named(&team, "typewriters"), None);
    }

    #[test]
    fn a_name_may_begin_or_end_with_punctuation() {
        let team = members(&["C#", "C++", ".NET", "c", "python"]);
        assert_eq!(named(&team, "C#"), Some("C#"));
        // A sentence's full stop after a name that ends in a mark of its own.
        assert_eq!(named(&team, "C++."), Some("C++"));
        assert_eq!(named(&team, "C#."), Some("C#"));
        assert_eq!(named(&team, ".NET."), Some(".NET"));
        assert_eq!(named(&team, "c."), Some("c"));
        assert_eq!(named(&team, "`c++`"), Some("C++"));
        assert_eq!(named(&team, "**.NET**"), Some(".NET"));
        assert_eq!(named(&team, "C# please"), Some("C#"));
        assert_eq!(named(&team, "the C# team."), Some("C#"));
        assert_eq!(named(&team, "c"), Some("c"));
        assert_eq!(named(&team, "Python."), Some("python"));
    }

    #[test]
    fn a_worker_named_with_a_colon_is_split_after_its_whole_name() {
        let team = members(&["team:a", "team", "writer"]);
        let split = |text: &str| {
            let (head, rest) = split_at_member(text, &team);
            (named(&team, &head).map(str::to_owned), rest)
        };
        let team_a = Some("team:a".to_owned());
        assert_eq!(
            split("team:a: check it"),
            (team_a.clone(), "check it".into())
        );
        assert_eq!(split("**Team:A**: check it"), (team_a, "check it".into()));
        assert_eq!(
            split("team: a thing"),
            (Some("team".into()), "a thing".into())
        );
        assert_eq!(
            split("writer: fix: now"),
            (Some("writer".into()), "fix: now".into())
        );
        // A first line that is a whole name, colons and all, names that member; the
        // instruction is what follows, on the next lines.
        assert_eq!(split("team:a"), (Some("team:a".into()), String::new()));
        assert_eq!(
            split("`Team:A`\ncheck it"),
            (Some("team:a".into()), "check it".into())
        );
        assert_eq!(split("team"), (Some("team".into()), String::new()));
    }
}
