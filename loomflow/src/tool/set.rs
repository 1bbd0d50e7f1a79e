//! [`ToolSet`]: tools whose list changes while a host holds them.

use std::sync::Arc;

use super::Tool;

/// A named collection of tools whose membership can change at any time, such as the tools of
/// an MCP server that announces list changes.
///
/// A [`ToolHost`](super::ToolHost) holding a set asks it for its current tools whenever it
/// lists definitions or looks a call up, so a tool that appears is offered on the next model
/// turn and a tool that disappears is reported as unknown. Calls still go through the host's
/// one path: schema check, hooks, permissions, approvals, timeout.
pub trait ToolSet: Send + Sync + 'static {
    /// The set's name, for diagnostics (an MCP server's name).
    fn name(&self) -> &str;

    /// The tools the set holds now.
    fn tools(&self) -> Vec<Arc<dyn Tool>>;
}
