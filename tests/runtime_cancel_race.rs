//! `Runtime::cancel` landing in the last instant before a run's suspension is written: after
//! the run looked at its row for a cancel, before its suspension (and the release of its
//! claim) reached the store. The cancel is made to land there from a tracing layer that runs
//! it when the run opens its `suspend` span, which it does right before that write.
//!
//! Its own test binary: the layer is the process's global subscriber.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::sync::{Mutex, OnceLock};

use loomflow::RunError;
use loomflow::prelude::*;
use loomflow::runtime::{RunState, SqliteStore};
use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt};
use tracing_subscriber::{Layer, Registry};

type Hook = Box<dyn FnOnce() + Send>;

/// What runs when the next `suspend` span opens, once.
fn hook() -> &'static Mutex<Option<Hook>> {
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

fn asking() -> CompiledGraph<u32> {
    Graph::new("asking")
        .node_fn("ask", |n: &mut u32, ctx| {
            Box::pin(async move {
                *n += ctx.interrupt::<u32>(json!("how many?"))?;
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
        .unwrap()
}

async fn cancelled_as_it_suspends(name: &str, runtime: Runtime) {
    install();
    let graph = asking();
    let thread = "race";
    let canceller = runtime.clone();
    *hook().lock().unwrap() = Some(Box::new(move || cancel_now(&canceller, thread)));
    let outcome = graph.invoke(&runtime, thread, 0).await;
    assert!(
        hook().lock().unwrap().is_none(),
        "{name}: the run never opened its suspend span"
    );
    assert!(
        matches!(outcome, Err(RunError::Cancelled { .. })),
        "{name}: the run should end cancelled, not {outcome:?}"
    );
    let row = runtime.run(thread).await.unwrap().record;
    assert_eq!(row.state, RunState::Cancelled, "{name}: {row:?}");
    let resumed = graph.resume(&runtime, thread, 3).await;
    assert!(
        matches!(resumed, Err(RunError::Cancelled { .. })),
        "{name}: a cancelled run is not resumed: {resumed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_that_lands_as_the_suspension_is_written_is_not_lost() {
    cancelled_as_it_suspends("memory", Runtime::in_memory()).await;
    let db = loomflow_tests::TempDb::new("cancel-race");
    let sqlite = Runtime::with_store(SqliteStore::open(db.path()).unwrap());
    cancelled_as_it_suspends("sqlite", sqlite).await;
}
