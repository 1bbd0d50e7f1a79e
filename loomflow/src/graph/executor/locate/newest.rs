//! Where a run's checkpoints end: the newest, and what a fresh run follows.

use crate::runtime::{Checkpoint, RunStatus, Runtime, StoreError};

/// The newest checkpoint of `thread` in `namespace`: from the memory store, as it was
/// handed over (the values it keeps, no body built, no thread named), read at once; there,
/// the thread is found from its `place`, the claim's (see `MemoryStore::claim_now`).
pub(super) async fn newest(
    runtime: &Runtime,
    (thread, place): (&str, usize),
    namespace: &str,
) -> Result<Option<Checkpoint>, StoreError> {
    match runtime.store().as_memory() {
        Some(memory) => memory.latest_unnamed((thread, place), namespace),
        None => runtime.store().latest_checkpoint(thread, namespace).await,
    }
}

/// The number of the thread's newest run in `namespace`, and whether the thread's row may
/// still ask that run to stop (it never ended: its execution died with a cancel on its
/// way): a fresh run's start, written at once, then makes the row its own, which drops
/// that cancel.
pub(super) async fn previous_run(
    runtime: &Runtime,
    placed: (&str, usize),
    namespace: &str,
) -> Result<(Option<u64>, bool), StoreError> {
    if let Some(memory) = runtime.store().as_memory() {
        let previous = memory.latest_run(placed, namespace)?;
        return Ok((previous, memory.cancel_requested_now(placed.0)?));
    }
    let newest = newest(runtime, placed, namespace).await?;
    let open = (newest.as_ref())
        .is_some_and(|cp| matches!(cp.status, RunStatus::Running | RunStatus::Interrupted));
    Ok((newest.map(|cp| cp.run), open))
}
