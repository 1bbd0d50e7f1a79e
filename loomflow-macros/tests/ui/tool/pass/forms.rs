use loomflow::prelude::*;
use loomflow::tool::ToolContext;

/// Async, with plain parameters and descriptions.
#[tool(param(city = "The city"))]
async fn weather(city: String, days: Option<u8>) -> String {
    format!("{city} {days:?}")
}

/// Sync, fallible.
#[tool(name = "divide")]
fn div(a: f64, b: f64) -> Result<f64, String> {
    if b == 0.0 { Err("division by zero".into()) } else { Ok(a / b) }
}

/// Arguments.
#[derive(Deserialize, JsonSchema)]
struct Move {
    /// From.
    from: String,
    /// To.
    to: String,
}

/// A single struct argument and the injected context, in any position.
#[tool(approval, destructive)]
async fn move_file(ctx: &ToolContext, args: Move) -> loomflow::Result<String> {
    Ok(format!("{} -> {} for {}", args.from, args.to, ctx.call_id))
}

/// No parameters, no return value.
#[tool]
fn ping() {}

/// Through a renamed crate path.
#[tool(crate = ::loomflow)]
pub fn public_tool(r#type: String) -> String {
    r#type
}

fn main() {
    let host = ToolHost::new()
        .with(weather)
        .with(div)
        .with(move_file)
        .with(ping)
        .with(public_tool);
    assert_eq!(host.list().len(), 5);
    assert_eq!(div::call(1.0, 2.0), Ok(0.5));
    assert!(public_tool.spec().parameters["properties"].get("type").is_some());
}
