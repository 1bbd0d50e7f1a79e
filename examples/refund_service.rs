//! A refund service: workers own the runs, a manager approves from another process, a
//! worker dies mid-refund and another finishes it, paying once.
//!
//! ```text
//! cargo run --example refund_service                              # the whole story, in processes
//! cargo run --example refund_service -- worker  --db refunds.db   # a worker; prints `completed <order>`
//! cargo run --example refund_service -- submit  --db refunds.db ord_7
//! cargo run --example refund_service -- approve --db refunds.db ord_7
//! cargo run --example refund_service -- status  --db refunds.db ord_7   # waiting, completed, ...
//! ```
//!
//! Every subcommand is its own process on the same SQLite file: nothing is shared but the
//! file. A worker notices what other processes write within 100 ms. `--db postgres://…`
//! puts the runs in PostgreSQL instead, where workers on several machines share them.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use loomflow::prelude::*;
use loomflow::runtime::{PostgresStore, RunState, RuntimeError, SignalOptions, SqliteStore};

const HELP: &str = "\
refund_service: refunds run by workers. A refund waits for a manager's approval (sent from
any process), then pays once. Every subcommand is its own process on one SQLite file.
Without a subcommand, tells the whole story: it starts a worker, submits a refund, approves
it from another process, kills the worker (SIGKILL) right after it paid, and shows a second
worker finishing the refund without paying again.

Usage: cargo run --example refund_service [-- COMMAND --db FILE [ORDER]]

Commands:
  worker            run a worker; prints `completed <order>` when a refund finishes
  submit ORDER      start a refund of ORDER
  approve ORDER     approve ORDER's refund (--reject to refuse it)
  status ORDER      print where ORDER's refund stands: queued, running, waiting, completed, ...

Options:
  --db FILE         the SQLite file (default: refund_service.db), or a PostgreSQL URL
                    (postgres://user@host/db) that workers on several machines share
  --reject          with approve: refuse the refund
  --mermaid         print the graph's Mermaid diagram instead of running it
  -h, --help        print this help
";

/// Short, so that the story's second worker takes over soon after the first one dies.
const LEASE: Duration = Duration::from_secs(2);

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Refund {
    order: String,
    amount_cents: u64,
    approved: Option<bool>,
    payment: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Review {
    approved: bool,
}

/// Wait for the manager, for up to a week; the run suspends while it waits.
#[node]
async fn ask_manager(state: &mut Refund, ctx: &Context) -> loomflow::Result<()> {
    println!("[worker] {} waits for the manager", state.order);
    let review: Review = ctx
        .wait_for_signal("review")
        .timeout(Duration::from_secs(7 * 86_400))
        .await?;
    state.approved = Some(review.approved);
    Ok(())
}

/// Pay the refund, once: the payment is journaled, so a worker that takes the run over
/// after a crash finds it made.
#[node]
async fn pay(state: &mut Refund, ctx: &Context) -> loomflow::Result<()> {
    let order = state.order.clone();
    let amount = state.amount_cents;
    let payment: String = ctx
        .step("payment", || async {
            record_payment(&order, amount)?;
            println!("[worker] paying {order}");
            Ok::<_, Error>(format!("pay_{order}"))
        })
        .await?;
    // Journaled: from here on, running this node again returns the payment made.
    println!("[worker] paid {order} ({payment})");
    std::io::stdout().flush().map_err(Error::custom)?;
    state.payment = Some(payment);
    if std::env::var_os("REFUND_SERVICE_HOLD_AFTER_PAY").is_some() {
        // The story kills this worker here: paid, the run not finished.
        std::future::pending::<()>().await;
    }
    Ok(())
}

fn graph() -> loomflow::Result<CompiledGraph<Refund>> {
    Ok(Graph::new("refund")
        .node(ask_manager)
        .node(pay)
        .edge(START, "ask_manager")
        .branch("ask_manager", ["pay", END], |r: &Refund| {
            if r.approved == Some(true) { "pay" } else { END }
        })
        .edge("pay", END)
        .compile()?)
}

/// The ledger of payments beside the database: one line per payment, so that the story can
/// count them across processes.
fn ledger() -> PathBuf {
    PathBuf::from(std::env::var("REFUND_SERVICE_LEDGER").unwrap_or_default())
}

fn record_payment(order: &str, amount_cents: u64) -> loomflow::Result<()> {
    let path = ledger();
    if path.as_os_str().is_empty() {
        return Ok(());
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(Error::custom)?;
    // One write per line, so that appends from several processes never interleave.
    file.write_all(format!("paid {order} {amount_cents}\n").as_bytes())
        .map_err(Error::custom)
}

/// The runtime on `db`: a SQLite file, or a PostgreSQL database (`postgres://…`), which
/// several `worker` processes on several machines may share.
async fn runtime(db: &Path) -> loomflow::Result<Runtime> {
    let text = db.to_string_lossy();
    let builder = Runtime::builder().lease(LEASE);
    let builder = if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        builder.store(PostgresStore::connect(&text).await?)
    } else {
        builder.store(SqliteStore::open(db)?)
    };
    Ok(builder.build())
}

struct Args {
    command: Option<String>,
    order: Option<String>,
    db: PathBuf,
    reject: bool,
    mermaid: bool,
    help: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        command: None,
        order: None,
        db: PathBuf::from("refund_service.db"),
        reject: false,
        mermaid: false,
        help: false,
    };
    let mut rest = std::env::args().skip(1);
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "-h" | "--help" => args.help = true,
            "--mermaid" => args.mermaid = true,
            "--reject" => args.reject = true,
            "--db" => args.db = rest.next().ok_or("--db needs a file")?.into(),
            flag if flag.starts_with('-') => return Err(format!("unknown option {flag}")),
            word if args.command.is_none() => args.command = Some(word.to_owned()),
            word if args.order.is_none() => args.order = Some(word.to_owned()),
            word => return Err(format!("unexpected argument {word}")),
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("refund_service: {message}\n\n{HELP}");
            return std::process::ExitCode::from(2);
        }
    };
    if args.help {
        print!("{HELP}");
        return std::process::ExitCode::SUCCESS;
    }
    match run(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("refund_service: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> loomflow::Result<()> {
    let graph = graph()?;
    if args.mermaid {
        print!("{}", graph.to_mermaid());
        return Ok(());
    }
    let order = || {
        args.order
            .clone()
            .ok_or_else(|| Error::msg("this command needs an ORDER"))
    };
    match args.command.as_deref() {
        None => story(&graph).await,
        Some("worker") => {
            let runtime = runtime(&args.db).await?;
            let worker = Worker::builder(&runtime)
                .graph(&graph)
                .on_finished(|report| {
                    if report.state == RunState::Completed {
                        println!("completed {}", report.thread);
                    } else if let Some(error) = &report.error {
                        println!("{} {}: {error}", report.state, report.thread);
                    }
                    let _ = std::io::stdout().flush();
                })
                .build();
            let handle = worker.start();
            println!("[worker] ready, pid {}", std::process::id());
            let _ = std::io::stdout().flush();
            tokio::signal::ctrl_c().await.map_err(Error::custom)?;
            handle.shutdown().await?;
            Ok(())
        }
        Some("submit") => {
            let order = order()?;
            let refund = Refund {
                order: order.clone(),
                amount_cents: 4_990,
                ..Refund::default()
            };
            runtime(&args.db)
                .await?
                .submit("refund", &order, refund)
                .await?;
            println!("submitted {order}");
            Ok(())
        }
        Some("approve") => {
            let order = order()?;
            let review = Review {
                approved: !args.reject,
            };
            let runtime = runtime(&args.db).await?;
            // An approval for an order with no refund, or one whose refund has ended, would
            // wait in the store and approve the order's next refund unseen: refused instead.
            match runtime.run(&order).await {
                Err(RuntimeError::UnknownRun { .. }) => {
                    return Err(Error::msg(format!("no refund for order {order}")));
                }
                Err(other) => return Err(other.into()),
                Ok(_) => {}
            }
            let live = SignalOptions::default().require_live_run();
            runtime.signal_with(&order, "review", review, live).await?;
            println!(
                "{} {order}",
                if args.reject { "rejected" } else { "approved" }
            );
            Ok(())
        }
        Some("status") => {
            let order = order()?;
            match runtime(&args.db).await?.run(&order).await {
                Ok(info) => {
                    println!("{}", info.record.state);
                    Ok(())
                }
                Err(RuntimeError::UnknownRun { .. }) => {
                    Err(Error::msg(format!("no refund for order {order}")))
                }
                Err(other) => Err(other.into()),
            }
        }
        Some(other) => Err(Error::msg(format!(
            "unknown command {other} (worker, submit, approve, status)"
        ))),
    }
}

/// The whole story, each actor its own process.
async fn story(graph: &CompiledGraph<Refund>) -> loomflow::Result<()> {
    let dir = std::env::temp_dir().join(format!("refund-service-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(Error::custom)?;
    let db = dir.join("refunds.db");
    let ledger = dir.join("payments.log");
    let result = tell(graph, &db, &ledger).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn tell(graph: &CompiledGraph<Refund>, db: &Path, ledger: &Path) -> loomflow::Result<()> {
    let order = "ord_1042";
    let runtime = runtime(db).await?;
    println!("The refund graph:\n{}", graph.to_mermaid());

    println!("1. A worker process starts (it will die right after paying).");
    let mut first = Actor::spawn("worker", db, ledger, &[], true)?;
    first.expect("ready")?;

    println!("2. Another process submits the refund of {order}.");
    Actor::spawn("submit", db, ledger, &[order], false)?.finish()?;
    wait_until(&runtime, order, RunState::Waiting).await?;
    println!("   status: waiting (the run is suspended; no task holds it)");

    println!("3. The manager approves, from a third process.");
    Actor::spawn("approve", db, ledger, &[order], false)?.finish()?;

    first.expect(&format!("paid {order}"))?;
    println!("4. The worker paid, and is killed (SIGKILL) before the run finishes.");
    first.kill()?;
    println!("   status: {}", runtime.run(order).await?.record.state);

    println!("5. A second worker starts; once the dead worker's lease runs out, it takes over.");
    let mut second = Actor::spawn("worker", db, ledger, &[], false)?;
    second.expect(&format!("completed {order}"))?;
    second.kill()?;

    let info = runtime.run(order).await?;
    let refund: Refund = runtime.get_state(order).await?.unwrap_or_default();
    let payments = std::fs::read_to_string(ledger)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.starts_with(&format!("paid {order} ")))
        .count();
    println!(
        "   status: {}, after {} claims; payment {}; payments made: {payments}",
        info.record.state,
        info.record.attempts,
        refund.payment.as_deref().unwrap_or("none"),
    );
    if info.record.state != RunState::Completed || payments != 1 {
        return Err(Error::msg(format!(
            "the refund should complete with one payment, not {} with {payments}",
            info.record.state
        )));
    }
    Ok(())
}

async fn wait_until(runtime: &Runtime, order: &str, state: RunState) -> loomflow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(info) = runtime.run(order).await
            && info.record.state == state
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(Error::msg(format!("{order} never became {state}")))
}

/// One of the story's processes: this example, run with a subcommand.
struct Actor {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Actor {
    fn spawn(
        command: &str,
        db: &Path,
        ledger: &Path,
        args: &[&str],
        hold_after_pay: bool,
    ) -> loomflow::Result<Self> {
        let exe = std::env::current_exe().map_err(Error::custom)?;
        let mut cmd = Command::new(exe);
        cmd.arg(command)
            .arg("--db")
            .arg(db)
            .args(args)
            .env("REFUND_SERVICE_LEDGER", ledger)
            .stdout(Stdio::piped());
        if hold_after_pay {
            cmd.env("REFUND_SERVICE_HOLD_AFTER_PAY", "1");
        } else {
            cmd.env_remove("REFUND_SERVICE_HOLD_AFTER_PAY");
        }
        let mut child = cmd.spawn().map_err(Error::custom)?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, lines) = std::sync::mpsc::channel();
        let pid = child.id();
        let command = command.to_owned();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                println!("   [{command} {pid}] {line}");
                let _ = tx.send(line);
            }
        });
        Ok(Self { child, lines })
    }

    /// Waits for a line containing `text`.
    fn expect(&mut self, text: &str) -> loomflow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(text) => return Ok(()),
                Ok(_) => {}
                Err(_) => return Err(Error::msg(format!("no process said {text:?}"))),
            }
        }
    }

    /// Waits for the process to exit successfully.
    fn finish(mut self) -> loomflow::Result<()> {
        let status = self.child.wait().map_err(Error::custom)?;
        if status.success() {
            Ok(())
        } else {
            Err(Error::msg(format!("a subcommand failed: {status}")))
        }
    }

    /// SIGKILL.
    fn kill(&mut self) -> loomflow::Result<()> {
        self.child.kill().map_err(Error::custom)?;
        self.child.wait().map_err(Error::custom)?;
        Ok(())
    }
}

impl Drop for Actor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
