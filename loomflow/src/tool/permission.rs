//! Permissions: allow, deny or ask, per call.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::ToolSpec;

/// What a permission rule says about one call.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Permission {
    /// Run it.
    Allow,
    /// Refuse it, with the reason the model reads.
    Deny(String),
    /// Ask the host's [`ApprovalHandler`](super::ApprovalHandler).
    Ask,
}

type Router = Arc<dyn Fn(Option<&str>, &ToolSpec, &Value) -> Option<Permission> + Send + Sync>;

/// Decides [`Permission`] per call: a per-user router first, then a per-tool override, then
/// a rule for destructive tools, then the default. Tools marked `requires_approval` always
/// ask, whatever the policy says (a deny still denies), until the approver answers
/// [`RememberAllow`](super::ApprovalDecision::RememberAllow) for the tool and the user.
///
/// # Examples
///
/// ```
/// use loomflow::tool::{Permission, PermissionPolicy, ToolSpec};
/// use serde_json::json;
///
/// let policy = PermissionPolicy::new(Permission::Allow)
///     .tool("delete_file", Permission::Ask)
///     .router(|user, spec, _args| match user {
///         Some("guest") if spec.destructive => Some(Permission::Deny("guests may not".into())),
///         _ => None,
///     });
/// let rm = ToolSpec::new("delete_file", "Delete a file.", json!({"type": "object"})).destructive(true);
/// assert_eq!(policy.decide(Some("alice"), &rm, &json!({})), Permission::Ask);
/// assert_eq!(policy.decide(Some("guest"), &rm, &json!({})), Permission::Deny("guests may not".into()));
/// ```
#[derive(Clone)]
pub struct PermissionPolicy {
    default: Permission,
    destructive: Option<Permission>,
    tools: HashMap<String, Permission>,
    router: Option<Router>,
    /// The tools allowed by [`allow_unless_ruled`](Self::allow_unless_ruled): the library's
    /// own, whose allow goes with them when a tool of that name replaces them.
    implicit: Vec<String>,
}

impl std::fmt::Debug for PermissionPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PermissionPolicy")
            .field("default", &self.default)
            .field("destructive", &self.destructive)
            .field("tools", &self.tools)
            .field("router", &self.router.is_some())
            .finish()
    }
}

impl Default for PermissionPolicy {
    /// Allows every call (tools that require approval still ask).
    fn default() -> Self {
        Self::new(Permission::Allow)
    }
}

impl PermissionPolicy {
    /// A policy whose answer, when no other rule applies, is `default`.
    pub fn new(default: Permission) -> Self {
        Self {
            default,
            destructive: None,
            tools: HashMap::new(),
            router: None,
            implicit: Vec::new(),
        }
    }

    /// Allows every call by default.
    pub fn allow_all() -> Self {
        Self::new(Permission::Allow)
    }

    /// Asks about every call by default.
    pub fn ask_all() -> Self {
        Self::new(Permission::Ask)
    }

    /// Denies every call by default.
    pub fn deny_all(reason: impl Into<String>) -> Self {
        Self::new(Permission::Deny(reason.into()))
    }

    /// The answer for one tool, by name.
    #[must_use]
    pub fn tool(mut self, name: impl Into<String>, permission: Permission) -> Self {
        self.tools.insert(name.into(), permission);
        self
    }

    /// The answer for tools marked destructive that have no per-tool override.
    #[must_use]
    pub fn destructive(mut self, permission: Permission) -> Self {
        self.destructive = Some(permission);
        self
    }

    /// A per-user router, asked first: `Some` decides, `None` falls through to the other rules.
    /// A router that panics denies the call.
    #[must_use]
    pub fn router(
        mut self,
        router: impl Fn(Option<&str>, &ToolSpec, &Value) -> Option<Permission> + Send + Sync + 'static,
    ) -> Self {
        self.router = Some(Arc::new(router));
        self
    }

    /// Allows the tool `name` unless a per-tool rule already decides it: the allow of a tool
    /// the library adds (memory's), which [`tool_replaced`](Self::tool_replaced) takes back.
    pub(crate) fn allow_unless_ruled(&mut self, name: &str) {
        if !self.tools.contains_key(name) {
            self.tools.insert(name.to_owned(), Permission::Allow);
            self.implicit.push(name.to_owned());
        }
    }

    /// The tool `name` was replaced or removed: an allow [`allow_unless_ruled`] gave the
    /// tool it was goes with it, so that another tool of that name (a destructive one of the
    /// user's) is decided by the policy's own rules.
    ///
    /// [`allow_unless_ruled`]: Self::allow_unless_ruled
    pub(crate) fn tool_replaced(&mut self, name: &str) {
        if let Some(at) = self.implicit.iter().position(|implicit| implicit == name) {
            self.implicit.swap_remove(at);
            self.tools.remove(name);
        }
    }

    /// The permission for a call by `user` to the tool `spec` with `arguments`.
    pub fn decide(&self, user: Option<&str>, spec: &ToolSpec, arguments: &Value) -> Permission {
        // A router that panics denies the call, as a hook that panics does.
        let routed = self.router.as_ref().and_then(|router| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                router(user, spec, arguments)
            }))
            .unwrap_or_else(|panic| {
                tracing::warn!(tool = %spec.name, panic = %crate::sync::panic_message(&*panic), "permission router panicked; denying");
                Some(Permission::Deny("the permission router failed".to_owned()))
            })
        });
        let decided = routed
            .or_else(|| self.tools.get(&spec.name).cloned())
            .or_else(|| spec.destructive.then(|| self.destructive.clone()).flatten())
            .unwrap_or_else(|| self.default.clone());
        match decided {
            Permission::Allow if spec.requires_approval => Permission::Ask,
            other => other,
        }
    }
}
