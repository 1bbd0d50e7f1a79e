//! `agent_turn`: the ReAct loop's own overhead per turn (DESIGN.md §5 budget: ≤ 20 µs).
//!
//! Two workloads on the in-memory runtime: `EchoModel` with one trivial tool registered (one
//! model turn per run), and a model that calls the trivial tool on every turn but the last
//! (ten model turns per run, nine of them followed by a tool step).
//! The summary lines print µs per turn.

#![allow(clippy::expect_used, clippy::unwrap_used)] // benchmarks abort loudly on setup errors

use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use loomflow::agent::Agent;
use loomflow::model::{
    ChunkStream, EchoModel, Message, Model, ModelError, ModelRequest, ModelResponse, ToolCall,
};
use loomflow::prelude::*;
use loomflow::tool::{Tool, ToolContext, ToolError, ToolSpec};

struct Noop(ToolSpec);

impl Tool for Noop {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    fn call<'a>(
        &'a self,
        _: serde_json::Value,
        _: &'a ToolContext,
    ) -> BoxFuture<'a, Result<serde_json::Value, ToolError>> {
        Box::pin(async { Ok(serde_json::Value::Bool(true)) })
    }
}

fn noop() -> Noop {
    Noop(ToolSpec::new(
        "noop",
        "Does nothing.",
        json!({ "type": "object" }),
    ))
}

/// Calls `noop` until the conversation holds `turns - 1` tool results, then answers.
#[derive(Debug)]
struct Looping {
    turns: usize,
}

impl Model for Looping {
    fn name(&self) -> &str {
        "looping"
    }
    fn complete(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        let done = request
            .messages
            .iter()
            .filter(|m| matches!(m, Message::Tool { .. }))
            .count();
        let response = if done + 1 < self.turns {
            ModelResponse::tool_calls(vec![ToolCall::new(format!("c{done}"), "noop", json!({}))])
        } else {
            ModelResponse::text("done")
        };
        Box::pin(async move { Ok(response) })
    }
    fn stream(&self, request: ModelRequest) -> ChunkStream {
        EchoModel::new().stream(request)
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let echo = Agent::builder("echo")
        .model(EchoModel::new())
        .tool(noop())
        .build()
        .unwrap();
    let looping = Agent::builder("loop")
        .model(Looping { turns: 10 })
        .tool(noop())
        .build()
        .unwrap();

    c.bench_function("agent_turn/echo_one_turn", |b| {
        b.to_async(&rt).iter(|| async {
            let result = echo.run("hi").await.unwrap();
            assert_eq!(result.turns, 1);
        });
    });
    c.bench_function("agent_turn/ten_turns_with_tool_calls", |b| {
        b.to_async(&rt).iter(|| async {
            let result = looping.run("go").await.unwrap();
            assert_eq!(result.turns, 10);
        });
    });

    let runs = 2_000u32;
    let started = Instant::now();
    rt.block_on(async {
        for _ in 0..runs {
            echo.run("hi").await.unwrap();
        }
    });
    let echo_us = started.elapsed().as_secs_f64() * 1e6 / f64::from(runs);
    let started = Instant::now();
    rt.block_on(async {
        for _ in 0..runs / 10 {
            looping.run("go").await.unwrap();
        }
    });
    let loop_us = started.elapsed().as_secs_f64() * 1e6 / f64::from(runs);
    println!(
        "agent_turn: echo {echo_us:.1} µs per one-turn run; tool loop {loop_us:.1} µs per turn (budget 20), memory runtime, checkpoint per step"
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
