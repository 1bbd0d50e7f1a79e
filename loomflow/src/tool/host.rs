//! [`ToolHost`]: holds tools and dispatches a model turn's calls.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::{Tool, ToolContext, ToolError, ToolSpec};
use crate::context::Context;
use crate::model::{ToolCall, ToolDefinition};
use crate::runtime::Runtime;

/// The tools a model may call, by name.
#[derive(Clone, Default)]
pub struct ToolHost {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl std::fmt::Debug for ToolHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolHost")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Where a dispatch happens: the run's session and user, its runtime, and the node's
/// context when the dispatch runs inside a graph node (approvals use it to suspend).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct DispatchContext<'a> {
    /// The session (thread).
    pub session: &'a str,
    /// The user, if known.
    pub user: Option<&'a str>,
    /// The runtime, for approvals by signal.
    pub runtime: Option<&'a Runtime>,
    /// The calling node's context.
    pub node: Option<&'a Context>,
}

impl<'a> DispatchContext<'a> {
    /// A context for a session.
    pub fn new(session: &'a str) -> Self {
        Self {
            session,
            user: None,
            runtime: None,
            node: None,
        }
    }

    /// Sets the user.
    #[must_use]
    pub fn user(mut self, user: Option<&'a str>) -> Self {
        self.user = user;
        self
    }

    /// Sets the runtime.
    #[must_use]
    pub fn runtime(mut self, runtime: &'a Runtime) -> Self {
        self.runtime = Some(runtime);
        self
    }

    /// Sets the calling node's context.
    #[must_use]
    pub fn node(mut self, node: &'a Context) -> Self {
        self.node = Some(node);
        self
    }
}

/// The result of one call, ready to send back to the model.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ToolOutcome {
    /// The model's id for the call.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The value (or the error's text), as the model reads it.
    pub content: String,
    /// Whether the call failed.
    pub is_error: bool,
}

impl ToolOutcome {
    fn new(call: &ToolCall, result: Result<Value, ToolError>) -> Self {
        let (content, is_error) = match result {
            Ok(Value::String(text)) => (text, false),
            Ok(value) => (value.to_string(), false),
            Err(error) => (error.to_string(), true),
        };
        Self {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content,
            is_error,
        }
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
        self.tools.insert(tool.spec().name.clone(), tool);
    }

    /// Removes a tool by name; returns whether it was there.
    pub fn remove(&mut self, name: &str) -> bool {
        self.tools.remove(name).is_some()
    }

    /// The specs of every tool, by name.
    pub fn list(&self) -> Vec<&ToolSpec> {
        self.tools.values().map(|t| t.spec()).collect()
    }

    /// A tool by name.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// The definitions to send to a model.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.tools.values().map(|t| t.spec().definition()).collect()
    }

    /// Runs the calls of one model turn and returns one outcome per call, in call order.
    ///
    /// # Errors
    ///
    /// Only [`Error::Suspended`](crate::Error::Suspended), when an approval suspended the
    /// calling node; every problem with a call becomes an error outcome instead.
    pub async fn dispatch(
        &self,
        calls: &[ToolCall],
        ctx: DispatchContext<'_>,
    ) -> crate::Result<Vec<ToolOutcome>> {
        let mut outcomes = Vec::with_capacity(calls.len());
        for call in calls {
            let result = match self.tools.get(&call.name) {
                None => Err(ToolError::UnknownTool {
                    name: call.name.clone(),
                    known: self.tools.keys().cloned().collect(),
                }),
                Some(tool) => {
                    let tool_ctx =
                        ToolContext::new(ctx.session, ctx.user.map(str::to_owned), &call.id);
                    tool.call(call.arguments.clone(), &tool_ctx).await
                }
            };
            outcomes.push(ToolOutcome::new(call, result));
        }
        Ok(outcomes)
    }
}
