//! The task that brings into a runtime's mailbox the signals other processes store (see
//! [`signals`](super::signals)): a waiter in this process receives a signal a web handler
//! elsewhere sent, whether or not the process runs a worker.

use super::{Runtime, store_told};

impl Runtime {
    /// Starts, once per runtime on a durable store, the task that brings in signals other
    /// processes store: every poll interval, and at once when a store that is told of
    /// changes (PostgreSQL's `LISTEN`) is told, it probes the store's change counter, and
    /// refreshes the mailbox when it moved. It ends with the runtime.
    pub(super) fn watch_for_signals(&self) {
        use std::sync::atomic::Ordering;
        if !self.store().is_durable() || self.inner.watching.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = std::sync::Arc::downgrade(&self.inner);
        // Dropped with the task, also when its Tokio runtime shuts down, and made at once: a
        // task dropped before it ever ran (its runtime's `block_on` returned first), or
        // never spawned, lets go of the flag too, and the next wait on another Tokio
        // runtime starts a watcher again.
        let watching = Watching(weak.clone());
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let every = self.inner.poll_interval;
        let notifier = self.store().change_notifier();
        handle.spawn(async move {
            let _watching = watching;
            let mut seen = None;
            loop {
                // Listening before the counter is read (see `store_told`).
                let mut listening =
                    std::pin::pin!(notifier.as_deref().map(tokio::sync::Notify::notified));
                store_told::enable(listening.as_mut());
                {
                    let Some(inner) = weak.upgrade() else { return };
                    let runtime = Runtime { inner };
                    let change = runtime.store().change_counter();
                    if change.is_none() || change != seen {
                        match runtime.refresh_signals().await {
                            Ok(_) => seen = change,
                            // Looked again at the next tick, whether or not the store
                            // changes again meanwhile.
                            Err(error) => {
                                tracing::warn!(%error, "could not load signals from the store");
                            }
                        }
                    }
                }
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    () = store_told::told(listening) => {}
                }
            }
        });
    }
}

/// Marks the runtime as watched no more once the watching task ends.
struct Watching(std::sync::Weak<super::RuntimeInner>);

impl Drop for Watching {
    fn drop(&mut self) {
        if let Some(inner) = self.0.upgrade() {
            inner
                .watching
                .store(false, std::sync::atomic::Ordering::Release);
        }
    }
}
