//! Tools: functions a model can call, with typed schemas, a host that dispatches calls,
//! permissions, approvals and hooks.
//!
//! A [`Tool`] has a [`ToolSpec`] (name, description, JSON schema for its arguments) and an
//! async `call`; [`#[tool]`](macro@crate::tool) writes both from a function. The [`ToolHost`] holds
//! tools and dispatches the calls of one model turn: bad calls (unknown tool, bad arguments,
//! a panic, a timeout) become error results the model can read; they never abort a run.
//!
//! Around each call: `before_tool` / `after_tool` hooks ([`HookCall`], [`HookResult`]), a
//! [`PermissionPolicy`] that allows, denies or asks, and an [`ApprovalHandler`] that settles
//! the asks, for example [`SignalApprover`], which waits for a person's
//! [`ApprovalDecision`] sent with [`Runtime::decide_approval`](crate::Runtime::decide_approval).
//!
//! A [`ToolSet`] is a group of tools whose list changes while the host holds it; with the
//! `mcp` feature, `mcp::McpServer` is one: an MCP server's tools, followed as they change.

mod approval;
mod event;
mod hook;
mod host;
#[doc(hidden)]
pub mod macro_support;
#[cfg(feature = "mcp")]
pub mod mcp;
pub(crate) mod name;
mod pending;
mod permission;
mod schema;
mod set;

pub use approval::{
    ApprovalDecision, ApprovalHandler, ApprovalRequest, SignalApprover, approver_fn,
};
pub use event::{AgentEvent, Decision};
pub use hook::{HookCall, HookDecision, HookResult};
pub use host::{DEFAULT_MAX_OUTPUT_BYTES, DispatchContext, ToolHost, ToolOutcome};
pub(crate) use name::callable_name;
pub use permission::{Permission, PermissionPolicy};
pub(crate) use schema::normalize_arguments;
pub(crate) use schema::validate as validate_schema;
pub use schema::{schema_for, strict_schema};
pub use set::ToolSet;

use serde_json::Value;

use crate::graph::BoxFuture;
use crate::model::ToolDefinition;

/// What a model sees of a tool, plus the policy flags the host enforces.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema (2020-12) of the arguments: an `object` schema.
    pub parameters: Value,
    /// Every call needs a person's approval, unless that person answered
    /// [`RememberAllow`](ApprovalDecision::RememberAllow) for this tool and user earlier.
    pub requires_approval: bool,
    /// The tool changes or destroys something (informational, for permission policies).
    pub destructive: bool,
}

impl ToolSpec {
    /// A spec with no policy flags.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            parameters,
            requires_approval: false,
            destructive: false,
        }
    }

    /// Marks every call as needing a person's approval.
    #[must_use]
    pub fn requires_approval(mut self, yes: bool) -> Self {
        self.requires_approval = yes;
        self
    }

    /// Marks the tool as destructive.
    #[must_use]
    pub fn destructive(mut self, yes: bool) -> Self {
        self.destructive = yes;
        self
    }

    /// The definition sent to a model, with the schema as written.
    pub fn definition(&self) -> ToolDefinition {
        ToolDefinition::new(&self.name, &self.description, self.parameters.clone())
    }

    /// The parameters in the form OpenAI's strict mode accepts: every property required,
    /// optional ones nullable, `additionalProperties: false`, in nested objects too (see
    /// [`strict_schema`]).
    pub fn strict_parameters(&self) -> Value {
        strict_schema(&self.parameters)
    }

    /// The definition sent to a model, with the [strict](Self::strict_parameters) schema.
    pub fn definition_strict(&self) -> ToolDefinition {
        ToolDefinition::new(&self.name, &self.description, self.strict_parameters())
    }
}

/// Why a tool call did not produce a value. Becomes an error result the model reads.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// No tool has that name.
    #[error("unknown tool {name}; known tools: {}", known.join(", "))]
    UnknownTool {
        /// The name the model used.
        name: String,
        /// The tools that exist.
        known: Vec<String>,
    },
    /// The arguments do not fit the tool's schema.
    #[error("invalid arguments for tool {tool}: {message}")]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// Which field is wrong and what was expected.
        message: String,
    },
    /// The tool ran and failed.
    #[error("tool {tool} failed: {message}")]
    Failed {
        /// The tool.
        tool: String,
        /// The tool's error.
        message: String,
    },
    /// The tool panicked; the panic was caught.
    #[error("tool {tool} panicked: {message}")]
    Panicked {
        /// The tool.
        tool: String,
        /// The panic message.
        message: String,
    },
    /// The tool took longer than the host's per-call timeout
    /// ([`ToolHost::timeout`], or the tool's own, [`ToolHost::timeout_for`]).
    #[error("tool {tool} timed out after {seconds} s")]
    TimedOut {
        /// The tool.
        tool: String,
        /// The timeout.
        seconds: f64,
    },
    /// The server that runs the tool is gone: its process exited or its connection closed
    /// (an MCP server, for example). Calls fail at once rather than wait.
    #[error("tool {tool} is unavailable: server {server} is gone ({reason})")]
    Unavailable {
        /// The tool.
        tool: String,
        /// The server that ran it.
        server: String,
        /// What was seen: the transport closed, the process exited, ….
        reason: String,
    },
    /// The server that runs the tool could not be reached for this call (a refused
    /// connection, an unknown host): the call was not made, and the next may reach it.
    #[error("tool {tool} is unavailable for now: server {server} could not be reached ({reason})")]
    Unreachable {
        /// The tool.
        tool: String,
        /// The server that runs it.
        server: String,
        /// What the connection said.
        reason: String,
    },
    /// A permission rule, an approver or a hook refused the call.
    #[error("call to tool {tool} was denied: {reason}")]
    Denied {
        /// The tool.
        tool: String,
        /// Why.
        reason: String,
    },
}

/// What a running tool knows about its call.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ToolContext {
    /// The session (thread) of the run that made the call.
    pub session: String,
    /// The user the run acts for, if known.
    pub user: Option<String>,
    /// The model's id for this call.
    pub call_id: String,
    /// The calling node's event channel, when the call comes from a graph node.
    events: Option<crate::context::NodeEvents>,
    /// The name the tool was called by, when a host dispatched the call.
    tool: Option<String>,
}

impl ToolContext {
    /// A context for a call.
    pub fn new(
        session: impl Into<String>,
        user: Option<String>,
        call_id: impl Into<String>,
    ) -> Self {
        Self {
            session: session.into(),
            user,
            call_id: call_id.into(),
            events: None,
            tool: None,
        }
    }

    /// Names the tool called (the host does this when it dispatches): the events it emits
    /// carry the name.
    #[must_use]
    pub(crate) fn with_tool(mut self, name: &str) -> Self {
        self.tool = Some(name.to_owned());
        self
    }

    /// Attaches the calling node's event channel (the host does this when it dispatches
    /// inside a graph node).
    #[must_use]
    pub fn with_node(mut self, node: &crate::Context) -> Self {
        self.events = Some(node.events());
        self
    }

    /// Emits a custom event on the calling run's event stream, as the calling node, like
    /// [`Context::emit`](crate::Context::emit). The data is `{"tool": …, "call_id": …,
    /// "data": …}`: the tool's name (left out unless a [`ToolHost`] dispatched the call),
    /// its call id, and what was emitted.
    /// Outside a graph node there is no stream and nothing happens. It never waits: see
    /// [`event_room`](Self::event_room).
    pub fn emit(&self, name: impl Into<String>, data: impl serde::Serialize) {
        let Some(events) = &self.events else { return };
        let name = name.into();
        let data = serde_json::to_value(data).unwrap_or_else(|error| {
            tracing::warn!(call_id = %self.call_id, event = %name, %error, "event payload did not serialize");
            Value::Null
        });
        let data = match &self.tool {
            Some(tool) => {
                serde_json::json!({ "tool": tool, "call_id": self.call_id, "data": data })
            }
            None => serde_json::json!({ "call_id": self.call_id, "data": data }),
        };
        events.emit(crate::event::EventKind::Custom { name, data });
    }

    /// Waits until the calling run's event stream has room for another event, like
    /// [`Context::event_room`](crate::Context::event_room): a tool that emits many events
    /// calls it before each. At once outside a graph node, or for a stream that is not
    /// bounded.
    ///
    /// # Errors
    ///
    /// As [`Context::event_room`](crate::Context::event_room): the run was cancelled, or
    /// taken over, while the tool waited.
    pub async fn event_room(&self) -> Result<(), crate::RunError> {
        match &self.events {
            Some(events) => events.room().await,
            None => Ok(()),
        }
    }
}

/// A function a model can call. Object-safe: hosts keep `Arc<dyn Tool>`.
///
/// Usually written with `#[tool]`; implement it by hand for tools built at run time.
pub trait Tool: Send + Sync + 'static {
    /// The tool's spec.
    fn spec(&self) -> &ToolSpec;

    /// Runs the tool on arguments that already match its schema. A [`ToolHost`] hands them
    /// over as serde decodes them: a `null` for an optional property that does not take
    /// `null` is left out, and an integral float where an integer is asked for (`3.0`) is
    /// that integer.
    fn call<'a>(
        &'a self,
        arguments: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>>;
}
