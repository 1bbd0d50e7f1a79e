//! Approvals: who settles a call the permissions answered with [`Permission::Ask`](super::Permission::Ask).

use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::DispatchContext;
use super::pending::{LiveApproval, interrupt_details};
use crate::Error;
use crate::graph::{BoxFuture, RunError};
use crate::runtime::SignalError;
use crate::runtime::clock::now_ms;
use crate::runtime::mailbox::Scope;

/// A call waiting for a decision: exactly what would run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ApprovalRequest {
    /// The model's id for the call; the signal `loomflow:approval:<call_id>` answers it.
    pub call_id: String,
    /// The tool's name.
    pub tool: String,
    /// The exact arguments the tool would run with.
    pub arguments: Value,
    /// The user the run acts for, if known.
    pub user: Option<String>,
    /// The session (thread).
    pub session: String,
    /// When the call was asked for, in milliseconds since the Unix epoch.
    #[serde(default)]
    pub requested_at_ms: u64,
    /// Who decided, as the handler reported it ([`decided_by`](Self::decided_by)).
    #[serde(skip)]
    decider: Decider,
}

/// Where a handler notes who decided, and when; shared by the clones of one request.
#[derive(Clone, Debug, Default)]
struct Decider(std::sync::Arc<std::sync::Mutex<(Option<String>, Option<u64>)>>);

impl PartialEq for Decider {
    /// Not part of what a request is: two requests for the same call are equal.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl ApprovalRequest {
    /// A request for `tool` called with `arguments` under `call_id`, asked now.
    pub fn new(
        session: impl Into<String>,
        call_id: impl Into<String>,
        tool: impl Into<String>,
        arguments: Value,
    ) -> Self {
        Self {
            call_id: call_id.into(),
            tool: tool.into(),
            arguments,
            user: None,
            session: session.into(),
            requested_at_ms: now_ms(),
            decider: Decider::default(),
        }
    }

    /// Notes who decided the call (a person's name, a service), for the audit log's
    /// `decision` entry. [`SignalApprover`] takes it from the decision's `by` field.
    pub fn decided_by(&self, who: impl Into<String>) {
        crate::sync::lock(&self.decider.0).0 = Some(who.into());
    }

    /// Who decided, if the handler said ([`decided_by`](Self::decided_by)).
    pub fn decider(&self) -> Option<String> {
        crate::sync::lock(&self.decider.0).0.clone()
    }

    /// Notes when the decision was taken (milliseconds since the Unix epoch), which the
    /// audit's `decision` entry is dated by rather than by when the run used it.
    pub(crate) fn decided_at(&self, at_ms: u64) {
        crate::sync::lock(&self.decider.0).1 = Some(at_ms);
    }

    /// When the decision was taken, if the handler said.
    pub(crate) fn decision_time(&self) -> Option<u64> {
        crate::sync::lock(&self.decider.0).1
    }

    /// The user the run acts for.
    #[must_use]
    pub fn user(mut self, user: Option<String>) -> Self {
        self.user = user;
        self
    }
}

/// A person's (or a program's) answer to an [`ApprovalRequest`].
///
/// As JSON it is tagged by `action`: `{"action":"allow"}`, `{"action":"deny","reason":".."}`,
/// `{"action":"edit","arguments":{..}}`, `{"action":"remember_allow"}`,
/// `{"action":"remember_deny"}`. A bare string (`"allow"`) is read as the matching action.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ApprovalDecision {
    /// Run the call as it is.
    Allow,
    /// Refuse it.
    Deny {
        /// Why, for the model.
        #[serde(default = "declined")]
        reason: String,
    },
    /// Run it with these arguments instead (checked against the schema again).
    Edit {
        /// The replacement arguments.
        arguments: Value,
    },
    /// Run it, and allow this tool for this user without asking for the rest of the host's
    /// life. A run that names no user remembers nothing: this call runs, the next asks.
    /// The decision is for the tool as it is: another of its name (a tool replaced, an MCP
    /// server's list changed) or its spec changed is asked about afresh. In a node, a call
    /// keeps the way its first run took: one asked about waits for its own decision even if
    /// an allow is remembered meanwhile (another call's), and one a remembered decision let
    /// run is not asked about when its node runs again.
    RememberAllow,
    /// Refuse it, and refuse this tool for this user without asking for the rest of the
    /// host's life. A run that names no user remembers nothing. For the tool as it is, as
    /// [`RememberAllow`](Self::RememberAllow).
    RememberDeny,
}

fn declined() -> String {
    "approval declined".to_owned()
}

impl ApprovalDecision {
    /// A denial with a reason.
    pub fn deny(reason: impl Into<String>) -> Self {
        Self::Deny {
            reason: reason.into(),
        }
    }

    /// Reads a decision from JSON; `None` when it is not one (callers deny).
    pub fn from_json(value: &Value) -> Option<Self> {
        if let Value::String(action) = value {
            return Self::deserialize(serde_json::json!({ "action": action })).ok();
        }
        Self::deserialize(value).ok()
    }
}

/// Settles calls that need approval. Object-safe: hosts keep `Arc<dyn ApprovalHandler>`.
///
/// A handler error denies the call, except [`Error::Suspended`], which
/// [`ToolHost::dispatch`](super::ToolHost::dispatch) passes on so the run can suspend.
pub trait ApprovalHandler: Send + Sync + 'static {
    /// Decides one call.
    fn decide<'a>(
        &'a self,
        request: &'a ApprovalRequest,
        ctx: DispatchContext<'a>,
    ) -> BoxFuture<'a, crate::Result<ApprovalDecision>>;
}

/// An [`ApprovalHandler`] from an async closure over the request.
///
/// # Examples
///
/// ```
/// use loomflow::tool::{approver_fn, ApprovalDecision, ToolHost};
///
/// let host = ToolHost::new().approval_handler(approver_fn(|request| async move {
///     Ok(if request.tool == "delete_file" { ApprovalDecision::deny("never") } else { ApprovalDecision::Allow })
/// }));
/// # let _ = host;
/// ```
pub fn approver_fn<F, Fut>(decide: F) -> impl ApprovalHandler
where
    F: Fn(ApprovalRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = crate::Result<ApprovalDecision>> + Send + 'static,
{
    FnApprover(decide)
}

struct FnApprover<F>(F);

impl<F, Fut> ApprovalHandler for FnApprover<F>
where
    F: Fn(ApprovalRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = crate::Result<ApprovalDecision>> + Send + 'static,
{
    fn decide<'a>(
        &'a self,
        request: &'a ApprovalRequest,
        _ctx: DispatchContext<'a>,
    ) -> BoxFuture<'a, crate::Result<ApprovalDecision>> {
        Box::pin((self.0)(request.clone()))
    }
}

/// Waits for a person's decision on the framework signal `loomflow:approval:<call id>` of the
/// run's session; while it waits, [`Runtime::pending_approvals`](crate::Runtime::pending_approvals)
/// lists the call (from any process once the run has suspended on it), and
/// [`Runtime::decide_approval`](crate::Runtime::decide_approval) answers it.
///
/// Fails closed: no runtime in the dispatch context, a timeout (default ten minutes) or a
/// payload that is not a decision all deny.
///
/// A call waiting in memory, in a run that has not suspended, is decided from its own
/// process only: elsewhere (`loomflow approve`, a `serve` process) `decide_approval` finds
/// nothing pending. To decide from another process, run the agent under a
/// [`Worker`](crate::Worker) (its wait suspends the run after a moment) or use
/// [`or_suspend`](Self::or_suspend).
///
/// On a durable store a decision is consumed from the store before the call goes on: where
/// approvers in several processes wait for the same call, one decision lets exactly one of
/// them go on, and the others wait on. Inside a graph node the decision is received as the
/// node's own waits receive a signal: consumed under the run's claim and journaled. So an
/// approver in a process that lost the run (it stalled past its lease, and another process
/// carried the run on) cannot take the decision from the one that holds it; the node, run
/// again for the same step after a failure or a crash, gets its decision without asking
/// again; and under a worker the wait parks briefly, then suspends the run, its interrupt
/// carrying the call, as any wait does there.
///
/// With [`or_suspend`](Self::or_suspend), a dispatch inside a graph node suspends the run
/// instead of waiting in memory: the run's interrupt carries the pending call (under
/// `details.approval`), and once the decision has been sent,
/// [`recover`](crate::CompiledGraph::recover) runs the node again and the call goes on.
#[derive(Clone, Debug)]
pub struct SignalApprover {
    timeout: Duration,
    suspend: bool,
}

impl Default for SignalApprover {
    fn default() -> Self {
        Self::new()
    }
}

impl SignalApprover {
    /// An approver that waits up to ten minutes.
    pub fn new() -> Self {
        Self {
            timeout: Duration::from_secs(600),
            suspend: false,
        }
    }

    /// How long to wait for a decision before denying.
    ///
    /// The [`ToolHost`](crate::tool::ToolHost) that asks also bounds every approval, by
    /// its [`approval_timeout`](crate::tool::ToolHost::approval_timeout) (15 minutes by
    /// default): for a longer wait, raise that too, or suspend the run instead
    /// ([`or_suspend`](Self::or_suspend)), which no timeout bounds.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Inside a graph node (a dispatch with [`DispatchContext::node`]), suspends the run
    /// until the decision arrives instead of waiting in memory; elsewhere it has no effect.
    #[must_use]
    pub fn or_suspend(mut self) -> Self {
        self.suspend = true;
        self
    }

    /// The prefix of the signal names that answer calls.
    pub(crate) const PREFIX: &'static str = "loomflow:approval:";

    /// The signal name that answers a call.
    pub fn signal_name(call_id: &str) -> String {
        format!("{}{call_id}", Self::PREFIX)
    }

    /// Waits for the decision in `node` as the node's own waits do (see the type's docs):
    /// suspending the run at once with [`or_suspend`](Self::or_suspend), or up to the
    /// timeout.
    /// The wait's timeout is the shorter of this approver's and the asking host's
    /// (`host`): the wait journals its deadline, so a run suspended on it and carried on
    /// later is denied when the host would have denied it.
    async fn wait_in_node(
        &self,
        request: &ApprovalRequest,
        (node, host): (&crate::Context, Option<Duration>),
        name: String,
    ) -> crate::Result<ApprovalDecision> {
        let timeout = host.map_or(self.timeout, |host| host.min(self.timeout));
        // A wait after a passed-over decision has what is left of the first one's time (its
        // deadline is journaled as the first's is, so a replay keeps it).
        let started = tokio::time::Instant::now();
        loop {
            let wait = node
                .wait_for_framework_signal::<Value>(name.clone())
                .details(interrupt_details(request));
            let wait = match self.suspend {
                true => wait.or_suspend(),
                false => wait.timeout(timeout.saturating_sub(started.elapsed())),
            };
            // A decision for an earlier request under the id is passed over (journaled as
            // taken, so a replay passes over it again), and the wait goes on.
            match wait.await {
                Ok(payload) if answers_another(request, &payload) => continue,
                Ok(payload) => return Ok(decision_from(request, &payload)),
                Err(RunError::Signal(SignalError::Timeout { .. })) => {
                    return Ok(timed_out(timeout));
                }
                Err(error) => return Err(error.into()),
            }
        }
    }
}

impl ApprovalHandler for SignalApprover {
    fn decide<'a>(
        &'a self,
        request: &'a ApprovalRequest,
        ctx: DispatchContext<'a>,
    ) -> BoxFuture<'a, crate::Result<ApprovalDecision>> {
        Box::pin(async move {
            let Some(runtime) = ctx.runtime.or_else(|| ctx.node.map(|node| node.runtime())) else {
                return Ok(ApprovalDecision::deny(
                    "approval needs a runtime to wait on; none was given",
                ));
            };
            let name = Self::signal_name(&request.call_id);
            // A wait that suspends at once is listed from the run's interrupt, which carries
            // the request, until answered; one that waits in memory, from this process too.
            let _listed = (!self.suspend || ctx.node.is_none())
                .then(|| LiveApproval::register(runtime, request));
            if let Some(node) = ctx.node {
                let host = ctx.approval_timeout;
                return self.wait_in_node(request, (node, host), name).await;
            }
            let deadline = crate::runtime::clock::instant_after(self.timeout);
            loop {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                let receive =
                    runtime.receive(&request.session, &name, Some(left), Scope::Framework);
                let entry = match receive.await {
                    Ok(entry) => entry,
                    Err(crate::runtime::RuntimeError::Signal(SignalError::Timeout { .. })) => {
                        return Ok(timed_out(self.timeout));
                    }
                    Err(error) => return Err(Error::from(error)),
                };
                let payload = entry.payload.clone();
                // Consumed in the store before it is acted on: where approvers in several
                // processes wait for the same call, one decision lets one of them go on. The
                // others wait on.
                let session = &request.session;
                if (runtime.take_handed_over(session, &name, entry, Scope::Framework)).await?
                    && !answers_another(request, &payload)
                {
                    return Ok(decision_from(request, &payload));
                }
            }
        })
    }
}

/// Whether `payload` is a decision made for another request under the call's id (asked at
/// another time): one left queued when its run was cancelled, or settled the call
/// otherwise. A decision that does not say (sent by hand, or by an older loomflow) answers.
fn answers_another(request: &ApprovalRequest, payload: &Value) -> bool {
    let asked = payload.get("asked_at_ms").and_then(Value::as_u64);
    let another = asked.is_some_and(|asked| asked != request.requested_at_ms);
    if another {
        tracing::warn!(
            session = %request.session,
            call_id = %request.call_id,
            "a decision made for an earlier request under this call id is passed over"
        );
    }
    another
}

/// The denial of a call no decision came for within `timeout`.
fn timed_out(timeout: Duration) -> ApprovalDecision {
    ApprovalDecision::deny(format!("no approval decision within {timeout:?}"))
}

/// The decision a signal carries. Its optional `by` names who decided (see
/// [`Runtime::decide_approval_by`](crate::Runtime::decide_approval_by)).
fn decision_from(request: &ApprovalRequest, payload: &Value) -> ApprovalDecision {
    if let Some(by) = payload.get("by").and_then(Value::as_str) {
        request.decided_by(by);
    }
    if let Some(at_ms) = payload.get("decided_at_ms").and_then(Value::as_u64) {
        request.decided_at(at_ms);
    }
    ApprovalDecision::from_json(payload).unwrap_or_else(|| {
        // Its shape only: the values may hold an approver's edited arguments.
        let keys: Vec<&str> = payload
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        tracing::warn!(
            call_id = %request.call_id,
            kind = json_kind(payload),
            ?keys,
            "unrecognised approval decision; denying"
        );
        ApprovalDecision::deny("unrecognised approval decision")
    })
}

/// What kind of JSON value a payload is, for a log line that must not show it.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}
