//! The tool a swarm agent calls to hand the conversation to another agent.

use serde_json::{Value, json};

use crate::graph::BoxFuture;
use crate::tool::{Tool, ToolContext, ToolError, ToolSpec};

pub(crate) struct HandoffTool {
    spec: ToolSpec,
    target: String,
}

impl HandoffTool {
    /// The tool that hands the conversation to `target`: `transfer_to_<target>`, made a
    /// name providers accept (`billing team` gives `transfer_to_billing_team`).
    pub(crate) fn new(target: &str, description: &str) -> Self {
        let spec = ToolSpec::new(
            crate::tool::callable_name("transfer_to_", target),
            format!("Hand the conversation to {target}: {description}"),
            json!({ "type": "object", "properties": {}, "additionalProperties": false }),
        );
        Self {
            spec,
            target: target.to_owned(),
        }
    }
}

impl Tool for HandoffTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call<'a>(
        &'a self,
        _arguments: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        let text = format!("transferred to {}", self.target);
        Box::pin(async move { Ok(Value::String(text)) })
    }
}
