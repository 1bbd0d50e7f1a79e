//! A refund that waits for a manager, survives a restart, and pays exactly once.
//!
//! ```text
//! cargo run --example refund_approval                     # every stage, one after another
//! cargo run --example refund_approval -- --stage ask      # 1. start: ask the manager, suspend
//! cargo run --example refund_approval -- --stage decide   # 2. the manager approves (--reject to refuse)
//! cargo run --example refund_approval -- --stage resume   # 3. carry on from the file: pay, complete
//! ```
//!
//! The run lives in a SQLite file (`refund_approval.db`, or `--db PATH`). Each stage opens it
//! afresh, as a new process after a restart would; nothing is kept in memory between them.

use std::sync::atomic::{AtomicBool, Ordering};

use loomflow::prelude::*;

const HELP: &str = "\
refund_approval: a refund that waits for a manager, survives a restart, and pays exactly
once. The run lives in a SQLite file; each stage opens it afresh, as a new process would.
Without --stage, runs every stage in turn (starting from a fresh file).

Usage: cargo run --example refund_approval [-- OPTIONS]

Options:
  --stage ask     1. start the run: ask the manager, suspend
  --stage decide  2. send the manager's decision as a signal (approve; --reject to refuse)
  --stage resume  3. carry the run on from the file: pay, complete
  --reject        the manager refuses the refund
  --db PATH       the SQLite file (default: refund_approval.db)
  --mermaid       print the graph's Mermaid diagram instead of running it
  -h, --help      print this help
";

const THREAD: &str = "refund-ord_1042";

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Refund {
    order: String,
    amount_cents: u64,
    reason: String,
    approved: Option<bool>,
    note: Option<String>,
    refund_id: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Review {
    approved: bool,
    note: Option<String>,
}

/// Tell the manager a refund needs a decision.
#[node]
async fn notify(state: &mut Refund) -> loomflow::Result<()> {
    println!(
        "[notify] refund of {}.{:02} EUR asked for order {}: {}",
        state.amount_cents / 100,
        state.amount_cents % 100,
        state.order,
        state.reason
    );
    Ok(())
}

/// Wait for the manager's review; suspend the run (nothing held in memory) until it comes.
#[node]
async fn ask_manager(state: &mut Refund, ctx: &Context) -> loomflow::Result<()> {
    let review: Review = ctx.wait_for_signal("manager_review").or_suspend().await?;
    state.approved = Some(review.approved);
    state.note = review.note;
    Ok(())
}

/// Set by the all-stages demo to show a crash right after the money moved.
static CRASH_AFTER_PAYING: AtomicBool = AtomicBool::new(false);

/// Refund through the payment provider, journaled so that it happens once.
#[node]
async fn pay(state: &mut Refund, ctx: &Context) -> loomflow::Result<()> {
    let key = format!("{}/{}", ctx.thread(), ctx.run_number());
    let refund_id: String = ctx
        .step("payments.refund", || async {
            println!(
                "[payments] refund {} for {} cents, idempotency key {key}",
                state.order, state.amount_cents
            );
            Ok::<_, Error>(format!("re_{}", state.order))
        })
        .await?;
    if CRASH_AFTER_PAYING.swap(false, Ordering::SeqCst) {
        return Err(Error::msg("simulated crash right after the payment"));
    }
    state.refund_id = Some(refund_id);
    Ok(())
}

fn graph() -> loomflow::Result<CompiledGraph<Refund>> {
    Ok(Graph::new("refund")
        .node(notify)
        .node(ask_manager)
        .node(pay)
        .edge(START, "notify")
        .edge("notify", "ask_manager")
        .branch("ask_manager", ["pay", END], |r: &Refund| {
            if r.approved == Some(true) { "pay" } else { END }
        })
        .edge("pay", END)
        .compile()?)
}

fn report(outcome: &RunOutcome<Refund>) -> loomflow::Result<()> {
    match outcome {
        RunOutcome::Completed(refund) => println!(
            "run {THREAD}: completed {}",
            serde_json::to_string(refund).map_err(Error::custom)?
        ),
        RunOutcome::Interrupted { interrupts, .. } => {
            for i in interrupts {
                match &i.signal {
                    Some(signal) => {
                        println!("run {THREAD}: suspended, waiting for signal {signal}")
                    }
                    None => println!("run {THREAD}: suspended on {}: {}", i.id, i.payload),
                }
            }
        }
        RunOutcome::Failed { error, .. } => {
            let cause = std::error::Error::source(error)
                .map(ToString::to_string)
                .unwrap_or_default();
            println!("run {THREAD}: failed: {error}: {cause}");
        }
        other => println!("run {THREAD}: {other:?}"),
    }
    Ok(())
}

async fn ask(db: &str) -> loomflow::Result<()> {
    let runtime = Runtime::sqlite(db)?;
    let input = Refund {
        order: "ord_1042".into(),
        amount_cents: 12_990,
        reason: "arrived broken".into(),
        ..Refund::default()
    };
    report(&graph()?.invoke(&runtime, THREAD, input).await?)
}

async fn decide(db: &str, approved: bool) -> loomflow::Result<()> {
    let runtime = Runtime::sqlite(db)?;
    let review =
        json!({ "approved": approved, "note": if approved { "ok" } else { "no receipt" } });
    // The key names the run: a webhook redelivered for this run is dropped as a duplicate,
    // and the decision on a later refund of the same order is not.
    let run = runtime.run(THREAD).await?.record.run;
    let key = format!("review-ord_1042-run-{run}");
    let options = loomflow::runtime::SignalOptions::default().idempotency_key(key);
    let delivery = runtime
        .signal_with(THREAD, "manager_review", review, options)
        .await?;
    println!(
        "[web handler] manager_review {review_word}: stored ({delivery:?})",
        review_word = if approved { "approved" } else { "rejected" }
    );
    Ok(())
}

async fn resume(db: &str) -> loomflow::Result<()> {
    let runtime = Runtime::sqlite(db)?;
    report(&graph()?.recover(&runtime, THREAD).await?)
}

#[tokio::main]
async fn main() -> loomflow::Result<()> {
    if std::env::args().skip(1).any(|a| a == "--help" || a == "-h") {
        print!("{HELP}");
        return Ok(());
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let db = value("--db").unwrap_or_else(|| "refund_approval.db".to_owned());
    let approved = !args.iter().any(|a| a == "--reject");

    match value("--stage").as_deref() {
        Some("ask") => ask(&db).await,
        Some("decide") => decide(&db, approved).await,
        Some("resume") => resume(&db).await,
        Some(other) => Err(Error::msg(format!(
            "unknown stage {other}: use ask, decide or resume"
        ))),
        None => {
            if args.iter().any(|a| a == "--mermaid") {
                print!("{}", graph()?.to_mermaid());
                return Ok(());
            }
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{db}{suffix}"));
            }
            println!("== 1. ask: the run starts on {db}, asks the manager and suspends");
            ask(&db).await?;
            println!("\n== the process state is dropped, as in a restart; only the file remains");
            println!("\n== 2. a web handler, in another process, sends the manager's decision");
            decide(&db, approved).await?;
            decide(&db, approved).await?; // a retried webhook: the idempotency key keeps it single
            println!("\n== 3. resume from the file; the process dies right after paying");
            CRASH_AFTER_PAYING.store(true, Ordering::SeqCst);
            resume(&db).await?;
            println!("\n== 4. resume again: the payment is in the journal, it is not made twice");
            resume(&db).await
        }
    }
}
