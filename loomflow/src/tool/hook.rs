//! Hooks around every call: `before_tool` may deny it, `after_tool` sees its result.

use std::future::Future;
use std::sync::Arc;

use serde_json::Value;

use crate::graph::BoxFuture;

/// A call as hooks see it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct HookCall {
    /// The model's id for the call.
    pub call_id: String,
    /// The tool's name.
    pub tool: String,
    /// The arguments the tool runs with.
    pub arguments: Value,
    /// The session (thread).
    pub session: String,
    /// The user, if known.
    pub user: Option<String>,
}

/// A call and its result, for `after_tool` hooks.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct HookResult {
    /// The call.
    pub call: HookCall,
    /// The text the model reads.
    pub content: String,
    /// Whether the call failed.
    pub is_error: bool,
}

/// What a `before_tool` hook says.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HookDecision {
    /// Let the call go on to the next hook and the permission check.
    Continue,
    /// Refuse the call, with the reason the model reads.
    Deny(String),
}

pub(crate) type BeforeHook =
    Arc<dyn Fn(HookCall) -> BoxFuture<'static, HookDecision> + Send + Sync>;
pub(crate) type AfterHook =
    Arc<dyn Fn(HookResult) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

pub(crate) fn before<F, Fut>(hook: F) -> BeforeHook
where
    F: Fn(HookCall) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HookDecision> + Send + 'static,
{
    Arc::new(move |call| Box::pin(hook(call)))
}

pub(crate) fn after<F, Fut, E>(hook: F) -> AfterHook
where
    F: Fn(HookResult) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: std::fmt::Display,
{
    Arc::new(move |result| {
        let future = hook(result);
        Box::pin(async move { future.await.map_err(|e| e.to_string()) })
    })
}
