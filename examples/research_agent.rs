//! An agent with tools and one approval.
//!
//! ```text
//! cargo run --example research_agent                    # scripted model, no API key needed
//! cargo run --example research_agent -- --base-url http://127.0.0.1:18080/v1 --model smollm2
//! cargo run --example research_agent -- --mermaid       # the agent's loop as a diagram
//! ```
//!
//! The agent searches, takes notes, and publishes a summary. Publishing needs a person's
//! approval: the run parks on it, a second task plays the reviewer, sees the exact pending
//! call, and approves it.

use std::sync::Arc;

use loomflow::agent::{Agent, Budget};
use loomflow::model::{Model, ModelResponse, OpenAiModel, ScriptedModel, ToolCall};
use loomflow::prelude::*;
use loomflow::tool::{ApprovalDecision, SignalApprover};

const HELP: &str = "\
research_agent: an agent searches, takes notes and publishes a summary; publishing needs a
person's approval, which a second task gives after seeing the exact pending call.

Usage: cargo run --example research_agent [-- OPTIONS]

Options:
  --base-url URL  an OpenAI-compatible server (up to /v1) instead of the scripted model
  --model NAME    the model to ask on that server (default: smollm2)
  --mermaid       print the agent's loop as a Mermaid diagram instead of running it
  -h, --help      print this help
";

/// Search the web and return the most relevant snippets.
#[tool(param(query = "What to search for"))]
async fn search(query: String) -> Vec<String> {
    vec![
        format!("{query}: the first paperclip patent was filed in 1867"),
        format!("{query}: Norwegians wore paperclips as a sign of resistance in 1940"),
    ]
}

/// Publish a summary to the team's wiki. A person approves each call.
#[tool(
    approval,
    destructive,
    param(title = "The page title", body = "The page text")
)]
async fn publish(title: String, body: String, ctx: &ToolContext) -> String {
    format!(
        "published \"{title}\" ({} characters) for {}",
        body.len(),
        ctx.session
    )
}

fn scripted() -> ScriptedModel {
    ScriptedModel::new([
        ModelResponse::tool_calls(vec![ToolCall::new(
            "call_1",
            "search",
            json!({ "query": "paperclip history" }),
        )]),
        ModelResponse::tool_calls(vec![ToolCall::new(
            "call_2",
            "publish",
            json!({ "title": "Paperclips", "body": "Patented in 1867; a symbol of resistance in 1940." }),
        )]),
        ModelResponse::text("Published a two-line history of the paperclip."),
    ])
}

fn model_from_args(args: &[String]) -> loomflow::Result<Arc<dyn Model>> {
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
    };
    match value("--base-url") {
        Some(base) => {
            let name = value("--model").map_or("smollm2", String::as_str);
            Ok(Arc::new(OpenAiModel::builder(name).base_url(base).build()?))
        }
        None => Ok(Arc::new(scripted())),
    }
}

#[tokio::main]
async fn main() -> loomflow::Result<()> {
    if std::env::args().skip(1).any(|a| a == "--help" || a == "-h") {
        print!("{HELP}");
        return Ok(());
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = Runtime::in_memory();
    let tools = ToolHost::new()
        .with(search)
        .with(publish)
        .approval_handler(SignalApprover::new().timeout(Duration::from_secs(60)));
    let agent =
        Agent::builder("You research a topic, then publish a short summary with the publish tool.")
            .name("researcher")
            .model(model_from_args(&args)?)
            .tools(tools)
            .runtime(runtime.clone())
            .max_turns(6)
            .budget(Budget::default().max_tokens(50_000))
            .build()?;

    if args.iter().any(|a| a == "--mermaid") {
        print!("{}", agent.generate_graph());
        return Ok(());
    }

    // The reviewer: waits until a call is pending, shows it, approves it.
    let reviewer = {
        let runtime = runtime.clone();
        tokio::spawn(async move {
            loop {
                if let Some(call) = runtime
                    .pending_approvals("research-1")
                    .await?
                    .into_iter()
                    .next()
                {
                    println!(
                        "[reviewer] {} wants to run {} with {}",
                        call.session, call.tool, call.arguments
                    );
                    println!("[reviewer] approved");
                    return runtime
                        .decide_approval("research-1", &call.call_id, ApprovalDecision::Allow)
                        .await;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };

    let result = agent
        .run("Write up the history of the paperclip.")
        .session("research-1")
        .user("ada")
        .await?;
    reviewer.abort();
    for message in &result.messages {
        println!("{:>9}: {}", format!("{:?}", message.role()), message.text());
        for call in message.tool_calls() {
            println!("{:>9}  -> {}({})", "", call.name, call.arguments);
        }
    }
    println!("\noutput: {}", result.output);
    println!(
        "turns: {}, tokens: {}, interrupted: {}",
        result.turns,
        result.usage.total_tokens(),
        result.interrupted
    );
    Ok(())
}
