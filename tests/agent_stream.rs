//! Agents: streaming keeps the rules of `run` (turn-taking, the timeout), and the host's
//! concurrency limit holds for an agent's tool calls.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use loomflow::agent::{Agent, AgentError, AgentEvent};
use loomflow::model::{
    ChunkStream, FinishReason, Model, ModelError, ModelRequest, ModelResponse, ScriptedModel,
    StreamChunk, ToolCall,
};
use loomflow::prelude::*;
use loomflow::tool::{ToolError, ToolSpec};

/// A model that never answers.
#[derive(Debug)]
struct Silent;

impl Model for Silent {
    fn name(&self) -> &str {
        "silent"
    }
    fn complete(&self, _: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        Box::pin(std::future::pending())
    }
    fn stream(&self, _: ModelRequest) -> ChunkStream {
        Box::pin(futures_util::stream::pending())
    }
}

#[tokio::test(start_paused = true)]
async fn a_streamed_run_times_out_like_a_run() {
    let agent = Agent::builder("slow")
        .model(Silent)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let mut stream = agent.run("hello").session("s").stream().await.unwrap();
    let mut last = None;
    while let Some(event) = stream.next().await {
        last = Some(event);
    }
    let last = last.unwrap();
    assert!(
        matches!(&last, AgentEvent::Failed { message } if message.contains("timed out")),
        "{last:?}"
    );
    let error = stream.outcome().await.unwrap_err();
    assert!(
        matches!(error, Error::Agent(AgentError::Timeout { .. })),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_streamed_run_waits_for_the_sessions_turn() {
    let agent = Agent::builder("echo")
        .model(ScriptedModel::new([
            ModelResponse::text("first"),
            ModelResponse::text("second"),
        ]))
        .build()
        .unwrap();
    // The first run holds the session's turn until its stream is drained.
    let first = agent.run("one").session("s").stream().await.unwrap();
    let second = tokio::spawn({
        let agent = agent.clone();
        async move {
            agent
                .run("two")
                .session("s")
                .stream()
                .await
                .unwrap()
                .outcome()
                .await
                .unwrap()
        }
    });
    let first = first.outcome().await.unwrap();
    let second = second.await.unwrap();
    assert_eq!(
        (first.output.as_str(), second.output.as_str()),
        ("first", "second")
    );
    // The second run continued the session: it saw the first exchange.
    assert_eq!(second.messages.len(), 4, "{:?}", second.messages);
}

/// A tool that records how many of its calls run at once.
struct Slow {
    spec: ToolSpec,
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

impl Tool for Slow {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call<'a>(
        &'a self,
        _: serde_json::Value,
        _: &'a ToolContext,
    ) -> BoxFuture<'a, Result<serde_json::Value, ToolError>> {
        Box::pin(async move {
            let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(10)).await;
            self.running.fetch_sub(1, Ordering::SeqCst);
            Ok(json!("done"))
        })
    }
}

#[tokio::test(start_paused = true)]
async fn an_agents_tool_calls_keep_the_hosts_concurrency_limit() {
    let most = Arc::new(AtomicUsize::new(0));
    let slow = Slow {
        spec: ToolSpec::new("slow", "Takes a while.", json!({ "type": "object" })),
        running: Arc::new(AtomicUsize::new(0)),
        most: Arc::clone(&most),
    };
    let calls = (0..4)
        .map(|i| ToolCall::new(format!("c{i}"), "slow", json!({})))
        .collect();
    let agent = Agent::builder("a")
        .model(ScriptedModel::new([
            ModelResponse::tool_calls(calls),
            ModelResponse::text("all done"),
        ]))
        .tools(ToolHost::new().with(slow).max_concurrency(2))
        .build()
        .unwrap();
    let result = agent.run("go").await.unwrap();
    assert_eq!(result.output, "all done");
    assert_eq!(
        most.load(Ordering::SeqCst),
        2,
        "two at a time, as the host allows"
    );
}

/// A model whose streamed reply is 1,000 chunks, made only as they are read; counts them.
#[derive(Debug, Default)]
struct Chatty {
    made: Arc<AtomicUsize>,
}

impl Model for Chatty {
    fn name(&self) -> &str {
        "chatty"
    }
    fn complete(&self, _: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        Box::pin(async { Ok(ModelResponse::text("unused")) })
    }
    fn stream(&self, _: ModelRequest) -> ChunkStream {
        let made = Arc::clone(&self.made);
        let text = futures_util::stream::iter(0..1_000).map(move |i| {
            made.fetch_add(1, Ordering::SeqCst);
            Ok(StreamChunk::Text {
                text: format!("{i} "),
            })
        });
        let finish = futures_util::stream::iter([Ok(StreamChunk::Finish {
            reason: FinishReason::Stop,
        })]);
        Box::pin(text.chain(finish))
    }
}

#[tokio::test]
async fn a_slow_reader_holds_the_run_back_instead_of_letting_events_pile_up() {
    let model = Chatty::default();
    let made = Arc::clone(&model.made);
    let agent = Agent::builder("a").model(model).build().unwrap();
    let mut stream = agent.run("talk").stream_capacity(8).stream().await.unwrap();
    let first = stream.next().await.unwrap();
    assert_eq!(
        first,
        AgentEvent::NodeStarted {
            node: "model".into()
        }
    );
    // The reader stops reading for a while: the model is not read ahead of it by more than
    // the two buffers (the agent's and the graph's) hold.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let ahead = made.load(Ordering::SeqCst);
    assert!(
        ahead <= 2 * 8 + 2,
        "{ahead} chunks made for a reader that took one event"
    );
    // Read on: every chunk arrives, in order, then the end.
    let mut chunks = 0;
    let mut last = None;
    while let Some(event) = stream.next().await {
        if let AgentEvent::ModelChunk {
            chunk: StreamChunk::Text { text },
        } = &event
        {
            assert_eq!(*text, format!("{chunks} "));
            chunks += 1;
        }
        last = Some(event);
    }
    assert_eq!(chunks, 1_000);
    assert_eq!(last, Some(AgentEvent::Done));
    assert_eq!(stream.outcome().await.unwrap().output.len(), 3_890);
}

/// A cancel asked while the model's chunks wait for a slow reader ends the wait: the
/// model's answer is read to its end without the reader, and the run is over (completed
/// with that step, its last) with the stream still unread. Before its fix the run waited
/// for the reader, and stayed running for as long as nobody read.
#[tokio::test]
async fn a_cancel_reaches_a_run_whose_chunks_wait_for_the_reader() {
    use loomflow::runtime::RunState;
    let model = Chatty::default();
    let made = Arc::clone(&model.made);
    let agent = Agent::builder("a").model(model).build().unwrap();
    let runtime = agent.runtime().clone();
    let mut stream = agent
        .run("talk")
        .session("held")
        .stream_capacity(4)
        .stream()
        .await
        .unwrap();
    stream.next().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        made.load(Ordering::SeqCst) < 100,
        "the reader holds the model back"
    );
    runtime.cancel("held").await.unwrap();
    let mut record = runtime.run("held").await.unwrap().record;
    for _ in 0..100 {
        if record.state != RunState::Running {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        record = runtime.run("held").await.unwrap().record;
    }
    assert!(
        matches!(record.state, RunState::Completed | RunState::Cancelled),
        "the run went on waiting for its reader: {record:?}"
    );
    assert_eq!(made.load(Ordering::SeqCst), 1_000);
    drop(stream);
}

/// Refund an order. Moves money.
#[tool(approval)]
fn refund(order: String) -> String {
    format!("refunded {order}")
}

/// Whatever becomes of a run, its stream ends with `Done` or `Failed`: a run that suspends
/// for an approval ends with its interrupt, then `Done`; a run refused because another
/// execution holds the session ends with `Failed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_run_always_ends_with_done_or_failed() {
    let runtime = Runtime::in_memory();
    let call = ToolCall::new("call_1", "refund", json!({ "order": "ord_1" }));
    let agent = |runtime: &Runtime| {
        Agent::builder("You refund.")
            .model(ScriptedModel::new(vec![ModelResponse::tool_calls(vec![
                call.clone(),
            ])]))
            .tool(refund)
            .durable_approvals()
            .runtime(runtime.clone())
            .build()
            .unwrap()
    };
    let asking = agent(&runtime);
    let mut stream = asking
        .run("refund ord_1")
        .session("s")
        .stream()
        .await
        .unwrap();
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event);
    }
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::Interrupted { .. })),
        "{events:?}"
    );
    assert_eq!(events.last(), Some(&AgentEvent::Done), "{events:?}");
    assert!(stream.outcome().await.unwrap().interrupted);

    // A session whose run another execution holds: refused at its claim.
    let held = runtime
        .store()
        .claim("b", "someone else", u64::MAX / 4, 1)
        .await
        .unwrap();
    assert_eq!(held, loomflow::runtime::Claim::Claimed);
    let mut stream = asking.run("hello").session("b").stream().await.unwrap();
    let mut last = None;
    while let Some(event) = stream.next().await {
        last = Some(event);
    }
    assert!(matches!(&last, Some(AgentEvent::Failed { .. })), "{last:?}");
    assert!(stream.outcome().await.is_err());
}

/// Look an order up. Reads only.
#[tool]
fn lookup(order: String) -> String {
    format!("{order}: paid")
}

/// A run carried on after an approval streams the results of the calls it runs, not again
/// those of calls that finished before it suspended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_does_not_stream_a_journaled_result_again() {
    let runtime = Runtime::in_memory();
    let calls = vec![
        ToolCall::new("call_a", "lookup", json!({ "order": "ord_1" })),
        ToolCall::new("call_b", "refund", json!({ "order": "ord_1" })),
    ];
    let agent = Agent::builder("You refund.")
        .model(ScriptedModel::new(vec![
            ModelResponse::tool_calls(calls),
            ModelResponse::text("refunded"),
        ]))
        .tool(lookup)
        .tool(refund)
        .durable_approvals()
        .runtime(runtime.clone())
        .build()
        .unwrap();
    let results = |events: &[AgentEvent]| -> Vec<String> {
        let ids = events.iter().filter_map(|e| match e {
            AgentEvent::ToolResult { id, .. } => Some(id.clone()),
            _ => None,
        });
        ids.collect()
    };
    let mut stream = agent
        .run("refund ord_1")
        .session("s")
        .stream()
        .await
        .unwrap();
    let mut first = Vec::new();
    while let Some(event) = stream.next().await {
        first.push(event);
    }
    assert_eq!(results(&first), ["call_a"]);
    runtime
        .decide_approval("s", "call_b", loomflow::tool::ApprovalDecision::Allow)
        .await
        .unwrap();
    let mut again = agent.graph().recover(&runtime, "s").stream();
    let mut second = Vec::new();
    while let Some(event) = again.next().await {
        second.extend(AgentEvent::from_event(&event));
    }
    assert_eq!(results(&second), ["call_b"]);
}

/// Starts a job that reports its progress later, from a task of its own.
#[tool]
async fn start_job(ctx: &loomflow::tool::ToolContext, job: String) -> String {
    let later = ctx.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(60)).await;
        later.emit("progress", 100);
    });
    format!("{job} started")
}

/// A tool's context cloned into a task that outlives the run keeps nothing open: the
/// stream ends with the run, its outcome comes, and the session takes its next prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_kept_past_the_run_does_not_hold_its_stream_open() {
    let agent = Agent::builder("You start jobs.")
        .model(ScriptedModel::new(vec![
            ModelResponse::tool_calls(vec![ToolCall::new(
                "call_1",
                "start_job",
                json!({ "job": "backup" }),
            )]),
            ModelResponse::text("the backup is under way"),
            ModelResponse::text("still under way"),
        ]))
        .tool(start_job)
        .build()
        .unwrap();
    let run = async {
        let mut stream = agent.run("back up").session("s").stream().await.unwrap();
        let mut done = false;
        while let Some(event) = stream.next().await {
            done |= matches!(event, AgentEvent::Done);
        }
        assert!(done);
        stream.outcome().await.unwrap();
        agent.run("and now?").session("s").await.unwrap()
    };
    let next = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the stream ended with its run");
    assert_eq!(next.output, "still under way");
}

/// A streamed run that fails ends with the agent's own error, as its outcome gives it: not
/// the failure of the agent's loop node wrapping it.
#[tokio::test]
async fn a_streamed_failure_reads_as_the_outcome_does() {
    let agent = Agent::builder("typed")
        .model(ScriptedModel::new(
            (0..3).map(|_| ModelResponse::text("no json here")),
        ))
        .output_schema::<serde_json::Value>(
            "answer",
            serde_json::json!({ "type": "object", "required": ["n"] }),
        )
        .max_schema_retries(1)
        .build()
        .unwrap();
    let mut stream = agent.run("?").session("s").stream().await.unwrap();
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event);
    }
    let failures: Vec<_> = events
        .iter()
        .filter(|event| matches!(event, AgentEvent::Failed { .. }))
        .collect();
    assert_eq!(failures.len(), 1, "{events:?}");
    let error = stream.outcome().await.unwrap_err();
    assert!(
        matches!(error, Error::Agent(AgentError::OutputSchema { .. })),
        "{error:?}"
    );
    let expected = AgentEvent::Failed {
        message: loomflow::ErrorChain(&error).to_string(),
    };
    assert_eq!(events.last(), Some(&expected));
    let AgentEvent::Failed { message } = &expected else {
        unreachable!()
    };
    assert!(!message.contains("node model failed"), "{message}");
}
