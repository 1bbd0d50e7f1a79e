//! An agent whose tools come from an MCP server: the reference filesystem server from npm.
//!
//! ```text
//! .ci/mcp/install.sh                                    # once: installs the server
//! cargo run --example mcp_tools                         # scripted model, no API key needed
//! cargo run --example mcp_tools -- --base-url http://127.0.0.1:18080/v1 --model smollm2
//! ```
//!
//! The server is started as a child process over stdio and given one scratch directory. Its
//! tools reach the model with their own schemas; writing is destructive (the server says so),
//! so the permission policy asks, and an approver allows writes inside the scratch directory
//! only.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use loomflow::agent::Agent;
use loomflow::model::{Model, ModelResponse, OpenAiModel, ScriptedModel, ToolCall};
use loomflow::prelude::*;
use loomflow::tool::mcp::McpServer;
use loomflow::tool::{ApprovalDecision, Permission, PermissionPolicy, approver_fn};
use tokio::process::Command;

const HELP: &str = "\
mcp_tools: an agent writes and reads a note with the tools of the MCP filesystem server
(@modelcontextprotocol/server-filesystem, installed by .ci/mcp/install.sh).

Usage: cargo run --example mcp_tools [-- OPTIONS]

Options:
  --base-url URL  an OpenAI-compatible server (up to /v1) instead of the scripted model
  --model NAME    the model to ask on that server (default: smollm2)
  -h, --help      print this help

Environment:
  LOOMFLOW_MCP_DIR  where the npm servers are installed (default: .ci/mcp)
";

fn scripted(note: &Path) -> ScriptedModel {
    ScriptedModel::new([
        ModelResponse::tool_calls(vec![ToolCall::new(
            "call_1",
            "fs_write_file",
            json!({ "path": note, "content": "- milk\n- eggs\n- coffee\n" }),
        )]),
        ModelResponse::tool_calls(vec![ToolCall::new(
            "call_2",
            "fs_read_text_file",
            json!({ "path": note }),
        )]),
        ModelResponse::text("Your shopping list is saved: milk, eggs and coffee."),
    ])
}

fn model_from_args(args: &[String], note: &Path) -> loomflow::Result<Arc<dyn Model>> {
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
        None => Ok(Arc::new(scripted(note))),
    }
}

/// The filesystem server's entry point, if it is installed.
fn filesystem_server() -> Option<PathBuf> {
    let dir = std::env::var_os("LOOMFLOW_MCP_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/mcp"),
        PathBuf::from,
    );
    let script = dir.join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    script.exists().then_some(script)
}

#[tokio::main]
async fn main() -> loomflow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{HELP}");
        return Ok(());
    }
    let Some(server) = filesystem_server() else {
        println!(
            "mcp_tools: the MCP filesystem server is not installed; run .ci/mcp/install.sh \
             (needs node and npm), or set LOOMFLOW_MCP_DIR to where it is installed"
        );
        return Ok(());
    };
    let scratch = std::env::temp_dir().join(format!("loomflow-mcp-example-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(Error::custom)?;
    let scratch = scratch.canonicalize().map_err(Error::custom)?;
    let note = scratch.join("shopping.md");

    let mut command = Command::new("node");
    command.arg(&server).arg(&scratch);
    let files = McpServer::builder("files")
        .tool_prefix("fs_")
        .stdio(command)
        .await
        .map_err(Error::custom)?;
    println!(
        "connected to {} with {} tools",
        files.name(),
        files.specs().len()
    );

    let inside = scratch.clone();
    let tools = ToolHost::new()
        .with_set(files.clone())
        .permissions(PermissionPolicy::allow_all().destructive(Permission::Ask))
        .approval_handler(approver_fn(move |request| {
            let inside = inside.clone();
            async move {
                let path = request.arguments["path"].as_str().unwrap_or_default();
                let allowed = Path::new(path).starts_with(&inside);
                println!(
                    "[approver] {} on {path}: {}",
                    request.tool,
                    if allowed { "allowed" } else { "denied" }
                );
                Ok(if allowed {
                    ApprovalDecision::Allow
                } else {
                    ApprovalDecision::deny("only the scratch directory may be written")
                })
            }
        }));
    let agent = Agent::builder(format!(
        "You keep the user's notes as files in {}.",
        scratch.display()
    ))
    .name("notes")
    .model(model_from_args(&args, &note)?)
    .tools(tools)
    .max_turns(6)
    .build()?;

    let result = agent
        .run("Save my shopping list (milk, eggs, coffee) and read it back to me.")
        .await?;
    for message in &result.messages {
        println!("{:>9}: {}", format!("{:?}", message.role()), message.text());
        for call in message.tool_calls() {
            println!("{:>9}  -> {}({})", "", call.name, call.arguments);
        }
    }
    println!("\noutput: {}", result.output);
    files.close().await;
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}
