//! A state that nests deeply (a parse tree, a nested document) is checkpointed and read back
//! whole by every store, up to 512 levels; past that, the step that made it fails with an
//! error that says so, and the run's last checkpoint stays as it was.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/postgres.rs"]
mod postgres;

use loomflow::prelude::*;
use loomflow::runtime::RunStatus;
use loomflow_tests::TempDb;
use serde_json::Value;

#[derive(Clone, Default, Debug, PartialEq, Serialize, Deserialize)]
struct Doc {
    /// How deeply `grow` nests `tree`.
    levels: usize,
    tree: Value,
    answer: Option<String>,
}

/// `levels` arrays and objects, one inside the other, around a string with brackets in it.
fn nested(levels: usize) -> Value {
    (0..levels).fold(json!("[{\"}"), |inner, level| match level % 2 {
        0 => json!([inner]),
        _ => json!({ "k": inner }),
    })
}

#[node]
async fn grow(doc: &mut Doc) -> loomflow::Result<()> {
    doc.tree = nested(doc.levels);
    Ok(())
}

#[node]
async fn ask(doc: &mut Doc, ctx: &Context) -> loomflow::Result<()> {
    doc.answer = Some(ctx.interrupt(json!({ "q": "keep it?" }))?);
    Ok(())
}

/// `START → grow → ask → END`: the state nests deeply from the first step on, then the run
/// suspends and is resumed.
fn graph() -> CompiledGraph<Doc> {
    Graph::new("documents")
        .node(grow)
        .node(ask)
        .edge(START, "grow")
        .edge("grow", "ask")
        .edge("ask", END)
        .compile()
        .unwrap()
}

/// `error` and its sources, as a log line shows them.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

fn input(levels: usize) -> Doc {
    Doc {
        levels,
        ..Doc::default()
    }
}

/// A state 300 levels deep suspends, resumes and completes, and every checkpoint of the
/// thread reads back, the deep ones with the tree as it was.
async fn deep_state_round_trips(label: &str, runtime: &Runtime) {
    let graph = graph();
    let out = graph.invoke(runtime, "deep", input(300)).await.unwrap();
    assert_eq!(out.interrupts().len(), 1, "{label}");
    let done = graph.resume(runtime, "deep", "yes").await.unwrap();
    let done = done.completed().unwrap();
    assert_eq!(done.tree, nested(300), "{label}");
    assert_eq!(done.answer.as_deref(), Some("yes"), "{label}");
    let checkpoints = runtime.list_checkpoints("deep").await.unwrap();
    let trees = checkpoints
        .iter()
        .filter(|cp| cp.body["state"]["tree"] == nested(300));
    // After `grow`, suspended in `ask`, after `ask`.
    assert_eq!(trees.count(), 3, "{label}: {checkpoints:#?}");
}

#[tokio::test]
async fn a_deeply_nested_state_round_trips_in_memory_and_sqlite() {
    let db = TempDb::new("deep-state");
    deep_state_round_trips("memory", &Runtime::in_memory()).await;
    deep_state_round_trips("sqlite", &Runtime::sqlite(db.path()).unwrap()).await;
}

#[tokio::test]
async fn a_deeply_nested_state_round_trips_in_postgres() {
    let Some(db) = postgres::TempPgDb::create("deeply nested state").await else {
        return;
    };
    deep_state_round_trips("postgres", &Runtime::postgres(&db.url).await.unwrap()).await;
}

/// Past 512 levels a durable store refuses the checkpoint: the step fails with an error that
/// names the graph, the node and the bound, and the thread keeps its input's checkpoint,
/// readable.
async fn too_deep_a_state_fails_its_step(label: &str, runtime: &Runtime) {
    let outcome = graph()
        .invoke(runtime, "too-deep", input(600))
        .await
        .unwrap();
    let RunOutcome::Failed { error, .. } = outcome else {
        panic!("{label}: a failed step: {outcome:?}");
    };
    let error = chain(&error);
    assert!(
        error.contains("documents after node grow"),
        "{label}: {error}"
    );
    assert!(error.contains("deeper than 512 levels"), "{label}: {error}");
    let checkpoints = runtime.list_checkpoints("too-deep").await.unwrap();
    let [start] = &checkpoints[..] else {
        panic!("{label}: the input's checkpoint only: {checkpoints:#?}");
    };
    assert_eq!(start.step, 0, "{label}");
    assert_eq!(start.body["state"]["levels"], 600, "{label}");
    assert_eq!(start.body["state"]["tree"], Value::Null, "{label}");
}

#[tokio::test]
async fn too_deep_a_state_fails_its_step_in_sqlite() {
    let db = TempDb::new("too-deep-state");
    too_deep_a_state_fails_its_step("sqlite", &Runtime::sqlite(db.path()).unwrap()).await;
}

#[tokio::test]
async fn too_deep_a_state_fails_its_step_in_postgres() {
    let Some(db) = postgres::TempPgDb::create("too deeply nested state").await else {
        return;
    };
    let runtime = Runtime::postgres(&db.url).await.unwrap();
    too_deep_a_state_fails_its_step("postgres", &runtime).await;
}

/// The memory store keeps states as they are and writes no JSON: it refuses one nested past
/// the bound when a resume reads it back through JSON (a durable store refused it when it
/// wrote it), naming the thread; the suspended checkpoint stays.
#[tokio::test]
async fn in_memory_too_deep_a_state_is_refused_when_read_back() {
    let runtime = Runtime::in_memory();
    let graph = graph();
    let out = graph
        .invoke(&runtime, "too-deep", input(600))
        .await
        .unwrap();
    assert_eq!(out.interrupts().len(), 1);
    let error = graph.resume(&runtime, "too-deep", "yes").await.unwrap_err();
    let error = chain(&error);
    assert!(error.contains("too-deep"), "{error}");
    assert!(error.contains("deeper than 512 levels"), "{error}");
    let newest = runtime.list_checkpoints("too-deep").await.unwrap();
    assert_eq!(newest.last().unwrap().status, RunStatus::Interrupted);
}

#[node]
async fn ask_deeply(doc: &mut Doc, ctx: &Context) -> loomflow::Result<()> {
    doc.answer = Some(ctx.interrupt(json!({ "tree": nested(doc.levels) }))?);
    Ok(())
}

/// An interrupt payload nested past the bound is refused where the node asks, whichever
/// store the run uses: the node fails, naming itself and the bound, and the thread keeps
/// the input's checkpoint, readable.
async fn too_deep_a_payload_fails_its_node(label: &str, runtime: &Runtime) {
    let graph = Graph::new("asking")
        .node(ask_deeply)
        .edge(START, "ask_deeply")
        .edge("ask_deeply", END)
        .compile()
        .unwrap();
    let outcome = graph.invoke(runtime, "payload", input(600)).await.unwrap();
    let RunOutcome::Failed { error, .. } = outcome else {
        panic!("{label}: the node fails: {outcome:?}");
    };
    let error = chain(&error);
    assert!(error.contains("ask_deeply"), "{label}: {error}");
    assert!(error.contains("deeper than 512 levels"), "{label}: {error}");
    let checkpoints = runtime.list_checkpoints("payload").await.unwrap();
    assert_eq!(checkpoints.len(), 1, "{label}: {checkpoints:#?}");
    assert_eq!(checkpoints[0].step, 0, "{label}");
    // 300 levels ask, and are answered, as any payload.
    let out = graph
        .invoke(runtime, "payload-300", input(300))
        .await
        .unwrap();
    assert_eq!(out.interrupts()[0].payload["tree"], nested(300), "{label}");
    let done = graph.resume(runtime, "payload-300", "ok").await.unwrap();
    assert_eq!(
        done.completed().unwrap().answer.as_deref(),
        Some("ok"),
        "{label}"
    );
}

#[tokio::test]
async fn too_deep_a_payload_fails_its_node_in_memory_and_sqlite() {
    let db = TempDb::new("too-deep-payload");
    too_deep_a_payload_fails_its_node("memory", &Runtime::in_memory()).await;
    too_deep_a_payload_fails_its_node("sqlite", &Runtime::sqlite(db.path()).unwrap()).await;
}

/// A journaled step whose result a durable store cannot keep (nested past 512 levels) fails
/// its node once: the store refuses it, as it would every time. Before, the refusal read as
/// the store failing, and a worker carried the run on and ran the step again, without end.
async fn too_deep_a_step_result_fails_its_node_once(label: &str, runtime: &Runtime) {
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&calls);
    let graph = Graph::new("deep_step")
        .node_fn("fetch", move |doc: &mut Doc, ctx| {
            let calls = std::sync::Arc::clone(&counted);
            Box::pin(async move {
                let tree: Value = ctx
                    .step("fetch", || async move {
                        calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        Ok::<_, String>(nested(600))
                    })
                    .await?;
                doc.tree = tree;
                Ok(())
            })
        })
        .edge(START, "fetch")
        .edge("fetch", END)
        .compile()
        .unwrap();
    runtime
        .submit("deep_step", "deep-step", input(0))
        .await
        .unwrap();
    let worker = Worker::builder(runtime).graph(&graph).build();
    let ran = tokio::time::timeout(std::time::Duration::from_secs(30), worker.run_until_idle())
        .await
        .expect("the worker settles")
        .unwrap();
    assert_eq!(ran, 1, "{label}: one execution");
    assert_eq!(
        calls.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "{label}"
    );
    let record = runtime.store().get_run("deep-step").await.unwrap().unwrap();
    assert_eq!(record.state, loomflow::runtime::RunState::Failed, "{label}");
}

#[tokio::test]
async fn too_deep_a_step_result_fails_its_node_once_in_sqlite() {
    let db = TempDb::new("too-deep-step");
    let runtime = Runtime::sqlite(db.path()).unwrap();
    too_deep_a_step_result_fails_its_node_once("sqlite", &runtime).await;
}

#[tokio::test]
async fn too_deep_a_step_result_fails_its_node_once_in_postgres() {
    let Some(db) = postgres::TempPgDb::create("too deeply nested step").await else {
        return;
    };
    let runtime = Runtime::postgres(&db.url).await.unwrap();
    too_deep_a_step_result_fails_its_node_once("postgres", &runtime).await;
}
