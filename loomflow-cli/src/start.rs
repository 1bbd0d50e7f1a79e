//! The commands that start runs: `submit` queues one for the workers, `fork` starts a
//! thread from another's checkpoint.

use loomflow::Runtime;
use serde_json::json;

use crate::Failure;
use crate::commands::parse_json;
use crate::output::Output;

/// Checks `submit`'s arguments before the store is opened.
pub(crate) fn check_submit(graph: &str, input: &str) -> Result<(), Failure> {
    if graph.trim().is_empty() || graph.chars().any(char::is_control) {
        return Err(Failure::usage(format!(
            "the graph name {graph:?} is blank or holds a control character"
        )));
    }
    parse_json("the input", input).map(drop)
}

pub(crate) async fn submit(
    runtime: &Runtime,
    out: &Output,
    (graph, thread): (&str, &str),
    input: &str,
) -> Result<(), Failure> {
    let input = parse_json("the input", input)?;
    runtime.submit(graph, thread, input).await?;
    out.done(
        &format!("{thread}: a run of {graph} is queued; a worker that registered {graph} runs it"),
        &json!({ "thread": thread, "graph": graph, "state": "queued" }),
    );
    Ok(())
}

pub(crate) async fn fork(
    runtime: &Runtime,
    out: &Output,
    (thread, checkpoint): (&str, u64),
    new_thread: &str,
) -> Result<(), Failure> {
    runtime.fork(thread, checkpoint, new_thread).await?;
    let row = runtime.store().get_run(new_thread).await;
    let state = row
        .map_err(loomflow::RuntimeError::from)?
        .map(|row| row.state);
    let shown = state.map_or_else(|| "started".to_owned(), |state| state.to_string());
    out.done(
        &format!(
            "{new_thread}: forked from checkpoint {checkpoint} of {thread} ({shown}); `show \
             {new_thread}` says what it waits for"
        ),
        &json!({ "thread": new_thread, "from": { "thread": thread, "checkpoint": checkpoint },
                 "state": state }),
    );
    Ok(())
}
