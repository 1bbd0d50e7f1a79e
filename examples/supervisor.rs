//! A supervisor delegates to a researcher and a writer until the task is done.
//!
//! ```text
//! cargo run --example supervisor              # scripted models, no API key needed
//! cargo run --example supervisor -- --mermaid # the team's diagram
//! ```

use futures_util::StreamExt;
use loomflow::EventKind;
use loomflow::agent::Agent;
use loomflow::architecture::{Supervisor, TeamState};
use loomflow::model::{ModelResponse, ScriptedModel};
use loomflow::prelude::*;

const HELP: &str = "\
supervisor: a supervisor agent delegates to a researcher and a writer until the task is
done (scripted models, no API key needed); prints the team's events and the result.

Usage: cargo run --example supervisor [-- OPTIONS]

Options:
  --mermaid   print the team's Mermaid diagram instead of running it
  -h, --help  print this help
";

fn scripted(name: &str, instructions: &str, replies: &[&str]) -> loomflow::Result<Agent> {
    Agent::builder(instructions)
        .name(name)
        .model(ScriptedModel::new(
            replies.iter().map(|r| ModelResponse::text(*r)),
        ))
        .build()
}

#[tokio::main]
async fn main() -> loomflow::Result<()> {
    if std::env::args().skip(1).any(|a| a == "--help" || a == "-h") {
        print!("{HELP}");
        return Ok(());
    }
    let boss = scripted(
        "supervisor",
        "You run a small newsroom.",
        &[
            "researcher: find two surprising facts about paperclips",
            "writer: write two sentences using the facts",
            "FINISH: The paperclip was patented in 1867, and Norwegians wore them as a symbol of resistance in 1940.",
        ],
    )?;
    let researcher = scripted(
        "researcher",
        "You find facts.",
        &["1) First patent: 1867 (Samuel Fay). 2) Worn in Norway in 1940 as a sign of resistance."],
    )?;
    let writer = scripted(
        "writer",
        "You write clearly.",
        &[
            "The paperclip was patented in 1867. In 1940 Norwegians wore them as a symbol of resistance.",
        ],
    )?;
    let team = Supervisor::new(boss)
        .worker("researcher", "finds facts", researcher)
        .worker("writer", "writes prose", writer)
        .build()?;

    if std::env::args().any(|a| a == "--mermaid") {
        print!("{}", team.to_mermaid());
        return Ok(());
    }

    let runtime = Runtime::in_memory();
    let mut run = team.stream(
        &runtime,
        "newsroom-1",
        TeamState::new("A short note on paperclips"),
    );
    while let Some(event) = run.next().await {
        if let (EventKind::NodeEnd, Some(node)) = (&event.kind, &event.node)
            && !node.contains('/')
        {
            println!("step {:>2}: {node} done", event.step);
        }
    }
    let team_state = run.outcome().await?.completed()?;
    println!("\npath: {}", team_state.path.join(" → "));
    for message in team_state.messages.iter().skip(1) {
        println!("  {}", message.text());
    }
    println!("\nanswer: {}", team_state.output.unwrap_or_default());
    Ok(())
}
