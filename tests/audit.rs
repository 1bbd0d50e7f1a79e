//! The audit log as an operator reads it: who approved what, which tools ran with which
//! arguments, which signals came and went, where runs suspended and resumed; durable, shared
//! by every runtime on the store, and kept to its retention. And what runs cost.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/asker.rs"]
mod asker;
#[path = "support/postgres.rs"]
mod postgres;

use loomflow::agent::Agent;
use loomflow::model::{ModelResponse, PriceTable, ScriptedModel, ToolCall, Usage};
use loomflow::prelude::*;
use loomflow::runtime::{AuditEntry, AuditKind, AuditQuery};
use loomflow::tool::{ApprovalDecision, Permission, PermissionPolicy};
use loomflow_tests::TempDb;

/// The sessions a refund ran for, one entry per refund: tests run side by side.
static REFUNDS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// How many refunds ran for `session`.
fn refunds_for(session: &str) -> usize {
    REFUNDS
        .lock()
        .unwrap()
        .iter()
        .filter(|s| *s == session)
        .count()
}

/// Refunds an order. Moves money, so a person approves it.
#[tool(approval)]
fn refund(ctx: &ToolContext, order: String, cents: u64) -> String {
    REFUNDS.lock().unwrap().push(ctx.session.clone());
    format!("refunded {cents} cents on {order}")
}

fn with_usage(mut response: ModelResponse, input: u64, output: u64) -> ModelResponse {
    response.usage = Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    };
    response
}

fn refund_agent(runtime: Runtime) -> Agent {
    let call = ToolCall::new(
        "call_r",
        "refund",
        json!({ "order": "ord-9", "cents": 4_000 }),
    );
    Agent::builder("You handle refunds.")
        .name("refunds")
        .model(
            ScriptedModel::new([
                with_usage(ModelResponse::tool_calls(vec![call]), 1_000, 100),
                with_usage(ModelResponse::text("Refunded 40.00."), 2_000, 50),
            ])
            .named("openai:gpt-4o"),
        )
        .tool(refund)
        .durable_approvals()
        .prices(PriceTable::new().model("gpt-4o", 2.50, 10.00))
        .runtime(runtime)
        .build()
        .unwrap()
}

fn of_kind(log: &[AuditEntry], kind: AuditKind) -> Vec<&AuditEntry> {
    log.iter().filter(|e| e.kind == kind).collect()
}

/// The approval story on one store: a run suspends, a second runtime decides as `ada`, the
/// run resumes; a third runtime (a restart) reads the whole trail.
async fn approved_refund_trail(session: &str, open: impl Fn() -> Runtime) {
    let agent = refund_agent(open());
    let first = agent
        .run("Refund order ord-9")
        .session(session)
        .await
        .unwrap();
    assert!(first.interrupted);
    open()
        .decide_approval_by(session, "call_r", ApprovalDecision::Allow, "ada")
        .await
        .unwrap();
    let done = agent.resume(session).await.unwrap();
    assert_eq!(done.output, "Refunded 40.00.");
    drop(agent);

    let log = open().audit(session).await.unwrap();
    assert!(log.windows(2).all(|w| w[0].id < w[1].id), "oldest first");
    let position = |kind| log.iter().position(|e| e.kind == kind).unwrap();

    let [interrupt] = of_kind(&log, AuditKind::Interrupt)[..] else {
        panic!("one interrupt: {log:#?}");
    };
    assert_eq!(interrupt.run, 1);
    assert!(interrupt.subject.starts_with("tools#"), "{interrupt:?}");
    assert_eq!(interrupt.detail["signal"], "loomflow:approval:call_r");
    assert!(
        interrupt.subject.ends_with("loomflow:approval:call_r"),
        "{interrupt:?}"
    );

    let [sent] = of_kind(&log, AuditKind::SignalSent)[..] else {
        panic!("one signal sent: {log:#?}");
    };
    assert_eq!(sent.subject, "loomflow:approval:call_r");
    assert_eq!(sent.detail["payload"]["action"], "allow");
    assert_eq!(sent.detail["payload"]["by"], "ada");
    // On record with its decider as it is sent, before the run takes it.
    assert_eq!(sent.actor.as_deref(), Some("ada"));
    let [received] = of_kind(&log, AuditKind::SignalReceived)[..] else {
        panic!("one signal received: {log:#?}");
    };
    assert_eq!(received.subject, "loomflow:approval:call_r");
    assert_eq!(received.run, 1);

    let [resume] = of_kind(&log, AuditKind::Resume)[..] else {
        panic!("one resume: {log:#?}");
    };
    assert_eq!(resume.subject, interrupt.subject);

    let [decision] = of_kind(&log, AuditKind::Decision)[..] else {
        panic!("one decision: {log:#?}");
    };
    assert_eq!(decision.subject, "refund");
    assert_eq!(decision.actor.as_deref(), Some("ada"));
    assert_eq!(decision.detail["decision"], "allow");
    assert_eq!(decision.detail["call_id"], "call_r");

    let [call] = of_kind(&log, AuditKind::ToolCall)[..] else {
        panic!("one tool call: {log:#?}");
    };
    assert_eq!(call.subject, "refund");
    assert_eq!(call.run, 1);
    assert_eq!(
        call.detail["arguments"],
        json!({ "order": "ord-9", "cents": 4_000 })
    );
    assert_eq!(call.detail["outcome"], "ok");
    assert_eq!(call.detail["result"], "refunded 4000 cents on ord-9");
    assert!(call.detail["duration_ms"].is_u64());

    assert!(position(AuditKind::Interrupt) < position(AuditKind::SignalSent));
    assert!(position(AuditKind::SignalSent) < position(AuditKind::Decision));
    assert!(position(AuditKind::Decision) < position(AuditKind::ToolCall));

    // Usage and cost add up over both legs of the run: 3,000 tokens in, 150 out.
    assert_eq!(done.usage.input_tokens, 3_000);
    assert_eq!(done.usage.output_tokens, 150);
    let cost = done.cost_usd.unwrap();
    assert!(
        (cost - (3_000.0 * 2.50 + 150.0 * 10.00) / 1e6).abs() < 1e-12,
        "{cost}"
    );

    // Another runtime on the store pages through every thread's decisions.
    let decisions = open()
        .audit_query(&AuditQuery::all().kind(AuditKind::Decision))
        .await
        .unwrap();
    assert!(decisions.iter().any(|d| d.id == decision.id));
}

#[tokio::test]
async fn an_approved_refund_leaves_its_trail_in_sqlite_across_restarts() {
    let db = TempDb::new("audit-trail");
    approved_refund_trail("refund-ord-9", || Runtime::sqlite(db.path()).unwrap()).await;
    assert_eq!(refunds_for("refund-ord-9"), 1);
}

#[tokio::test]
async fn an_approved_refund_leaves_its_trail_in_postgres() {
    let Some(db) = postgres::TempPgDb::create("audit trail").await else {
        return;
    };
    // One store for the test's runtimes: a pool per runtime would do as well.
    let runtime = Runtime::postgres(&db.url).await.unwrap();
    approved_refund_trail("refund-ord-9-pg", || runtime.clone()).await;
}

#[tokio::test]
async fn refused_calls_record_who_refused_and_why() {
    let runtime = Runtime::in_memory();
    let calls = vec![
        ToolCall::new("c1", "refund", json!({ "order": "ord-1", "cents": 100 })),
        ToolCall::new("c2", "refund", json!({ "order": "ord-2", "cents": "lots" })),
    ];
    let agent = Agent::builder("You handle refunds.")
        .name("refunds")
        .model(ScriptedModel::new([
            ModelResponse::tool_calls(calls),
            ModelResponse::text("I could not refund."),
        ]))
        .tools(
            ToolHost::new()
                .with(refund)
                .permissions(PermissionPolicy::allow_all().tool(
                    "refund",
                    Permission::Deny("refunds are closed on Sundays".to_owned()),
                )),
        )
        .runtime(runtime.clone())
        .build()
        .unwrap();
    agent.run("Refund both").session("sunday").await.unwrap();
    let log = runtime.audit("sunday").await.unwrap();

    // The first call reached the policy, which refused it; the second never got that far.
    let [decision] = of_kind(&log, AuditKind::Decision)[..] else {
        panic!("one decision: {log:#?}");
    };
    assert_eq!(decision.actor.as_deref(), Some("policy"));
    assert_eq!(decision.detail["decision"], "deny");
    assert_eq!(decision.detail["reason"], "refunds are closed on Sundays");
    assert_eq!(decision.detail["call_id"], "c1");
    let calls = of_kind(&log, AuditKind::ToolCall);
    assert_eq!(calls.len(), 2);
    assert!(calls.iter().all(|c| c.detail["outcome"] == "error"));
    let invalid = calls.iter().find(|c| c.detail["call_id"] == "c2").unwrap();
    assert!(
        invalid.detail["error"]
            .as_str()
            .unwrap()
            .contains("field `cents`"),
        "{invalid:?}"
    );
}

/// A node that waits for a payment signal.
#[node]
async fn await_payment(paid: &mut Option<u64>, ctx: &Context) -> loomflow::Result<()> {
    *paid = Some(ctx.wait_for_signal("payment").await?);
    Ok(())
}

#[tokio::test]
async fn in_memory_signals_are_audited_when_sent_and_received() {
    let graph = Graph::new("checkout")
        .node(await_payment)
        .edge(START, "await_payment")
        .edge("await_payment", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let run = tokio::spawn({
        let runtime = runtime.clone();
        async move { graph.run(&runtime, "order-3", None).await }
    });
    runtime.signal("order-3", "payment", 990).await.unwrap();
    assert!(matches!(
        run.await.unwrap().unwrap(),
        RunOutcome::Completed(Some(990))
    ));
    let log = runtime.audit("order-3").await.unwrap();
    let kinds: Vec<AuditKind> = log.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [AuditKind::SignalSent, AuditKind::SignalReceived]);
    assert_eq!(log[0].detail["payload"], 990);
    assert_eq!(log[1].subject, "payment");
    assert_eq!(log[1].run, 1);
}

/// A signal received outside any run (`Runtime::wait_for_signal`, `Runtime::poll_signal`)
/// is audited when it is received, in memory as on SQLite: a `signal_sent` entry without a
/// `signal_received` one reads as a signal nobody got.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_received_outside_a_run_are_audited() {
    let db = loomflow_tests::TempDb::new("audit-outside");
    for runtime in [Runtime::in_memory(), durable(db.path())] {
        runtime.signal("s", "go", 1).await.unwrap();
        let got = runtime.wait_for_signal::<u32>("s", "go", None).await;
        assert_eq!(got.unwrap(), 1);
        runtime.signal("s", "poll", 2).await.unwrap();
        assert_eq!(runtime.poll_signal::<u32>("s", "poll").unwrap(), Some(2));
        let mut received = Vec::new();
        for _ in 0..100 {
            let log = runtime.audit("s").await.unwrap();
            received = of_kind(&log, AuditKind::SignalReceived)
                .iter()
                .map(|e| (e.subject.clone(), e.run))
                .collect::<Vec<_>>();
            if received.len() == 2 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        received.sort();
        assert_eq!(received, [("go".to_owned(), 0), ("poll".to_owned(), 0)]);
    }
}

/// A resume request (`Runtime::request_resume`, what `loomflow resume` and the HTTP API
/// send) is audited when it is sent and when the run takes it, in memory as on SQLite.
#[tokio::test]
async fn resume_requests_are_audited_when_sent_and_taken() {
    let db = loomflow_tests::TempDb::new("audit-resume-request");
    let asker = asker::asker::<String>();
    for runtime in [Runtime::in_memory(), durable(db.path())] {
        asker.invoke(&runtime, "t", None).await.unwrap();
        runtime.request_resume("t", "yes").await.unwrap();
        let done = asker.recover(&runtime, "t").await.unwrap();
        assert_eq!(done.completed().unwrap().as_deref(), Some("yes"));
        let log = runtime.audit("t").await.unwrap();
        let taken = of_kind(&log, AuditKind::SignalReceived);
        assert_eq!(taken.len(), 1, "{log:#?}");
        assert_eq!(
            (taken[0].subject.as_str(), taken[0].run),
            ("loomflow:resume", 1)
        );
        assert_eq!(of_kind(&log, AuditKind::SignalSent).len(), 1, "{log:#?}");
    }
}

/// A `resume` entry names the node and the value it was given, and reads back the same from
/// every store: a scalar (the memory store keeps it with its node, and builds the detail
/// when the log is read), a map (kept as text), and a value nested deeper than serde_json
/// reads by default (128 levels): the memory store keeps it as a value rather than as
/// text, the durable stores write text and read it back whole.
async fn resume_details_read_back(label: &str, runtime: &Runtime) {
    let asker = asker::asker::<serde_json::Value>();
    let values = [
        ("scalar", json!("approved by ada")),
        ("small", json!({"by": "ada", "ok": true})),
        (
            "deep",
            (0..150).fold(json!("core"), |inner, _| json!([inner])),
        ),
    ];
    let now_ms = || {
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        u64::try_from(since.unwrap().as_millis()).unwrap()
    };
    for (thread, value) in values {
        let before = now_ms();
        asker.invoke(runtime, thread, None).await.unwrap();
        let done = asker.resume(runtime, thread, &value).await.unwrap();
        let after = now_ms();
        assert_eq!(done.completed().unwrap().as_ref(), Some(&value), "{label}");
        let log = runtime.audit(thread).await.unwrap();
        let [resume] = of_kind(&log, AuditKind::Resume)[..] else {
            panic!("{label}: one resume: {log:#?}");
        };
        assert_eq!(resume.subject, "ask#0", "{label}");
        assert_eq!(resume.run, 1, "{label}");
        assert_eq!(
            resume.detail,
            json!({"node": "ask", "value": value}),
            "{label}"
        );
        let [interrupt] = of_kind(&log, AuditKind::Interrupt)[..] else {
            panic!("{label}: one interrupt: {log:#?}");
        };
        assert_eq!(interrupt.detail, json!({}), "{label}");
        // Dated when the run suspended and when it was picked up again, in that order.
        let times = [before, interrupt.at_ms, resume.at_ms, after];
        assert!(times.is_sorted(), "{label}: {times:?}");
    }
}

#[tokio::test]
async fn resume_entries_name_the_node_and_the_value_in_memory_and_sqlite() {
    let db = TempDb::new("audit-resume-detail");
    resume_details_read_back("memory", &Runtime::in_memory()).await;
    resume_details_read_back("sqlite", &Runtime::sqlite(db.path()).unwrap()).await;
}

#[tokio::test]
async fn resume_entries_name_the_node_and_the_value_in_postgres() {
    let Some(db) = postgres::TempPgDb::create("audit resume detail").await else {
        return;
    };
    resume_details_read_back("postgres", &Runtime::postgres(&db.url).await.unwrap()).await;
}

#[tokio::test]
async fn workers_keep_the_log_to_its_retention() {
    let db = TempDb::new("audit-retention");
    let runtime = Runtime::builder()
        .store(loomflow::runtime::SqliteStore::open(db.path()).unwrap())
        .audit_retention(Duration::from_millis(1))
        .build();
    runtime.signal("old", "ping", 1).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(runtime.audit("old").await.unwrap().len(), 1);
    // The newest entry is kept whatever its age (so that ids never go back): write one.
    runtime.signal("recent", "ping", 0).await.unwrap();
    let graph = Graph::new("idle")
        .node(await_payment)
        .edge(START, "await_payment")
        .edge("await_payment", END)
        .compile()
        .unwrap();
    let worker = Worker::builder(&runtime).graph(&graph).build();
    worker.run_until_idle().await.unwrap();
    assert!(runtime.audit("old").await.unwrap().is_empty());
    // On demand, too.
    runtime.signal("new", "ping", 2).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(runtime.prune_audit(Duration::ZERO).await.unwrap(), 1);
}

#[tokio::test]
async fn without_prices_there_is_no_cost() {
    let agent = Agent::builder("You help.")
        .model(ScriptedModel::new([with_usage(
            ModelResponse::text("Hi."),
            10,
            2,
        )]))
        .build()
        .unwrap();
    let result = agent.run("Hello").await.unwrap();
    assert_eq!(result.usage.input_tokens, 10);
    assert_eq!(result.cost_usd, None);
}

/// Pruning never hands an id out again: a reader paging with `after_id` (the HTTP
/// `?after=ID`) sees what is written after its cursor even when pruning emptied the log.
/// And no detail reads back as an empty object from every store.
#[tokio::test]
async fn ids_never_go_back_and_no_detail_reads_the_same_everywhere() {
    let db = loomflow_tests::TempDb::new("audit-ids");
    for (label, runtime) in [
        ("memory", Runtime::in_memory()),
        ("sqlite", Runtime::sqlite(db.path()).unwrap()),
    ] {
        for i in 0..3 {
            runtime.signal("tail", "ping", i).await.unwrap();
        }
        let cursor = runtime.audit("tail").await.unwrap().last().unwrap().id;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        runtime
            .prune_audit(std::time::Duration::ZERO)
            .await
            .unwrap();
        runtime.signal("tail", "ping", 99).await.unwrap();
        let page = runtime
            .audit_query(&AuditQuery::thread("tail").after_id(cursor))
            .await
            .unwrap();
        assert_eq!(page.len(), 1, "{label}: the entry written after the cursor");
        assert!(page[0].id > cursor, "{label}");

        runtime
            .store()
            .append_audit(vec![AuditEntry::new(
                "nothing",
                AuditKind::ToolCall,
                "x",
                serde_json::Value::Null,
            )])
            .await
            .unwrap();
        let log = runtime.audit("nothing").await.unwrap();
        assert_eq!(log[0].detail, json!({}), "{label}");
    }
}

static PAUSE: std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>> =
    std::sync::Mutex::new(None);

fn gate_graph() -> CompiledGraph<Option<String>> {
    Graph::new("gate")
        .node_fn("gate", |state: &mut Option<String>, ctx| {
            Box::pin(async move {
                let value: String = ctx.wait_for_signal("go").or_suspend().await?;
                let _: u32 = ctx.step("work", || async { Ok::<_, Error>(7) }).await?;
                // The first carry-on "crashes" here: after its journaled step, before its
                // checkpoint.
                let pause = PAUSE.lock().unwrap().take();
                if let Some(pause) = pause {
                    let _ = pause.send(());
                    std::future::pending::<()>().await;
                }
                *state = Some(value);
                Ok(())
            })
        })
        .edge(START, "gate")
        .edge("gate", END)
        .compile()
        .unwrap()
}

fn durable(path: &std::path::Path) -> Runtime {
    Runtime::builder()
        .store(loomflow::runtime::SqliteStore::open(path).unwrap())
        .lease(Duration::from_millis(300))
        .build()
}

/// A run carried on from a suspension, killed after a journaled step of the resumed
/// node and before its checkpoint, then recovered: the log says it resumed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_after_a_crash_mid_resume_records_the_resume_once() {
    let db = TempDb::new("audit-resume");
    let graph = gate_graph();
    let first = durable(db.path());
    let outcome = graph.run(&first, "job", None).await.unwrap();
    assert!(matches!(outcome, RunOutcome::Interrupted { .. }));
    first.signal("job", "go", "ok").await.unwrap();

    let (tx, rx) = tokio::sync::oneshot::channel();
    *PAUSE.lock().unwrap() = Some(tx);
    let carried = tokio::spawn({
        let graph = graph.clone();
        let runtime = first.clone();
        async move { graph.recover(&runtime, "job").await }
    });
    rx.await.unwrap();
    carried.abort(); // the process dies
    let _ = carried.await;
    drop(first);

    let restarted = durable(db.path());
    let outcome = graph
        .recover(&restarted, "job")
        .wait_if_busy(Duration::from_secs(5))
        .await
        .unwrap();
    assert!(
        matches!(outcome, RunOutcome::Completed(Some(ref v)) if v == "ok"),
        "{outcome:?}"
    );

    let log = restarted.audit("job").await.unwrap();
    for e in &log {
        println!(
            "{} run {} {} {} {}",
            e.id, e.run, e.kind, e.subject, e.detail
        );
    }
    let count = |kind| log.iter().filter(|e| e.kind == kind).count();
    assert_eq!(count(AuditKind::Interrupt), 1);
    assert_eq!(count(AuditKind::SignalReceived), 1);
    assert_eq!(count(AuditKind::Resume), 1, "one suspension, one resume");
}

/// `recover` of a run whose signal has not come (an operator's early `resume`, a
/// spurious wake) carries nothing on, and the log records no `resume` for it.
#[tokio::test]
async fn a_recover_that_finds_nothing_to_receive_records_no_resume() {
    let db = TempDb::new("audit-early");
    let graph = gate_graph();
    let runtime = durable(db.path());
    let outcome = graph.run(&runtime, "early", None).await.unwrap();
    assert!(matches!(outcome, RunOutcome::Interrupted { .. }));
    let outcome = graph.recover(&runtime, "early").await.unwrap();
    assert!(
        matches!(outcome, RunOutcome::Interrupted { .. }),
        "{outcome:?}"
    );
    let log = runtime.audit("early").await.unwrap();
    for e in &log {
        println!(
            "{} run {} {} {} {}",
            e.id, e.run, e.kind, e.subject, e.detail
        );
    }
    let count = |kind| log.iter().filter(|e| e.kind == kind).count();
    assert_eq!(
        count(AuditKind::Resume),
        0,
        "nothing was received, nothing resumed"
    );
    assert_eq!(
        count(AuditKind::Interrupt),
        1,
        "the run still waits where it first suspended"
    );
}

/// Two nodes suspend in one step; a resume answers one. The other asks again in the
/// resumed step: it is the same suspension, recorded once.
#[tokio::test]
async fn a_resume_that_answers_one_of_two_records_the_other_once() {
    #[derive(Clone, Debug, Default, Serialize, Deserialize)]
    struct Answers {
        log: Vec<String>,
    }
    fn ask(state: &mut Answers, ctx: &Context) -> NodeResult {
        let answer: String = ctx.interrupt(json!({ "asks": ctx.node() }))?;
        state.log.push(format!("{}={answer}", ctx.node()));
        Ok(())
    }
    let graph = Graph::new("pair")
        .node_fn("left", |s, ctx| Box::pin(async move { ask(s, ctx) }))
        .node_fn("right", |s, ctx| Box::pin(async move { ask(s, ctx) }))
        .reducer("log", Reducer::append())
        .edge(START, "left")
        .edge(START, "right")
        .edge("left", END)
        .edge("right", END)
        .compile()
        .unwrap();
    let db = TempDb::new("audit-pair");
    let runtime = durable(db.path());
    let outcome = graph
        .invoke(&runtime, "pair", Answers::default())
        .await
        .unwrap();
    assert_eq!(outcome.interrupts().len(), 2);
    let outcome = graph
        .resume_with(&runtime, "pair", [("left#0", "yes")])
        .await
        .unwrap();
    assert_eq!(outcome.interrupts().len(), 1, "{outcome:?}");
    let done = graph
        .resume(&runtime, "pair", "no")
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(done.log.len(), 2);
    let log = runtime.audit("pair").await.unwrap();
    let subjects = |kind| -> Vec<&str> {
        log.iter()
            .filter(|e| e.kind == kind)
            .map(|e| e.subject.as_str())
            .collect()
    };
    let mut interrupts = subjects(AuditKind::Interrupt);
    interrupts.sort_unstable();
    assert_eq!(interrupts, ["left#0", "right#0"], "each suspension once");
    assert_eq!(subjects(AuditKind::Resume), ["left#0", "right#0"]);
}

/// Under `Durability::Exit` the resume entry waits for the run's next write. A node asked
/// again in a later step (a loop) is a new suspension: the earlier answer stays recorded.
#[tokio::test]
async fn an_exit_run_that_asks_again_later_keeps_the_first_answer() {
    let graph = Graph::new("again")
        .node_fn("ask", |state: &mut Vec<String>, ctx| {
            Box::pin(async move {
                let answer: String = ctx.interrupt(json!({ "turn": state.len() }))?;
                state.push(answer);
                Ok(())
            })
        })
        .edge(START, "ask")
        .branch("ask", ["ask", END], |state: &Vec<String>| {
            match state.len() {
                1 => "ask",
                _ => END,
            }
        })
        .compile()
        .unwrap();
    let runtime = Runtime::builder().durability(Durability::Exit).build();
    graph.invoke(&runtime, "again", Vec::new()).await.unwrap();
    let outcome = graph.resume(&runtime, "again", "first").await.unwrap();
    assert_eq!(outcome.interrupts().len(), 1, "{outcome:?}");
    let done = graph.resume(&runtime, "again", "second").await.unwrap();
    assert_eq!(done.completed().unwrap(), ["first", "second"]);
    let log = runtime.audit("again").await.unwrap();
    let kinds: Vec<String> = log
        .iter()
        .map(|e| format!("{} {}", e.kind, e.subject))
        .collect();
    assert_eq!(
        kinds,
        [
            "interrupt ask#0",
            "resume ask#0",
            "interrupt ask#0",
            "resume ask#0"
        ]
    );
}

/// A node that waits twice for the same signal name suspends twice: each suspension is
/// recorded, and so is each signal that carried the run past one, rather than the second
/// wait being taken for the first one still waiting.
#[tokio::test]
async fn a_node_that_waits_twice_for_one_name_records_both_waits() {
    let db = TempDb::new("audit-twice");
    for runtime in [Runtime::in_memory(), durable(db.path())] {
        let graph = Graph::new("twice")
            .node_fn("twice", |total: &mut u32, ctx| {
                Box::pin(async move {
                    let first: u32 = ctx.wait_for_signal("go").or_suspend().await?;
                    let second: u32 = ctx.wait_for_signal("go").or_suspend().await?;
                    *total = first + second;
                    Ok(())
                })
            })
            .edge(START, "twice")
            .edge("twice", END)
            .compile()
            .unwrap();
        let first = graph.invoke(&runtime, "t", 0).await.unwrap();
        assert_eq!(first.interrupts()[0].id, "twice#signal:go", "{first:?}");
        runtime.signal("t", "go", 1).await.unwrap();
        let second = graph.recover(&runtime, "t").await.unwrap();
        assert_eq!(second.interrupts()[0].id, "twice#signal:go#1", "{second:?}");
        runtime.signal("t", "go", 2).await.unwrap();
        let done = graph.recover(&runtime, "t").await.unwrap();
        assert_eq!(done.completed().unwrap(), 3);

        let log = runtime.audit("t").await.unwrap();
        let subjects = |kind| {
            of_kind(&log, kind)
                .iter()
                .map(|e| e.subject.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            subjects(AuditKind::Interrupt),
            ["twice#signal:go", "twice#signal:go#1"]
        );
        assert_eq!(
            subjects(AuditKind::Resume),
            ["twice#signal:go", "twice#signal:go#1"]
        );
    }
}

/// A resume answers one node's question while a sibling in the same step waits for a
/// signal that came meanwhile: the sibling receives it, and the log records a `resume` for
/// each, as a recover would for the wait.
#[tokio::test]
async fn a_wait_carried_past_by_a_resume_of_its_sibling_is_recorded() {
    #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
    struct Both {
        asked: u32,
        heard: u32,
    }
    let db = TempDb::new("audit-sibling-wait");
    for runtime in [Runtime::in_memory(), durable(db.path())] {
        let graph = Graph::new("both")
            .node_fn("ask", |s: &mut Both, ctx| {
                Box::pin(async move {
                    s.asked = ctx.interrupt(json!("how many?"))?;
                    Ok(())
                })
            })
            .node_fn("hear", |s: &mut Both, ctx| {
                Box::pin(async move {
                    s.heard = ctx.wait_for_signal("go").or_suspend().await?;
                    Ok(())
                })
            })
            .edge(START, "ask")
            .edge(START, "hear")
            .edge("ask", END)
            .edge("hear", END)
            .compile()
            .unwrap();
        let first = graph.invoke(&runtime, "t", Both::default()).await.unwrap();
        assert_eq!(first.interrupts().len(), 2, "{first:?}");
        runtime.signal("t", "go", 2).await.unwrap();
        let done = graph
            .resume_with(&runtime, "t", [("ask#0", 1)])
            .await
            .unwrap();
        assert_eq!(done.completed().unwrap(), Both { asked: 1, heard: 2 });

        let log = runtime.audit("t").await.unwrap();
        let mut resumed: Vec<_> = of_kind(&log, AuditKind::Resume)
            .iter()
            .map(|e| e.subject.clone())
            .collect();
        resumed.sort();
        assert_eq!(resumed, ["ask#0", "hear#signal:go"]);
    }
}

static SUSPEND_SLEEP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// A run suspended on a timer (as a worker's grace suspends a long sleep), carried on by a
/// `recover` that sleeps in memory, and cancelled before the time comes: the log has no
/// `resume` for the timer, which never fired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cancelled_while_it_waits_again_records_no_resume() {
    use std::sync::atomic::Ordering::SeqCst;
    let graph = Graph::new("nap")
        .node_fn("nap", |_: &mut Option<String>, ctx| {
            Box::pin(async move {
                let sleep = ctx.sleep(Duration::from_secs(3_600));
                match SUSPEND_SLEEP.load(SeqCst) {
                    true => sleep.or_suspend().await?,
                    false => sleep.await?,
                }
                Ok(())
            })
        })
        .edge(START, "nap")
        .edge("nap", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let outcome = graph.run(&runtime, "nap", None).await.unwrap();
    assert!(matches!(outcome, RunOutcome::Interrupted { .. }));
    SUSPEND_SLEEP.store(false, SeqCst);
    let carried = tokio::spawn({
        let (graph, runtime) = (graph.clone(), runtime.clone());
        async move { graph.recover(&runtime, "nap").await }
    });
    while runtime
        .run("nap")
        .await
        .unwrap()
        .record
        .lease_owner
        .is_none()
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    runtime.cancel("nap").await.unwrap();
    let ended = carried.await.unwrap();
    assert!(ended.is_err(), "{ended:?}");
    let log = runtime.audit("nap").await.unwrap();
    let kinds: Vec<AuditKind> = log.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [AuditKind::Interrupt], "{log:#?}");
}

/// A decision is dated when it was taken, not when the run got to use it: a worker may
/// carry the run on hours later, or a recovery replay it. Before its fix the entry was
/// dated by the run's use of it.
#[tokio::test]
async fn a_decision_is_dated_when_it_was_taken() {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};
    let now_ms = || {
        u64::try_from(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_millis(),
        )
        .unwrap()
    };
    /// Refunds an order, counted by no other test.
    #[tool(approval)]
    fn refund_later(order: String, cents: u64) -> String {
        format!("refunded {cents} cents on {order}")
    }
    let runtime = Runtime::in_memory();
    let call = ToolCall::new(
        "call_r",
        "refund_later",
        json!({ "order": "ord-9", "cents": 4_000 }),
    );
    let agent = Agent::builder("You handle refunds.")
        .name("refunds")
        .model(ScriptedModel::new([
            ModelResponse::tool_calls(vec![call]),
            ModelResponse::text("Refunded 40.00."),
        ]))
        .tool(refund_later)
        .durable_approvals()
        .runtime(runtime.clone())
        .build()
        .unwrap();
    let session = "refund-later";
    let first = agent
        .run("Refund order ord-9")
        .session(session)
        .await
        .unwrap();
    assert!(first.interrupted);
    let before = now_ms();
    runtime
        .decide_approval_by(session, "call_r", ApprovalDecision::Allow, "ada")
        .await
        .unwrap();
    let after = now_ms();
    tokio::time::sleep(Duration::from_millis(300)).await;
    agent.resume(session).await.unwrap();
    let log = runtime.audit(session).await.unwrap();
    // In memory too, the decision's signal names its decider.
    let [sent] = of_kind(&log, AuditKind::SignalSent)[..] else {
        panic!("one signal sent: {log:#?}");
    };
    assert_eq!(sent.actor.as_deref(), Some("ada"));
    let [decision] = of_kind(&log, AuditKind::Decision)[..] else {
        panic!("one decision: {log:#?}");
    };
    assert!(
        (before..=after).contains(&decision.at_ms),
        "{before}..={after}: {decision:?}"
    );
    let [call] = of_kind(&log, AuditKind::ToolCall)[..] else {
        panic!("one tool call: {log:#?}");
    };
    assert!(call.at_ms >= after + 300, "the call ran later: {call:?}");
}

/// Send a note. Needs approval.
#[tool(approval)]
fn note(text: String) -> String {
    format!("noted {text}")
}

/// A tool call's `duration_ms` is the time its body ran: the wait for its approval is not
/// part of it (the decision entry says when it was decided). Before, a call a person took
/// a second to approve was logged as a tool that ran for a second.
#[tokio::test]
async fn a_tool_calls_duration_leaves_out_the_wait_for_its_approval() {
    let runtime = Runtime::in_memory();
    let host = ToolHost::new()
        .with(note)
        .approval_handler(loomflow::tool::approver_fn(|_request| async {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            Ok(ApprovalDecision::Allow)
        }));
    let call = ToolCall::new("call_n", "note", json!({ "text": "hi" }));
    let context = loomflow::tool::DispatchContext::new("s").runtime(&runtime);
    let outcome = host.dispatch(&[call], context).await.unwrap().remove(0);
    assert_eq!(outcome.content, "noted hi");
    let log = runtime.audit_query(&AuditQuery::all()).await.unwrap();
    let [call] = of_kind(&log, AuditKind::ToolCall)[..] else {
        panic!("one tool call: {log:#?}");
    };
    let took = call.detail["duration_ms"].as_u64().unwrap();
    assert!(took < 500, "the body took {took} ms");
}
