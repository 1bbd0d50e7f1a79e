//! [`ToolRegistry`]: the tools a configuration file may name.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::tool::{Tool, ToolSet};

/// The tools an agent configuration file may give its agent, by name.
///
/// Code registers every tool it has; the file's `tools = [...]` picks the ones this agent
/// gets (see [`Agent::from_config`](crate::agent::Agent::from_config)). A tool is registered
/// under its spec name, the name the model calls it by; a [`ToolSet`] (an MCP server's tools,
/// say) under the name you give it, and naming that in `tools` gives the agent all of the
/// set's tools, as they change. Registering a name again replaces what it named.
///
/// One registry serves any number of files; it is cheap to clone (the tools are shared).
///
/// # Examples
///
/// ```
/// use loomflow::agent::ToolRegistry;
/// use loomflow::prelude::*;
///
/// /// Look up an order.
/// #[tool]
/// async fn lookup_order(id: u64) -> String {
///     format!("order {id}: shipped")
/// }
///
/// /// Refund an order.
/// #[tool(destructive)]
/// async fn refund(id: u64) -> String {
///     format!("order {id}: refunded")
/// }
///
/// let registry = ToolRegistry::new().tool(lookup_order).tool(refund);
/// assert_eq!(registry.names().collect::<Vec<_>>(), ["lookup_order", "refund"]);
/// assert!(registry.contains("refund"));
/// ```
#[derive(Clone, Default)]
#[must_use]
pub struct ToolRegistry {
    entries: BTreeMap<String, Registered>,
}

/// What a registered name stands for.
#[derive(Clone)]
pub(super) enum Registered {
    Tool(Arc<dyn Tool>),
    Set(Arc<dyn ToolSet>),
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a tool under its spec name, replacing whatever had that name.
    pub fn tool(self, tool: impl Tool) -> Self {
        self.tool_arc(Arc::new(tool))
    }

    /// Registers a shared tool under its spec name, replacing whatever had that name.
    pub fn tool_arc(mut self, tool: Arc<dyn Tool>) -> Self {
        self.entries
            .insert(tool.spec().name.clone(), Registered::Tool(tool));
        self
    }

    /// Registers a set of tools whose list can change (an MCP server's tools, for example)
    /// under `name`, replacing whatever had that name. A file that lists `name` in `tools`
    /// gives its agent every tool of the set (see [`ToolHost::with_set`]).
    ///
    /// [`ToolHost::with_set`]: crate::tool::ToolHost::with_set
    pub fn set(self, name: impl Into<String>, set: impl ToolSet) -> Self {
        self.set_arc(name, Arc::new(set))
    }

    /// Registers a shared tool set under `name` (see [`set`](Self::set)).
    pub fn set_arc(mut self, name: impl Into<String>, set: Arc<dyn ToolSet>) -> Self {
        self.entries.insert(name.into(), Registered::Set(set));
        self
    }

    /// Whether `name` is registered, as a tool or as a tool set.
    #[must_use]
    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// Every registered name, tools and tool sets, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    pub(super) fn get(&self, name: &str) -> Option<&Registered> {
        self.entries.get(name)
    }
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut tools = Vec::new();
        let mut sets = Vec::new();
        for (name, entry) in &self.entries {
            match entry {
                Registered::Tool(_) => tools.push(name),
                Registered::Set(_) => sets.push(name),
            }
        }
        f.debug_struct("ToolRegistry")
            .field("tools", &tools)
            .field("sets", &sets)
            .finish()
    }
}
