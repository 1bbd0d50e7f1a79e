//! Context management: past a token threshold the conversation is snipped or compacted
//! before the model turn, and no tool result ever loses its call.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::collections::HashSet;
use std::sync::Arc;

use loomflow::agent::{Agent, AgentState, ContextPolicy};
use loomflow::model::{Message, ModelRequest, ModelResponse, ScriptedModel, ToolCall};
use loomflow::prelude::*;
use loomflow::tool::{Tool, ToolContext, ToolError, ToolSpec};
use serde_json::Value;

/// Returns a long page for any query.
struct Fetch(ToolSpec);

impl Fetch {
    fn new() -> Self {
        Self(ToolSpec::new(
            "fetch",
            "Fetches a page",
            json!({ "type": "object" }),
        ))
    }
}

impl Tool for Fetch {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    fn call<'a>(
        &'a self,
        args: Value,
        _: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move {
            Ok(json!(format!(
                "page {}: {}",
                args["page"],
                "lorem ipsum ".repeat(40)
            )))
        })
    }
}

fn fetch_call(n: u32) -> ModelResponse {
    ModelResponse::tool_calls(vec![ToolCall::new(
        format!("c{n}"),
        "fetch",
        json!({ "page": n }),
    )])
}

/// Every tool result in a request follows the assistant message that called it.
fn assert_no_orphans(request: &ModelRequest) {
    let mut called = HashSet::new();
    for message in &request.messages {
        for call in message.tool_calls() {
            called.insert(call.id.clone());
        }
        if let Message::Tool(result) = message {
            assert!(
                called.contains(&result.call_id),
                "orphaned result {}: {:?}",
                result.call_id,
                request.messages
            );
        }
    }
}

#[tokio::test]
async fn a_long_tool_loop_is_snipped_to_its_question_and_latest_exchanges() {
    let mut script: Vec<_> = (1..=8).map(fetch_call).collect();
    script.push(ModelResponse::text("Done reading."));
    let model = Arc::new(ScriptedModel::new(script));
    let agent = Agent::builder("You read pages.")
        .model(Arc::clone(&model))
        .tool(Fetch::new())
        .context_policy(ContextPolicy::snip().above_tokens(300).keep_recent(2))
        .build()
        .unwrap();
    let result = agent.run("Read pages 1 to 8.").await.unwrap();
    assert_eq!(result.output, "Done reading.");
    let requests = model.requests();
    assert_eq!(requests.len(), 9);
    for request in &requests {
        assert_no_orphans(request);
        // system prompt, the question, then what was kept
        assert_eq!(request.messages[0].text(), "You read pages.");
        assert_eq!(request.messages[1].text(), "Read pages 1 to 8.");
    }
    let last = &requests[8].messages;
    assert_eq!(
        last.len(),
        2 + 4,
        "the question and two exchanges of call + result: {last:?}"
    );
    assert!(last[5].text().starts_with("page 8"), "{last:?}");
    // The checkpointed conversation is the trimmed one: it does not grow without bound.
    assert!(result.messages.len() <= 7, "{}", result.messages.len());
}

#[tokio::test]
async fn a_compaction_summarizes_the_older_part_in_one_journaled_call() {
    let db = loomflow_tests::TempDb::new("context-compact");
    let runtime = Runtime::sqlite(db.path()).unwrap();
    let summarizer = Arc::new(ScriptedModel::new([ModelResponse::text(
        "The user wants pages 1-4 read; pages 1 and 2 were about lorem ipsum.",
    )]));
    // The main model reads two pages, then its script runs out: the run fails after the
    // compaction was journaled, at the turn it was made for.
    let model = Arc::new(ScriptedModel::new([fetch_call(1), fetch_call(2)]));
    let policy = ContextPolicy::compact()
        .above_tokens(250)
        .keep_recent(1)
        .summarizer(Arc::clone(&summarizer));
    let agent = Agent::builder("You read pages.")
        .model(Arc::clone(&model))
        .tool(Fetch::new())
        .context_policy(policy.clone())
        .runtime(runtime.clone())
        .build()
        .unwrap();
    assert!(agent.run("Read pages 1 to 4.").session("s").await.is_err());
    assert_eq!(summarizer.requests().len(), 1, "one summary");
    let asked = &summarizer.requests()[0].messages[1];
    assert!(
        asked.text().contains("page 1:"),
        "the summary is of the older part: {asked:?}"
    );
    let sent = &model.requests()[2].messages;
    assert_no_orphans(&model.requests()[2]);
    assert_eq!(
        sent[1].text(),
        "[Summary of the earlier conversation]\nThe user wants pages 1-4 read; pages 1 and 2 were about lorem ipsum."
    );

    // Another process carries the run on: the summary is read back from the journal, not
    // asked for again, and the run finishes.
    let model = Arc::new(ScriptedModel::new([ModelResponse::text("All read.")]));
    let again = Agent::builder("You read pages.")
        .model(Arc::clone(&model))
        .tool(Fetch::new())
        .context_policy(policy)
        .runtime(Runtime::sqlite(db.path()).unwrap())
        .build()
        .unwrap();
    let result = again.resume("s").await.unwrap();
    assert_eq!(result.output, "All read.");
    assert_eq!(
        summarizer.requests().len(),
        1,
        "the summary was not asked for again"
    );
    assert!(
        result.messages[0]
            .text()
            .starts_with("[Summary of the earlier conversation]")
    );
    let state: AgentState = runtime.get_state("s").await.unwrap().unwrap();
    assert_eq!(state.messages, result.messages);
}

#[tokio::test]
async fn a_summary_that_fails_leaves_the_conversation_whole() {
    let model = Arc::new(ScriptedModel::new([
        fetch_call(1),
        fetch_call(2),
        ModelResponse::text("ok"),
    ]));
    let agent = Agent::builder("You read pages.")
        .model(Arc::clone(&model))
        .tool(Fetch::new())
        .context_policy(
            ContextPolicy::compact()
                .above_tokens(100)
                .keep_recent(1)
                .summarizer(ScriptedModel::new([])),
        )
        .build()
        .unwrap();
    let result = agent.run("Read two pages.").await.unwrap();
    assert_eq!(result.output, "ok");
    assert_eq!(
        model.requests()[2].messages.len(),
        1 + 5,
        "nothing was compacted"
    );
}

#[tokio::test]
async fn a_long_session_is_trimmed_when_the_next_run_starts() {
    let replies = (0..6).map(|i| ModelResponse::text(format!("answer {i} {}", "x".repeat(200))));
    let model = Arc::new(ScriptedModel::new(replies));
    let agent = Agent::builder("You chat.")
        .model(Arc::clone(&model))
        .context_policy(ContextPolicy::snip().above_tokens(200).keep_recent(3))
        .build()
        .unwrap();
    for i in 0..6 {
        agent
            .run(format!("question {i}"))
            .session("chat")
            .await
            .unwrap();
    }
    let last = &model.requests()[5].messages;
    // Untrimmed it would be the system prompt and 11 messages; the earlier runs were
    // snipped to their last three exchanges whenever they passed 200 tokens.
    assert_eq!(last.len(), 1 + 5, "{last:?}");
    assert_eq!(last[1].text(), "question 3");
    assert_eq!(last[5].text(), "question 5");
    for request in model.requests() {
        let tokens: usize = request
            .messages
            .iter()
            .map(|m| m.text().len())
            .sum::<usize>()
            / 4;
        assert!(tokens <= 200 + 60, "{tokens} tokens sent");
    }
}

#[tokio::test]
async fn a_snipped_conversation_starts_with_a_user_message() {
    let replies = ["first answer", "second answer"]
        .map(|r| ModelResponse::text(format!("{r} {}", "x".repeat(400))));
    let model = Arc::new(ScriptedModel::new(replies));
    let agent = Agent::builder("You chat.")
        .model(Arc::clone(&model))
        .context_policy(ContextPolicy::snip().above_tokens(50).keep_recent(2))
        .build()
        .unwrap();
    agent.run("first question").session("s").await.unwrap();
    agent.run("second question").session("s").await.unwrap();
    // The last two exchanges would be the first answer and the second question: the cut
    // moves on, so that no provider is sent a conversation that opens with its own words.
    let sent = &model.requests()[1].messages;
    let texts: Vec<&str> = sent.iter().map(Message::text).collect();
    assert_eq!(texts, ["You chat.", "second question"]);
}

#[tokio::test]
async fn a_compaction_neither_summarizes_the_question_it_keeps_nor_its_own_summary_again() {
    let summarizer = Arc::new(ScriptedModel::new([
        ModelResponse::text("Pages 1 was lorem ipsum."),
        ModelResponse::text("A summary of the summary."),
    ]));
    let model = ScriptedModel::new([
        fetch_call(1),
        fetch_call(2),
        fetch_call(3),
        ModelResponse::text("Done."),
    ]);
    let agent = Agent::builder("You read pages.")
        .model(model)
        .tool(Fetch::new())
        .context_policy(
            ContextPolicy::compact()
                .above_tokens(100)
                .keep_recent(2)
                .summarizer(Arc::clone(&summarizer)),
        )
        .build()
        .unwrap();
    let result = agent.run("Read pages 1 to 3.").await.unwrap();
    assert_eq!(result.output, "Done.");
    let asked = summarizer.requests();
    assert_eq!(asked.len(), 1, "the summary alone is not summarized again");
    let transcript = asked[0].messages[1].text();
    assert!(transcript.contains("page 1:"), "{transcript}");
    assert!(
        !transcript.contains("Read pages 1 to 3."),
        "the question is kept word for word, not summarized: {transcript}"
    );
    assert_eq!(result.messages[1].text(), "Read pages 1 to 3.");
}

/// A summary's call is one of the run's model calls: its tokens count in the run's usage
/// (and so against its token budget), and the agent's rate limiter paces it.
#[tokio::test(start_paused = true)]
async fn a_compactions_call_is_counted_and_paced_as_the_agents_others() {
    use loomflow::agent::{Limits, RateLimiter};
    use loomflow::model::Usage;
    let used = |input_tokens: u64| Usage {
        input_tokens,
        ..Usage::default()
    };
    let model = Arc::new(
        ScriptedModel::new([
            fetch_call(1).with_usage(used(10)),
            fetch_call(2).with_usage(used(10)),
            ModelResponse::text("A summary of pages 1 and 2.").with_usage(used(1_000)),
            ModelResponse::text("All read.").with_usage(used(10)),
        ])
        .named("m"),
    );
    let limiter = RateLimiter::new().model("m", Limits::new().requests_per_minute(1));
    let agent = Agent::builder("You read pages.")
        .model(Arc::clone(&model))
        .tool(Fetch::new())
        .rate_limiter(limiter)
        .context_policy(ContextPolicy::compact().above_tokens(250).keep_recent(1))
        .build()
        .unwrap();
    let start = tokio::time::Instant::now();
    let result = agent.run("Read pages 1 and 2.").await.unwrap();
    assert_eq!(result.output, "All read.");
    assert_eq!(model.requests().len(), 4, "three turns and a summary");
    assert!(
        result.messages[0]
            .text()
            .contains("A summary of pages 1 and 2."),
        "{:?}",
        result.messages
    );
    assert_eq!(
        result.usage.input_tokens, 1_030,
        "the summary's tokens count"
    );
    // One call a minute: at 0, 60, 120 and 180 s.
    assert_eq!(start.elapsed(), std::time::Duration::from_secs(180));
}

/// A summary that spends what was left of the run's token budget stops the run before
/// another model call, with the budget as the reason.
#[tokio::test]
async fn a_summary_that_spends_the_budget_stops_the_run_before_the_next_call() {
    use loomflow::agent::{Budget, BudgetCap, StopReason};
    use loomflow::model::Usage;
    let used = |input_tokens: u64| Usage {
        input_tokens,
        ..Usage::default()
    };
    let model = Arc::new(ScriptedModel::new([
        fetch_call(1).with_usage(used(10)),
        fetch_call(2).with_usage(used(10)),
        ModelResponse::text("A summary of pages 1 and 2.").with_usage(used(1_000)),
        ModelResponse::text("All read.").with_usage(used(10)),
    ]));
    let agent = Agent::builder("You read pages.")
        .model(Arc::clone(&model))
        .tool(Fetch::new())
        .budget(Budget::default().max_tokens(500))
        .context_policy(ContextPolicy::compact().above_tokens(250).keep_recent(1))
        .build()
        .unwrap();
    let result = agent.run("Read pages 1 and 2.").await.unwrap();
    assert_eq!(model.requests().len(), 3, "two turns and the summary");
    assert_eq!(result.reason, Some(StopReason::Budget(BudgetCap::Tokens)));
    assert_eq!(result.usage.input_tokens, 1_020);
}

/// A rate limiter that fails at once refuses a summary the way it refuses the agent's own
/// calls: the run fails with the limiter's error, naming the summarizer's model.
#[tokio::test(start_paused = true)]
async fn a_summary_refused_by_a_failing_rate_limiter_fails_the_run() {
    use loomflow::agent::{AgentError, Limits, RateLimitMode, RateLimiter};
    let model = Arc::new(ScriptedModel::new([
        fetch_call(1),
        fetch_call(2),
        ModelResponse::text("All read."),
        fetch_call(1),
        fetch_call(2),
    ]));
    let summarizer = Arc::new(
        ScriptedModel::new([
            ModelResponse::text("A summary."),
            ModelResponse::text("Another summary."),
        ])
        .named("s"),
    );
    let limiter = RateLimiter::new()
        .model("s", Limits::new().requests_per_minute(1))
        .mode(RateLimitMode::Fail);
    let agent = Agent::builder("You read pages.")
        .model(Arc::clone(&model))
        .tool(Fetch::new())
        .rate_limiter(limiter)
        .context_policy(
            ContextPolicy::compact()
                .above_tokens(250)
                .keep_recent(1)
                .summarizer(Arc::clone(&summarizer)),
        )
        .build()
        .unwrap();
    let first = agent.run("Read pages 1 and 2.").session("a").await.unwrap();
    assert_eq!(first.output, "All read.");
    let error = agent
        .run("Read pages 1 and 2.")
        .session("b")
        .await
        .unwrap_err();
    let text = format!("{error:?}");
    assert!(
        matches!(&error, Error::Agent(AgentError::RateLimited { model, .. }) if model == "s"),
        "{text}"
    );
    assert_eq!(
        summarizer.requests().len(),
        1,
        "the second summary was refused"
    );
}
