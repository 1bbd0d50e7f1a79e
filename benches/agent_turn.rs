//! `agent_turn`: the ReAct loop's own overhead per turn (DESIGN.md §5 budget: ≤ 20 µs).
//!
//! Two workloads on the in-memory runtime: `EchoModel` with one trivial tool registered (one
//! model turn per run), and a model that calls the trivial tool on every turn but the last
//! (ten model turns per run, nine of them followed by a tool step).
//! The summary lines print µs per turn.
//!
//! `agent_turn_growth: <ratio> (turn 200 <x> µs, turn 1 <y> µs)`: whether a turn's overhead
//! grows with the conversation. A model that calls the trivial tool on each of its first 200
//! calls, then answers, stamps the time each call starts; the loop's overhead of turn `k` is
//! the gap between calls `k` and `k + 1` (the model and the tool do nothing else, and the
//! model counts its own calls rather than reading the conversation). Each turn's figure is
//! the median over runs; the ratio is turn 200's over turn 1's. `agent_turn_memory` prints
//! the heap a run leaves held in the in-memory store (every checkpoint kept: the allocator
//! counts live bytes before the run and after it, with the agent and its runtime alive),
//! after 100 and after 200 turns: linear growth doubles it, quadratic growth quadruples it.
//! Beside it, what those checkpoints weigh as JSON, as a durable store writes them.

#![allow(clippy::expect_used, clippy::unwrap_used)] // benchmarks abort loudly on setup errors

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cap::Cap;
use criterion::{Criterion, criterion_group, criterion_main};
use loomflow::agent::Agent;
use loomflow::model::{
    ChunkStream, EchoModel, Message, Model, ModelError, ModelRequest, ModelResponse, ToolCall,
};
use loomflow::prelude::*;
use loomflow::runtime::MemoryStore;
use loomflow::tool::{Tool, ToolContext, ToolError, ToolSpec};

/// The system allocator, counting the bytes held (for `agent_turn_memory`).
#[global_allocator]
static ALLOCATOR: Cap<std::alloc::System> = Cap::new(std::alloc::System, usize::MAX);

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

/// What a [`Stamped`] model shares with the bench.
#[derive(Debug, Default)]
struct Stamps {
    /// How many of a run's calls ask for the tool; the next one answers.
    tool_turns: AtomicUsize,
    /// Calls so far in this run.
    calls: AtomicUsize,
    /// When each call started.
    at: Mutex<Vec<Instant>>,
    /// When each tool call started.
    tool_at: Mutex<Vec<Instant>>,
}

impl Stamps {
    fn new(tool_turns: usize) -> Arc<Self> {
        let stamps = Self::default();
        stamps.tool_turns.store(tool_turns, Ordering::Relaxed);
        Arc::new(stamps)
    }

    /// Ready for a new run.
    fn reset(&self) {
        self.calls.store(0, Ordering::Relaxed);
        let mut at = self.at.lock().unwrap();
        at.clear();
        at.reserve(self.tool_turns.load(Ordering::Relaxed) + 1);
        let mut tool_at = self.tool_at.lock().unwrap();
        tool_at.clear();
        tool_at.reserve(self.tool_turns.load(Ordering::Relaxed));
    }

    /// The gaps between calls, in µs: `[k - 1]` is turn `k`'s.
    fn gaps(&self) -> Vec<f64> {
        let at = self.at.lock().unwrap();
        at.windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64() * 1e6)
            .collect()
    }

    /// Turn `k`'s gap split at the tool call, in µs: (model call to tool call, tool call to
    /// the next model call).
    fn halves(&self) -> Vec<(f64, f64)> {
        let (at, tool_at) = (self.at.lock().unwrap(), self.tool_at.lock().unwrap());
        at.windows(2)
            .zip(tool_at.iter())
            .map(|(w, &tool)| {
                (
                    (tool - w[0]).as_secs_f64() * 1e6,
                    (w[1] - tool).as_secs_f64() * 1e6,
                )
            })
            .collect()
    }
}

/// The trivial tool, stamping the time each call starts.
struct StampedNoop(ToolSpec, Arc<Stamps>);

impl Tool for StampedNoop {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    fn call<'a>(
        &'a self,
        _: serde_json::Value,
        _: &'a ToolContext,
    ) -> BoxFuture<'a, Result<serde_json::Value, ToolError>> {
        self.1.tool_at.lock().unwrap().push(Instant::now());
        Box::pin(async { Ok(serde_json::Value::Bool(true)) })
    }
}

/// Calls `noop` on each of a run's first `tool_turns` calls, then answers; constant work
/// per call, whatever the conversation's length.
#[derive(Debug)]
struct Stamped(Arc<Stamps>);

impl Model for Stamped {
    fn name(&self) -> &str {
        "stamped"
    }
    fn complete(&self, _: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, ModelError>> {
        let now = Instant::now();
        let call = self.0.calls.fetch_add(1, Ordering::Relaxed);
        self.0.at.lock().unwrap().push(now);
        let response = if call < self.0.tool_turns.load(Ordering::Relaxed) {
            ModelResponse::tool_calls(vec![ToolCall::new(format!("c{call}"), "noop", json!({}))])
        } else {
            ModelResponse::text("done")
        };
        Box::pin(async move { Ok(response) })
    }
    fn stream(&self, request: ModelRequest) -> ChunkStream {
        EchoModel::new().stream(request)
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The `agent_turn_growth` and `agent_turn_memory` lines.
fn growth(rt: &tokio::runtime::Runtime) -> Vec<String> {
    const TURNS: usize = 200;
    let (warm, runs) = (3, 30);
    let stamps = Stamps::new(TURNS);
    let mut by_turn: Vec<Vec<f64>> = vec![Vec::new(); TURNS];
    let mut split: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); TURNS];
    for run in 0..warm + runs {
        // A new agent, hence a new in-memory runtime, for each run: runs do not share a store.
        let agent = Agent::builder("grow")
            .model(Stamped(Arc::clone(&stamps)))
            .tool(StampedNoop(noop().0, Arc::clone(&stamps)))
            .max_turns(TURNS as u32 + 1)
            .build()
            .unwrap();
        stamps.reset();
        let result = rt.block_on(async { agent.run("go").await.unwrap() });
        assert_eq!(result.turns as usize, TURNS + 1);
        if run >= warm {
            for (turn, gap) in by_turn.iter_mut().zip(stamps.gaps()) {
                turn.push(gap);
            }
            for ((to_tool, to_model), (a, b)) in split.iter_mut().zip(stamps.halves()) {
                to_tool.push(a);
                to_model.push(b);
            }
        }
    }
    let medians: Vec<f64> = by_turn.iter_mut().map(|gaps| median(gaps)).collect();
    let (first, last) = (medians[0], medians[TURNS - 1]);
    let mean = |turns: &[f64]| turns.iter().sum::<f64>() / turns.len() as f64;
    let all = mean(&medians);
    let mut halves = |turn: usize| {
        let (to_tool, to_model) = &mut split[turn - 1];
        format!(
            "turn {turn} {:.1} + {:.1}",
            median(to_tool),
            median(to_model)
        )
    };
    let halves = [halves(1), halves(2), halves(TURNS)].join(", ");

    // Memory: the checkpoints a run leaves, every one kept.
    let bytes = |turns: usize| {
        let before = ALLOCATOR.allocated();
        let stamps = Stamps::new(turns);
        let agent = Agent::builder("memory")
            .model(Stamped(Arc::clone(&stamps)))
            .tool(noop())
            .max_turns(turns as u32 + 1)
            .runtime(Runtime::with_store(MemoryStore::with_retention(None)))
            .build()
            .unwrap();
        stamps.reset();
        rt.block_on(async {
            let session = format!("memory-{turns}");
            agent.run("go").session(session.clone()).await.unwrap();
            let held = ALLOCATOR.allocated().saturating_sub(before);
            let sizes: Vec<usize> = agent
                .list_checkpoints(&session)
                .await
                .unwrap()
                .iter()
                .map(|cp| serde_json::to_string(&cp.body).unwrap().len())
                .collect();
            (
                sizes.iter().sum::<usize>(),
                sizes.len(),
                sizes.last().copied().unwrap_or_default(),
                held,
            )
        })
    };
    let (half, full) = (bytes(TURNS / 2), bytes(TURNS));
    let kib = |b: usize| b as f64 / 1024.0;
    vec![
        format!(
            "agent_turn_growth: {:.2} (turn {TURNS} {last:.1} µs, turn 1 {first:.1} µs)",
            last / first
        ),
        format!(
            "agent_turn_growth detail: medians over {runs} runs of {TURNS} tool turns; turn 2 {:.1} µs (turn {TURNS} over turn 2: {:.2}), turns 1-10 {:.1} µs, 91-100 {:.1} µs, 191-200 {:.1} µs; mean over all {TURNS} turns {all:.1} µs; split at the tool call (model call to tool call + tool call to next model call, µs): {halves}",
            medians[1],
            last / medians[1],
            mean(&medians[..10]),
            mean(&medians[90..100]),
            mean(&medians[TURNS - 10..]),
        ),
        format!(
            "agent_turn_memory: heap a run holds, every checkpoint kept: {} turns {:.0} KiB, {TURNS} turns {:.0} KiB: ×{:.2} for twice the turns (linear 2, quadratic 4)",
            TURNS / 2,
            kib(half.3),
            kib(full.3),
            full.3 as f64 / half.3 as f64,
        ),
        format!(
            "agent_turn_memory detail: the same checkpoints as JSON, as a durable store writes them whole: {} turns {:.0} KiB in {} checkpoints (the last {:.1} KiB), {TURNS} turns {:.0} KiB in {} (the last {:.1} KiB): ×{:.1}",
            TURNS / 2,
            kib(half.0),
            half.1,
            kib(half.2),
            kib(full.0),
            full.1,
            kib(full.2),
            full.0 as f64 / half.0 as f64,
        ),
    ]
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
    for line in growth(&rt) {
        println!("{line}");
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
