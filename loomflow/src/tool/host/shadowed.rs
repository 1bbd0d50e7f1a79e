//! Every tool a host offers, by name: its own, then its sets' in the order they were added.
//! A set's tool whose name another already has is never offered nor called; it is warned
//! of, once per name and host, rather than hidden silently (two MCP servers without a
//! prefix that both offer `search`, or a server's tool named as one of the host's own).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use super::super::Tool;
use super::super::set::ToolSet;

/// The names already warned of.
#[derive(Default)]
pub(super) struct Shadowed(Mutex<HashSet<String>>);

impl Shadowed {
    fn warn_once(&self, name: &str) {
        if crate::sync::lock(&self.0).insert(name.to_owned()) {
            tracing::warn!(
                tool = name,
                "a tool set offers a tool named {name}, which another tool of the host has: \
                 the host's own (or an earlier set's) is the one the model calls; give the \
                 set's tools a prefix (McpServer::builder(..).tool_prefix(..)) or rename one"
            );
        }
    }
}

/// `own` and then each of `sets`' tools, by name; a set's tool named as one before it is
/// left out, and warned of.
pub(super) fn all_tools(
    own: &BTreeMap<String, Arc<dyn Tool>>,
    sets: &[Arc<dyn ToolSet>],
    shadowed: &Shadowed,
) -> Vec<Arc<dyn Tool>> {
    if sets.is_empty() {
        return own.values().cloned().collect();
    }
    let mut all = own.clone();
    for set in sets {
        for tool in set.tools() {
            match all.entry(tool.spec().name.clone()) {
                std::collections::btree_map::Entry::Occupied(taken) => {
                    shadowed.warn_once(taken.key());
                }
                std::collections::btree_map::Entry::Vacant(free) => {
                    free.insert(tool);
                }
            }
        }
    }
    all.into_values().collect()
}
