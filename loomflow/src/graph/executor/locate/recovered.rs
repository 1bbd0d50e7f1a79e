//! A recover of a suspended run: where it carries on, or what it still waits for.

use super::{Located, Result, Stored, from_checkpoint};
use crate::graph::State;
use crate::graph::compiled::CompiledInner;
use crate::graph::run::RunOutcome;
use crate::runtime::Runtime;

/// Where a recover of a run interrupted at `cp` (with no value given), in `namespace`,
/// carries on. A run waiting for signals or timers is run again: the signals may have
/// arrived, the timers may be due (a timer that is not suspends again). So is one whose
/// subgraph asked again since `cp` (see [`child_moved_on`]), to suspend on what it asks now.
/// One waiting for a value stays as it is.
pub(super) async fn recover_interrupted<S: State>(
    g: &CompiledInner<S>,
    (runtime, namespace): (&Runtime, &str),
    (thread, cp): (&str, Stored<S>),
) -> Result<Located<S>> {
    let waits =
        (cp.snapshot.interrupts.iter()).any(|i| i.signal.is_some() || i.wake_at_ms.is_some());
    let in_subgraph = !waits && (cp.snapshot.interrupts.iter()).any(|i| g.is_subgraph(&i.node));
    // Boxed: only a run suspended in a subgraph reads the store here.
    if waits
        || in_subgraph && Box::pin(child_moved_on(g, (runtime, namespace), thread, &cp)).await?
    {
        return Ok(Located::Position(from_checkpoint(
            g,
            thread,
            cp,
            Vec::new(),
        )?));
    }
    Ok(Located::Finished(RunOutcome::Interrupted {
        state: cp.state.decode(g, thread)?,
        interrupts: cp.snapshot.interrupts,
    }))
}

/// Whether a subgraph whose questions `cp` suspended on wrote a checkpoint after `cp`: it
/// took an answer and asked again in a step whose parent wrote nothing (a sibling's value
/// was refused, the process died before the parent's write). `cp` then shows questions the
/// subgraph no longer asks.
async fn child_moved_on<S: State>(
    g: &CompiledInner<S>,
    (runtime, namespace): (&Runtime, &str),
    thread: &str,
    cp: &Stored<S>,
) -> Result<bool> {
    let mut looked: Vec<&str> = Vec::new();
    for interrupt in &cp.snapshot.interrupts {
        let node = interrupt.node.as_str();
        if !g.is_subgraph(node) || looked.contains(&node) {
            continue;
        }
        looked.push(node);
        // The subgraph ran in the step that suspended, the one after `cp`'s.
        let child = crate::graph::namespace::stored_child(namespace, node, cp.step + 1);
        let latest = runtime.store().latest_checkpoint(thread, &child).await?;
        if latest.is_some_and(|latest| latest.run == cp.run && latest.id > cp.id) {
            return Ok(true);
        }
    }
    Ok(false)
}
