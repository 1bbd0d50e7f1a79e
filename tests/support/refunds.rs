//! A refund agent whose one tool waits for approval: the run the HTTP and inbox tests decide.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};

use loomflow::agent::Agent;
use loomflow::model::{ModelResponse, ScriptedModel, ToolCall};
use loomflow::prelude::*;

/// How many refunds this test binary's agents made.
pub(crate) static REFUNDS: AtomicUsize = AtomicUsize::new(0);

/// Refund an order. Moves money.
#[tool(approval)]
pub(crate) fn refund(order: String, cents: u64) -> String {
    REFUNDS.fetch_add(1, Ordering::SeqCst);
    format!("refunded {cents} cents on {order}")
}

/// The refund agent on `runtime`, answering with `replies`, its approvals durable.
pub(crate) fn agent(runtime: &Runtime, replies: Vec<ModelResponse>) -> Agent {
    Agent::builder("You handle refunds.")
        .name("refunds")
        .model(ScriptedModel::new(replies))
        .tool(refund)
        .durable_approvals()
        .runtime(runtime.clone())
        .build()
        .unwrap_or_else(|e| panic!("refund agent: {e}"))
}

/// The call that refunds `cents` on order `ord_42`, as the model asks for it.
pub(crate) fn call(cents: u64) -> ToolCall {
    ToolCall::new(
        "call_1",
        "refund",
        json!({ "order": "ord_42", "cents": cents }),
    )
}

/// Runs the refund agent on `session` until it suspends on approving the refund of `cents`.
pub(crate) async fn ask_for_refund(runtime: &Runtime, session: &str, cents: u64) {
    let replies = vec![ModelResponse::tool_calls(vec![call(cents)])];
    let asked = agent(runtime, replies)
        .run("refund")
        .session(session)
        .await
        .unwrap_or_else(|e| panic!("{session}: {e}"));
    assert!(
        asked.interrupted,
        "{session}: the refund waits for approval"
    );
}
