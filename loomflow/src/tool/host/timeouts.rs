//! How long a tool may run: the host's time, and the times set for tools by name.

use std::collections::BTreeMap;
use std::time::Duration;

use super::ToolHost;

/// How long tools may run before their calls fail with
/// [`ToolError::TimedOut`](crate::tool::ToolError::TimedOut).
#[derive(Clone, Debug)]
pub(super) struct Timeouts {
    /// Every tool's, but those named in `per_tool`.
    default: Duration,
    per_tool: BTreeMap<String, Duration>,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            default: Duration::from_secs(60),
            per_tool: BTreeMap::new(),
        }
    }
}

impl Timeouts {
    /// How long the tool named `tool` may run.
    pub(super) fn of(&self, tool: &str) -> Duration {
        self.per_tool.get(tool).copied().unwrap_or(self.default)
    }
}

impl ToolHost {
    /// How long one tool may run before its call fails with
    /// [`ToolError::TimedOut`](crate::tool::ToolError::TimedOut) (default 60 s), but those
    /// given a time of their own with [`timeout_for`](Self::timeout_for). Approvals and
    /// hooks are not counted.
    ///
    /// A tool past its time is given up on, not stopped: an async tool's future is dropped
    /// where it waits, but a sync `#[tool]` runs on a blocking thread that cannot be
    /// interrupted, and goes on to its end (its result is dropped). The model is told the
    /// call timed out and may call it again: a tool whose effect must not happen twice
    /// needs an idempotency key of its own (the call id, say) or a timeout it cannot reach.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.default = timeout;
        self
    }

    /// How long the tool named `tool` may run, instead of [`timeout`](Self::timeout): a
    /// slow search given minutes, a quick lookup a second. Set for a name, the one the
    /// model calls the tool by (an MCP server's tools by their prefixed name, `fs_read_file`
    /// for `read_file`): it holds for whichever tool has that name, one added later or a
    /// tool set's included; a name no tool has is not checked. An MCP tool is bounded by
    /// its server's own limits too.
    ///
    /// ```
    /// use std::time::Duration;
    /// use loomflow::tool::ToolHost;
    ///
    /// let host = ToolHost::new()
    ///     .timeout(Duration::from_secs(10))
    ///     .timeout_for("crawl_site", Duration::from_secs(300));
    /// # let _ = host;
    /// ```
    #[must_use]
    pub fn timeout_for(mut self, tool: impl Into<String>, timeout: Duration) -> Self {
        self.timeouts.per_tool.insert(tool.into(), timeout);
        self
    }
}
