//! A run parks on an approval; a second task plays the web handler and sends it.
//!
//! ```text
//! cargo run --example signals
//! cargo run --example signals -- --mermaid   # its diagram
//! ```

use std::time::Instant;

use loomflow::EventKind;
use loomflow::prelude::*;

const HELP: &str = "\
signals: a run parks on an expense approval; a second task plays the web handler and sends
the decision as a signal, which wakes the run.

Usage: cargo run --example signals [-- OPTIONS]

Options:
  --mermaid   print the graph's Mermaid diagram instead of running it
  -h, --help  print this help
";

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Expense {
    who: String,
    amount_cents: u64,
    approved: Option<bool>,
    approver: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Decision {
    approved: bool,
    by: String,
}

/// Park until someone decides, for at most a day.
#[node]
async fn await_approval(state: &mut Expense, ctx: &Context) -> loomflow::Result<()> {
    let decision: Decision = ctx
        .wait_for_signal("approval")
        .timeout(Duration::from_secs(86_400))
        .await?;
    state.approved = Some(decision.approved);
    state.approver = Some(decision.by);
    Ok(())
}

/// Record the outcome.
#[node]
async fn file(state: &mut Expense, ctx: &Context) -> loomflow::Result<()> {
    ctx.emit("filed", json!({ "approved": state.approved }));
    Ok(())
}

#[tokio::main]
async fn main() -> loomflow::Result<()> {
    if std::env::args().skip(1).any(|a| a == "--help" || a == "-h") {
        print!("{HELP}");
        return Ok(());
    }
    let graph = Graph::new("expense")
        .node(await_approval)
        .node(file)
        .edge(START, "await_approval")
        .edge("await_approval", "file")
        .edge("file", END)
        .compile()?;
    if std::env::args().any(|a| a == "--mermaid") {
        print!("{}", graph.to_mermaid());
        return Ok(());
    }
    let runtime = Runtime::in_memory();
    let started = Instant::now();
    let stamp = move || format!("{:>7.3} ms", started.elapsed().as_secs_f64() * 1e3);

    let input = Expense {
        who: "ada".into(),
        amount_cents: 12_900,
        ..Expense::default()
    };
    let mut run = graph.stream(&runtime, "expense-7", input);

    // The web handler: it learns of the parked run from the event stream (a real one would
    // get an HTTP request) and answers with a signal on the run's thread.
    let (parked_tx, parked_rx) = tokio::sync::oneshot::channel::<()>();
    let handler = {
        let runtime = runtime.clone();
        tokio::spawn(async move {
            let _ = parked_rx.await;
            let decision = json!({ "approved": true, "by": "grace" });
            runtime.signal("expense-7", "approval", decision).await
        })
    };

    let mut parked_tx = Some(parked_tx);
    while let Some(event) = futures_util::StreamExt::next(&mut run).await {
        let node = event.node.as_deref().unwrap_or("-");
        match &event.kind {
            EventKind::Wait { signal, .. } => {
                println!(
                    "{}  step {}  {node}: parked, waiting for signal {signal:?}",
                    stamp(),
                    event.step
                );
                println!("{}  handler: sending approval from another task", stamp());
                if let Some(tx) = parked_tx.take() {
                    let _ = tx.send(());
                }
            }
            EventKind::NodeStart => println!("{}  step {}  {node}: started", stamp(), event.step),
            EventKind::NodeEnd => println!("{}  step {}  {node}: finished", stamp(), event.step),
            EventKind::Custom { name, data } => {
                println!("{}  step {}  {node}: {name} {data}", stamp(), event.step)
            }
            EventKind::Step { nodes } => println!(
                "{}  step {} done: {}",
                stamp(),
                event.step,
                nodes.join(", ")
            ),
            EventKind::Done => println!("{}  run completed", stamp()),
            other => println!("{}  {other:?}", stamp()),
        }
    }
    let delivery = handler.await.map_err(Error::custom)??;
    println!("{}  handler: signal was {delivery:?}", stamp());
    let expense = run.outcome().await?.completed()?;
    println!(
        "final state: {}",
        serde_json::to_string(&expense).map_err(Error::custom)?
    );
    Ok(())
}
