//! Who decides a tool call, and what a decision can reach: a decision needs a call waiting
//! for it, an approver's edit passes the same hooks and rules as the model's arguments, an
//! approval remembered for no user is not remembered, and a handoff that was refused hands
//! nothing off. Each case ran a call it should not have before its fix.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/faulty_store.rs"]
mod faulty_store;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use loomflow::agent::Agent;
use loomflow::architecture::{Swarm, TeamState};
use loomflow::model::{ModelResponse, ScriptedModel, ToolCall};
use loomflow::prelude::*;
use loomflow::runtime::{RunState, SqliteStore, StoreError};
use loomflow::tool::{
    ApprovalDecision, DispatchContext, HookDecision, Permission, PermissionPolicy, SignalApprover,
    ToolOutcome, approver_fn,
};
use serde_json::Value;

use faulty_store::FaultyStore;

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

async fn run_in(host: &ToolHost, session: &str, id: &str, name: &str, args: Value) -> ToolOutcome {
    host.dispatch(
        &[ToolCall::new(id, name, args)],
        DispatchContext::new(session),
    )
    .await
    .unwrap()
    .remove(0)
}

/// An approver's edit is checked by the before hooks and the permission rules, as the
/// model's arguments are: an edit to a path the sandbox refuses does not run.
#[tokio::test]
async fn an_approvers_edit_passes_the_hooks_and_rules_the_model_would() {
    let hook_saw = Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
    let seen = hook_saw.clone();
    let host = ToolHost::new()
        .with(delete_file)
        .permissions(PermissionPolicy::allow_all().router(|_user, spec, args| {
            // Never delete under /etc; ask for anything else destructive.
            let path = args["path"].as_str().unwrap_or_default();
            match (spec.name.as_str(), path.starts_with("/etc")) {
                ("delete_file", true) => Some(Permission::Deny("not under /etc".into())),
                ("delete_file", false) => Some(Permission::Ask),
                _ => None,
            }
        }))
        .before_tool(move |call| {
            seen.lock().unwrap().push(call.arguments.clone());
            let deny = call.arguments["path"]
                .as_str()
                .is_some_and(|p| !p.starts_with("/tmp/"));
            async move {
                if deny {
                    HookDecision::Deny("outside the sandbox".into())
                } else {
                    HookDecision::Continue
                }
            }
        })
        .approval_handler(approver_fn(|_req| async {
            Ok(ApprovalDecision::Edit {
                arguments: json!({ "path": "/etc/passwd" }),
            })
        }));
    // Sanity: the rules refuse /etc/passwd when the model asks for it directly.
    let direct = run_in(
        &host,
        "s",
        "c0",
        "delete_file",
        json!({ "path": "/etc/passwd" }),
    )
    .await;
    assert!(direct.is_error, "{direct:?}");
    let out = run_in(&host, "s", "c1", "delete_file", json!({ "path": "/tmp/a" })).await;
    println!("hook saw {:?}\n{out:?}", hook_saw.lock().unwrap());
    assert!(
        out.is_error && out.content.contains("the approver's edit is refused"),
        "the edited call ran on a path the hook and the router refuse: {}",
        out.content
    );
    assert!(
        hook_saw
            .lock()
            .unwrap()
            .contains(&json!({ "path": "/etc/passwd" })),
        "the hook saw the edit"
    );
}

/// A host whose `pay` calls wait for a decision sent as a signal, for 200 ms.
fn host_asking_by_signal() -> ToolHost {
    ToolHost::new()
        .with(pay)
        .approval_handler(SignalApprover::new().timeout(Duration::from_millis(200)))
}

/// Asks to pay `amount` as call `call_0` of session `s`.
async fn pay_as_call_0(host: &ToolHost, runtime: &Runtime, amount: u32) -> ToolOutcome {
    let call = ToolCall::new("call_0", "pay", json!({ "amount": amount }));
    host.dispatch(&[call], DispatchContext::new("s").runtime(runtime))
        .await
        .unwrap()
        .remove(0)
}

/// Approvers in two processes wait for the same call (a run taken over from a process that
/// stalled, say): one decision lets one of them go on, and the other waits on until its
/// timeout denies. Before its fix, the approver acted on the decision in its mailbox and
/// removed the signal's row afterwards, so both paid while the first one's removal was on
/// its way to the store (held back here, to make that window certain).
#[tokio::test]
async fn one_decision_lets_one_of_two_waiting_approvers_go_on() {
    let db = loomflow_tests::TempDb::new("one-decision");
    let (store, faults) = FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let here = Runtime::builder().store(store).build();
    let there = Runtime::builder()
        .store(SqliteStore::open(db.path()).unwrap())
        .poll_interval(Duration::from_millis(20))
        .build();
    let host = ToolHost::new()
        .with(pay)
        .approval_handler(SignalApprover::new().timeout(Duration::from_secs(2)));
    let asking = |runtime: &Runtime| {
        let (host, runtime) = (host.clone(), runtime.clone());
        tokio::spawn(async move { pay_as_call_0(&host, &runtime, 5).await })
    };
    let (first, second) = (asking(&here), asking(&there));
    for runtime in [&here, &there] {
        while runtime.pending_approvals("s").await.unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let removal = faults.hold_next_plain_take();
    here.decide_approval("s", "call_0", ApprovalDecision::Allow)
        .await
        .unwrap();
    let outcomes = [first.await.unwrap(), second.await.unwrap()];
    drop(removal);
    let paid = outcomes.iter().filter(|out| out.content == "paid 5");
    assert_eq!(paid.count(), 1, "{outcomes:?}");
}

/// A decision over the payload limit is refused, naming its size, and the call waits on for
/// one that fits: an approval's decision counts against the limit whole (loomflow's own
/// signals are checked by their sender, not by the mailbox).
#[tokio::test]
async fn a_decision_over_the_payload_limit_is_refused() {
    // A decision is sent with when it was made and the request it answers: about 80 bytes.
    let limit = loomflow::runtime::MailboxConfig::default().max_payload_bytes(128);
    let runtime = Runtime::builder().signals(limit).build();
    let host = ToolHost::new()
        .with(pay)
        .approval_handler(SignalApprover::new().timeout(Duration::from_secs(20)));
    let asking = {
        let (host, runtime) = (host.clone(), runtime.clone());
        tokio::spawn(async move { pay_as_call_0(&host, &runtime, 7).await })
    };
    while runtime.pending_approvals("s").await.unwrap().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let too_long = ApprovalDecision::deny("x".repeat(200));
    let refused = runtime.decide_approval("s", "call_0", too_long).await;
    assert!(
        matches!(
            refused,
            Err(loomflow::Error::Signal(
                loomflow::SignalError::PayloadTooLarge { limit: 128, .. }
            ))
        ),
        "{refused:?}"
    );
    runtime
        .decide_approval("s", "call_0", ApprovalDecision::Allow)
        .await
        .unwrap();
    assert_eq!(asking.await.unwrap().content, "paid 7");
}

fn refused_as_not_pending(decided: &loomflow::Result<()>) -> bool {
    matches!(
        decided,
        Err(loomflow::Error::Runtime(
            loomflow::RuntimeError::NoPendingApproval { .. }
        ))
    )
}

/// A decision for a call that is not waiting is refused, and so nothing is kept to approve
/// a later call with that id that nobody has looked at.
#[tokio::test]
async fn a_decision_for_a_call_not_waiting_is_refused() {
    let runtime = Runtime::in_memory();
    let host = host_asking_by_signal();
    let early = runtime
        .decide_approval("s", "call_0", ApprovalDecision::Allow)
        .await;
    let out = pay_as_call_0(&host, &runtime, 5000).await;
    assert!(refused_as_not_pending(&early), "{early:?}");
    assert!(
        out.is_error,
        "a decision sent before the call existed approved it: {}",
        out.content
    );
}

/// A second click after the run went on is refused too, and does not approve the next call
/// that reuses the id (local models often number calls `call_0`, ..).
#[tokio::test]
async fn a_second_decision_after_the_run_went_on_is_refused() {
    let runtime = Runtime::in_memory();
    let host = host_asking_by_signal();
    let decider = {
        let runtime = runtime.clone();
        tokio::spawn(async move {
            while runtime.pending_approvals("s").await.unwrap().is_empty() {
                tokio::task::yield_now().await;
            }
            runtime
                .decide_approval("s", "call_0", ApprovalDecision::Allow)
                .await
                .unwrap();
        })
    };
    let first = pay_as_call_0(&host, &runtime, 1).await;
    decider.await.unwrap();
    assert_eq!(first.content, "paid 1");
    let second_click = runtime
        .decide_approval("s", "call_0", ApprovalDecision::Allow)
        .await;
    let later = pay_as_call_0(&host, &runtime, 9999).await;
    assert!(refused_as_not_pending(&second_click), "{second_click:?}");
    assert!(
        later.is_error,
        "the stale second click approved a new call: {}",
        later.content
    );
}

/// An approval is not remembered for a run with no user: it would apply to every other run
/// with no user, in every session.
#[tokio::test]
async fn an_approval_is_not_remembered_for_a_run_without_a_user() {
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    let host = ToolHost::new()
        .with(pay)
        .approval_handler(approver_fn(move |req| {
            counter.fetch_add(1, Ordering::SeqCst);
            async move {
                Ok(if req.session == "alice-chat" {
                    ApprovalDecision::RememberAllow
                } else {
                    ApprovalDecision::deny("no")
                })
            }
        }));
    run_in(&host, "alice-chat", "c1", "pay", json!({ "amount": 1 })).await;
    let out = run_in(&host, "bob-chat", "c2", "pay", json!({ "amount": 7777 })).await;
    println!("asked {} times; {out:?}", asked.load(Ordering::SeqCst));
    assert!(
        out.is_error,
        "bob's session was allowed by alice's remembered approval: {}",
        out.content
    );
    assert_eq!(
        asked.load(Ordering::SeqCst),
        2,
        "bob's call was asked about"
    );
}

fn scripted(name: &str, replies: &[&str]) -> Agent {
    Agent::builder(format!("You are {name}."))
        .name(name)
        .model(ScriptedModel::new(
            replies.iter().map(|r| ModelResponse::text(*r)),
        ))
        .build()
        .unwrap()
}

/// The triage agent's policy refuses the handoff to billing: the model reads "denied", and
/// the conversation stays with triage.
#[tokio::test]
async fn a_denied_handoff_hands_nothing_off() {
    let triage = Agent::builder("You route customers.")
        .name("triage")
        .model(ScriptedModel::new([
            ModelResponse::tool_calls(vec![ToolCall::new("h1", "transfer_to_billing", json!({}))]),
            ModelResponse::text("I cannot transfer you; here is what I can do."),
        ]))
        .tools(
            ToolHost::new().permissions(PermissionPolicy::allow_all().tool(
                "transfer_to_billing",
                Permission::Deny("billing is closed".into()),
            )),
        )
        .build()
        .unwrap();
    let swarm = Swarm::new()
        .agent("triage", "first contact", triage)
        .agent(
            "billing",
            "money questions",
            scripted("billing", &["Refund issued."]),
        )
        .build()
        .unwrap();
    let runtime = Runtime::in_memory();
    let team = swarm
        .invoke(&runtime, "s", TeamState::new("refund please"))
        .await
        .unwrap()
        .completed()
        .unwrap();
    println!(
        "path {:?}\noutput {:?}\nmessages {:#?}",
        team.path, team.output, team.messages
    );
    assert_eq!(
        team.path,
        ["triage"],
        "the handoff was denied, but the conversation went to billing"
    );
}

/// Same with a handoff whose arguments are not JSON: the model reads an error, and no
/// handoff happens.
#[tokio::test]
async fn a_failed_handoff_call_hands_nothing_off() {
    let triage = Agent::builder("You route customers.")
        .name("triage")
        .model(ScriptedModel::new([
            ModelResponse::tool_calls(vec![ToolCall::new(
                "h1",
                "transfer_to_billing",
                json!("{not json"),
            )]),
            ModelResponse::text("Sorry."),
        ]))
        .build()
        .unwrap();
    let swarm = Swarm::new()
        .agent("triage", "first contact", triage)
        .agent(
            "billing",
            "money questions",
            scripted("billing", &["Refund issued."]),
        )
        .build()
        .unwrap();
    let runtime = Runtime::in_memory();
    let team = swarm
        .invoke(&runtime, "s2", TeamState::new("refund please"))
        .await
        .unwrap()
        .completed()
        .unwrap();
    println!("path {:?}\noutput {:?}", team.path, team.output);
    assert_eq!(team.path, ["triage"], "an error result handed off");
}

/// Inside a node the approver takes the decision as the node's own waits take a signal:
/// under the run's claim, journaled with the run. A node that failed after its call was
/// approved, run again for the same step, gets that decision without a second one being
/// sent. Before, the decision was gone with the failed execution: the node asked again and
/// its approver denied when no second decision came.
#[tokio::test]
async fn a_node_run_again_keeps_the_decision_its_approver_took() {
    let db = loomflow_tests::TempDb::new("approval-journaled");
    let runtime = Runtime::builder()
        .store(SqliteStore::open(db.path()).unwrap())
        .build();
    let host = Arc::new(
        ToolHost::new()
            .with(pay)
            .approval_handler(SignalApprover::new().timeout(Duration::from_millis(300))),
    );
    let executions = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&executions);
    let graph: CompiledGraph<Vec<String>> = Graph::new("paying")
        .node_fn("pay", move |paid: &mut Vec<String>, ctx| {
            let (host, counted) = (Arc::clone(&host), Arc::clone(&counted));
            Box::pin(async move {
                let call = ToolCall::new("call_7", "pay", json!({ "amount": 3 }));
                let dispatch = DispatchContext::new(ctx.thread()).node(ctx);
                let outcome = host.dispatch(&[call], dispatch).await?.remove(0);
                paid.push(outcome.content);
                if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                    return Err(Error::msg("the node fails after its call").into());
                }
                Ok(())
            })
        })
        .edge(START, "pay")
        .edge("pay", END)
        .compile()
        .unwrap();

    let run = graph.start(&runtime, "t", Vec::new());
    while runtime.pending_approvals("t").await.unwrap().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    runtime
        .decide_approval("t", "call_7", ApprovalDecision::Allow)
        .await
        .unwrap();
    let failed = run.await.unwrap();
    assert!(matches!(failed, RunOutcome::Failed { .. }), "{failed:?}");

    let done = graph.recover(&runtime, "t").await.unwrap();
    let paid = done.completed().unwrap();
    assert_eq!(paid.len(), 1, "{paid:?}");
    assert!(
        paid[0].contains("paid 3"),
        "allowed again, unasked: {paid:?}"
    );
    assert_eq!(executions.load(Ordering::SeqCst), 2);
    assert!(runtime.pending_approvals("t").await.unwrap().is_empty());
}

/// A call that runs, or is refused, on a decision remembered for its user is audited with
/// that decision, by `remembered`: the log of another session shows who let it run.
#[tokio::test]
async fn a_remembered_decision_is_audited_on_each_call_it_decides() {
    use loomflow::runtime::{AuditKind, AuditQuery};
    for (decision, word) in [
        (ApprovalDecision::RememberAllow, "allow"),
        (ApprovalDecision::RememberDeny, "deny"),
    ] {
        let runtime = Runtime::in_memory();
        let host = ToolHost::new()
            .with(pay)
            .approval_handler(approver_fn(move |_request| {
                let decision = decision.clone();
                async move { Ok(decision) }
            }));
        for session in ["first", "second"] {
            let context = DispatchContext::new(session)
                .user(Some("ada"))
                .runtime(&runtime);
            let call = ToolCall::new("c1", "pay", json!({ "amount": 5 }));
            host.dispatch(&[call], context).await.unwrap();
        }
        let query = AuditQuery::all().kind(AuditKind::Decision);
        let log = runtime.audit_query(&query).await.unwrap();
        let second: Vec<_> = log.iter().filter(|e| e.thread == "second").collect();
        let [entry] = &second[..] else {
            panic!("one decision for the second call: {log:#?}")
        };
        assert_eq!(entry.actor.as_deref(), Some("remembered"));
        assert_eq!(entry.detail["decision"], word);
    }
}

/// A graph named `name` whose one node dispatches `call` through `host`, from inside the node
/// (so that an approval can suspend the run), and keeps what the call returned.
fn paying_in_a_node(name: &str, host: Arc<ToolHost>, call: ToolCall) -> CompiledGraph<Vec<String>> {
    Graph::new(name)
        .node_fn("pay", move |paid: &mut Vec<String>, ctx| {
            let (host, call) = (Arc::clone(&host), call.clone());
            Box::pin(async move {
                let dispatch = DispatchContext::new(ctx.thread()).node(ctx);
                let outcome = host.dispatch(&[call], dispatch).await?.remove(0);
                paid.push(outcome.content);
                Ok(())
            })
        })
        .edge(START, "pay")
        .edge("pay", END)
        .compile()
        .unwrap()
}

/// A store that fails for a moment while a call in a node waits for its decision does not
/// turn the call into a denial, journaled for good: the run stops as on any store failure,
/// and the execution that carries it on finds the decision still there.
#[tokio::test]
async fn a_store_failure_while_waiting_for_a_decision_is_not_a_denial() {
    let db = loomflow_tests::TempDb::new("approval-store-failure");
    let (store, faults) = FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).build();
    let host = Arc::new(
        ToolHost::new()
            .with(pay)
            .approval_handler(SignalApprover::new()),
    );
    let graph = paying_in_a_node(
        "paying",
        host,
        ToolCall::new("call_7", "pay", json!({ "amount": 3 })),
    );

    let run = graph.start(&runtime, "t", Vec::new());
    while runtime.pending_approvals("t").await.unwrap().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    faults.fail_next_claimed_take();
    runtime
        .decide_approval("t", "call_7", ApprovalDecision::Allow)
        .await
        .unwrap();
    let stopped = run.await;
    assert!(
        !matches!(&stopped, Ok(RunOutcome::Completed(paid)) if !paid[0].contains("paid 3")),
        "denied for the store's failure: {stopped:?}"
    );
    let done = match stopped {
        Ok(RunOutcome::Completed(paid)) => paid,
        _ => graph
            .recover(&runtime, "t")
            .await
            .unwrap()
            .completed()
            .unwrap(),
    };
    assert_eq!(done.len(), 1, "{done:?}");
    assert!(done[0].contains("paid 3"), "{done:?}");
}

/// The host's approval timeout bounds a call a worker suspended too: the wait's deadline is
/// the host's (shorter than the approver's ten minutes), the run wakes at it, and the call
/// is denied then, as in a run that waited in memory.
#[tokio::test]
async fn the_hosts_approval_timeout_bounds_a_suspended_wait() {
    let runtime = Runtime::in_memory();
    let host = Arc::new(
        ToolHost::new()
            .with(pay)
            .approval_handler(SignalApprover::new())
            .approval_timeout(Duration::from_millis(300)),
    );
    let graph = paying_in_a_node(
        "paying-later",
        host,
        ToolCall::new("call_8", "pay", json!({ "amount": 4 })),
    );
    let worker = Worker::builder(&runtime)
        .graph(&graph)
        .park_grace(Duration::ZERO)
        .build();
    runtime
        .submit("paying-later", "t", Vec::<String>::new())
        .await
        .unwrap();
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    let pending = runtime.pending_interrupts("t").await.unwrap();
    let asked = runtime.pending_approvals("t").await.unwrap()[0].requested_at_ms;
    let wake = pending[0].wake_at_ms.unwrap();
    assert!(
        wake <= asked + 1_000,
        "woken at the host's deadline: {wake} vs {asked}"
    );

    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        runtime.pending_approvals("t").await.unwrap().is_empty(),
        "past its deadline"
    );
    assert_eq!(worker.run_until_idle().await.unwrap(), 1);
    let paid = graph
        .recover(&runtime, "t")
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert!(paid[0].contains("denied"), "{paid:?}");
}

/// A fork of a run suspended on an approval waits for a decision of its own: its call is
/// listed on the fork's thread, a decision there lets the fork's call run, and the source
/// run still waits. Before its fix the fork's request named the source thread, so the
/// inbox's "approve" on the fork's card decided the source's call.
#[tokio::test]
async fn a_forks_approval_is_decided_on_the_fork() {
    let runtime = Runtime::in_memory();
    let host = suspending_host();
    let call = ToolCall::new("call_9", "pay", json!({ "amount": 5 }));
    let graph = paying_in_a_node("paying", host, call);
    let suspended = graph.run(&runtime, "refund-1", Vec::new()).await.unwrap();
    assert_eq!(suspended.interrupts().len(), 1);
    let newest = runtime.list_checkpoints("refund-1").await.unwrap();
    let at = newest.last().unwrap().id;
    runtime.fork("refund-1", at, "refund-1-b").await.unwrap();

    let listed = runtime.pending_approvals("refund-1-b").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].session, "refund-1-b");
    runtime
        .decide_approval(
            &listed[0].session,
            &listed[0].call_id,
            ApprovalDecision::Allow,
        )
        .await
        .unwrap();
    let done = graph.recover(&runtime, "refund-1-b").await.unwrap();
    assert!(done.completed().unwrap()[0].contains("paid 5"));
    let source = runtime.pending_approvals("refund-1").await.unwrap();
    assert_eq!(source.len(), 1, "the source run still waits");
    assert_eq!(source[0].session, "refund-1");
}

static PAYING: tokio::sync::Notify = tokio::sync::Notify::const_new();
static PAID: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Send money, taking its time: says when it started, and finishes when told to.
#[tool(name = "pay", approval)]
async fn pay_slowly(amount: u32) -> String {
    PAYING.notify_one();
    PAID.notified().await;
    format!("paid {amount}")
}

/// A call decided while its run was suspended is not listed as waiting while the run,
/// carried on, runs it: its decision is taken (the mailbox no longer holds it), but the
/// newest checkpoint is still the one the run suspended on. Before its fix the call was
/// listed (and offered for a decision that was then refused) until the run's next
/// checkpoint, in memory and on SQLite alike.
#[tokio::test]
async fn a_decided_call_is_not_listed_while_it_runs() {
    let db = loomflow_tests::TempDb::new("approval-running");
    for durable in [false, true] {
        let runtime = match durable {
            false => Runtime::in_memory(),
            true => Runtime::builder()
                .store(SqliteStore::open(db.path()).unwrap())
                .build(),
        };
        let host = Arc::new(
            ToolHost::new()
                .with(pay_slowly)
                .approval_handler(SignalApprover::new().or_suspend()),
        );
        let call = ToolCall::new("call_10", "pay", json!({ "amount": 6 }));
        let graph = paying_in_a_node("paying-slowly", host, call);
        let suspended = graph.run(&runtime, "t", Vec::new()).await.unwrap();
        assert_eq!(suspended.interrupts().len(), 1);
        assert_eq!(runtime.pending_approvals("t").await.unwrap().len(), 1);
        runtime
            .decide_approval("t", "call_10", ApprovalDecision::Allow)
            .await
            .unwrap();

        let carried_on = tokio::spawn({
            let (graph, runtime) = (graph.clone(), runtime.clone());
            async move { graph.recover(&runtime, "t").await }
        });
        PAYING.notified().await;
        let listed = runtime.pending_approvals("t").await.unwrap();
        assert!(listed.is_empty(), "durable {durable}: {listed:?}");
        let again = runtime
            .decide_approval("t", "call_10", ApprovalDecision::Allow)
            .await;
        assert!(refused_as_decided(&again), "durable {durable}: {again:?}");
        PAID.notify_one();
        let paid = carried_on.await.unwrap().unwrap().completed().unwrap();
        assert!(paid[0].contains("paid 6"), "{paid:?}");
    }
}

/// A run that took its call's decision and asked again under the same id, before its next
/// checkpoint, is decided on the call that waits now: the interrupt it suspended on before
/// is still the newest checkpoint, and before its fix the decision was keyed to that first
/// request, and refused as already decided.
#[tokio::test]
async fn a_call_asked_again_under_its_id_before_a_checkpoint_is_decided() {
    let runtime = Runtime::in_memory();
    let suspending = suspending_host();
    let parking = Arc::new(
        ToolHost::new()
            .with(pay)
            .approval_handler(SignalApprover::new()),
    );
    let graph: CompiledGraph<Vec<String>> = Graph::new("paying-twice")
        .node_fn("pay", move |paid: &mut Vec<String>, ctx| {
            let (suspending, parking) = (Arc::clone(&suspending), Arc::clone(&parking));
            Box::pin(async move {
                for (host, amount) in [(suspending, 1), (parking, 2)] {
                    // Asked a few milliseconds apart: a decision is keyed by the call's id
                    // and the millisecond it was asked in.
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    let call = ToolCall::new("call_11", "pay", json!({ "amount": amount }));
                    let dispatch = DispatchContext::new(ctx.thread()).node(ctx);
                    paid.push(host.dispatch(&[call], dispatch).await?.remove(0).content);
                }
                Ok(())
            })
        })
        .edge(START, "pay")
        .edge("pay", END)
        .compile()
        .unwrap();
    let suspended = graph.run(&runtime, "t", Vec::new()).await.unwrap();
    assert_eq!(suspended.interrupts().len(), 1);
    runtime
        .decide_approval("t", "call_11", ApprovalDecision::Allow)
        .await
        .unwrap();
    let carried_on = tokio::spawn({
        let (graph, runtime) = (graph.clone(), runtime.clone());
        async move { graph.recover(&runtime, "t").await }
    });
    let asked_again = loop {
        let listed = runtime.pending_approvals("t").await.unwrap();
        if let Some(request) = listed.into_iter().find(|r| r.arguments["amount"] == 2) {
            break request;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    runtime
        .decide_approval_asked_at(
            "t",
            "call_11",
            Some(asked_again.requested_at_ms),
            ApprovalDecision::Allow,
            "ann",
        )
        .await
        .unwrap();
    let paid = carried_on.await.unwrap().unwrap().completed().unwrap();
    assert_eq!(paid.len(), 2, "{paid:?}");
    assert!(paid[1].contains("paid 2"), "{paid:?}");
}

/// A run whose row says it ended while its newest checkpoint is the one it suspended on (a
/// worker failed it at its lapse limit, which leaves its checkpoints as they are) waits for
/// no decision: its call is not listed, and a decision for it is refused, saying the run
/// has ended. Before, it was listed, and a decision was stored for no run.
#[tokio::test]
async fn a_run_failed_while_suspended_lists_no_approval() {
    let runtime = Runtime::in_memory();
    let call = ToolCall::new("call_12", "pay", json!({ "amount": 8 }));
    let graph = paying_in_a_node("paying-failed", suspending_host(), call);
    let suspended = graph.run(&runtime, "t", Vec::new()).await.unwrap();
    assert_eq!(suspended.interrupts().len(), 1);
    assert_eq!(runtime.pending_approvals("t").await.unwrap().len(), 1);
    // As the worker's lapse limit fails it: the row only, under a claim.
    let far = u64::MAX / 2;
    runtime
        .store()
        .claim("t", "worker-1", far, 1)
        .await
        .unwrap();
    (runtime.store())
        .finish_run("t", "worker-1", RunState::Failed, Some("lapses".into()))
        .await
        .unwrap();
    assert!(runtime.pending_approvals("t").await.unwrap().is_empty());
    let decided = runtime
        .decide_approval("t", "call_12", ApprovalDecision::Allow)
        .await;
    assert!(
        matches!(
            decided,
            Err(loomflow::Error::Runtime(
                loomflow::RuntimeError::ApprovalRunEnded {
                    state: RunState::Failed,
                    ..
                }
            ))
        ),
        "{decided:?}"
    );
    // A new run submitted on the thread, not started yet: the checkpoint is still the
    // failed run's, and nothing waits either.
    runtime
        .submit("paying-failed", "t", Vec::<String>::new())
        .await
        .unwrap();
    assert!(runtime.pending_approvals("t").await.unwrap().is_empty());
}

fn refused_as_decided(decided: &loomflow::Result<()>) -> bool {
    matches!(
        decided,
        Err(Error::Runtime(
            loomflow::runtime::RuntimeError::AlreadyDecided { .. }
        ))
    )
}

/// A host whose approvals suspend the run (`pay` its tool).
fn suspending_host() -> Arc<ToolHost> {
    Arc::new(
        ToolHost::new()
            .with(pay)
            .approval_handler(SignalApprover::new().or_suspend()),
    )
}

/// How many times `charge` ran.
static CHARGED: AtomicUsize = AtomicUsize::new(0);

/// Charge a card.
#[tool(approval)]
fn charge(cents: u32) -> String {
    CHARGED.fetch_add(1, Ordering::SeqCst);
    format!("charged {cents}")
}

/// An agent's tool call whose approval is asked in passing of a store failure (the write of
/// when it was asked reports a broken connection) lets the run go, as any
/// store failure does, rather than failing it for good: resumed, the call runs once and the
/// turn ends. Before its fix the run failed with the tool step's failure.
#[tokio::test]
async fn a_store_failure_asking_an_agents_approval_lets_the_run_go() {
    let db = loomflow_tests::TempDb::new("agent-approval-store-failure");
    let (store, faults) = FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).build();
    let agent = Agent::builder("You take payments.")
        .name("till")
        .model(ScriptedModel::new([
            ModelResponse::tool_calls(vec![ToolCall::new(
                "call_1",
                "charge",
                json!({ "cents": 250 }),
            )]),
            ModelResponse::text("charged"),
        ]))
        .tools(
            ToolHost::new()
                .with(charge)
                .approval_handler(approver_fn(|_req| async { Ok(ApprovalDecision::Allow) })),
        )
        .runtime(runtime.clone())
        .build()
        .unwrap();

    faults.fail_journal_write_before_commit_named("approval-asked:call_1");
    let first = agent.run("charge 250").session("till-1").await;
    assert!(
        matches!(first, Err(Error::Store(StoreError::Write { .. }))),
        "let go, not failed: {first:?}"
    );
    let record = runtime.run("till-1").await.unwrap().record;
    assert_ne!(record.state, RunState::Failed, "{record:?}");

    let done = agent.resume("till-1").await.unwrap();
    assert_eq!(done.output, "charged");
    assert_eq!(CHARGED.load(Ordering::SeqCst), 1, "the call ran once");
}

/// Look a word up.
#[tool(name = "act", approval)]
fn act_lookup(word: String) -> String {
    format!("looked up {word}")
}

/// Delete a word for good.
#[tool(name = "act", approval, destructive)]
fn act_delete(word: String) -> String {
    format!("deleted {word}")
}

/// A decision remembered for a user's tool decides for that tool only: another tool that
/// takes its name (a server's list changed, a tool replaced) is asked about afresh. Before
/// its fix the allow given to a lookup ran a destructive tool of the same name, unasked.
#[tokio::test]
async fn a_remembered_allow_does_not_pass_to_another_tool_of_its_name() {
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    let mut host = ToolHost::new()
        .with(act_lookup)
        .approval_handler(approver_fn(move |_request| {
            let first = counter.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                Ok(match first {
                    true => ApprovalDecision::RememberAllow,
                    false => ApprovalDecision::deny("not that one"),
                })
            }
        }));
    let call = |id: &str| ToolCall::new(id, "act", json!({ "word": "w" }));
    let ada = || DispatchContext::new("s").user(Some("ada"));
    for id in ["c1", "c2"] {
        let out = host.dispatch(&[call(id)], ada()).await.unwrap().remove(0);
        assert_eq!(out.content, "looked up w", "{out:?}");
    }
    assert_eq!(
        asked.load(Ordering::SeqCst),
        1,
        "the second call was remembered"
    );
    host.add(act_delete);
    let out = host.dispatch(&[call("c3")], ada()).await.unwrap().remove(0);
    assert!(
        out.is_error && out.content.contains("not that one"),
        "{out:?}"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 2);
}

/// A call a remembered allow let run, whose node runs again (it failed after the call)
/// once a tool of another kind has taken the name, is asked about: the allow its first run
/// took stood for the tool as it was. The first version of the journaled permission ran
/// the destructive tool unasked.
#[tokio::test]
async fn a_journaled_remembered_allow_does_not_pass_to_a_tool_that_took_its_name() {
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    let host = ToolHost::new()
        .with(act_lookup)
        .approval_handler(approver_fn(move |_request| {
            let first = counter.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                Ok(match first {
                    true => ApprovalDecision::RememberAllow,
                    false => ApprovalDecision::deny("not that one"),
                })
            }
        }));
    let host = Arc::new(tokio::sync::RwLock::new(host));
    let call = |id: &str| ToolCall::new(id, "act", json!({ "word": "w" }));
    let ada = DispatchContext::new("other").user(Some("ada"));
    let first = host
        .read()
        .await
        .dispatch(&[call("c0")], ada)
        .await
        .unwrap();
    assert_eq!(first[0].content, "looked up w");

    let runs = Arc::new(AtomicUsize::new(0));
    let (in_node, counted) = (Arc::clone(&host), Arc::clone(&runs));
    let graph: CompiledGraph<Vec<String>> = Graph::new("acting")
        .node_fn("act", move |said: &mut Vec<String>, ctx| {
            let (host, counted) = (Arc::clone(&in_node), Arc::clone(&counted));
            Box::pin(async move {
                let dispatch = DispatchContext::new(ctx.thread())
                    .user(Some("ada"))
                    .node(ctx);
                let host = host.read().await;
                let outcome = host.dispatch(&[call("c1")], dispatch).await?.remove(0);
                said.push(outcome.content);
                if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                    return Err(Error::msg("the node fails after its call").into());
                }
                Ok(())
            })
        })
        .edge(START, "act")
        .edge("act", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let failed = graph.run(&runtime, "t", Vec::new()).await.unwrap();
    assert!(matches!(failed, RunOutcome::Failed { .. }), "{failed:?}");
    assert_eq!(asked.load(Ordering::SeqCst), 1, "remembered: not asked");

    host.write().await.add(act_delete);
    let done = graph.recover(&runtime, "t").await.unwrap();
    let said = done.completed().unwrap();
    assert!(said[0].contains("not that one"), "ran unasked: {said:?}");
    assert_eq!(asked.load(Ordering::SeqCst), 2);
}

/// Decides `call_2` at once, "allow and remember it"; every other call by signal, the run
/// suspending while it waits.
struct RemembersTheSecond(SignalApprover);

impl loomflow::tool::ApprovalHandler for RemembersTheSecond {
    fn decide<'a>(
        &'a self,
        request: &'a loomflow::tool::ApprovalRequest,
        ctx: DispatchContext<'a>,
    ) -> futures_util::future::BoxFuture<'a, loomflow::Result<ApprovalDecision>> {
        if request.call_id == "call_2" {
            return Box::pin(async { Ok(ApprovalDecision::RememberAllow) });
        }
        self.0.decide(request, ctx)
    }
}

/// A call whose run suspended on its decision takes that decision when the run is carried
/// on, even if an allow for the same user and tool was remembered meanwhile (for another
/// call): the deny it was sent stands. Before, the node run again took the remembered allow
/// and the tool ran.
#[tokio::test]
async fn a_decision_remembered_while_a_call_waited_does_not_stand_for_its_own() {
    let runtime = Runtime::in_memory();
    let approver = RemembersTheSecond(SignalApprover::new().or_suspend());
    let host = Arc::new(ToolHost::new().with(pay).approval_handler(approver));
    let in_node = Arc::clone(&host);
    let graph: CompiledGraph<Vec<String>> = Graph::new("paying")
        .node_fn("pay", move |paid: &mut Vec<String>, ctx| {
            let host = Arc::clone(&in_node);
            Box::pin(async move {
                let call = ToolCall::new("call_1", "pay", json!({ "amount": 500 }));
                let dispatch = DispatchContext::new(ctx.thread())
                    .user(Some("ada"))
                    .node(ctx);
                let outcome = host.dispatch(&[call], dispatch).await?.remove(0);
                paid.push(outcome.content);
                Ok(())
            })
        })
        .edge(START, "pay")
        .edge("pay", END)
        .compile()
        .unwrap();
    let suspended = graph.run(&runtime, "t", Vec::new()).await.unwrap();
    assert_eq!(suspended.interrupts().len(), 1);

    let other = DispatchContext::new("other")
        .user(Some("ada"))
        .runtime(&runtime);
    let call = ToolCall::new("call_2", "pay", json!({ "amount": 5 }));
    let outcome = host.dispatch(&[call], other).await.unwrap().remove(0);
    assert!(outcome.content.contains("paid 5"), "{outcome:?}");

    runtime
        .decide_approval("t", "call_1", ApprovalDecision::deny("not this one"))
        .await
        .unwrap();
    let done = graph.recover(&runtime, "t").await.unwrap();
    let paid = done.completed().unwrap();
    assert_eq!(paid.len(), 1, "{paid:?}");
    assert!(
        paid[0].contains("not this one"),
        "ran over its deny: {paid:?}"
    );
    assert!(runtime.pending_approvals("t").await.unwrap().is_empty());
}

/// A decision for a call whose run is suspended, sent to an in-memory runtime that keeps no
/// pending signals, is dropped on arrival: `decide_approval` says so rather than reporting
/// it sent, and the call still waits for one. Before, it returned `Ok` and the run waited
/// for ever.
#[tokio::test]
async fn a_decision_dropped_on_arrival_is_reported() {
    let signals = loomflow::runtime::MailboxConfig::default().max_pending_signal_sessions(Some(0));
    let runtime = Runtime::builder().signals(signals).build();
    let host = suspending_host();
    let call = ToolCall::new("call_d", "pay", json!({ "amount": 5 }));
    let graph = paying_in_a_node("paying", host, call);
    let suspended = graph.run(&runtime, "d-1", Vec::new()).await.unwrap();
    assert_eq!(suspended.interrupts().len(), 1);
    let sent = runtime
        .decide_approval("d-1", "call_d", ApprovalDecision::Allow)
        .await;
    assert!(
        matches!(
            sent,
            Err(Error::Runtime(
                loomflow::RuntimeError::DecisionDropped { .. }
            ))
        ),
        "{sent:?}"
    );
    assert_eq!(runtime.pending_approvals("d-1").await.unwrap().len(), 1);
}
