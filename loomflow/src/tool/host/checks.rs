//! The checks around each call: hooks before and after, the permission policy, and the
//! approval it may ask for.

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use futures_util::future::Either;
use serde_json::Value;

use super::{DispatchContext, ToolHost, observe};
use crate::Error;
use crate::model::ToolCall;
use crate::tool::ToolSpec;
use crate::tool::approval::{ApprovalDecision, ApprovalRequest};
use crate::tool::event::{AgentEvent, Decision};
use crate::tool::hook::{HookCall, HookDecision, HookResult};
use crate::tool::permission::Permission;

/// Who decided a call's permission: the policy, or an approver's decision remembered for
/// the user and tool (`RememberAllow`, `RememberDeny`).
pub(super) const POLICY: &str = "policy";
pub(super) const REMEMBERED: &str = "remembered";

impl ToolHost {
    /// The call's permission, and who decided it ([`POLICY`] or [`REMEMBERED`]).
    pub(super) fn permission(
        &self,
        user: Option<&str>,
        spec: &ToolSpec,
        arguments: &Value,
    ) -> (Permission, &'static str) {
        match self.policy.decide(user, spec, arguments) {
            Permission::Ask => {
                let remembered = crate::sync::lock(&self.remembered);
                let key = (user.map(str::to_owned), spec.name.clone());
                // Given for the tool as it was then: one of that name now that differs (a
                // server's list changed, a tool replaced) is asked about afresh.
                let decided = remembered
                    .get(&key)
                    .filter(|(_, given_for)| *given_for == spec_print(spec));
                match decided {
                    Some((allowed, _)) => remembered_permission(*allowed),
                    None => (Permission::Ask, POLICY),
                }
            }
            other => (other, POLICY),
        }
    }

    /// [`permission`](Self::permission), as the call's node first took it when the policy
    /// asks: whether a remembered decision stood for one, or the call was asked about, is
    /// journaled, so that the node run again for the call (carried on while its approval
    /// waited, recovered) takes the same way. Otherwise an allow remembered since, for
    /// another call, let the tool run over the decision this call waited for (a deny, say),
    /// and a remembered decision a restart forgot asked again about a call decided.
    pub(super) async fn permission_of(
        &self,
        call: &ToolCall,
        spec: &ToolSpec,
        arguments: &Value,
        ctx: DispatchContext<'_>,
    ) -> crate::Result<(Permission, &'static str)> {
        let (permission, by) = self.permission(ctx.user, spec, arguments);
        // Nothing is remembered for a run with no user, nor without an approver to decide.
        let (Some(node), Some(_), Some(_)) = (ctx.node, ctx.user, &self.approver) else {
            return Ok((permission, by));
        };
        let print = spec_print(spec);
        let remembered = match (&permission, by) {
            (Permission::Ask, _) => None,
            (Permission::Allow, REMEMBERED) => Some((true, print)),
            (Permission::Deny(_), REMEMBERED) => Some((false, print)),
            _ => return Ok((permission, by)),
        };
        let name = format!("permission:{}", call.id);
        let taken = node.step(
            &name,
            || async move { Ok::<_, crate::RunError>(remembered) },
        );
        Ok(match taken.await? {
            // Taken for the tool as it was: another now (a deploy, a server's list changed)
            // is asked about, as a remembered decision would not stand for it either. One a
            // build before the stable print journaled still stands for the same tool.
            Some((allowed, given_for)) if given_for == print || given_for == legacy_print(spec) => {
                remembered_permission(allowed)
            }
            _ => (Permission::Ask, POLICY),
        })
    }

    /// Why arguments an approver edited may not run, if they may not: a before hook or the
    /// permission policy refuses them, as either would have refused them from the model.
    /// The refusal is recorded as the decision of the hook or the policy.
    pub(super) async fn refuse_edit(
        &self,
        call: &ToolCall,
        spec: &ToolSpec,
        edited: &Value,
        ctx: DispatchContext<'_>,
    ) -> Option<String> {
        let (by, reason) = if let Some(reason) = self
            .run_before_hooks(&super::hook_call(call, ctx, edited.clone()))
            .await
        {
            ("hook", reason)
        } else if let Permission::Deny(reason) = self.policy.decide(ctx.user, spec, edited) {
            ("policy", reason)
        } else {
            return None;
        };
        let reason = format!("the approver's edit is refused: {reason}");
        let entry =
            observe::decision_entry(ctx, call, Some(by.to_owned()), "deny", Some(&reason), None);
        observe::record(ctx, entry).await;
        Some(reason)
    }

    /// Remembers a decision for `user` and `tool`. A run for no user has nobody to remember
    /// it for: every such run shares the key, so a decision given in one session would
    /// decide in all of them. It is not remembered.
    pub(super) fn remember(&self, user: Option<&str>, tool: &ToolSpec, allowed: bool) {
        let Some(user) = user else {
            tracing::debug!(
                tool = tool.name,
                "not remembering an approval decision: the run has no user"
            );
            return;
        };
        let key = (Some(user.to_owned()), tool.name.clone());
        crate::sync::lock(&self.remembered).insert(key, (allowed, spec_print(tool)));
    }

    pub(super) async fn ask(
        &self,
        call: &ToolCall,
        spec: &ToolSpec,
        arguments: &Value,
        ctx: DispatchContext<'_>,
    ) -> crate::Result<Approval> {
        let Some(handler) = &self.approver else {
            let reason = "approval required; no approver";
            let entry = observe::decision_entry(ctx, call, None, "deny", Some(reason), None);
            observe::record(ctx, entry).await;
            return Ok(Approval::Refuse(reason.to_owned()));
        };
        let mut request = ApprovalRequest::new(
            ctx.session,
            call.id.clone(),
            spec.name.clone(),
            arguments.clone(),
        )
        .user(ctx.user.map(str::to_owned));
        if let Some(node) = ctx.node {
            // Asked once: a node that runs again for the same step (resumed before the
            // decision came, retried) asks with the time it first asked, which the lists of
            // pending calls show and decisions are keyed by.
            let now = request.requested_at_ms;
            let name = format!("approval-asked:{}", call.id);
            let asked = node.step(&name, || async move { Ok::<_, crate::RunError>(now) });
            request.requested_at_ms = asked.await?;
        }
        let ctx = DispatchContext {
            approval_timeout: Some(self.approval_timeout),
            ..ctx
        };
        let decision = guarded(|| handler.decide(&request, ctx));
        let refused = |reason: String| async move {
            let entry = observe::decision_entry(ctx, call, None, "deny", Some(&reason), None);
            observe::record(ctx, entry).await;
            Ok(Approval::Refuse(reason))
        };
        let decision = match tokio::time::timeout(self.approval_timeout, decision).await {
            Err(_) => {
                return refused(format!(
                    "no approval decision within {:?}",
                    self.approval_timeout
                ))
                .await;
            }
            Ok(Err(panic)) => {
                tracing::warn!(tool = %spec.name, panic = %crate::sync::panic_message(&*panic), "approval handler panicked; denying");
                return refused("the approval handler failed".to_owned()).await;
            }
            Ok(Ok(Err(error @ Error::Suspended { .. }))) => return Err(error),
            // The run was cancelled while the call waited for its decision: the run stops.
            Ok(Ok(Err(error @ Error::Run(crate::RunError::Cancelled { .. })))) => {
                return Err(error);
            }
            // The store failed for a moment while the call waited in a node: the node fails
            // as on any store failure, and the run is carried on where the decision waits
            // still. A denial would be journaled for good.
            Ok(Ok(Err(error))) if ctx.node.is_some() && store_failed(&error) => {
                return Err(error);
            }
            Ok(Ok(Err(error))) => {
                tracing::warn!(tool = %spec.name, %error, "approval handler failed; denying");
                return refused(format!("the approval handler failed: {error}")).await;
            }
            Ok(Ok(Ok(decision))) => decision,
        };
        let (action, reason, edited) = match &decision {
            ApprovalDecision::Allow => ("allow", None, None),
            ApprovalDecision::Deny { reason } => ("deny", Some(reason.as_str()), None),
            ApprovalDecision::Edit { arguments } => ("edit", None, Some(arguments)),
            ApprovalDecision::RememberAllow => ("remember_allow", None, None),
            ApprovalDecision::RememberDeny => ("remember_deny", None, None),
        };
        let mut entry =
            observe::decision_entry(ctx, call, request.decider(), action, reason, edited);
        if let Some(at_ms) = request.decision_time() {
            entry = entry.at_ms(at_ms);
        }
        observe::record(ctx, entry).await;
        Ok(match decision {
            ApprovalDecision::Allow => Approval::Run,
            ApprovalDecision::Deny { reason } => Approval::Refuse(reason),
            ApprovalDecision::Edit { arguments } => Approval::RunWith(arguments),
            ApprovalDecision::RememberAllow => {
                self.remember(ctx.user, spec, true);
                Approval::Run
            }
            ApprovalDecision::RememberDeny => {
                self.remember(ctx.user, spec, false);
                Approval::Refuse("approval declined".to_owned())
            }
        })
    }

    /// The first denial among the before-hooks, in registration order.
    pub(super) async fn run_before_hooks(&self, call: &HookCall) -> Option<String> {
        for (index, hook) in self.before.iter().enumerate() {
            let future = guarded(|| hook(call.clone()));
            match tokio::time::timeout(self.hook_timeout, future).await {
                Err(_) if !self.hook_timeout_denies => {
                    tracing::warn!(tool = %call.tool, hook = index, "before_tool hook timed out; going on");
                }
                Err(_) => {
                    return Some(format!(
                        "before_tool hook {index} did not answer within {:?}",
                        self.hook_timeout
                    ));
                }
                Ok(Err(panic)) => {
                    tracing::warn!(tool = %call.tool, hook = index, panic = %crate::sync::panic_message(&*panic), "before_tool hook panicked; denying");
                    return Some(format!("before_tool hook {index} failed"));
                }
                Ok(Ok(HookDecision::Deny(reason))) => return Some(reason),
                Ok(Ok(HookDecision::Continue)) => {}
            }
        }
        None
    }

    pub(super) async fn run_after_hooks(&self, result: HookResult) {
        for (index, hook) in self.after.iter().enumerate() {
            let future = guarded(|| hook(result.clone()));
            match tokio::time::timeout(self.hook_timeout, future).await {
                Err(_) => {
                    tracing::warn!(tool = %result.call.tool, hook = index, "after_tool hook timed out")
                }
                Ok(Err(panic)) => {
                    tracing::warn!(tool = %result.call.tool, hook = index, panic = %crate::sync::panic_message(&*panic), "after_tool hook panicked")
                }
                Ok(Ok(Err(error))) => {
                    tracing::warn!(tool = %result.call.tool, hook = index, %error, "after_tool hook failed")
                }
                Ok(Ok(Ok(()))) => {}
            }
        }
    }
}

/// The future `make` makes, guarded: a panic while it makes it (the user's closure, before
/// its `async` block) or while it is polled is its `Err`, as a hook's or an approver's panic
/// is to be handled wherever it happens.
fn guarded<F: Future>(
    make: impl FnOnce() -> F,
) -> impl Future<Output = std::thread::Result<F::Output>> {
    match std::panic::catch_unwind(AssertUnwindSafe(make)) {
        Ok(future) => Either::Left(AssertUnwindSafe(future).catch_unwind()),
        Err(panic) => Either::Right(std::future::ready(Err(panic))),
    }
}

/// What an approval settled.
pub(super) enum Approval {
    Run,
    RunWith(Value),
    Refuse(String),
}

/// Surfaces a permission or approval decision on the run's stream, when the dispatch runs
/// inside a node; the event is built only when the run has a listener, as it copies the
/// call's id and names.
pub(super) fn emit(ctx: DispatchContext<'_>, event: impl FnOnce() -> AgentEvent) {
    if let Some(node) = ctx.node.filter(|node| node.has_listener()) {
        event().emit(node);
    }
}

pub(super) fn emit_approval(ctx: DispatchContext<'_>, call: &ToolCall, decision: Decision) {
    emit(ctx, || AgentEvent::Approval {
        call_id: call.id.clone(),
        tool: call.name.clone(),
        decision,
    });
}

/// Whether `error` is a store's passing failure (see `StoreError::is_passing`), which the
/// run is let go on, rather than one of the call's.
fn store_failed(error: &Error) -> bool {
    match error {
        Error::Store(failure) | Error::Run(crate::RunError::Store(failure)) => failure.is_passing(),
        _ => false,
    }
}

/// Arguments as an object: a JSON string is parsed (some models send text), `null` is `{}`.
pub(super) fn normalize_arguments(arguments: &Value) -> Result<Value, String> {
    let parsed = match arguments {
        Value::String(text) if text.trim().is_empty() => {
            return Ok(Value::Object(serde_json::Map::new()));
        }
        Value::String(text) => {
            serde_json::from_str(text).map_err(|e| format!("arguments are not JSON: {e}"))?
        }
        Value::Null => return Ok(Value::Object(serde_json::Map::new())),
        other => other.clone(),
    };
    match parsed {
        Value::Object(_) => Ok(parsed),
        Value::Null => Ok(Value::Object(serde_json::Map::new())),
        other => Err(format!(
            "arguments: expected a JSON object, got {}",
            match other {
                Value::Array(_) => "an array",
                Value::String(_) => "a string",
                Value::Number(_) => "a number",
                Value::Bool(_) => "a boolean",
                _ => "something else",
            }
        )),
    }
}

/// What a remembered decision was given for: the tool's spec, hashed (description,
/// parameters, approval and destructive flags), so that another tool of the same name is
/// not decided by it. Journaled with the call's permission, so the same in every build: a
/// node run again by a newer build finds the print it took.
pub(super) fn spec_print(spec: &ToolSpec) -> u64 {
    let mut hash = crate::stable_hash::StableHash::new();
    hash.text(&spec.name).text(&spec.description);
    hash_value(&mut hash, &spec.parameters);
    hash.bytes(&[u8::from(spec.requires_approval), u8::from(spec.destructive)]);
    hash.finish()
}

/// The print builds before [`spec_print`] journaled: `std`'s hasher, which is the same for the
/// same tool as long as Rust does not change it.
fn legacy_print(spec: &ToolSpec) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    spec.name.hash(&mut hasher);
    spec.description.hash(&mut hasher);
    spec.parameters.to_string().hash(&mut hasher);
    (spec.requires_approval, spec.destructive).hash(&mut hasher);
    hasher.finish()
}

/// Feeds `value` to `hash`, its objects' fields in the order of their names: whether
/// serde_json keeps fields in the order they came (its `preserve_order` feature, which any
/// crate of the build may turn on) changes no print.
fn hash_value(hash: &mut crate::stable_hash::StableHash, value: &Value) {
    match value {
        Value::Object(fields) => {
            let mut names: Vec<&String> = fields.keys().collect();
            names.sort_unstable();
            hash.bytes(b"{");
            for name in names {
                hash.text(name);
                if let Some(field) = fields.get(name) {
                    hash_value(hash, field);
                }
            }
            hash.bytes(b"}");
        }
        Value::Array(items) => {
            hash.bytes(b"[");
            for item in items {
                hash_value(hash, item);
            }
            hash.bytes(b"]");
        }
        Value::String(text) => {
            hash.bytes(b"s").text(text);
        }
        // By value, not by text: serde_json's `arbitrary_precision` keeps a number's text as
        // it came (`1e3`, `1000`). A whole number is one, however written (`1`, `1.0`).
        Value::Number(number) => {
            let whole = |real: f64| {
                // In range of an i64 and without a fraction: the cast is exact.
                #[allow(clippy::cast_possible_truncation)]
                let cast = real as i64;
                (real.fract() == 0.0 && real.abs() < 9.0e18).then_some(cast)
            };
            let canonical = match (number.as_i64(), number.as_u64(), number.as_f64()) {
                (Some(whole), _, _) => format!("i{whole}"),
                (None, Some(whole), _) => format!("u{whole}"),
                (None, None, Some(real)) => match whole(real) {
                    Some(whole) => format!("i{whole}"),
                    None => format!("f{:x}", real.to_bits()),
                },
                (None, None, None) => number.to_string(),
            };
            hash.text(&canonical);
        }
        other => {
            hash.text(&other.to_string());
        }
    }
}

/// The permission a decision remembered for the user and tool gives.
fn remembered_permission(allowed: bool) -> (Permission, &'static str) {
    let permission = match allowed {
        true => Permission::Allow,
        false => Permission::Deny("denied earlier for this user and tool (remembered)".to_owned()),
    };
    (permission, REMEMBERED)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A print journaled by one build matches in the next: it is FNV-1a of the spec's
    /// texts (each after its length), its schema's fields in name order, and its flags,
    /// worked out here by hand, not `std`'s hasher.
    #[test]
    fn a_tool_print_is_the_same_in_every_build() {
        let mut spec = ToolSpec::new("refund", "Refunds an order.", json!({"type": "object"}));
        spec.requires_approval = true;
        assert_eq!(spec_print(&spec), 0x6e96_d0ab_8b4e_b7bb);
        spec.destructive = true;
        assert_ne!(spec_print(&spec), 0x6e96_d0ab_8b4e_b7bb);
    }

    /// Whatever order a schema's fields are kept in (serde_json's `preserve_order` keeps the
    /// order they came in), the print is the same; another schema's differs.
    #[test]
    fn a_tool_print_takes_fields_in_name_order() {
        let mut one = serde_json::Map::new();
        one.insert("type".into(), json!("object"));
        one.insert("required".into(), json!(["a"]));
        let mut other = serde_json::Map::new();
        other.insert("required".into(), json!(["a"]));
        other.insert("type".into(), json!("object"));
        let print = |fields| spec_print(&ToolSpec::new("t", "d", Value::Object(fields)));
        assert_eq!(print(one.clone()), print(other));
        one.insert("required".into(), json!(["b"]));
        assert_ne!(print(one), print(serde_json::Map::new()));
        // A number by its value, however it was written.
        let with = |n: Value| spec_print(&ToolSpec::new("t", "d", json!({"maximum": n})));
        assert_eq!(
            with(json!(1000)),
            with(serde_json::from_str("1e3").unwrap())
        );
        assert_eq!(with(json!(1000)), with(json!(1000.0)));
        assert_ne!(with(json!(1000)), with(json!(1000.5)));
    }
}
