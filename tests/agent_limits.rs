//! Limits on agents' model calls and runs, under paused time: rate limiters shared by
//! agents (requests and tokens a minute, per model and per user, a provider's 429 pausing
//! everyone), and the running-time and per-user cost budgets.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/callsites.rs"]
mod callsites;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use loomflow::agent::{
    Agent, AgentError, AgentEvent, AgentState, Budget, BudgetCap, Limits, RateLimitMode,
    RateLimiter, RunResult, StopReason,
};
use loomflow::model::{
    BoxFuture, ChunkStream, EchoModel, FinishReason, Model, ModelError, ModelRequest,
    ModelResponse, PriceTable, ScriptedModel, StreamChunk, ToolCall, Usage,
};
use loomflow::prelude::*;
use loomflow::tool::ApprovalDecision;
use tokio::sync::Notify;
use tokio::time::Instant;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Whether `elapsed` is `expected`, give or take the timer's few milliseconds.
fn about(elapsed: Duration, expected: Duration) -> bool {
    elapsed.abs_diff(expected) <= Duration::from_millis(20)
}

fn input_tokens(n: u64) -> Usage {
    Usage {
        input_tokens: n,
        ..Usage::default()
    }
}

fn agent(name: &str, model: impl Model + 'static, limiter: &RateLimiter) -> Agent {
    Agent::builder("You answer.")
        .name(name)
        .model(model)
        .rate_limiter(limiter.clone())
        .build()
        .unwrap()
}

/// `n` one-turn answers, from a model that goes by `gpt-4o`.
fn answers(n: usize) -> ScriptedModel {
    ScriptedModel::new((0..n).map(|i| ModelResponse::text(format!("answer {i}")))).named("gpt-4o")
}

#[tokio::test(start_paused = true)]
async fn two_agents_sharing_a_limiter_share_its_requests_a_minute() {
    let limiter = RateLimiter::new().model("gpt-4o", Limits::new().requests_per_minute(2));
    let writer = agent("writer", answers(2), &limiter);
    let critic = agent("critic", answers(1), &limiter);

    let start = Instant::now();
    writer.run("one").await.unwrap();
    critic.run("two").await.unwrap();
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "the burst lets two through"
    );
    // Two a minute: the third call waits for half a minute's refill.
    let third = writer.run("three").await.unwrap();
    assert_eq!(third.output, "answer 1");
    assert!(about(start.elapsed(), secs(30)), "{:?}", start.elapsed());
}

#[tokio::test(start_paused = true)]
async fn a_call_that_waited_says_so_on_the_stream() {
    let limiter = RateLimiter::new().model("gpt-4o", Limits::new().requests_per_minute(1));
    let agent = agent("a", answers(2), &limiter);
    agent.run("one").await.unwrap();
    let events: Vec<_> = agent.run("two").stream().await.unwrap().collect().await;
    let waits: Vec<(String, u64)> = events
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::RateLimited { model, waited_ms } => Some((model, waited_ms)),
            _ => None,
        })
        .collect();
    let [(model, waited_ms)] = &waits[..] else {
        panic!("one wait: {waits:?}")
    };
    assert_eq!(model, "gpt-4o");
    assert!((59_990..=60_020).contains(waited_ms), "{waited_ms}");
}

/// A call the limiter lets through at once reports no wait (in real time, where looking at
/// the buckets takes a few nanoseconds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_did_not_wait_reports_no_wait() {
    let limiter = RateLimiter::new().model("gpt-4o", Limits::new().requests_per_minute(100));
    let agent = agent("a", answers(1), &limiter);
    let events: Vec<_> = agent.run("one").stream().await.unwrap().collect().await;
    assert!(
        !(events.iter()).any(|e| matches!(e, AgentEvent::RateLimited { .. })),
        "{events:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn each_user_has_buckets_of_their_own() {
    let limiter = RateLimiter::new().per_user(Limits::new().requests_per_minute(1));
    let agent = agent("a", EchoModel::new(), &limiter);
    let start = Instant::now();
    agent.run("first of a").user("a").await.unwrap();
    // a has used their minute; b has not, and is not held up behind a.
    let (a, b) = tokio::join!(
        async {
            agent.run("second of a").user("a").await.unwrap();
            start.elapsed()
        },
        async {
            agent.run("first of b").user("b").await.unwrap();
            start.elapsed()
        },
    );
    assert!(about(a, secs(60)), "{a:?}");
    assert_eq!(b, Duration::ZERO);
    // Runs without a user are not limited per user.
    let free = Instant::now();
    agent.run("anyone").await.unwrap();
    agent.run("anyone again").await.unwrap();
    assert_eq!(free.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_big_reply_spends_the_tokens_a_minute() {
    // 1,000 tokens a minute. The first call is estimated at a few tokens but uses 1,500:
    // the bucket owes 500, which takes half a minute to refill, plus the next estimate.
    let limiter = RateLimiter::new().model("gpt-4o", Limits::new().tokens_per_minute(1_000));
    let model = ScriptedModel::new([
        ModelResponse::text("long").with_usage(input_tokens(1_500)),
        ModelResponse::text("short").with_usage(input_tokens(5)),
    ])
    .named("gpt-4o");
    let agent = agent("a", model, &limiter);
    let start = Instant::now();
    agent.run("hi").await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
    agent.run("hi").await.unwrap();
    let waited = start.elapsed();
    assert!(
        waited >= secs(30) && waited < secs(32),
        "about 30 s and the estimate's refill: {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn failing_fast_is_a_typed_error_that_says_how_long() {
    let limiter = RateLimiter::new()
        .per_user(Limits::new().requests_per_minute(1))
        .mode(RateLimitMode::Fail);
    let agent = agent("support", EchoModel::new(), &limiter);
    agent.run("hi").user("a").await.unwrap();
    let error = agent.run("again").user("a").await.unwrap_err();
    let Error::Agent(AgentError::RateLimited {
        agent: name,
        model,
        user,
        retry_after,
    }) = &error
    else {
        panic!("{error:?}")
    };
    assert_eq!(
        (name.as_str(), model.as_str(), user.as_deref()),
        ("support", "echo", Some("a"))
    );
    assert!(about(*retry_after, secs(60)), "{retry_after:?}");
    assert_eq!(
        error.to_string(),
        "agent support is rate limited on model echo for user a: retry after 60 s"
    );
    // Nothing waited, and another user goes through.
    agent.run("hi").user("b").await.unwrap();
}

/// Answers 429 (retry after `retry_after`) to its first call, then text; says when it was rate
/// limited.
#[derive(Debug)]
struct BusyOnce {
    calls: AtomicUsize,
    limited: Notify,
    retry_after: Duration,
}

impl BusyOnce {
    fn reply(&self) -> Result<ModelResponse, ModelError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            self.limited.notify_one();
            return Err(ModelError::RateLimited {
                provider: "test".into(),
                model: "gpt-4o".into(),
                retry_after: Some(self.retry_after),
                message: "slow down".into(),
            });
        }
        Ok(ModelResponse::text("made it"))
    }
}

impl Model for BusyOnce {
    fn name(&self) -> &str {
        "gpt-4o"
    }

    fn complete(&self, _: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        let reply = self.reply();
        Box::pin(async move { reply })
    }

    fn stream(&self, _: ModelRequest) -> ChunkStream {
        let chunks = match self.reply() {
            Ok(reply) => vec![
                Ok(StreamChunk::Text {
                    text: reply.content,
                }),
                Ok(StreamChunk::Finish {
                    reason: FinishReason::Stop,
                }),
            ],
            Err(error) => vec![Err(error)],
        };
        Box::pin(futures_util::stream::iter(chunks))
    }
}

#[tokio::test(start_paused = true)]
async fn a_providers_429_pauses_every_agent_sharing_the_limiter() {
    let limiter = RateLimiter::new(); // no limits of its own: the provider's 429 is enough
    let busy = Arc::new(BusyOnce {
        calls: AtomicUsize::new(0),
        limited: Notify::new(),
        retry_after: secs(5),
    });
    let first = agent("first", Arc::clone(&busy), &limiter);
    let second = agent("second", answers(1), &limiter);
    let start = Instant::now();
    let first_run = tokio::spawn(async move { first.run("hi").await });
    busy.limited.notified().await;
    assert_eq!(start.elapsed(), Duration::ZERO);
    // The 429 paused gpt-4o for 5 s: the other agent's call waits too.
    let other = second.run("hi").await.unwrap();
    assert_eq!(other.output, "answer 0");
    assert!(about(start.elapsed(), secs(5)), "{:?}", start.elapsed());
    // And the rate-limited run tried again after the pause, and finished.
    let result = first_run.await.unwrap().unwrap();
    assert_eq!(result.output, "made it");
    assert_eq!(busy.calls.load(Ordering::SeqCst), 2);
    assert!(about(start.elapsed(), secs(5)), "{:?}", start.elapsed());
}

/// A `retry-after` past the limiter's `max_pause` (an hourly quota) fails the call with the
/// provider's error, and holds no other run of the model.
#[tokio::test(start_paused = true)]
async fn a_retry_after_longer_than_the_longest_pause_fails_the_call_and_pauses_nobody() {
    let limiter = RateLimiter::new().max_pause(secs(60));
    let busy = Arc::new(BusyOnce {
        calls: AtomicUsize::new(0),
        limited: Notify::new(),
        retry_after: secs(3_600),
    });
    let start = Instant::now();
    let error = agent("first", Arc::clone(&busy), &limiter)
        .run("hi")
        .await
        .unwrap_err();
    assert!(format!("{error:?}").contains("RateLimited"), "{error:?}");
    assert_eq!(busy.calls.load(Ordering::SeqCst), 1, "not tried again");
    let other = agent("second", answers(1), &limiter)
        .run("hi")
        .await
        .unwrap();
    assert_eq!(other.output, "answer 0");
    assert_eq!(start.elapsed(), Duration::ZERO, "nobody waited");
}

/// A reply that reports no usage keeps its estimate in the token buckets: the tokens a
/// minute still pace calls to a server that leaves usage out.
#[tokio::test(start_paused = true)]
async fn a_reply_without_usage_keeps_its_estimate() {
    let limiter = RateLimiter::new().model("gpt-4o", Limits::new().tokens_per_minute(1_000));
    let agent = Agent::builder("You answer.")
        .model(answers(2))
        .max_tokens(600)
        .rate_limiter(limiter)
        .build()
        .unwrap();
    let start = Instant::now();
    agent.run("hi").await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
    // Each call is estimated at over 600 tokens: the second waits for the bucket to refill.
    agent.run("hi").await.unwrap();
    assert!(start.elapsed() >= secs(10), "{:?}", start.elapsed());
}

#[tokio::test(start_paused = true)]
async fn retries_after_a_429_are_bounded() {
    #[derive(Debug)]
    struct AlwaysBusy(AtomicUsize);
    impl Model for AlwaysBusy {
        fn name(&self) -> &str {
            "m"
        }
        fn complete(&self, _: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Box::pin(async {
                Err(ModelError::RateLimited {
                    provider: "test".into(),
                    model: "m".into(),
                    retry_after: None,
                    message: String::new(),
                })
            })
        }
        fn stream(&self, _: ModelRequest) -> ChunkStream {
            Box::pin(futures_util::stream::empty())
        }
    }
    let model = Arc::new(AlwaysBusy(AtomicUsize::new(0)));
    let limiter = RateLimiter::new().retries(3).backoff(secs(2));
    let agent = agent("a", Arc::clone(&model), &limiter);
    let start = Instant::now();
    let error = agent.run("hi").await.unwrap_err();
    assert!(format!("{error:?}").contains("RateLimited"), "{error:?}");
    assert_eq!(model.0.load(Ordering::SeqCst), 4, "the call and 3 retries");
    assert!(about(start.elapsed(), secs(6)), "{:?}", start.elapsed());
}

// --- budgets ---

/// Waits 10 s, then says it is done.
#[tool]
async fn slow_job() -> String {
    tokio::time::sleep(secs(10)).await;
    "done".to_owned()
}

/// Waits 10 s, then says it is done; needs a person's approval first.
#[tool(approval)]
async fn slow_approved_job() -> String {
    tokio::time::sleep(secs(10)).await;
    "done".to_owned()
}

fn call(id: &str, tool: &str) -> ModelResponse {
    ModelResponse::tool_calls(vec![ToolCall::new(id, tool, json!({}))])
}

/// An agent scripted with `replies`, its two slow jobs, durable approvals and a wall-clock
/// cap of `cap`.
fn timed_agent(replies: Vec<ModelResponse>, cap: Duration) -> Agent {
    Agent::builder("You work.")
        .model(ScriptedModel::new(replies))
        .tool(slow_job)
        .tool(slow_approved_job)
        .durable_approvals()
        .budget(Budget::default().max_wall_clock(cap))
        .build()
        .unwrap()
}

/// Lets an hour pass on session `s`, suspended, then allows call `c2` and resumes: the
/// resumed run's result.
async fn approve_after_an_hour(agent: &Agent) -> RunResult {
    tokio::time::advance(secs(3_600)).await;
    agent
        .runtime()
        .decide_approval("s", "c2", ApprovalDecision::Allow)
        .await
        .unwrap();
    agent.resume("s").await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_wall_clock_cap_stops_a_run_at_the_turn_after_it() {
    let agent = Agent::builder("You work.")
        .model(ScriptedModel::new([
            call("c1", "slow_job"),
            call("c2", "slow_job"),
            call("c3", "slow_job"),
            ModelResponse::text("finished"),
        ]))
        .tool(slow_job)
        .budget(Budget::default().max_wall_clock(secs(15)))
        .build()
        .unwrap();
    let result = agent.run("go").session("s").await.unwrap();
    // Turn 2 starts at 10 s, under the cap; turn 3 would start at 20 s.
    assert!(result.interrupted);
    assert_eq!(
        result.reason,
        Some(StopReason::Budget(BudgetCap::WallClock))
    );
    assert_eq!(result.reason.unwrap().to_string(), "budget:wall_clock");
    assert_eq!(result.turns, 2);
    let state: AgentState = agent.runtime().get_state("s").await.unwrap().unwrap();
    assert_eq!(state.running_ms, 20_000);
}

#[tokio::test(start_paused = true)]
async fn the_wall_clock_cap_adds_up_the_legs_of_a_run_but_not_its_suspension() {
    // Leg 1: turn 1 calls a 10 s job, turn 2 a job that needs approval (suspends at 10 s).
    // An hour passes. Leg 2: the approved 10 s job runs (20 s), turn 3 calls another 10 s
    // job (30 s), and the 25 s cap stops the run before turn 4.
    let agent = timed_agent(
        vec![
            call("c1", "slow_job"),
            call("c2", "slow_approved_job"),
            call("c3", "slow_job"),
            ModelResponse::text("finished"),
        ],
        secs(25),
    );
    let first = agent.run("go").session("s").await.unwrap();
    assert_eq!(first.reason, Some(StopReason::Suspended));
    let suspended: AgentState = agent.runtime().get_state("s").await.unwrap().unwrap();
    assert_eq!(suspended.running_ms, 10_000);

    let done = approve_after_an_hour(&agent).await;
    assert_eq!(done.reason, Some(StopReason::Budget(BudgetCap::WallClock)));
    assert_eq!(
        done.turns, 3,
        "the hour suspended did not count; the legs did"
    );
    let state: AgentState = agent.runtime().get_state("s").await.unwrap().unwrap();
    assert_eq!(state.running_ms, 30_000);
}

#[tokio::test(start_paused = true)]
async fn a_tools_step_that_suspends_keeps_the_time_its_finished_calls_ran() {
    // One reply, two calls: a 10 s job runs while the other waits for approval, and the
    // step suspends at 10 s. Resumed, the finished job replays from the journal at once and
    // the approved one runs 10 s: the run ran 20 s, though the first leg's state was lost.
    let agent = timed_agent(
        vec![
            ModelResponse::tool_calls(vec![
                ToolCall::new("c1", "slow_job", json!({})),
                ToolCall::new("c2", "slow_approved_job", json!({})),
            ]),
            ModelResponse::text("finished"),
        ],
        secs(60),
    );
    let first = agent.run("go").session("s").await.unwrap();
    assert_eq!(first.reason, Some(StopReason::Suspended));
    let done = approve_after_an_hour(&agent).await;
    assert_eq!(done.output, "finished");
    let state: AgentState = agent.runtime().get_state("s").await.unwrap().unwrap();
    assert_eq!(state.running_ms, 20_000, "both legs, not the hour between");
}

#[tokio::test(start_paused = true)]
async fn a_per_user_cost_cap_spans_runs_and_leaves_other_users_alone() {
    // $1 per million input tokens; each reply costs $0.60; the cap is $1.
    let model =
        Arc::new(
            ScriptedModel::new((0..3).map(|i| {
                ModelResponse::text(format!("reply {i}")).with_usage(input_tokens(600_000))
            }))
            .named("openai:gpt-4o"),
        );
    let agent = Agent::builder("You help.")
        .model(Arc::clone(&model))
        .prices(PriceTable::new().model("gpt-4o", 1.00, 0.00))
        .budget(Budget::default().max_cost_usd_per_user(1.00))
        .build()
        .unwrap();

    let first = agent.run("one").user("a").await.unwrap();
    let second = agent.run("two").user("a").await.unwrap();
    assert!(
        !first.interrupted && !second.interrupted,
        "$0.60, then $1.20"
    );
    let third = agent.run("three").user("a").await.unwrap();
    assert!(third.interrupted);
    assert_eq!(third.reason, Some(StopReason::Budget(BudgetCap::UserCost)));
    assert_eq!(third.reason.unwrap().to_string(), "budget:user_cost");
    assert_eq!(third.turns, 0, "stopped before calling the model");
    assert_eq!(model.requests().len(), 2);

    let other = agent.run("one").user("b").await.unwrap();
    assert!(!other.interrupted);
    assert_eq!(other.output, "reply 2");
}

/// A model reply is charged to its user once: a run that failed after the reply was
/// journaled, resumed, replays the reply without charging it again.
#[tokio::test(start_paused = true)]
async fn a_replayed_reply_is_not_charged_to_its_user_again() {
    use loomflow::agent::{OnBlock, Verdict, on_output};
    let model = Arc::new(ScriptedModel::new([
        ModelResponse::text("the secret is 42").with_usage(input_tokens(600)),
        ModelResponse::text("hello").with_usage(input_tokens(100)),
    ]));
    let blocked = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&blocked);
    let agent = Agent::builder("You help.")
        .model(Arc::clone(&model))
        .guardrail(on_output("no_secrets", move |text| {
            if text.contains("secret") {
                seen.fetch_add(1, Ordering::SeqCst);
                Verdict::Block("tells a secret".into())
            } else {
                Verdict::Allow
            }
        }))
        .on_guardrail_block(OnBlock::Fail)
        .budget(Budget::default().max_tokens_per_user(1_000))
        .build()
        .unwrap();
    let failed = agent.run("tell me").session("s").user("a").await;
    assert!(failed.is_err(), "{failed:?}");
    let again = agent.resume("s").await;
    assert!(
        again.is_err(),
        "the journaled reply is blocked again: {again:?}"
    );
    assert_eq!(
        model.requests().len(),
        1,
        "the reply was replayed, not asked for again"
    );
    // 600 tokens spent, not 1,200: the user's next run goes ahead.
    let next = agent.run("hi").session("t").user("a").await.unwrap();
    assert_eq!(next.reason, None, "{next:?}");
    assert_eq!(next.output, "hello");
}

/// A cap or a price that is negative or not a number is refused at build, naming it: a NaN
/// cap never stops a run, a negative price makes every run cheaper the more it spends.
#[test]
fn caps_and_prices_that_are_not_zero_or_more_are_refused_at_build() {
    let build = |budget: Budget, prices: PriceTable| {
        Agent::builder("You answer.")
            .name("pricey")
            .model(EchoModel::new())
            .budget(budget)
            .prices(prices)
            .build()
    };
    let error = build(
        Budget::default()
            .max_cost_usd(f64::NAN)
            .max_cost_usd_per_user(-1.0)
            .prices_per_million(-1.0, 2.0),
        PriceTable::new().model("gpt-x", 2.5, f64::INFINITY),
    )
    .unwrap_err();
    let Error::Agent(AgentError::Invalid { agent, problems }) = &error else {
        panic!("{error:?}");
    };
    assert_eq!(agent, "pricey");
    assert_eq!(
        problems,
        &[
            "budget.max_cost_usd must be a number more than zero (not NaN); leave it out for no cap",
            "budget.max_cost_usd_per_user must be a number more than zero (not -1); leave it out \
             for no cap",
            "budget input price must be a number, zero or more (not -1)",
            "the prices of model gpt-x must be numbers, zero or more (input 2.5, output inf)",
        ]
    );
    let fine = Budget::default()
        .max_cost_usd(0.01)
        .prices_per_million(0.0, 15.0);
    assert!(build(fine, PriceTable::new().model("gpt-x", 0.0, 1.0)).is_ok());
}

/// A zero wall-clock cap and a zero answer length, which would stop or fail every run, are
/// refused at build, as a config file refuses them. Before the fix both built.
#[test]
fn a_zero_wall_clock_cap_and_a_zero_answer_length_are_refused_at_build() {
    let refused = Agent::builder("You answer.")
        .name("zeros")
        .model(EchoModel::new())
        .budget(Budget::default().max_wall_clock(Duration::ZERO))
        .max_tokens(0)
        .build();
    let Err(loomflow::Error::Agent(AgentError::Invalid { problems, .. })) = refused else {
        panic!("refused: {refused:?}");
    };
    assert_eq!(
        problems,
        [
            "max_tokens must be at least 1",
            "budget.max_wall_clock must be more than zero",
        ]
    );
}

/// Caps of zero, often meant as "no cap", stop every run before its first model call: they
/// are refused at build, in code and in a config file, as is a run's `max_turns(0)`. Before,
/// each built, and every run stopped at once as if it had spent its budget.
#[tokio::test]
async fn caps_of_zero_are_refused() {
    let refused = Agent::builder("You answer.")
        .name("zeros")
        .model(EchoModel::new())
        .budget(
            Budget::default()
                .max_tokens(0)
                .max_tokens_per_user(0)
                .max_cost_usd(0.0)
                .max_cost_usd_per_user(0.0)
                .prices_per_million(1.0, 1.0),
        )
        .build();
    let Err(loomflow::Error::Agent(AgentError::Invalid { problems, .. })) = refused else {
        panic!("refused: {refused:?}");
    };
    assert_eq!(problems.len(), 4, "{problems:?}");
    for field in [
        "max_tokens",
        "max_tokens_per_user",
        "max_cost_usd ",
        "max_cost_usd_per_user",
    ] {
        let field = format!("budget.{field}");
        assert!(
            problems.iter().any(|p| p.starts_with(field.trim())),
            "{field}: {problems:?}"
        );
    }

    let file = "instructions = \"x\"\n\n[budget]\nmax_cost_usd = 0.0\n";
    let registry = loomflow::agent::ToolRegistry::new();
    let refused = Agent::from_config_str(file, &registry).map(|_| ());
    let text = refused.unwrap_err().to_string();
    assert!(
        text.contains("line 4, column 16: `budget.max_cost_usd`: must be more than zero"),
        "{text}"
    );

    let agent = Agent::builder("You answer.")
        .name("echo")
        .model(EchoModel::new())
        .build()
        .unwrap();
    let refused = agent.run("hi").max_turns(0).await;
    let Err(loomflow::Error::Agent(AgentError::Invalid { agent, problems })) = refused else {
        panic!("refused: {refused:?}");
    };
    assert_eq!(agent, "echo");
    assert_eq!(problems, ["the run's max_turns must be at least 1"]);
}

/// A tool written by hand, known by its spec alone: it answers `null`.
struct Named(loomflow::tool::ToolSpec);

impl loomflow::tool::Tool for Named {
    fn spec(&self) -> &loomflow::tool::ToolSpec {
        &self.0
    }
    fn call<'a>(
        &'a self,
        _arguments: serde_json::Value,
        _ctx: &'a loomflow::tool::ToolContext,
    ) -> loomflow::graph::BoxFuture<'a, Result<serde_json::Value, loomflow::tool::ToolError>> {
        Box::pin(async { Ok(serde_json::Value::Null) })
    }
}

/// A tool written by hand whose name providers refuse (a dot, too long) is refused when the
/// agent is built, naming it and what it would be: every model call would fail otherwise.
#[test]
fn a_tool_name_providers_refuse_is_refused_at_build() {
    let spec =
        |name: &str| loomflow::tool::ToolSpec::new(name, "reads", json!({ "type": "object" }));
    let error = Agent::builder("You read.")
        .name("reader")
        .model(EchoModel::new())
        .tool(Named(spec("files.read")))
        .tool(Named(spec("fine_name")))
        .build()
        .unwrap_err();
    let Error::Agent(AgentError::Invalid { problems, .. }) = &error else {
        panic!("{error:?}");
    };
    assert_eq!(
        problems,
        &[
            "tool \"files.read\" has a name model providers refuse: 1 to 64 letters, digits, _ and - \
           (`files_read` would be)"
        ]
    );
}

/// An output schema whose name providers refuse (OpenAI's schema name, Anthropic's output
/// tool) is refused when the agent is built, as a tool's is; so is one named as one of the
/// agent's tools, whose calls would read as the answer. A type's long name is cut to 64.
#[test]
fn an_output_schema_name_providers_refuse_is_refused_at_build() {
    #[derive(serde::Deserialize)]
    struct Verdict {}
    let schema = || json!({"type": "object", "properties": {}});
    let problems = |builder: loomflow::agent::AgentBuilder| {
        let error = builder.build().unwrap_err();
        let Error::Agent(AgentError::Invalid { problems, .. }) = error else {
            panic!("{error:?}");
        };
        problems
    };
    let agent = || {
        Agent::builder("You judge.")
            .name("judge")
            .model(EchoModel::new())
    };
    assert_eq!(
        problems(agent().output_schema::<Verdict>("refund verdict", schema())),
        [
            "output schema \"refund verdict\" has a name model providers refuse: 1 to 64 \
             letters, digits, _ and - (`refund_verdict` would be)"
        ]
    );
    let tool = Named(loomflow::tool::ToolSpec::new(
        "verdict",
        "looks up a verdict",
        json!({ "type": "object" }),
    ));
    assert_eq!(
        problems(
            agent()
                .tool(tool)
                .output_schema::<Verdict>("verdict", schema())
        ),
        [
            "output schema \"verdict\" has the name of one of the agent's tools: name one or \
             the other otherwise"
        ]
    );
    assert!(
        agent()
            .output_schema::<Verdict>("verdict", schema())
            .build()
            .is_ok()
    );
    // The memory tools the agent is given count: before, `recall` passed build and every
    // run failed at its first turn.
    let memory = loomflow::memory::SqliteMemory::in_memory().unwrap();
    let with_memory_tools = || {
        agent()
            .memory(memory.clone())
            .memory_options(loomflow::memory::MemoryOptions::default().with_tools(true))
    };
    assert_eq!(
        problems(with_memory_tools().output_schema::<Verdict>("recall", schema())),
        [
            "output schema \"recall\" has the name of one of the agent's tools (a memory tool: \
             turn them off with MemoryOptions::with_tools(false)): name one or the other \
             otherwise"
        ]
    );
    assert!(
        agent()
            .memory(memory.clone())
            .output_schema::<Verdict>("recall", schema())
            .build()
            .is_ok(),
        "without the memory tools, the name is free"
    );
}

/// An output schema named as one of the tools a turn offers, which `build()` could not see
/// (a run's own output, a tool added after build), fails the run when its turn is asked
/// for, naming the schema, before any model call: the tool's calls would read as the answer.
#[tokio::test]
async fn an_output_schema_named_as_a_later_tool_fails_the_run_naming_it() {
    #[derive(serde::Deserialize, JsonSchema)]
    #[allow(dead_code)] // only its schema is used
    struct Verdict {
        approved: bool,
    }
    let named = |name: &str| {
        Named(loomflow::tool::ToolSpec::new(
            name,
            "looks up a verdict",
            json!({ "type": "object" }),
        ))
    };
    let clash = |result: loomflow::Result<RunResult>, name: &str| {
        // The model node failed with the agent's typed error, naming the schema.
        let error = result.unwrap_err();
        let debug = format!("{error:?}");
        let expected = format!("OutputNamedAsTool {{ agent: \"judge\", schema: {name:?} }}");
        assert!(debug.contains(&expected), "{debug}");
        let said = format!(
            "agent judge: output schema {name:?} has the name of one of the run's tools: name \
             one or the other otherwise"
        );
        let mut source: Option<&dyn std::error::Error> = Some(&error);
        while let Some(error) = source.filter(|e| e.to_string() != said) {
            source = error.source();
        }
        assert!(source.is_some(), "{error}");
    };
    let model = Arc::new(ScriptedModel::new([ModelResponse::text("{}")]));
    let agent = Agent::builder("You judge.")
        .name("judge")
        .model(Arc::clone(&model))
        .tool(named("Verdict"))
        .build()
        .unwrap();
    clash(agent.run("order 7?").output::<Verdict>().await, "Verdict");

    let agent = Agent::builder("You judge.")
        .name("judge")
        .model(Arc::clone(&model))
        .output_schema::<serde_json::Value>("verdict", json!({"type": "object"}))
        .build()
        .unwrap();
    agent.add_tool(named("verdict"));
    clash(agent.run("order 8?").await, "verdict");
    assert!(model.requests().is_empty(), "no model call was made");
}

/// A cost cap with nothing to price tokens is refused at build: every run would cost
/// nothing, and the cap would never stop one. A price anywhere (the budget's, the agent's
/// table) makes it a cap.
#[test]
fn a_cost_cap_without_prices_is_refused_at_build() {
    let build = |budget: Budget, prices: PriceTable| {
        Agent::builder("You answer.")
            .name("capped")
            .model(EchoModel::new())
            .budget(budget)
            .prices(prices)
            .build()
    };
    for budget in [
        Budget::default().max_cost_usd(0.5),
        Budget::default().max_cost_usd_per_user(5.0),
    ] {
        let error = build(budget.clone(), PriceTable::new())
            .unwrap_err()
            .to_string();
        assert!(error.contains("nothing prices tokens"), "{error}");
        let table = PriceTable::new().model("gpt-x", 2.5, 10.0);
        assert!(build(budget.clone(), table).is_ok());
        assert!(build(budget.prices_per_million(3.0, 15.0), PriceTable::new()).is_ok());
    }
}

/// A model whose streamed reply shows a word, then reports a rate limit.
#[derive(Debug, Default)]
struct LimitedMidStream {
    calls: AtomicUsize,
}

impl Model for LimitedMidStream {
    fn name(&self) -> &str {
        "gpt-4o"
    }

    fn complete(&self, _: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        Box::pin(async { Ok(ModelResponse::text("unused")) })
    }

    fn stream(&self, _: ModelRequest) -> ChunkStream {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let limited = ModelError::RateLimited {
            provider: "test".into(),
            model: "gpt-4o".into(),
            retry_after: Some(secs(1)),
            message: "slow down".into(),
        };
        let text = StreamChunk::Text {
            text: "Partial ".into(),
        };
        Box::pin(futures_util::stream::iter([Ok(text), Err(limited)]))
    }
}

/// A rate limit reported inside a reply some of which the listener was shown is the
/// stream's error: the call is not tried again, so the listener never sees a second reply
/// after the first's beginning.
#[tokio::test(start_paused = true)]
async fn a_rate_limit_after_part_of_a_streamed_reply_is_not_retried() {
    let model = Arc::new(LimitedMidStream::default());
    let agent = agent("streamed", Arc::clone(&model), &RateLimiter::new());
    let mut stream = agent.run("hi").stream().await.unwrap();
    let mut shown = String::new();
    while let Some(event) = stream.next().await {
        if let AgentEvent::ModelChunk {
            chunk: StreamChunk::Text { text },
        } = event
        {
            shown.push_str(&text);
        }
    }
    assert_eq!(shown, "Partial ", "shown once");
    assert_eq!(model.calls.load(Ordering::SeqCst), 1, "not tried again");
    let error = stream.outcome().await.unwrap_err();
    assert!(format!("{error:?}").contains("rate_limited"), "{error:?}");
}

/// A prompt the run stops on before its first model turn (the user's budget spent) is
/// checked by the input guardrails all the same: what the session keeps of it is the
/// redacted prompt, which a later run sends. Before its fix the budget stopped the run
/// before the guardrail was asked, and the raw prompt stayed in the transcript.
#[tokio::test]
async fn a_prompt_stopped_by_the_budget_is_still_checked() {
    use loomflow::agent::{Verdict, on_input};
    let agent = Agent::builder("You answer.")
        .name("redacting")
        .model(ScriptedModel::new([
            ModelResponse::text("noted").with_usage(input_tokens(600))
        ]))
        .guardrail(on_input("no_cards", |text: &str| {
            if text.contains("4111") {
                Verdict::Rewrite(text.replace("4111 1111 1111 1111", "[card]"))
            } else {
                Verdict::Allow
            }
        }))
        .budget(Budget::default().max_tokens_per_user(500))
        .build()
        .unwrap();
    agent.run("hello").session("s").user("ann").await.unwrap();
    let stopped = agent
        .run("my card is 4111 1111 1111 1111")
        .session("s")
        .user("ann")
        .await
        .unwrap();
    assert!(
        matches!(stopped.reason, Some(StopReason::Budget(_))),
        "{stopped:?}"
    );
    let state: AgentState = agent.runtime().get_state("s").await.unwrap().unwrap();
    let texts: Vec<&str> = state.messages.iter().map(|m| m.text()).collect();
    assert!(
        texts.iter().all(|t| !t.contains("4111")),
        "the raw prompt stays: {texts:?}"
    );
    assert!(texts.contains(&"my card is [card]"), "{texts:?}");
}

/// A cost cap whose prices have none for the agent's model is not refused (the model a
/// provider reports may be priced), but building says so: otherwise the cap would stop
/// nothing, silently.
#[test]
fn a_cost_cap_without_a_price_for_the_model_is_warned_of() {
    let build = |prices: PriceTable| {
        Agent::builder("You answer.")
            .name("capped")
            .model(EchoModel::new())
            .budget(Budget::default().max_cost_usd(0.5))
            .prices(prices)
            .build()
            .unwrap()
    };
    // Another test's thread may meet the warning's callsite first, with no subscriber.
    let warned = callsites::warnings_while(|| {
        build(PriceTable::new().model("gpt-4o", 2.5, 10.0));
    });
    assert!(
        warned
            .iter()
            .any(|w| w.contains("caps a cost") && w.contains("echo")),
        "{warned:?}"
    );
}

/// An agent with a tool that needs approval and nobody to ask denies every call of it (it
/// fails closed): building it says so, naming the tool, so that the first sign is not a
/// run whose every order was refused.
#[test]
fn a_tool_that_needs_approval_without_an_approver_is_warned_of() {
    let build = |durable: bool| {
        let builder = Agent::builder("You run jobs.")
            .name("jobs")
            .model(EchoModel::new())
            .tool(slow_approved_job)
            .runtime(Runtime::in_memory());
        let builder = if durable {
            builder.durable_approvals()
        } else {
            builder
        };
        builder.build().unwrap()
    };
    let warned = callsites::warnings_while(|| {
        build(false);
    });
    let named = |w: &String| w.contains("nobody to ask") && w.contains("slow_approved_job");
    assert!(warned.iter().any(named), "{warned:?}");
    let warned = callsites::warnings_while(|| {
        build(true);
    });
    assert!(!warned.iter().any(named), "{warned:?}");
}
