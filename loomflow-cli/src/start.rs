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
    // Standard input, or a file that may be a pipe (`@/dev/stdin`), is read once, when the
    // run is submitted.
    match input {
        "-" => Ok(()),
        input if input.starts_with('@') => Ok(()),
        input => parse_json("the input", input).map(drop),
    }
}

/// The input's text: the argument itself, standard input for `-`, or the file `@PATH`
/// names (an input too large for the command line).
fn input_text(input: &str) -> Result<String, Failure> {
    if input == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .map_err(|e| Failure::usage(format!("cannot read the input from stdin: {e}")))?;
        return Ok(text);
    }
    match input.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| Failure::usage(format!("cannot read the input file {path}: {e}"))),
        None => Ok(input.to_owned()),
    }
}

pub(crate) async fn submit(
    runtime: &Runtime,
    out: &Output,
    (graph, thread): (&str, &str),
    input: &str,
) -> Result<(), Failure> {
    let input = parse_json("the input", &input_text(input)?)?;
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
    // Going back on one thread replaces the run that stands there (suspended, or stopped
    // half-way), as `Runtime::fork` does: said, so that it is not missed.
    let replaced = match thread == new_thread {
        true => runtime.store().get_run(thread).await,
        false => Ok(None),
    };
    let replaced = replaced.map_err(loomflow::RuntimeError::from)?;
    let replaced = replaced.filter(|row| !row.state.is_finished());
    runtime.fork(thread, checkpoint, new_thread).await?;
    let row = runtime.store().get_run(new_thread).await;
    let state = row
        .map_err(loomflow::RuntimeError::from)?
        .map(|row| row.state);
    let shown = state.map_or_else(|| "started".to_owned(), |state| state.to_string());
    let note = match &replaced {
        Some(row) => format!(" (its run {}, {}, was replaced)", row.run, row.state),
        None => String::new(),
    };
    out.done(
        &format!(
            "{new_thread}: forked from checkpoint {checkpoint} of {thread} ({shown}){note}; \
             `show {new_thread}` says what it waits for"
        ),
        &json!({ "thread": new_thread, "from": { "thread": thread, "checkpoint": checkpoint },
                 "state": state, "replaced_run": replaced.map(|row| row.run) }),
    );
    Ok(())
}
