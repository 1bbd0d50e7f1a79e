//! `Runtime::cancel` racing a run's suspension, from either side.
//!
//! - The run's side: the cancel lands after the run looked at its row for a cancel, before
//!   its suspension (and the release of its claim) reached the store. It is made to land
//!   there from a tracing layer that runs it when the run opens its `suspend` span, which
//!   it does right before that write.
//! - The canceller's side: the cancel finds the run held, and the run suspends and lets go
//!   before the cancel leaves its request on the row, so the run never reads it. The layer
//!   holds the cancel at its `cancel_busy` event until the run has suspended.
//!
//! Its own test binary: the layer is the process's global subscriber. One test runs every
//! case in turn, as the layer's hooks fire on any run's span or event.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::sync::{Arc, Mutex, OnceLock, mpsc};

use futures_util::StreamExt;
use loomflow::prelude::*;
use loomflow::runtime::{RunState, SqliteStore};
use loomflow::{EventKind, RunError};
use tokio::sync::Notify;
use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt};
use tracing_subscriber::{Layer, Registry};

type Hook = Box<dyn FnOnce() + Send>;

/// What runs when the next `suspend` span opens, once.
fn hook() -> &'static Mutex<Option<Hook>> {
    static HOOK: OnceLock<Mutex<Option<Hook>>> = OnceLock::new();
    HOOK.get_or_init(|| Mutex::new(None))
}

/// What runs when `Runtime::cancel` next finds the run held by another execution, once.
fn busy_hook() -> &'static Mutex<Option<Hook>> {
    static HOOK: OnceLock<Mutex<Option<Hook>>> = OnceLock::new();
    HOOK.get_or_init(|| Mutex::new(None))
}

struct AtSuspend;

impl<S: tracing::Subscriber> Layer<S> for AtSuspend {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _id: &tracing::span::Id,
        _ctx: LayerContext<'_, S>,
    ) {
        if attrs.metadata().name() == "suspend"
            && let Some(hook) = hook().lock().unwrap().take()
        {
            hook();
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, _ctx: LayerContext<'_, S>) {
        if event.metadata().fields().field("cancel_busy").is_some()
            && let Some(hook) = busy_hook().lock().unwrap().take()
        {
            hook();
        }
    }
}

fn install() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        tracing::subscriber::set_global_default(Registry::default().with(AtSuspend)).unwrap();
    });
}

/// Cancels `thread` from another OS thread, with a tokio runtime of its own, and waits for
/// the cancel to return: the run's own thread is held inside its `suspend` span meanwhile.
fn cancel_now(runtime: &Runtime, thread: &'static str) {
    let runtime = runtime.clone();
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(runtime.cancel(thread))
            .unwrap()
    })
    .join()
    .unwrap();
}

/// A graph whose one node suspends at once.
fn asking() -> CompiledGraph<u32> {
    parked(None, Arc::new(Notify::new()))
}

async fn cancelled_as_it_suspends(name: &str, runtime: Runtime) {
    install();
    let graph = asking();
    let thread = "race";
    let canceller = runtime.clone();
    *hook().lock().unwrap() = Some(Box::new(move || cancel_now(&canceller, thread)));
    let mut stream = graph.run(&runtime, thread, 0).stream();
    let mut kinds = Vec::new();
    while let Some(event) = stream.next().await {
        kinds.push(event.kind);
    }
    let outcome = stream.outcome().await;
    assert!(
        hook().lock().unwrap().is_none(),
        "{name}: the run never opened its suspend span"
    );
    assert!(
        matches!(outcome, Err(RunError::Cancelled { .. })),
        "{name}: the run should end cancelled, not {outcome:?}"
    );
    // Its stream says so last, after the question it can no longer take an answer to.
    assert!(
        matches!(kinds.last(), Some(EventKind::Error { message }) if message.contains("cancelled")),
        "{name}: {kinds:?}"
    );
    let row = runtime.run(thread).await.unwrap().record;
    assert_eq!(row.state, RunState::Cancelled, "{name}: {row:?}");
    let resumed = graph.resume(&runtime, thread, 3).await;
    assert!(
        matches!(resumed, Err(RunError::Cancelled { .. })),
        "{name}: a cancelled run is not resumed: {resumed:?}"
    );
}

/// A run executing elsewhere: what says it is in its node, lets it go on, and hands back
/// its outcome (its number of interrupts).
struct Elsewhere {
    entered: mpsc::Receiver<()>,
    go: Arc<Notify>,
    outcome: mpsc::Receiver<Result<usize, String>>,
}

/// A graph whose node, given `entered`, says so and waits for `go` before it suspends.
fn parked(entered: Option<mpsc::Sender<()>>, go: Arc<Notify>) -> CompiledGraph<u32> {
    let entered = Mutex::new(entered);
    Graph::new("parked")
        .node_fn("ask", move |n: &mut u32, ctx| {
            let entered = entered.lock().unwrap().take();
            let go = Arc::clone(&go);
            Box::pin(async move {
                if let Some(entered) = entered {
                    entered.send(()).unwrap();
                    go.notified().await;
                }
                *n += ctx.interrupt::<u32>(json!("how many?"))?;
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
        .unwrap()
}

/// Starts a run of [`parked`] on its own OS thread, through a runtime of its own on the
/// file at `path` (standing in for another process): it parks in its node until told to go
/// on, then suspends.
fn suspend_elsewhere(path: std::path::PathBuf, thread: &'static str) -> Elsewhere {
    let (entered_tx, entered) = mpsc::channel();
    let (outcome_tx, outcome) = mpsc::channel();
    let go = Arc::new(Notify::new());
    let told = Arc::clone(&go);
    std::thread::spawn(move || {
        let runtime = Runtime::with_store(SqliteStore::open(&path).unwrap());
        let graph = parked(Some(entered_tx), told);
        let outcome = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(graph.invoke(&runtime, thread, 0));
        let outcome = outcome
            .map(|out| out.interrupts().len())
            .map_err(|e| e.to_string());
        outcome_tx.send(outcome).unwrap();
    });
    Elsewhere {
        entered,
        go,
        outcome,
    }
}

/// The canceller's side: the cancel finds the run held, the run suspends and lets go before
/// the cancel's request reaches its row; the cancel looks again and cancels it itself.
async fn cancelled_after_it_let_go() {
    install();
    let db = loomflow_tests::TempDb::new("cancel-race-busy");
    let thread = "busy";
    let run = suspend_elsewhere(db.path().to_path_buf(), thread);
    run.entered.recv().unwrap();
    let (go, outcome) = (run.go, run.outcome);
    let (suspended_tx, suspended) = mpsc::channel();
    *busy_hook().lock().unwrap() = Some(Box::new(move || {
        go.notify_one();
        suspended_tx.send(outcome.recv().unwrap()).unwrap();
    }));

    let canceller = Runtime::with_store(SqliteStore::open(db.path()).unwrap());
    let row = canceller.cancel(thread).await.unwrap();
    assert!(
        busy_hook().lock().unwrap().is_none(),
        "the cancel never found the run held"
    );
    assert_eq!(
        suspended.recv().unwrap(),
        Ok(1),
        "the run suspended before the cancel asked it to stop"
    );
    assert_eq!(row.state, RunState::Cancelled, "{row:?}");
    let resumed = asking().resume(&canceller, thread, 3).await;
    assert!(
        matches!(resumed, Err(RunError::Cancelled { .. })),
        "a cancelled run is not resumed: {resumed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_that_races_a_suspension_is_not_lost() {
    cancelled_as_it_suspends("memory", Runtime::in_memory()).await;
    let db = loomflow_tests::TempDb::new("cancel-race");
    let sqlite = Runtime::with_store(SqliteStore::open(db.path()).unwrap());
    cancelled_as_it_suspends("sqlite", sqlite).await;
    cancelled_after_it_let_go().await;
}
