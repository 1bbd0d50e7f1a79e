//! Tools: `#[tool]` functions, their schemas (plain and OpenAI-strict), a host that runs a
//! model turn's calls, a bad call, a denied call, and a call approved through a signal.
//!
//! Run with `cargo run --example tools`.

use loomflow::model::ToolCall;
use loomflow::prelude::*;
use loomflow::tool::{
    ApprovalDecision, DispatchContext, HookDecision, Permission, PermissionPolicy, SignalApprover,
    ToolOutcome,
};

const HELP: &str = "\
tools: #[tool] functions and their schemas (plain and OpenAI-strict), a host running a model
turn's calls, a bad call, a denied call, and a call approved through a signal.

Usage: cargo run --example tools [-- OPTIONS]

Options:
  -h, --help  print this help
";

/// Get the weather forecast for a city.
#[tool(param(city = "The city, e.g. Lyon", days = "Days ahead, 1 to 7"))]
async fn weather(city: String, days: Option<u8>) -> String {
    format!("{city}: sunny for the next {} day(s)", days.unwrap_or(1))
}

/// A money transfer.
#[derive(Deserialize, JsonSchema)]
struct Transfer {
    /// Amount in cents.
    amount_cents: u64,
    /// The destination account.
    to: String,
    /// A note for the recipient.
    note: Option<String>,
}

/// Send money to an account. Every call needs a person's approval.
#[tool(approval, destructive)]
fn transfer(args: Transfer, ctx: &ToolContext) -> Result<String, String> {
    if args.amount_cents == 0 {
        return Err("nothing to send".into());
    }
    Ok(format!(
        "sent {} cents to {} ({}) for {}",
        args.amount_cents,
        args.to,
        args.note.unwrap_or_default(),
        ctx.user.as_deref().unwrap_or("nobody")
    ))
}

/// Delete a file.
#[tool(destructive)]
fn delete_file(path: String) -> String {
    format!("deleted {path}")
}

fn show(title: &str, outcomes: &[ToolOutcome]) {
    println!("\n== {title}");
    for outcome in outcomes {
        let mark = if outcome.is_error { "error" } else { "ok" };
        println!(
            "  {} {} [{mark}]: {}",
            outcome.call_id, outcome.name, outcome.content
        );
    }
}

#[tokio::main]
async fn main() -> loomflow::Result<()> {
    if std::env::args().skip(1).any(|a| a == "--help" || a == "-h") {
        print!("{HELP}");
        return Ok(());
    }
    let runtime = Runtime::in_memory();
    let host = ToolHost::new()
        .with(weather)
        .with(transfer)
        .with(delete_file)
        .max_concurrency(4)
        .timeout(Duration::from_secs(30))
        .permissions(PermissionPolicy::allow_all().router(|user, spec, _args| {
            (user == Some("guest") && spec.destructive)
                .then(|| Permission::Deny("guests may not change anything".into()))
        }))
        .approval_handler(SignalApprover::new().timeout(Duration::from_secs(60)))
        .before_tool(|call| async move {
            if call.arguments["path"] == "/" {
                HookDecision::Deny("refusing to touch /".into())
            } else {
                HookDecision::Continue
            }
        })
        .after_tool(|result| async move {
            println!(
                "  (audit) {} -> error: {}",
                result.call.tool, result.is_error
            );
            Ok::<(), String>(())
        });

    for spec in host.list() {
        println!("== tool {}: {}", spec.name, spec.description);
        println!(
            "plain:  {}",
            serde_json::to_string_pretty(&spec.parameters).unwrap_or_default()
        );
        println!("strict: {}", spec.strict_parameters());
    }

    let as_ada = DispatchContext::new("session-1")
        .user(Some("ada"))
        .runtime(&runtime);

    let good = [
        ToolCall::new("c1", "weather", json!({ "city": "Lyon", "days": 3 })),
        ToolCall::new("c2", "weather", json!({ "city": "Oslo" })),
        ToolCall::new("c3", "delete_file", json!({ "path": "/tmp/old.log" })),
    ];
    show(
        "good calls, run side by side",
        &host.dispatch(&good, as_ada).await?,
    );

    let bad = [
        ToolCall::new("c4", "weather", json!({ "city": 42 })),
        ToolCall::new("c5", "weather", json!({})),
        ToolCall::new("c6", "forecast", json!({ "city": "Lyon" })),
        ToolCall::new("c7", "weather", json!("{not json")),
    ];
    show(
        "bad calls become results the model can read",
        &host.dispatch(&bad, as_ada).await?,
    );

    let as_guest = DispatchContext::new("session-2")
        .user(Some("guest"))
        .runtime(&runtime);
    let denied = [ToolCall::new(
        "c8",
        "delete_file",
        json!({ "path": "/tmp/x" }),
    )];
    show(
        "denied by the per-user policy",
        &host.dispatch(&denied, as_guest).await?,
    );
    let hooked = [ToolCall::new("c9", "delete_file", json!({ "path": "/" }))];
    show(
        "denied by a before_tool hook",
        &host.dispatch(&hooked, as_ada).await?,
    );

    // A person approves from elsewhere: they list what is waiting, then decide.
    let reviewer = {
        let runtime = runtime.clone();
        tokio::spawn(async move {
            let pending = loop {
                let pending = runtime.pending_approvals("session-1").await?;
                if !pending.is_empty() {
                    break pending;
                }
                tokio::task::yield_now().await;
            };
            for request in pending {
                println!(
                    "\n== reviewer sees {} wanting {} with {}",
                    request.call_id, request.tool, request.arguments
                );
                let decision = ApprovalDecision::Edit {
                    arguments: json!({ "amount_cents": 500, "to": "savings", "note": "capped by reviewer" }),
                };
                runtime
                    .decide_approval("session-1", &request.call_id, decision)
                    .await?;
            }
            Ok::<(), loomflow::Error>(())
        })
    };
    let needs_approval = [ToolCall::new(
        "c10",
        "transfer",
        json!({ "amount_cents": 90000, "to": "savings" }),
    )];
    show(
        "approved through a signal (with edited arguments)",
        &host.dispatch(&needs_approval, as_ada).await?,
    );
    reviewer
        .await
        .map_err(|e| loomflow::Error::custom(e.to_string()))??;
    Ok(())
}
