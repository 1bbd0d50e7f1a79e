//! The tool host: add/remove/list, bad calls become error results, parallel dispatch with a
//! concurrency limit and results in call order, per-call timeouts, caught panics; sync tools
//! run on the blocking pool, so they run together and the timeout applies to them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/callsites.rs"]
mod callsites;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use loomflow::graph::BoxFuture;
use loomflow::model::ToolCall;
use loomflow::prelude::*;
use loomflow::tool::{
    DispatchContext, Permission, PermissionPolicy, ToolError, ToolOutcome, ToolSpec,
};
use serde_json::Value;

/// Add two numbers.
#[tool]
fn add(a: i64, b: i64) -> i64 {
    a + b
}

/// Greet someone.
#[tool(param(name = "Who to greet"))]
async fn greet(name: String, tags: Option<Vec<String>>) -> String {
    format!("hello {name} {}", tags.unwrap_or_default().join(","))
}

/// Always panics.
#[tool]
fn explode() -> String {
    panic!("boom")
}

/// Sleeps for an hour.
#[tool]
async fn slow() -> String {
    tokio::time::sleep(Duration::from_secs(3600)).await;
    "done".into()
}

/// Sleeps for `ms` milliseconds, then answers with `ms`.
#[tool]
async fn nap(ms: u64) -> u64 {
    tokio::time::sleep(Duration::from_millis(ms)).await;
    ms
}

/// Where sync tools block their thread: each arrival counts, and waits for enough others (or
/// for the test to open it) up to a limit.
struct Gate {
    arrived: Mutex<usize>,
    changed: Condvar,
}

impl Gate {
    const fn new() -> Self {
        Self {
            arrived: Mutex::new(0),
            changed: Condvar::new(),
        }
    }

    /// Arrives, then blocks until `count` calls have arrived or 10 s pass: whether they did.
    fn arrive_and_wait(&self, count: usize) -> bool {
        let mut arrived = self.arrived.lock().unwrap();
        *arrived = arrived.saturating_add(1);
        self.changed.notify_all();
        let (arrived, _) = self
            .changed
            .wait_timeout_while(arrived, Duration::from_secs(10), |n| *n < count)
            .unwrap();
        *arrived >= count
    }

    fn open(&self) {
        *self.arrived.lock().unwrap() = usize::MAX;
        self.changed.notify_all();
    }
}

static HELD: Gate = Gate::new();
static MEETING: Gate = Gate::new();

/// Blocks its thread until the test lets it go.
#[tool]
fn held() -> String {
    HELD.arrive_and_wait(usize::MAX);
    "released".into()
}

/// Blocks its thread until two calls are in it at once.
#[tool]
fn meet(who: u32) -> bool {
    let _ = who;
    MEETING.arrive_and_wait(2)
}

fn call(id: &str, name: &str, arguments: Value) -> ToolCall {
    ToolCall::new(id, name, arguments)
}

async fn run(host: &ToolHost, calls: &[ToolCall]) -> Vec<ToolOutcome> {
    host.dispatch(calls, DispatchContext::new("session-1"))
        .await
        .unwrap()
}

async fn run_one(host: &ToolHost, name: &str, arguments: Value) -> ToolOutcome {
    run(host, &[call("c1", name, arguments)]).await.remove(0)
}

#[test]
fn add_remove_list_get_and_definitions() {
    let mut host = ToolHost::new().with(add).with(greet);
    let names: Vec<_> = host.list().iter().map(|s| s.name.clone()).collect();
    assert_eq!(names, ["add", "greet"]);
    assert!(host.get("add").is_some());
    assert_eq!(host.definitions()[1].name, "greet");
    assert!(host.remove("add"));
    assert!(!host.remove("add"));
    assert!(host.get("add").is_none());
    assert_eq!(host.list().len(), 1);
}

/// A tool written by hand, held as `Arc<dyn Tool>`: the trait is object-safe.
struct Echo(ToolSpec);

impl Tool for Echo {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn call<'a>(
        &'a self,
        arguments: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move { Ok(arguments) })
    }
}

/// A `null` for a field the schema requires, whose type a branch of the schema gives (zod's
/// `.and()` writes `allOf`), is refused naming the field: it is not a field left out. Before,
/// the branch took it for an optional field's `null`, the check passed, and the field was
/// dropped before the tool ran: the server got `{}` and refused it in its own words.
#[tokio::test]
async fn a_null_for_a_field_required_around_a_branch_is_refused() {
    let schema = json!({
        "type": "object",
        "required": ["city"],
        "allOf": [{ "properties": { "city": { "type": "string" } } }],
    });
    let mut host = ToolHost::new();
    host.add_arc(Arc::new(Echo(ToolSpec::new("echo", "Echo.", schema))));
    let out = run_one(&host, "echo", json!({ "city": null })).await;
    assert!(out.is_error, "{out:?}");
    assert!(out.content.contains("city"), "{}", out.content);
    assert!(
        out.content.contains("expected a string, got null"),
        "{}",
        out.content
    );
    let out = run_one(&host, "echo", json!({ "city": "Lyon" })).await;
    assert_eq!(out.content, r#"{"city":"Lyon"}"#);
}

/// A hand-written tool (an MCP server's, say) is given a `null` its schema accepts as it
/// was sent, though the property has a default: "no limit" is not "the default limit".
#[tokio::test]
async fn a_null_a_hand_written_tool_accepts_reaches_it() {
    let schema = json!({
        "type": "object",
        "properties": { "limit": { "type": ["integer", "null"], "default": 10 } },
    });
    let mut host = ToolHost::new();
    host.add_arc(Arc::new(Echo(ToolSpec::new("echo", "Echo.", schema))));
    let out = run_one(&host, "echo", json!({ "limit": null })).await;
    assert_eq!(out.content, r#"{"limit":null}"#, "{out:?}");
}

#[tokio::test]
async fn hand_written_tools_are_object_safe() {
    let echo: Arc<dyn Tool> = Arc::new(Echo(ToolSpec::new(
        "echo",
        "Echo the arguments.",
        json!({ "type": "object", "properties": {} }),
    )));
    let mut host = ToolHost::new();
    host.add_arc(echo);
    let out = run_one(&host, "echo", json!({ "x": 1 })).await;
    assert_eq!(out.content, r#"{"x":1}"#);
    assert!(!out.is_error);
}

#[tokio::test]
async fn good_calls_return_their_serialized_values() {
    let host = ToolHost::new().with(add).with(greet);
    let out = run(
        &host,
        &[
            call("c1", "add", json!({ "a": 2, "b": 3 })),
            call("c2", "greet", json!({ "name": "Ada", "tags": ["x", "y"] })),
        ],
    )
    .await;
    assert_eq!(out[0].content, "5");
    assert_eq!(out[1].content, "hello Ada x,y");
    assert_eq!(
        (out[0].call_id.as_str(), out[1].name.as_str()),
        ("c1", "greet")
    );
    assert!(out.iter().all(|o| !o.is_error));
}

#[tokio::test]
async fn unknown_tool_lists_the_known_ones() {
    let host = ToolHost::new().with(add).with(greet);
    let out = run_one(&host, "mul", json!({})).await;
    assert!(out.is_error);
    assert_eq!(out.content, "unknown tool mul; known tools: add, greet");
}

#[tokio::test]
async fn arguments_that_are_not_json_are_an_error_result() {
    let host = ToolHost::new().with(add);
    let out = run_one(&host, "add", json!("{\"a\": 1,")).await;
    assert!(out.is_error);
    assert!(
        out.content.contains("arguments are not JSON"),
        "{}",
        out.content
    );
}

#[tokio::test]
async fn arguments_given_as_json_text_are_parsed() {
    let host = ToolHost::new().with(add);
    let out = run_one(&host, "add", json!("{\"a\": 1, \"b\": 2}")).await;
    assert_eq!(out.content, "3");
}

#[tokio::test]
async fn arguments_that_are_not_an_object_are_an_error_result() {
    let host = ToolHost::new().with(add);
    let out = run_one(&host, "add", json!([1, 2])).await;
    assert!(out.is_error);
    assert!(
        out.content.contains("expected a JSON object, got an array"),
        "{}",
        out.content
    );
}

#[tokio::test]
async fn a_missing_field_is_named() {
    let host = ToolHost::new().with(add);
    let out = run_one(&host, "add", json!({ "a": 1 })).await;
    assert!(out.is_error);
    assert_eq!(
        out.content,
        "invalid arguments for tool add: missing required field `b`"
    );
}

#[tokio::test]
async fn a_wrong_type_names_the_field_and_what_was_expected() {
    let host = ToolHost::new().with(add).with(greet);
    let out = run_one(&host, "add", json!({ "a": 1, "b": "two" })).await;
    assert_eq!(
        out.content,
        "invalid arguments for tool add: field `b`: expected an integer, got the string \"two\""
    );
    let out = run_one(&host, "greet", json!({ "name": "Ada", "tags": ["ok", 3] })).await;
    assert!(out.is_error);
    assert!(
        out.content.contains("field `tags[1]`: expected a string"),
        "{}",
        out.content
    );
}

#[tokio::test]
async fn a_panicking_tool_is_an_error_result_and_the_others_still_run() {
    let host = ToolHost::new().with(explode).with(add);
    let out = run(
        &host,
        &[
            call("c1", "explode", json!({})),
            call("c2", "add", json!({ "a": 1, "b": 1 })),
        ],
    )
    .await;
    assert!(out[0].is_error);
    assert_eq!(out[0].content, "tool explode panicked: boom");
    assert_eq!(out[1].content, "2");
}

#[tokio::test(start_paused = true)]
async fn a_slow_tool_times_out() {
    let host = ToolHost::new()
        .with(slow)
        .with(add)
        .timeout(Duration::from_secs(2));
    let out = run(
        &host,
        &[
            call("c1", "slow", json!({})),
            call("c2", "add", json!({ "a": 1, "b": 1 })),
        ],
    )
    .await;
    assert!(out[0].is_error);
    assert_eq!(out[0].content, "tool slow timed out after 2 s");
    assert_eq!(out[1].content, "2");
}

/// A tool given a time of its own runs that long, whatever the host's: the slow one gets
/// two hours and finishes its hour; another past the host's second times out at it.
#[tokio::test(start_paused = true)]
async fn a_tool_given_a_time_of_its_own_runs_that_long() {
    let host = ToolHost::new()
        .with(slow)
        .with(nap)
        .timeout(Duration::from_secs(1))
        .timeout_for("slow", Duration::from_secs(7_200));
    let out = run(
        &host,
        &[
            call("c1", "slow", json!({})),
            call("c2", "nap", json!({ "ms": 5_000 })),
        ],
    )
    .await;
    assert_eq!(out[0].content, "done", "{:?}", out[0]);
    assert!(out[1].is_error);
    assert_eq!(out[1].content, "tool nap timed out after 1 s");
}

#[tokio::test]
async fn a_sync_tool_that_overruns_the_timeout_times_out() {
    let host = ToolHost::new()
        .with(held)
        .timeout(Duration::from_millis(100));
    let out = run_one(&host, "held", json!({})).await;
    HELD.open();
    assert!(out.is_error, "{}", out.content);
    assert_eq!(out.content, "tool held timed out after 0.1 s");
}

#[tokio::test]
async fn the_sync_calls_of_one_turn_run_at_the_same_time() {
    let host = ToolHost::new().with(meet);
    let out = run(
        &host,
        &[
            call("c1", "meet", json!({ "who": 1 })),
            call("c2", "meet", json!({ "who": 2 })),
        ],
    )
    .await;
    assert_eq!(out[0].content, "true");
    assert_eq!(out[1].content, "true");
}

#[tokio::test(start_paused = true)]
async fn results_come_back_in_call_order_whatever_finishes_first() {
    let host = ToolHost::new().with(nap);
    let calls: Vec<_> = [300, 100, 200, 0]
        .iter()
        .enumerate()
        .map(|(i, ms)| call(&format!("c{i}"), "nap", json!({ "ms": ms })))
        .collect();
    let started = tokio::time::Instant::now();
    let out = run(&host, &calls).await;
    let contents: Vec<_> = out.iter().map(|o| o.content.as_str()).collect();
    assert_eq!(contents, ["300", "100", "200", "0"]);
    let ids: Vec<_> = out.iter().map(|o| o.call_id.as_str()).collect();
    assert_eq!(ids, ["c0", "c1", "c2", "c3"]);
    // They ran side by side: the turn took as long as the slowest call, not the sum.
    assert!(started.elapsed() < Duration::from_millis(600));
}

/// A tool that records how many of its calls run at once.
struct Gauge {
    spec: ToolSpec,
    running: AtomicUsize,
    peak: AtomicUsize,
    barrier: Option<tokio::sync::Barrier>,
}

impl Gauge {
    fn new(barrier: Option<usize>) -> Arc<Self> {
        Arc::new(Self {
            spec: ToolSpec::new("gauge", "Count.", json!({ "type": "object" })),
            running: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            barrier: barrier.map(tokio::sync::Barrier::new),
        })
    }
}

struct GaugeTool(Arc<Gauge>);

impl Tool for GaugeTool {
    fn spec(&self) -> &ToolSpec {
        &self.0.spec
    }

    fn call<'a>(
        &'a self,
        _arguments: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        let gauge = &self.0;
        Box::pin(async move {
            let now = gauge.running.fetch_add(1, Ordering::SeqCst) + 1;
            gauge.peak.fetch_max(now, Ordering::SeqCst);
            match &gauge.barrier {
                Some(barrier) => {
                    barrier.wait().await;
                }
                None => tokio::time::sleep(Duration::from_millis(10)).await,
            }
            gauge.running.fetch_sub(1, Ordering::SeqCst);
            Ok(Value::Null)
        })
    }
}

fn gauge_calls(n: usize) -> Vec<ToolCall> {
    (0..n)
        .map(|i| call(&format!("c{i}"), "gauge", json!({})))
        .collect()
}

#[tokio::test]
async fn calls_of_one_turn_run_concurrently() {
    // Three calls that each wait for the other two: only finishes if they run at once.
    let gauge = Gauge::new(Some(3));
    let host = ToolHost::new()
        .with(GaugeTool(gauge.clone()))
        .max_concurrency(3);
    let out = run(&host, &gauge_calls(3)).await;
    assert!(out.iter().all(|o| !o.is_error));
    assert_eq!(gauge.peak.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn the_concurrency_limit_holds() {
    let gauge = Gauge::new(None);
    let host = ToolHost::new()
        .with(GaugeTool(gauge.clone()))
        .max_concurrency(2);
    let out = run(&host, &gauge_calls(7)).await;
    assert_eq!(out.len(), 7);
    assert_eq!(gauge.peak.load(Ordering::SeqCst), 2);

    let gauge = Gauge::new(None);
    let host = ToolHost::new()
        .with(GaugeTool(gauge.clone()))
        .max_concurrency(1);
    run(&host, &gauge_calls(4)).await;
    assert_eq!(gauge.peak.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn context_reaches_the_tool() {
    /// Who is asking.
    #[tool]
    fn whoami(ctx: &ToolContext) -> String {
        format!("{} {:?} {}", ctx.session, ctx.user, ctx.call_id)
    }
    let host = ToolHost::new().with(whoami);
    let out = host
        .dispatch(
            &[call("c9", "whoami", json!({}))],
            DispatchContext::new("s-1").user(Some("ada")),
        )
        .await
        .unwrap();
    assert_eq!(out[0].content, r#"s-1 Some("ada") c9"#);
}

#[tokio::test]
async fn a_tool_called_from_a_node_emits_events_on_the_run() {
    use futures_util::StreamExt;
    use loomflow::EventKind;

    /// Report progress.
    #[tool]
    async fn progress(steps: u32, ctx: &ToolContext) -> u32 {
        for step in 1..=steps {
            ctx.emit("progress", json!({ "step": step }));
        }
        steps
    }

    let host = Arc::new(ToolHost::new().with(progress));
    let graph = Graph::new("g")
        .node_fn("tools", move |done: &mut Vec<String>, ctx| {
            let host = host.clone();
            Box::pin(async move {
                let calls = [call("c1", "progress", json!({ "steps": 2 }))];
                let dispatch = DispatchContext::new(ctx.thread()).node(ctx);
                let outcomes = host.dispatch(&calls, dispatch).await?;
                done.extend(outcomes.into_iter().map(|o| o.content));
                Ok(())
            })
        })
        .edge(START, "tools")
        .edge("tools", END)
        .compile()
        .unwrap();
    let runtime = Runtime::in_memory();
    let mut stream = graph.stream(&runtime, "t", Vec::new());
    let mut custom = Vec::new();
    while let Some(event) = stream.next().await {
        if let EventKind::Custom { name, data } = event.kind {
            custom.push((event.node.unwrap(), name, data));
        }
    }
    assert_eq!(
        custom,
        [1, 2]
            .map(|step| (
                "tools".to_owned(),
                "progress".to_owned(),
                json!({ "tool": "progress", "call_id": "c1", "data": { "step": step } })
            ))
            .to_vec()
    );
    // Outside a node, emitting does nothing (and does not fail).
    let out = run_one(
        &ToolHost::new().with(progress),
        "progress",
        json!({ "steps": 1 }),
    )
    .await;
    assert_eq!(out.content, "1");
}

/// A set whose list the test changes while the host holds it.
#[derive(Clone, Default)]
struct Shifting(Arc<std::sync::Mutex<Vec<Arc<dyn Tool>>>>);

impl loomflow::tool::ToolSet for Shifting {
    fn name(&self) -> &str {
        "shifting"
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.0.lock().unwrap().clone()
    }
}

/// Answers with its own name.
struct Named(ToolSpec);

impl Tool for Named {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn call<'a>(&'a self, _: Value, _: &'a ToolContext) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move { Ok(Value::String(format!("from the set: {}", self.0.name))) })
    }
}

fn named(name: &str) -> Arc<dyn Tool> {
    Arc::new(Named(ToolSpec::new(
        name,
        "from a set",
        json!({ "type": "object" }),
    )))
}

#[tokio::test]
async fn a_tool_set_is_read_on_every_lookup_and_own_tools_win() {
    let set = Shifting::default();
    let host = ToolHost::new().with(add).with_set(set.clone());
    let names = |host: &ToolHost| host.list().into_iter().map(|s| s.name).collect::<Vec<_>>();
    assert_eq!(names(&host), ["add"]);

    set.0.lock().unwrap().extend([named("wave"), named("add")]);
    assert_eq!(names(&host), ["add", "wave"]);
    let ctx = || DispatchContext::new("s");
    let calls = [
        ToolCall::new("c1", "wave", json!({})),
        ToolCall::new("c2", "add", json!({ "a": 1, "b": 2 })),
    ];
    let outcomes = host.dispatch(&calls, ctx()).await.unwrap();
    assert_eq!(outcomes[0].content, "from the set: wave");
    assert_eq!(
        outcomes[1].content, "3",
        "the host's own tool wins over the set's"
    );

    set.0.lock().unwrap().clear();
    let outcome = host
        .dispatch(&calls[..1], ctx())
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert!(outcome.is_error);
    assert!(
        outcome.content.contains("unknown tool wave"),
        "{}",
        outcome.content
    );
}

/// Repeat a word.
#[tool]
fn repeat(word: String, times: usize) -> String {
    word.repeat(times)
}

/// A result past the host's bound is cut, saying how much was left out: it goes into the
/// transcript and every checkpoint, and one past the model's context would fail every
/// later turn. A result within the bound is whole.
#[tokio::test]
async fn a_huge_result_is_cut_to_the_hosts_bound() {
    let host = ToolHost::new().with(repeat);
    let huge = run_one(&host, "repeat", json!({ "word": "é", "times": 1_000_000 })).await;
    assert!(!huge.is_error);
    assert!(
        huge.content.len() <= loomflow::tool::DEFAULT_MAX_OUTPUT_BYTES + 100,
        "{} bytes",
        huge.content.len()
    );
    assert!(
        huge.content.ends_with("bytes left out]"),
        "{}",
        &huge.content[huge.content.len() - 60..]
    );

    let small = ToolHost::new().with(repeat).max_output_bytes(10);
    let cut = run_one(&small, "repeat", json!({ "word": "ab", "times": 20 })).await;
    assert_eq!(cut.content, "ababababab\n[cut: 30 of 40 bytes left out]");
    let whole = run_one(&small, "repeat", json!({ "word": "ab", "times": 5 })).await;
    assert_eq!(whole.content, "ababababab");
}

/// A call waiting for its approval holds no slot of the concurrency limit: with one slot,
/// the call beside it runs meanwhile. Before its fix the waiting call held the only slot,
/// the other never ran, and the approver (which waits for it here) gave up and denied.
#[tokio::test]
async fn a_call_waiting_for_its_approval_holds_no_slot() {
    let ran = Arc::new(tokio::sync::Notify::new());
    /// Marks that it ran.
    struct Mark(Arc<tokio::sync::Notify>, ToolSpec);
    impl loomflow::tool::Tool for Mark {
        fn spec(&self) -> &ToolSpec {
            &self.1
        }
        fn call<'a>(
            &'a self,
            _: Value,
            _: &'a ToolContext,
        ) -> BoxFuture<'a, Result<Value, ToolError>> {
            self.0.notify_one();
            Box::pin(async { Ok(json!("marked")) })
        }
    }
    let waited = Arc::clone(&ran);
    let approver = loomflow::tool::approver_fn(move |_| {
        let waited = Arc::clone(&waited);
        async move {
            let other_ran = tokio::time::timeout(Duration::from_secs(10), waited.notified());
            Ok(match other_ran.await {
                Ok(()) => loomflow::tool::ApprovalDecision::Allow,
                Err(_) => loomflow::tool::ApprovalDecision::deny("the other call never ran"),
            })
        }
    });
    let spec = ToolSpec::new("mark", "Marks.", json!({ "type": "object" }));
    let host = ToolHost::new()
        .with(Mark(Arc::clone(&ran), spec))
        .with(add)
        .permissions(PermissionPolicy::allow_all().tool("add", Permission::Ask))
        .approval_handler(approver)
        .max_concurrency(1);
    let calls = [
        call("c1", "add", json!({ "a": 1, "b": 2 })),
        call("c2", "mark", json!({})),
    ];
    let out = run(&host, &calls).await;
    assert_eq!(
        (out[0].content.as_str(), out[0].is_error),
        ("3", false),
        "{out:?}"
    );
    assert_eq!(
        (out[1].content.as_str(), out[1].is_error),
        ("marked", false)
    );
}

/// A set's tool named as one the host already has is hidden (the host's own is called),
/// and said so once per name, not silently and not on every turn.
#[test]
fn a_set_tool_hidden_by_another_of_its_name_is_warned_of_once() {
    let set = Shifting::default();
    set.0.lock().unwrap().extend([named("wave"), named("add")]);
    let host = ToolHost::new().with(add).with_set(set);
    let warned = callsites::warnings_while(|| {
        for _ in 0..3 {
            assert_eq!(host.list().len(), 2);
        }
    });
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].contains("named add"), "{warned:?}");
}
