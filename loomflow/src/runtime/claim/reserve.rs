//! The start of a fresh `Exit` run, written before its first journal entry.
//!
//! A run takes its number from the thread's newest checkpoint (one past it). An `Exit` run
//! writes no checkpoint until it stops, so one abandoned half way (its process died, its
//! future was dropped) leaves none, and the thread's next run takes the same number. Its
//! journal is keyed by that number: the next run would be handed the abandoned run's step
//! results instead of doing its own steps, and its subgraphs the abandoned run's
//! subgraph checkpoints. So an `Exit` run that journals anything, or whose subgraph writes
//! a checkpoint, writes its start first (unsynced, as a `Sync` run's start is), which gives
//! the number away; a run that does neither writes nothing more than before.

use std::sync::atomic::{AtomicBool, Ordering};

use super::RunClaim;
use crate::runtime::store::{Checkpoint, StoreError};

/// A start checkpoint waiting for the run's first journal entry.
#[derive(Default)]
pub(super) struct ReservedStart {
    /// Whether one waits: read on every journal write, so that most take no lock.
    waiting: AtomicBool,
    /// Held while it is written, so that no journal entry goes out before it. Boxed: most
    /// runs reserve none, and every claim has room for one.
    start: tokio::sync::Mutex<Option<Box<Checkpoint>>>,
}

impl RunClaim {
    /// Keeps `start`, a fresh `Exit` run's first checkpoint, to be written before the run's
    /// first journal entry.
    pub(crate) fn reserve_start(&self, start: Checkpoint) {
        let reserved = &self.inner.reserved;
        if let Ok(mut slot) = reserved.start.try_lock() {
            *slot = Some(Box::new(start));
            reserved.waiting.store(true, Ordering::Release);
        }
    }

    /// Writes the reserved start, if one waits; what every journal write, and every
    /// checkpoint of a subgraph's run, does first.
    pub(crate) async fn write_reserved_start(&self) -> Result<(), StoreError> {
        let reserved = &self.inner.reserved;
        if !reserved.waiting.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut slot = reserved.start.lock().await;
        if let Some(start) = slot.take()
            && let Err(error) = self.put_checkpoint(Checkpoint::clone(&start)).await
        {
            // Kept for the next journal write to try again.
            *slot = Some(start);
            return Err(error);
        }
        reserved.waiting.store(false, Ordering::Release);
        Ok(())
    }
}
