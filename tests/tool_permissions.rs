//! Permissions, approvals (handlers and the signal approver) and hooks.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use loomflow::model::ToolCall;
use loomflow::prelude::*;
use loomflow::tool::{
    ApprovalDecision, ApprovalRequest, DispatchContext, HookDecision, Permission, PermissionPolicy,
    SignalApprover, ToolOutcome, approver_fn,
};
use serde_json::Value;

/// Read a file.
#[tool]
fn read_file(path: String) -> String {
    format!("contents of {path}")
}

/// Delete a file.
#[tool(destructive)]
fn delete_file(path: String) -> String {
    format!("deleted {path}")
}

/// Send money.
#[tool(approval)]
fn pay(amount: u32) -> String {
    format!("paid {amount}")
}

fn host() -> ToolHost {
    ToolHost::new().with(read_file).with(delete_file).with(pay)
}

async fn run_as(host: &ToolHost, user: Option<&str>, name: &str, arguments: Value) -> ToolOutcome {
    host.dispatch(
        &[ToolCall::new("c1", name, arguments)],
        DispatchContext::new("s").user(user),
    )
    .await
    .unwrap()
    .remove(0)
}

async fn run(host: &ToolHost, name: &str, arguments: Value) -> ToolOutcome {
    run_as(host, None, name, arguments).await
}

fn path(p: &str) -> Value {
    json!({ "path": p })
}

/// An approver that answers with `decision` and counts how often it was asked.
fn counting(
    decision: ApprovalDecision,
) -> (impl loomflow::tool::ApprovalHandler, Arc<AtomicUsize>) {
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    let handler = approver_fn(move |_request| {
        counter.fetch_add(1, Ordering::SeqCst);
        let decision = decision.clone();
        async move { Ok(decision) }
    });
    (handler, asked)
}

// ---- permissions ----

#[tokio::test]
async fn the_default_policy_allows() {
    let out = run(&host(), "delete_file", path("a")).await;
    assert_eq!(out.content, "deleted a");
}

#[tokio::test]
async fn a_deny_default_denies_with_its_reason() {
    let host = host().permissions(PermissionPolicy::deny_all("read-only mode"));
    let out = run(&host, "read_file", path("a")).await;
    assert!(out.is_error);
    assert_eq!(
        out.content,
        "call to tool read_file was denied: read-only mode"
    );
}

#[tokio::test]
async fn per_tool_overrides_beat_the_default() {
    let host = host().permissions(
        PermissionPolicy::deny_all("no")
            .tool("read_file", Permission::Allow)
            .tool("delete_file", Permission::Ask),
    );
    assert_eq!(
        run(&host, "read_file", path("a")).await.content,
        "contents of a"
    );
    // Ask without an approver denies.
    let out = run(&host, "delete_file", path("a")).await;
    assert_eq!(
        out.content,
        "call to tool delete_file was denied: approval required; no approver"
    );
}

#[tokio::test]
async fn destructive_tools_can_have_their_own_rule() {
    let host = host().permissions(
        PermissionPolicy::allow_all().destructive(Permission::Deny("destructive".into())),
    );
    assert!(!run(&host, "read_file", path("a")).await.is_error);
    assert!(
        run(&host, "delete_file", path("a"))
            .await
            .content
            .ends_with("denied: destructive")
    );
}

#[tokio::test]
async fn the_per_user_router_decides_first() {
    let host = host().permissions(PermissionPolicy::allow_all().router(
        |user, spec, args| match user {
            Some("guest") if spec.destructive => {
                Some(Permission::Deny("guests cannot delete".into()))
            }
            Some("intern") if args["path"] == "/etc" => Some(Permission::Deny("not /etc".into())),
            _ => None,
        },
    ));
    assert!(
        run_as(&host, Some("guest"), "delete_file", path("a"))
            .await
            .content
            .ends_with("guests cannot delete")
    );
    assert!(
        !run_as(&host, Some("admin"), "delete_file", path("a"))
            .await
            .is_error
    );
    assert!(
        run_as(&host, Some("intern"), "read_file", path("/etc"))
            .await
            .content
            .ends_with("not /etc")
    );
    assert!(
        !run_as(&host, Some("intern"), "read_file", path("/tmp"))
            .await
            .is_error
    );
}

#[tokio::test]
async fn tools_that_require_approval_always_ask() {
    let (handler, asked) = counting(ApprovalDecision::Allow);
    // Even a policy that allows everything asks for `approval` tools.
    let host = host()
        .permissions(PermissionPolicy::allow_all())
        .approval_handler(handler);
    assert_eq!(
        run(&host, "pay", json!({ "amount": 5 })).await.content,
        "paid 5"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    assert!(!run(&host, "read_file", path("a")).await.is_error);
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    // Without an approver they are denied.
    let out = run(&self::host(), "pay", json!({ "amount": 5 })).await;
    assert!(out.is_error && out.content.contains("no approver"));
}

// ---- approval decisions ----

#[tokio::test]
async fn deny_carries_its_reason() {
    let (handler, _) = counting(ApprovalDecision::deny("too much"));
    let out = run(
        &host().approval_handler(handler),
        "pay",
        json!({ "amount": 5 }),
    )
    .await;
    assert_eq!(out.content, "call to tool pay was denied: too much");
}

#[tokio::test]
async fn edit_runs_with_the_edited_arguments_after_checking_them() {
    let (handler, _) = counting(ApprovalDecision::Edit {
        arguments: json!({ "amount": 1 }),
    });
    let out = run(
        &host().approval_handler(handler),
        "pay",
        json!({ "amount": 500 }),
    )
    .await;
    assert_eq!(out.content, "paid 1");

    let (handler, _) = counting(ApprovalDecision::Edit {
        arguments: json!({ "amount": "one" }),
    });
    let out = run(
        &host().approval_handler(handler),
        "pay",
        json!({ "amount": 500 }),
    )
    .await;
    assert!(out.is_error);
    assert!(
        out.content
            .contains("edited by the approver: field `amount`"),
        "{}",
        out.content
    );
}

#[tokio::test]
async fn the_approver_sees_the_exact_call() {
    let seen = Arc::new(Mutex::new(None));
    let store = seen.clone();
    let host = host().approval_handler(approver_fn(move |request: ApprovalRequest| {
        *store.lock().unwrap() = Some(request);
        async { Ok(ApprovalDecision::Allow) }
    }));
    run_as(&host, Some("ada"), "pay", json!({ "amount": 7 })).await;
    let request = seen.lock().unwrap().clone().unwrap();
    assert_eq!(request.tool, "pay");
    assert_eq!(request.arguments, json!({ "amount": 7 }));
    assert_eq!(
        (request.call_id.as_str(), request.session.as_str()),
        ("c1", "s")
    );
    assert_eq!(request.user.as_deref(), Some("ada"));
}

#[tokio::test]
async fn remember_allow_stops_asking_for_that_user_and_tool() {
    let (handler, asked) = counting(ApprovalDecision::RememberAllow);
    let host = host().approval_handler(handler);
    for _ in 0..3 {
        assert_eq!(
            run_as(&host, Some("ada"), "pay", json!({ "amount": 1 }))
                .await
                .content,
            "paid 1"
        );
    }
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    // Another user is asked again.
    run_as(&host, Some("bob"), "pay", json!({ "amount": 1 })).await;
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    host.forget_approvals();
    run_as(&host, Some("ada"), "pay", json!({ "amount": 1 })).await;
    assert_eq!(asked.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn remember_deny_denies_without_asking() {
    let (handler, asked) = counting(ApprovalDecision::RememberDeny);
    let host = host().approval_handler(handler);
    for _ in 0..3 {
        assert!(
            run_as(&host, Some("ada"), "pay", json!({ "amount": 1 }))
                .await
                .is_error
        );
    }
    assert_eq!(asked.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_failing_approver_denies() {
    let host = host().approval_handler(approver_fn(|_request| async {
        Err(loomflow::Error::custom("approval service down"))
    }));
    let out = run(&host, "pay", json!({ "amount": 1 })).await;
    assert!(out.is_error);
    assert!(
        out.content.contains("approval service down"),
        "{}",
        out.content
    );
}

#[tokio::test]
async fn a_panicking_approver_denies() {
    let host = host().approval_handler(approver_fn(|_request| async { panic!("oops") }));
    let out = run(&host, "pay", json!({ "amount": 1 })).await;
    assert!(
        out.is_error && out.content.contains("denied"),
        "{}",
        out.content
    );
}

#[tokio::test(start_paused = true)]
async fn a_slow_approver_denies_after_the_approval_timeout() {
    let host = host()
        .approval_timeout(Duration::from_secs(30))
        .approval_handler(approver_fn(|_request| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(ApprovalDecision::Allow)
        }));
    let out = run(&host, "pay", json!({ "amount": 1 })).await;
    assert!(out.is_error);
    assert!(
        out.content.contains("no approval decision within 30s"),
        "{}",
        out.content
    );
}

#[tokio::test]
async fn a_suspending_approver_suspends_the_dispatch() {
    let host = host().approval_handler(approver_fn(|_request| async {
        Err(loomflow::Error::Suspended {
            node: "tools".into(),
        })
    }));
    let result = host
        .dispatch(
            &[ToolCall::new("c1", "pay", json!({ "amount": 1 }))],
            DispatchContext::new("s"),
        )
        .await;
    assert!(
        matches!(result, Err(loomflow::Error::Suspended { .. })),
        "{result:?}"
    );
}

#[test]
fn decisions_travel_as_tagged_json() {
    let cases = [
        (ApprovalDecision::Allow, json!({ "action": "allow" })),
        (
            ApprovalDecision::deny("no"),
            json!({ "action": "deny", "reason": "no" }),
        ),
        (
            ApprovalDecision::Edit {
                arguments: json!({ "a": 1 }),
            },
            json!({ "action": "edit", "arguments": { "a": 1 } }),
        ),
        (
            ApprovalDecision::RememberAllow,
            json!({ "action": "remember_allow" }),
        ),
        (
            ApprovalDecision::RememberDeny,
            json!({ "action": "remember_deny" }),
        ),
    ];
    for (decision, wire) in cases {
        assert_eq!(serde_json::to_value(&decision).unwrap(), wire);
        assert_eq!(ApprovalDecision::from_json(&wire), Some(decision));
    }
    assert_eq!(
        ApprovalDecision::from_json(&json!("allow")),
        Some(ApprovalDecision::Allow)
    );
    assert_eq!(
        ApprovalDecision::from_json(&json!({ "action": "deny" })),
        Some(ApprovalDecision::deny("approval declined"))
    );
    for unrecognised in [
        json!(true),
        json!({ "approved": true }),
        json!("yes"),
        json!(null),
    ] {
        assert_eq!(ApprovalDecision::from_json(&unrecognised), None);
    }
}

// ---- approval by signal ----

async fn wait_for_pending(runtime: &Runtime, session: &str) -> Vec<ApprovalRequest> {
    loop {
        let pending = runtime.pending_approvals(session).await.unwrap();
        if !pending.is_empty() {
            return pending;
        }
        tokio::task::yield_now().await;
    }
}

async fn approve_by_signal(
    decision: ApprovalDecision,
) -> (ToolOutcome, Vec<ApprovalRequest>, Runtime) {
    let runtime = Runtime::in_memory();
    let host = host().approval_handler(SignalApprover::new().timeout(Duration::from_secs(60)));
    let decider = {
        let runtime = runtime.clone();
        tokio::spawn(async move {
            let pending = wait_for_pending(&runtime, "s").await;
            runtime
                .decide_approval("s", &pending[0].call_id, decision)
                .await
                .unwrap();
            pending
        })
    };
    let out = host
        .dispatch(
            &[ToolCall::new("call-42", "pay", json!({ "amount": 9 }))],
            DispatchContext::new("s")
                .user(Some("ada"))
                .runtime(&runtime),
        )
        .await
        .unwrap()
        .remove(0);
    (out, decider.await.unwrap(), runtime)
}

#[tokio::test]
async fn a_person_approves_through_the_signal() {
    let (out, pending, runtime) = approve_by_signal(ApprovalDecision::Allow).await;
    assert_eq!(out.content, "paid 9");
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].call_id, "call-42");
    assert_eq!(pending[0].tool, "pay");
    assert_eq!(pending[0].arguments, json!({ "amount": 9 }));
    assert_eq!(pending[0].user.as_deref(), Some("ada"));
    assert!(runtime.pending_approvals("s").await.unwrap().is_empty());
}

#[tokio::test]
async fn a_person_denies_or_edits_through_the_signal() {
    let (out, _, _) = approve_by_signal(ApprovalDecision::deny("not today")).await;
    assert_eq!(out.content, "call to tool pay was denied: not today");
    let (out, _, _) = approve_by_signal(ApprovalDecision::Edit {
        arguments: json!({ "amount": 3 }),
    })
    .await;
    assert_eq!(out.content, "paid 3");
}

#[tokio::test(start_paused = true)]
async fn the_signal_approver_fails_closed_on_timeout() {
    let runtime = Runtime::in_memory();
    let host = host().approval_handler(SignalApprover::new().timeout(Duration::from_secs(5)));
    let out = host
        .dispatch(
            &[ToolCall::new("c1", "pay", json!({ "amount": 9 }))],
            DispatchContext::new("s").runtime(&runtime),
        )
        .await
        .unwrap()
        .remove(0);
    assert!(out.is_error);
    assert!(
        out.content.contains("no approval decision within 5s"),
        "{}",
        out.content
    );
    assert!(runtime.pending_approvals("s").await.unwrap().is_empty());
}

#[tokio::test]
async fn the_signal_approver_without_a_runtime_denies() {
    let host = host().approval_handler(SignalApprover::new());
    let out = run(&host, "pay", json!({ "amount": 9 })).await;
    assert!(
        out.is_error && out.content.contains("needs a runtime"),
        "{}",
        out.content
    );
}

#[tokio::test]
async fn the_approval_signal_name_is_reserved() {
    let runtime = Runtime::in_memory();
    assert!(
        runtime
            .signal("s", "loomflow:approval:c1", json!({ "action": "allow" }))
            .await
            .is_err()
    );
}

// ---- hooks ----

#[tokio::test]
async fn before_hooks_run_in_order_and_the_first_deny_wins() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let (a, b, c) = (log.clone(), log.clone(), log.clone());
    let host = host()
        .before_tool(move |call| {
            a.lock().unwrap().push(format!("first {}", call.tool));
            async { HookDecision::Continue }
        })
        .before_tool(move |call| {
            b.lock().unwrap().push("second".to_owned());
            let deny = call.arguments["path"] == "/secret";
            async move {
                if deny {
                    HookDecision::Deny("blocked by reviewer".into())
                } else {
                    HookDecision::Continue
                }
            }
        })
        .before_tool(move |_call| {
            c.lock().unwrap().push("third".to_owned());
            async { HookDecision::Deny("third says no".into()) }
        });
    let out = run(&host, "read_file", path("/secret")).await;
    assert_eq!(
        out.content,
        "call to tool read_file was denied: blocked by reviewer"
    );
    assert_eq!(*log.lock().unwrap(), ["first read_file", "second"]);
    let out = run(&host, "read_file", path("/tmp")).await;
    assert!(out.content.ends_with("third says no"));
}

#[tokio::test(start_paused = true)]
async fn a_slow_before_hook_denies_after_its_timeout() {
    let host = host().before_tool(|_call| async {
        tokio::time::sleep(Duration::from_secs(60)).await;
        HookDecision::Continue
    });
    let out = run(&host, "read_file", path("a")).await;
    assert!(out.is_error);
    assert!(
        out.content.contains("did not answer within 5s"),
        "{}",
        out.content
    );
    // The timeout is configurable.
    let host = self::host()
        .hook_timeout(Duration::from_secs(120))
        .before_tool(|_call| async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            HookDecision::Continue
        });
    assert_eq!(
        run(&host, "read_file", path("a")).await.content,
        "contents of a"
    );
}

#[tokio::test]
async fn after_hooks_see_the_result_and_their_failures_change_nothing() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (a, b) = (seen.clone(), seen.clone());
    let host = host()
        .after_tool(move |result| {
            a.lock().unwrap().push(format!(
                "{} -> {} ({})",
                result.call.tool, result.content, result.is_error
            ));
            async { Err::<(), _>("audit log unavailable") }
        })
        .after_tool(|result| async move {
            assert!(result.is_error, "hook bug");
            Ok::<(), String>(())
        })
        .after_tool(move |result| {
            b.lock()
                .unwrap()
                .push(format!("last saw {}", result.call.call_id));
            async { Ok::<(), String>(()) }
        });
    let out = run(&host, "read_file", path("a")).await;
    assert_eq!(out.content, "contents of a");
    assert!(!out.is_error);
    assert_eq!(
        *seen.lock().unwrap(),
        ["read_file -> contents of a (false)", "last saw c1"]
    );
}

#[tokio::test]
async fn hooks_see_the_arguments_an_approver_edited() {
    let args = Arc::new(Mutex::new(Value::Null));
    let store = args.clone();
    let (handler, _) = counting(ApprovalDecision::Edit {
        arguments: json!({ "amount": 2 }),
    });
    let host = host().approval_handler(handler).after_tool(move |result| {
        *store.lock().unwrap() = result.call.arguments.clone();
        async { Ok::<(), String>(()) }
    });
    run(&host, "pay", json!({ "amount": 100 })).await;
    assert_eq!(*args.lock().unwrap(), json!({ "amount": 2 }));
}

// ---- approval that suspends a run ----

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Turn {
    results: Vec<String>,
    runs: u32,
}

#[tokio::test]
async fn inside_a_node_the_signal_approver_can_suspend_the_run() {
    let host = Arc::new(host().approval_handler(SignalApprover::new().or_suspend()));
    let graph = Graph::new("agent")
        .node_fn("tools", move |turn: &mut Turn, ctx| {
            let host = host.clone();
            Box::pin(async move {
                turn.runs += 1;
                let calls = [ToolCall::new("call-1", "pay", json!({ "amount": 12 }))];
                let dispatch = DispatchContext::new(ctx.thread())
                    .runtime(ctx.runtime())
                    .node(ctx);
                let outcomes = host.dispatch(&calls, dispatch).await?;
                turn.results = outcomes.into_iter().map(|o| o.content).collect();
                Ok(())
            })
        })
        .edge(START, "tools")
        .edge("tools", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let out = graph.invoke(&runtime, "t", Turn::default()).await.unwrap();
    let [waiting] = out.interrupts() else {
        panic!("{out:?}")
    };
    assert_eq!(waiting.signal.as_deref(), Some("loomflow:approval:call-1"));
    // The run's state shows the exact pending call...
    assert_eq!(waiting.payload["details"]["approval"]["tool"], "pay");
    assert_eq!(
        waiting.payload["details"]["approval"]["arguments"],
        json!({ "amount": 12 })
    );
    // ...and so does the runtime.
    let pending = runtime.pending_approvals("t").await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].call_id, "call-1");

    runtime
        .decide_approval("t", "call-1", ApprovalDecision::Allow)
        .await
        .unwrap();
    assert!(runtime.pending_approvals("t").await.unwrap().is_empty());
    let done = graph
        .recover(&runtime, "t")
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(done.results, ["paid 12"]);
    assert_eq!(
        done.runs, 1,
        "the suspended step's changes were never committed"
    );
}

/// Hooks, approvers and routers are the user's closures: one that panics before it returns
/// its future (while it reads the call, say) is handled as one that panics inside it. A
/// before hook or a router denies, an approver denies, an after hook changes nothing; the
/// dispatch never unwinds.
#[tokio::test]
async fn a_closure_that_panics_before_its_future_is_handled_like_one_that_panics_in_it() {
    let no_user = |user: Option<String>| -> String { user.expect("a user") };
    let before = host().before_tool(move |call| {
        let _user = no_user(call.user.clone());
        async { HookDecision::Continue }
    });
    let out = run(&before, "read_file", path("a")).await;
    assert!(out.is_error, "{}", out.content);
    assert!(
        out.content.contains("before_tool hook 0 failed"),
        "{}",
        out.content
    );

    let after = host().after_tool(move |result| {
        let _user = no_user(result.call.user.clone());
        async { Ok::<(), String>(()) }
    });
    let out = run(&after, "read_file", path("a")).await;
    assert_eq!(
        (out.content.as_str(), out.is_error),
        ("contents of a", false)
    );

    let approver = host().approval_handler(approver_fn(|request: ApprovalRequest| {
        let _user = request.user.clone().expect("a user");
        async { Ok(ApprovalDecision::Allow) }
    }));
    let out = run(&approver, "pay", json!({ "amount": 1 })).await;
    assert!(
        out.is_error && out.content.contains("denied"),
        "{}",
        out.content
    );

    let routed = host().permissions(PermissionPolicy::allow_all().router(|user, _, _| {
        let _user = user.expect("a user");
        None
    }));
    let out = run(&routed, "read_file", path("a")).await;
    assert!(out.is_error, "{}", out.content);
    assert!(
        out.content.contains("the permission router failed"),
        "{}",
        out.content
    );
}
