//! [`ToolHost`]: holds tools and dispatches a model turn's calls.

mod checks;
mod context;
mod observe;
mod shadowed;
mod timeouts;

use checks::{Approval, emit, emit_approval, normalize_arguments};
pub use context::{DispatchContext, ToolOutcome};

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use serde_json::Value;
use tracing::Instrument;

use super::approval::ApprovalHandler;
use super::event::{AgentEvent, Decision};
use super::hook::{self, AfterHook, BeforeHook, HookCall, HookDecision, HookResult};
use super::permission::{Permission, PermissionPolicy};
use super::schema::validate;
use super::set::ToolSet;
use super::{Tool, ToolContext, ToolError, ToolSpec};
use crate::model::{ToolCall, ToolDefinition};

/// The most bytes of a call's result a [`ToolHost`] gives the model unless told otherwise
/// ([`ToolHost::max_output_bytes`]): 256 KiB, some 64,000 tokens.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 256 * 1024;

/// The tools a model may call, by name, and the rules around calling them.
///
/// [`dispatch`](Self::dispatch) runs the calls of one model turn, at most
/// [`max_concurrency`](Self::max_concurrency) tools at a time, and answers each one in call
/// order.
/// For every call: the tool is looked up, its arguments are checked against the schema, the
/// `before_tool` hooks run, the [`PermissionPolicy`] decides (asking the
/// [`ApprovalHandler`] when it says ask), the tool runs under a timeout with panics caught,
/// and the `after_tool` hooks see the result. Every problem becomes an error result the
/// model can read.
///
/// # Examples
///
/// ```
/// use loomflow::prelude::*;
/// use loomflow::model::ToolCall;
/// use loomflow::tool::{DispatchContext, ToolHost};
///
/// /// Add two numbers.
/// #[tool]
/// fn add(a: i64, b: i64) -> i64 {
///     a + b
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
/// let host = ToolHost::new().with(add).timeout(Duration::from_secs(5));
/// let calls = [
///     ToolCall::new("c1", "add", json!({ "a": 2, "b": 3 })),
///     ToolCall::new("c2", "add", json!({ "a": "two", "b": 1 })),
///     ToolCall::new("c3", "mul", json!({})),
/// ];
/// let outcomes = host.dispatch(&calls, DispatchContext::new("session-1")).await?;
/// assert_eq!(outcomes[0].content, "5");
/// assert!(outcomes[1].is_error && outcomes[1].content.contains("field `a`"));
/// assert!(outcomes[2].is_error && outcomes[2].content.contains("known tools: add"));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ToolHost {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    /// Tool sets whose lists change (MCP servers), asked on every lookup.
    sets: Vec<Arc<dyn ToolSet>>,
    max_concurrency: usize,
    max_output_bytes: usize,
    timeouts: timeouts::Timeouts,
    approval_timeout: Duration,
    hook_timeout: Duration,
    hook_timeout_denies: bool,
    policy: PermissionPolicy,
    approver: Option<Arc<dyn ApprovalHandler>>,
    before: Vec<BeforeHook>,
    after: Vec<AfterHook>,
    /// Remembered approvals: (user, tool) → allowed.
    remembered: Arc<Mutex<Remembered>>,
    /// Whether tool spans record arguments and results.
    record_content: bool,
    /// The names of sets' tools warned of as hidden by another of that name.
    shadowed: Arc<shadowed::Shadowed>,
}

impl Default for ToolHost {
    fn default() -> Self {
        Self {
            tools: BTreeMap::new(),
            sets: Vec::new(),
            max_concurrency: 8,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            timeouts: timeouts::Timeouts::default(),
            approval_timeout: Duration::from_secs(900),
            hook_timeout: Duration::from_secs(5),
            hook_timeout_denies: true,
            policy: PermissionPolicy::default(),
            approver: None,
            before: Vec::new(),
            after: Vec::new(),
            remembered: Arc::default(),
            record_content: false,
            shadowed: Arc::default(),
        }
    }
}

impl std::fmt::Debug for ToolHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolHost")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .field(
                "sets",
                &self.sets.iter().map(|s| s.name()).collect::<Vec<_>>(),
            )
            .field("max_concurrency", &self.max_concurrency)
            .field("timeouts", &self.timeouts)
            .field("approval_timeout", &self.approval_timeout)
            .field("hook_timeout", &self.hook_timeout)
            .field("hook_timeout_denies", &self.hook_timeout_denies)
            .field("policy", &self.policy)
            .field("approver", &self.approver.is_some())
            .field("before_hooks", &self.before.len())
            .field("after_hooks", &self.after.len())
            .field("record_content", &self.record_content)
            .finish_non_exhaustive()
    }
}

impl ToolHost {
    /// An empty host.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool, replacing one of the same name.
    #[must_use]
    pub fn with(mut self, tool: impl Tool) -> Self {
        self.add(tool);
        self
    }

    /// Adds a tool, replacing one of the same name.
    pub fn add(&mut self, tool: impl Tool) {
        self.add_arc(Arc::new(tool));
    }

    /// Adds a shared tool, replacing one of the same name.
    pub fn add_arc(&mut self, tool: Arc<dyn Tool>) {
        self.policy.tool_replaced(&tool.spec().name);
        self.tools.insert(tool.spec().name.clone(), tool);
    }

    /// Adds a set of tools whose list can change (an MCP server's tools, for example).
    ///
    /// The set is asked for its current tools on every lookup and listing. A tool added with
    /// [`with`](Self::with) wins over a set's tool of the same name, and an earlier set wins
    /// over a later one.
    #[must_use]
    pub fn with_set(mut self, set: impl ToolSet) -> Self {
        self.add_set(Arc::new(set));
        self
    }

    /// Adds a shared set of tools whose list can change (see [`with_set`](Self::with_set)).
    pub fn add_set(&mut self, set: Arc<dyn ToolSet>) {
        self.sets.push(set);
    }

    /// Removes a tool by name; returns whether it was there. Tools of a [`ToolSet`] are not
    /// removed this way: their set decides.
    pub fn remove(&mut self, name: &str) -> bool {
        self.policy.tool_replaced(name);
        self.tools.remove(name).is_some()
    }

    /// Every tool the host offers now, by name: its own, then those of its sets.
    /// A set's tool named as one before it is not offered, and is warned of once.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        shadowed::all_tools(&self.tools, &self.sets, &self.shadowed)
    }

    /// The specs of every tool, by name.
    pub fn list(&self) -> Vec<ToolSpec> {
        self.tools().iter().map(|t| t.spec().clone()).collect()
    }

    /// Whether the host has a tool of its own (added with [`with`](Self::with) or
    /// [`add`](Self::add), not a set's) named `name`.
    pub(crate) fn has_own(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    /// A tool by name, from the host's own tools or, failing that, its sets.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        if let Some(tool) = self.tools.get(name) {
            return Some(Arc::clone(tool));
        }
        self.sets
            .iter()
            .find_map(|set| set.tools().into_iter().find(|t| t.spec().name == name))
    }

    /// The definitions to send to a model.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.tools().iter().map(|t| t.spec().definition()).collect()
    }

    /// How many tools of one turn run at once (default 8; at least 1). Only the tools'
    /// bodies count: a call waiting for its approval holds no slot.
    #[must_use]
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.max_concurrency = n.max(1);
        self
    }

    /// The most bytes of a call's result (or error) the model reads (default
    /// [`DEFAULT_MAX_OUTPUT_BYTES`]): past it the content is cut, saying how much was left
    /// out. A result is kept in the transcript and its every checkpoint.
    #[must_use]
    pub fn max_output_bytes(mut self, bytes: usize) -> Self {
        self.max_output_bytes = bytes;
        self
    }

    /// How long the approval handler may take before the call is denied (default 15 min).
    ///
    /// It bounds every handler, whatever its own timeout
    /// ([`SignalApprover::timeout`](crate::tool::SignalApprover::timeout) included): raise
    /// it for longer waits. A `SignalApprover` wait that a worker suspends keeps the shorter
    /// deadline across executions, so the call is denied at it then too. A handler that
    /// suspends the run at once (`or_suspend`) returns at once, and the run waits for its
    /// decision for as long as it takes.
    #[must_use]
    pub fn approval_timeout(mut self, timeout: Duration) -> Self {
        self.approval_timeout = timeout;
        self
    }

    /// How long each hook may take (default 5 s): a `before_tool` hook that takes longer
    /// denies the call; an `after_tool` hook that takes longer is logged.
    #[must_use]
    pub fn hook_timeout(mut self, timeout: Duration) -> Self {
        self.hook_timeout = timeout;
        self
    }

    /// Whether a `before_tool` hook that times out denies the call (default `true`); with
    /// `false` the call goes on to the next hook, and the timeout is logged.
    #[must_use]
    pub fn hook_timeout_denies(mut self, denies: bool) -> Self {
        self.hook_timeout_denies = denies;
        self
    }

    /// The permission policy (default: allow, except tools that require approval).
    #[must_use]
    pub fn permissions(mut self, policy: PermissionPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Adds a tool of the library's own (a memory tool, a handoff), allowed unless the
    /// policy has a rule for its name: added first, as adding a tool takes back an allow its
    /// name was given this way.
    pub(crate) fn add_allowed(&mut self, tool: Arc<dyn Tool>) {
        let name = tool.spec().name.clone();
        self.add_arc(tool);
        self.policy.allow_unless_ruled(&name);
    }

    /// Who settles calls the policy asks about. Without one, those calls are denied.
    #[must_use]
    pub fn approval_handler(mut self, handler: impl ApprovalHandler) -> Self {
        self.approver = Some(Arc::new(handler));
        self
    }

    /// Registers a hook that runs before every call whose arguments fit the schema, before
    /// the permission check, in registration order; the first [`HookDecision::Deny`] refuses
    /// the call. A hook that panics or takes
    /// longer than the [hook timeout](Self::hook_timeout) denies too.
    #[must_use]
    pub fn before_tool<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(HookCall) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HookDecision> + Send + 'static,
    {
        self.before.push(hook::before(hook));
        self
    }

    /// Registers a hook that sees every call's result, in registration order. Its failures
    /// (an `Err`, a panic, a timeout) are logged and never change the result.
    #[must_use]
    pub fn after_tool<F, Fut, E>(mut self, hook: F) -> Self
    where
        F: Fn(HookResult) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: std::fmt::Display,
    {
        self.after.push(hook::after(hook));
        self
    }

    /// Whether each call's `execute_tool` span records its arguments and its result
    /// (`gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`; default `false`: they are
    /// content, which may be private). The audit log records them either way.
    #[must_use]
    pub fn record_content(mut self, record: bool) -> Self {
        self.record_content = record;
        self
    }

    /// Whether calls that need approval have someone to ask.
    pub(crate) fn has_approver(&self) -> bool {
        self.approver.is_some()
    }

    /// How many calls run at once (see [`max_concurrency`](Self::max_concurrency)).
    pub fn concurrency_limit(&self) -> usize {
        self.max_concurrency
    }

    /// Forgets every remembered approval decision.
    pub fn forget_approvals(&self) {
        crate::sync::lock(&self.remembered).clear();
    }

    /// Runs the calls of one model turn and returns one outcome per call, in call order.
    ///
    /// Up to [`max_concurrency`](Self::max_concurrency) tools run at once; the calls' checks,
    /// hooks and approvals do not count, so a call that waits for a person's decision holds
    /// no other call back.
    ///
    /// A suspension (an approval that suspends the run) ends the whole batch at once: the
    /// other calls' outcomes are dropped, those still running are cancelled, and when the
    /// node runs again after the resume, the batch runs again from its first call. Agents
    /// journal each call as a step of its own, so a finished call is not run twice; a node
    /// of your own that dispatches calls with side effects under a suspending approver
    /// should do the same (one call per [`Context::step`](crate::Context::step)).
    ///
    /// # Errors
    ///
    /// [`Error::Suspended`](crate::Error::Suspended), when an approval suspended the
    /// calling node, and [`RunError::Cancelled`](crate::RunError::Cancelled) (as
    /// [`Error::Run`](crate::Error::Run)), when the run was cancelled while a call waited
    /// for its approval; every problem with a call becomes an error outcome instead.
    pub async fn dispatch(
        &self,
        calls: &[ToolCall],
        ctx: DispatchContext<'_>,
    ) -> crate::Result<Vec<ToolOutcome>> {
        // One call (an agent's tool step dispatches one at a time) needs no pool, whose
        // set of futures allocates room for two of them before it runs the first.
        if let [call] = calls {
            return Ok(vec![self.run_one(call, ctx).await?]);
        }
        // Every call goes through its checks, hooks and approval at once: only the tools'
        // bodies take a slot, so that a call waiting for a person holds none. A set of
        // futures rather than `stream::map(..).buffered(..)`: the closure there makes the
        // future fail the `Send` check inside graph nodes.
        let slots = tokio::sync::Semaphore::new(self.max_concurrency);
        let ctx = match ctx.slots {
            Some(_) => ctx,
            None => ctx.slots(&slots),
        };
        let mut outcomes: Vec<Option<ToolOutcome>> = vec![None; calls.len()];
        let mut running: FuturesUnordered<_> = calls
            .iter()
            .enumerate()
            .map(|(index, call)| {
                let outcome = self.run_one(call, ctx);
                async move { (index, outcome.await) }
            })
            .collect();
        while let Some((index, outcome)) = running.next().await {
            outcomes[index] = Some(outcome?);
        }
        Ok(outcomes.into_iter().flatten().collect())
    }

    async fn run_one(
        &self,
        call: &ToolCall,
        ctx: DispatchContext<'_>,
    ) -> crate::Result<ToolOutcome> {
        // The arguments the tool runs with (normalized, perhaps edited by an approver); the
        // model's own until they are checked.
        let mut arguments = None;
        let span = observe::tool_span(call);
        let mut took = std::time::Duration::ZERO;
        let result = self
            .execute(call, ctx, &mut arguments, &mut took)
            .instrument(span.clone())
            .await?;
        let arguments = arguments.unwrap_or_else(|| call.arguments.clone());
        observe::record_result(&span, &arguments, &result, self.record_content);
        // The audit entry keeps the arguments: moved into it unless an after hook needs them.
        let (audited, for_hooks) = match self.after.is_empty() {
            true => (arguments, None),
            false => (arguments.clone(), Some(arguments)),
        };
        let entry = observe::tool_call_entry(ctx, call, audited, &result, took);
        observe::record(ctx, entry).await;
        let outcome = ToolOutcome::new(call, result, self.max_output_bytes);
        if let Some(arguments) = for_hooks {
            let result = HookResult {
                call: hook_call(call, ctx, arguments),
                content: outcome.content.clone(),
                is_error: outcome.is_error,
            };
            self.run_after_hooks(result).await;
        }
        Ok(outcome)
    }

    /// Checks, hooks, permits and runs `call`; `used` gets the arguments it runs with once
    /// they are checked, `took` the time its body ran (not the wait for its approval).
    async fn execute(
        &self,
        call: &ToolCall,
        ctx: DispatchContext<'_>,
        used: &mut Option<Value>,
        took: &mut std::time::Duration,
    ) -> crate::Result<Result<Value, ToolError>> {
        let Some(tool) = self.get(&call.name) else {
            return Ok(Err(ToolError::UnknownTool {
                name: call.name.clone(),
                known: self.tools().iter().map(|t| t.spec().name.clone()).collect(),
            }));
        };
        let spec = tool.spec();
        let invalid = |message: String| ToolError::InvalidArguments {
            tool: spec.name.clone(),
            message,
        };
        let mut arguments = match normalize_arguments(&call.arguments) {
            Ok(arguments) => arguments,
            Err(message) => return Ok(Err(invalid(message))),
        };
        if let Err(message) = validate(&spec.parameters, &arguments) {
            return Ok(Err(invalid(message)));
        }
        // What every tool, hook and approver sees, hand-written tools included: `null` for an
        // optional property left out, `3.0` for an integer as `3`.
        crate::tool::schema::normalize_arguments(&spec.parameters, &mut arguments);
        *used = Some(arguments.clone());
        if !self.before.is_empty()
            && let Some(reason) = self
                .run_before_hooks(&hook_call(call, ctx, arguments.clone()))
                .await
        {
            let hook = Some("hook".to_owned());
            let entry = observe::decision_entry(ctx, call, hook, "deny", Some(&reason), None);
            observe::record(ctx, entry).await;
            return Ok(Err(denied(spec, reason)));
        }
        let (permission, by) = self.permission_of(call, spec, &arguments, ctx).await?;
        emit(ctx, || AgentEvent::Permission {
            call_id: call.id.clone(),
            tool: spec.name.clone(),
            decision: match &permission {
                Permission::Allow => Decision::Allow,
                Permission::Deny(_) => Decision::Deny,
                Permission::Ask => Decision::Ask,
            },
        });
        match permission {
            // An approval remembered for the user stands for one given now: it is audited
            // as the decision on this call. The policy's plain allow is not a decision.
            Permission::Allow if by == checks::REMEMBERED => {
                let reason = "allowed earlier for this user and tool (remembered)";
                let by = Some(by.to_owned());
                let entry = observe::decision_entry(ctx, call, by, "allow", Some(reason), None);
                observe::record(ctx, entry).await;
            }
            Permission::Allow => {}
            Permission::Deny(reason) => {
                let by = Some(by.to_owned());
                let entry = observe::decision_entry(ctx, call, by, "deny", Some(&reason), None);
                observe::record(ctx, entry).await;
                return Ok(Err(denied(spec, reason)));
            }
            Permission::Ask => match self.ask(call, spec, &arguments, ctx).await? {
                Approval::Run => {
                    emit_approval(ctx, call, Decision::Allow);
                }
                Approval::RunWith(edited) => {
                    emit_approval(ctx, call, Decision::Edit);
                    let mut edited = match normalize_arguments(&edited) {
                        Ok(edited) => edited,
                        Err(message) => {
                            return Ok(Err(invalid(format!("edited by the approver: {message}"))));
                        }
                    };
                    if let Err(message) = validate(&spec.parameters, &edited) {
                        return Ok(Err(invalid(format!("edited by the approver: {message}"))));
                    }
                    crate::tool::schema::normalize_arguments(&spec.parameters, &mut edited);
                    // The edit is what runs: it passes the same hooks and rules as the
                    // model's arguments did (the approver's decision stands for an `Ask`).
                    if let Some(reason) = self.refuse_edit(call, spec, &edited, ctx).await {
                        return Ok(Err(denied(spec, reason)));
                    }
                    arguments = edited;
                    *used = Some(arguments.clone());
                }
                Approval::Refuse(reason) => {
                    emit_approval(ctx, call, Decision::Deny);
                    return Ok(Err(denied(spec, reason)));
                }
            },
        }
        // A slot of the host's concurrency limit, for the body only (a closed set of slots,
        // never made, would run it without one).
        let _slot = match ctx.slots {
            Some(slots) => slots.acquire().await.ok(),
            None => None,
        };
        let started = std::time::Instant::now();
        let result = self.run_tool(tool.as_ref(), arguments, call, ctx).await;
        *took = started.elapsed();
        Ok(result)
    }

    async fn run_tool(
        &self,
        tool: &dyn Tool,
        arguments: Value,
        call: &ToolCall,
        ctx: DispatchContext<'_>,
    ) -> Result<Value, ToolError> {
        let name = &tool.spec().name;
        let panicked = |panic: Box<dyn std::any::Any + Send>| ToolError::Panicked {
            tool: name.clone(),
            message: crate::sync::panic_message(&*panic),
        };
        let mut tool_ctx =
            ToolContext::new(ctx.session, ctx.user.map(str::to_owned), &call.id).with_tool(name);
        if let Some(node) = ctx.node {
            tool_ctx = tool_ctx.with_node(node);
        }
        let future =
            match std::panic::catch_unwind(AssertUnwindSafe(|| tool.call(arguments, &tool_ctx))) {
                Ok(future) => future,
                Err(panic) => return Err(panicked(panic)),
            };
        let timeout = self.timeouts.of(name);
        match tokio::time::timeout(timeout, AssertUnwindSafe(future).catch_unwind()).await {
            Err(_) => Err(ToolError::TimedOut {
                tool: name.clone(),
                seconds: timeout.as_secs_f64(),
            }),
            Ok(Err(panic)) => Err(panicked(panic)),
            Ok(Ok(result)) => result,
        }
    }
}

/// Remembered approvals: (user, tool) → allowed, and the tool's spec it was given for.
type Remembered = HashMap<(Option<String>, String), (bool, u64)>;

fn denied(spec: &ToolSpec, reason: String) -> ToolError {
    ToolError::Denied {
        tool: spec.name.clone(),
        reason,
    }
}

/// `call` as hooks see it, running with `arguments`.
fn hook_call(call: &ToolCall, ctx: DispatchContext<'_>, arguments: Value) -> HookCall {
    HookCall {
        call_id: call.id.clone(),
        tool: call.name.clone(),
        arguments,
        session: ctx.session.to_owned(),
        user: ctx.user.map(str::to_owned),
    }
}
