//! The engine's errors: [`GraphError`] (a graph did not compile) and [`RunError`] (a run, a
//! resume or a node's call on its [`Context`](crate::Context) failed).

use crate::graph::node::BoxError;
use crate::runtime::{RuntimeError, SignalError, StoreError};

/// Why a graph did not compile: every problem found, each naming its node.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GraphError {
    /// The graph has one or more structural problems.
    #[error("graph {graph} is invalid: {}", join_problems(problems))]
    Invalid {
        /// The graph's name.
        graph: String,
        /// Every problem found, in a stable order.
        problems: Vec<GraphProblem>,
    },
}

impl GraphError {
    /// The problems found, whatever the variant.
    pub fn problems(&self) -> &[GraphProblem] {
        match self {
            Self::Invalid { problems, .. } => problems,
        }
    }
}

/// A vertex's name as people read it: `START` and `END` for the names they stand for.
pub(crate) fn shown(name: &str) -> std::borrow::Cow<'_, str> {
    use std::borrow::Cow;
    match name {
        crate::graph::START => Cow::Borrowed("START"),
        crate::graph::END => Cow::Borrowed("END"),
        // A node of the user's named so, told apart from the graph's own.
        "START" | "END" => Cow::Owned(format!("{name:?}")),
        name => Cow::Borrowed(name),
    }
}

/// A vertex routes leave from: `START`, or "node <name>".
fn shown_vertex(name: &str) -> String {
    match name {
        crate::graph::START => "START".to_owned(),
        name => format!("node {name}"),
    }
}

fn join_problems(problems: &[GraphProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// One structural problem found by `compile()`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GraphProblem {
    /// Two nodes share a name.
    #[error("node {name} is declared more than once")]
    DuplicateNode {
        /// The repeated name.
        name: String,
    },
    /// A node uses a reserved or empty name.
    #[error("node name {name:?} is reserved or empty")]
    ReservedName {
        /// The offending name.
        name: String,
    },
    /// An edge, branch or join names a node that was never added.
    #[error("{context} names unknown node {}", shown(name))]
    UnknownNode {
        /// The missing node.
        name: String,
        /// Where it was named, e.g. `edge from a`.
        context: String,
    },
    /// A branch lists a target that is not a node of the graph.
    #[error(
        "branch from {} lists target {}, which is not a node",
        shown(from),
        shown(target)
    )]
    UnknownBranchTarget {
        /// The node the branch leaves.
        from: String,
        /// The target that is not a node.
        target: String,
    },
    /// A node has two branches; a node routes through at most one.
    #[error("{} has more than one branch", shown_vertex(node))]
    DuplicateBranch {
        /// The node.
        node: String,
    },
    /// A branch declares no targets.
    #[error("branch from {} declares no targets", shown(from))]
    EmptyBranch {
        /// The node the branch leaves.
        from: String,
    },
    /// A join declares no sources: it would never fire.
    #[error("join into {} declares no sources", shown(target))]
    EmptyJoin {
        /// The join's target.
        target: String,
    },
    /// Some of a join's sources can run, but not all: those `waiting` run only after the join
    /// fires (its own target leads to them), or never. The join never fires, and what only it
    /// leads to is unreachable.
    #[error(
        "join into {} never fires: its sources {} run only after it, or never",
        shown(target),
        waiting.join(", ")
    )]
    JoinNeverFires {
        /// The join's target.
        target: String,
        /// Its sources that no run reaches before the join fires.
        waiting: Vec<String>,
    },
    /// An edge leaves `END` or enters `START`.
    #[error(
        "edge {} -> {} uses START or END the wrong way round",
        shown(from),
        shown(to)
    )]
    MisdirectedEdge {
        /// Source of the edge.
        from: String,
        /// Target of the edge.
        to: String,
    },
    /// `recursion_limit(0)`: every run would stop before its first superstep.
    #[error("the recursion limit is 0: no run could take a step (it must be at least 1)")]
    ZeroRecursionLimit,
    /// Two reducers for one field; the second would silently replace the first.
    #[error("field {field} has more than one reducer")]
    DuplicateReducer {
        /// The field.
        field: String,
    },
    /// A reducer names a field the state does not have (checked when the state is a struct
    /// deriving `Deserialize`).
    #[error("reducer for field {field} names no field of the state (its fields: {})", fields.join(", "))]
    UnknownReducerField {
        /// The field the reducer names.
        field: String,
        /// The state's top-level fields, as serialized.
        fields: Vec<String>,
    },
    /// Nothing leaves `START`.
    #[error("graph has no entry: add an edge or branch from START")]
    NoEntry,
    /// A multi-agent shape was given fewer members of some role than it needs (a debate with
    /// one debater).
    #[error("at least {min} {role} needed, found {found}")]
    TooFewMembers {
        /// The role, plural: `debaters`.
        role: String,
        /// How many the shape needs.
        min: usize,
        /// How many it was given.
        found: usize,
    },
    /// A node cannot be reached from `START`.
    #[error("node {name} is unreachable from START")]
    Unreachable {
        /// The node.
        name: String,
    },
    /// No path leads from a node to `END`.
    #[error("node {name} has no path to END")]
    NoPathToEnd {
        /// The node.
        name: String,
    },
}

/// Why a run stopped without completing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// A node returned an error.
    #[error("node {node} failed at step {step}")]
    NodeFailed {
        /// The node.
        node: String,
        /// The superstep it ran in.
        step: u64,
        /// What the node returned; downcast it to the node's own error type (for `#[node]`
        /// functions usually [`loomflow::Error`](crate::Error)).
        #[source]
        source: BoxError,
    },
    /// A node panicked; the panic was caught and the process carries on.
    #[error("node {node} panicked at step {step}: {message}")]
    NodePanicked {
        /// The node.
        node: String,
        /// The superstep it ran in.
        step: u64,
        /// The panic message, when it was a string.
        message: String,
    },
    /// The router of a branch leaving `node` panicked; the panic was caught, and the step
    /// fails as for a route to an undeclared target.
    #[error("the router after {} panicked: {message}", shown_vertex(node))]
    RouterPanicked {
        /// The node the branch leaves.
        node: String,
        /// The panic message, when it was a string.
        message: String,
    },
    /// Two nodes of one superstep changed the same field, which has no reducer.
    #[error(
        "nodes {first} and {second} both changed field {field} in step {step}, which has no reducer"
    )]
    MergeConflict {
        /// The state field; [`WHOLE_STATE`](crate::graph::WHOLE_STATE) for a state that is not
        /// a JSON object.
        field: String,
        /// The first writer, in declaration order.
        first: String,
        /// The second writer, in declaration order.
        second: String,
        /// The superstep.
        step: u64,
    },
    /// A reducer could not combine the values written to its field.
    #[error("reducer for field {field} failed in step {step}: {message}")]
    Reducer {
        /// The state field.
        field: String,
        /// The superstep.
        step: u64,
        /// What went wrong.
        message: String,
    },
    /// A branch's router chose a target it did not declare.
    #[error(
        "branch from {} chose {}, which is not one of its declared targets",
        shown(node),
        shown(target)
    )]
    UndeclaredRoute {
        /// The node the branch leaves.
        node: String,
        /// The target it chose.
        target: String,
    },
    /// The run took more supersteps than its recursion limit allows.
    #[error("recursion limit of {limit} supersteps reached; last nodes run: {}", last_nodes.join(", "))]
    RecursionLimit {
        /// The limit in force.
        limit: u64,
        /// The nodes of the last superstep that ran.
        last_nodes: Vec<String>,
    },
    /// A value given on resume did not deserialize into the type the node asked for.
    #[error("resume value for interrupt {index} of node {node} is not {expected}")]
    ResumeValue {
        /// The node; inside a subgraph, after its namespace (`sub:1/ask`), as the
        /// interrupt's id names it.
        node: String,
        /// Which of its interrupts.
        index: usize,
        /// The type the node asked for, as it is written in code (`a String`, `a Vec<u32>`).
        expected: String,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
    /// A value given on resume could not be serialized, so it cannot reach the node.
    #[error("resume value for interrupt {id} on thread {thread} does not serialize")]
    UnserializableResume {
        /// The thread.
        thread: String,
        /// The interrupt the value was for.
        id: String,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
    /// `resume` or `recover` named a thread with no checkpoint.
    #[error("thread {thread} has no checkpoint to resume from")]
    UnknownThread {
        /// The thread.
        thread: String,
    },
    /// `resume` on a thread whose newest run is not suspended on an interrupt.
    #[error("thread {thread} is not interrupted (its newest run is {status})")]
    NotInterrupted {
        /// The thread.
        thread: String,
        /// Where its newest run stands.
        status: &'static str,
    },
    /// `resume` named an interrupt that is not pending.
    #[error("interrupt {id} is not pending on thread {thread}; pending: {}", pending.join(", "))]
    UnknownInterrupt {
        /// The thread.
        thread: String,
        /// The id given.
        id: String,
        /// The ids that are pending.
        pending: Vec<String>,
    },
    /// `resume` named an interrupt that waits for a signal, not for a value.
    #[error(
        "interrupt {id} on thread {thread} waits for signal {signal}: send it, then recover the run"
    )]
    WaitsForSignal {
        /// The thread.
        thread: String,
        /// The interrupt.
        id: String,
        /// The signal it waits for.
        signal: String,
    },
    /// `resume` named an interrupt that waits for a timer, not for a value.
    #[error(
        "interrupt {id} on thread {thread} sleeps until {wake_at_ms} ms since the epoch: recover the run once it is due"
    )]
    WaitsForTimer {
        /// The thread.
        thread: String,
        /// The interrupt.
        id: String,
        /// When it wakes, in milliseconds since the Unix epoch.
        wake_at_ms: u64,
    },
    /// `resume` with one value while several interrupts are pending.
    #[error("thread {thread} has {} pending interrupts ({}); resume them by id", pending.len(), pending.join(", "))]
    AmbiguousResume {
        /// The thread.
        thread: String,
        /// The ids that are pending.
        pending: Vec<String>,
    },
    /// A checkpoint names a node the graph does not have (the graph changed since): the run
    /// stands at it, and no graph without it can carry the run on.
    #[error(
        "checkpoint of thread {thread} names node {node}, which graph {graph} does not have: \
         carry the run on with a version of the graph that has it (allow_graph_change cannot \
         run a node that is gone)"
    )]
    CheckpointMismatch {
        /// The thread.
        thread: String,
        /// The graph.
        graph: String,
        /// The unknown node.
        node: String,
    },
    /// The run's checkpoints were written by a graph of another structure; carrying it on
    /// could run the wrong nodes. Edges and branch routes declared in another order are the
    /// same structure to a run, and are let through; nodes or joins in another order (or a
    /// join's sources) are a change, as a checkpoint records them by position. Opt in with
    /// [`RunBuilder::allow_graph_change`](crate::RunBuilder::allow_graph_change), or for
    /// the runs a worker carries on with its builder's `allow_graph_change(true)`.
    #[error("graph {graph} changed since thread {thread} was checkpointed ({}); carry it on with recover(..).allow_graph_change() (or resume(..)), or with a worker built with allow_graph_change(true), to run it anyway", changes.join("; "))]
    GraphChanged {
        /// The thread.
        thread: String,
        /// The graph.
        graph: String,
        /// What changed: `removed: edge a -> b`, `added: node c`, ….
        changes: Vec<String>,
    },
    /// The thread's run is another graph's: the checkpoint carried on from was written by
    /// the graph named `recorded`. Carry it on with that graph; `allow_graph_change` runs it
    /// with this one anyway.
    #[error(
        "thread {thread} was run by graph {recorded}, not {graph}: carry it on with {recorded} (recover(..).allow_graph_change() runs it with {graph} anyway)"
    )]
    OtherGraph {
        /// The thread.
        thread: String,
        /// The graph asked to carry it on.
        graph: String,
        /// The graph whose run it is.
        recorded: String,
    },
    /// Another execution, in this process or another, is carrying the thread's run on: it
    /// holds the run's claim. Nothing was read or written. Try again later, or ask the run to
    /// wait for the claim with [`RunBuilder::wait_if_busy`](crate::RunBuilder::wait_if_busy).
    #[error("thread {thread} is busy: its run is held by {owner} until {}", crate::runtime::Utc(*until))]
    Busy {
        /// The thread.
        thread: String,
        /// Who holds the claim: the process id, a random part and an execution number.
        owner: String,
        /// When the holder's lease expires unless it renews it (it renews while it runs).
        until: std::time::SystemTime,
    },
    /// The worker executing the run shut down: the run stopped between two supersteps, its
    /// newest checkpoint intact, and let go of its claim; any worker carries it on.
    #[error(
        "run on thread {thread} was handed back by its worker, which is shutting down; another worker carries it on"
    )]
    Yielded {
        /// The thread.
        thread: String,
    },
    /// A runtime call made for the run failed in a way that has no meaning of its own for
    /// runs.
    #[error(transparent)]
    Runtime(Box<RuntimeError>),
    /// The run was cancelled: stopped with [`Runtime::cancel`](crate::Runtime::cancel) (its
    /// newest checkpoint says so; resuming it is refused with this error too), or the task
    /// driving it was aborted ([`RunHandle::abort`](crate::RunHandle::abort)).
    #[error("run on thread {thread} was cancelled")]
    Cancelled {
        /// The thread.
        thread: String,
    },
    /// The task driving a started run panicked outside any node, router or reducer (whose
    /// panics are caught and fail the step): in the state's `Clone`, `Serialize` or
    /// `Deserialize`, or in a store. The run's checkpoints are those its last finished
    /// step left.
    #[error("the task running thread {thread} panicked: {message}")]
    TaskPanicked {
        /// The thread.
        thread: String,
        /// The panic message, when it was a string.
        message: String,
    },
    /// A node asked to suspend the run (an interrupt, a durable wait, a timer).
    ///
    /// Node bodies propagate this with `?`; the executor treats it as control flow, not as a
    /// failure. Catching it does not cancel the suspension: the [`Context`](crate::Context)
    /// remembers that the node asked to suspend.
    #[error("node {node} suspended the run")]
    Suspended {
        /// The node that asked to suspend.
        node: String,
    },
    /// A journaled step's own function failed; nothing was recorded, so a retry calls it again.
    #[error("step {name} of node {node} failed")]
    StepFailed {
        /// The node.
        node: String,
        /// The step's name.
        name: String,
        /// What the step's function returned.
        #[source]
        source: BoxError,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A signal was refused, or a wait for one ended without a payload.
    #[error(transparent)]
    Signal(#[from] SignalError),
    /// A value could not be converted to or from JSON.
    #[error("json conversion failed for {what}")]
    Json {
        /// What was being converted (a state type, a payload, a field).
        what: String,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
    /// An invariant of the executor broke (a bug in loomflow: please report it).
    #[error("internal error: {problem}")]
    Internal {
        /// What broke.
        problem: &'static str,
    },
}

impl RunError {
    pub(crate) fn json(what: impl Into<String>, source: serde_json::Error) -> Self {
        Self::Json {
            what: what.into(),
            source,
        }
    }

    /// Whether this is the control value of a suspension rather than a failure.
    pub fn is_suspension(&self) -> bool {
        matches!(self, Self::Suspended { .. })
    }
}

impl From<RuntimeError> for RunError {
    fn from(error: RuntimeError) -> Self {
        match error {
            RuntimeError::Store(e) => Self::Store(e),
            RuntimeError::Signal(e) => Self::Signal(e),
            RuntimeError::Json { what, source } => Self::Json { what, source },
            RuntimeError::Busy {
                thread,
                owner,
                until,
            } => Self::Busy {
                thread,
                owner,
                until,
            },
            RuntimeError::UnknownRun { thread } => Self::UnknownThread { thread },
            other => Self::Runtime(Box::new(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_error_lists_every_problem() {
        let err = GraphError::Invalid {
            graph: "g".into(),
            problems: vec![
                GraphProblem::DuplicateNode { name: "a".into() },
                GraphProblem::Unreachable { name: "b".into() },
            ],
        };
        let text = err.to_string();
        assert!(text.contains("node a is declared more than once"), "{text}");
        assert!(text.contains("node b is unreachable"), "{text}");
    }
}
