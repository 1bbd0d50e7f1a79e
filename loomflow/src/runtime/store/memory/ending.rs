//! How a thread's run ends for good: finished under its claim (failed, or cancelled before
//! its first checkpoint), or deleted with everything the thread keeps.

use super::MemoryStore;
use super::threads::NO_PLACE;
use crate::runtime::clock::now_ms;
use crate::runtime::store::{DeletedThread, RunState, StoreError};

impl MemoryStore {
    /// [`Store::finish_run`](crate::runtime::Store::finish_run), made at once.
    pub(super) fn finish_now(
        &self,
        (thread, owner): (&str, &str),
        state: RunState,
        error: Option<String>,
    ) -> Result<(), StoreError> {
        let mut inner = self.lock_mut()?;
        let row = &mut inner.fenced((thread, NO_PLACE), owner, 0)?.slot.row;
        row.state = Some(state);
        row.error = error;
        row.runnable_at_ms = None;
        row.wake_at_ms = None;
        row.waiting_on.clear();
        row.input = None;
        row.cancel_requested = false;
        row.owner = None;
        row.until_ms = 0;
        row.lapses = 0;
        row.updated_at_ms = now_ms();
        Ok(())
    }

    /// [`Store::delete_thread`](crate::runtime::Store::delete_thread), made at once: the
    /// thread's slot goes, with its row, checkpoints and journal, and so do the signals
    /// pending for its session.
    pub(super) fn delete_thread_now(
        &self,
        thread: &str,
        owner: &str,
    ) -> Result<DeletedThread, StoreError> {
        let mut inner = self.lock_mut()?;
        inner.fenced((thread, NO_PLACE), owner, 0)?;
        let slot = inner.threads.remove(thread);
        let (checkpoints, journal_entries) =
            slot.map_or((0, 0), |slot| (slot.kept.len(), slot.journal.len()));
        let inner = &mut *inner;
        let before = inner.signals.len();
        // Their idempotency keys stay remembered for a while, as those of signals received.
        let now_ms = now_ms();
        inner.signals.retain(|_, signal| {
            let kept = signal.session != thread;
            if !kept {
                inner.keys.released(signal, now_ms);
            }
            kept
        });
        let signals = before - inner.signals.len();
        Ok(DeletedThread::new(
            checkpoints as u64,
            journal_entries as u64,
            signals as u64,
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::Value;

    use super::*;
    use crate::runtime::store::StoredSignal;
    use crate::runtime::store::records::CONSUMED_KEY_KEPT_MS;

    /// The keys of the signals a delete drops are forgotten an hour later, as those of
    /// signals received or pruned, not remembered for the life of the process.
    #[test]
    fn a_deleted_signals_key_is_forgotten_an_hour_later() {
        let store = MemoryStore::new();
        let signal = StoredSignal {
            seq: 0,
            session: "t".into(),
            name: "go".into(),
            payload: Value::Null,
            idempotency_key: Some("k".into()),
            sent_at_ms: 0,
        };
        let now = now_ms();
        assert!(store.lock_mut().unwrap().keys.remember(&signal, now));
        store.lock_mut().unwrap().signals.insert(1, signal.clone());
        store.claim_now("t", "me", now + 60_000, now).unwrap();

        let deleted = store.delete_thread_now("t", "me").unwrap();
        assert_eq!(deleted.signals, 1);
        let mut inner = store.lock_mut().unwrap();
        assert!(
            !inner.keys.remember(&signal, now_ms()),
            "a moment later: a duplicate"
        );
        let later = now_ms() + CONSUMED_KEY_KEPT_MS + 1;
        assert!(
            inner.keys.remember(&signal, later),
            "forgotten an hour later"
        );
    }
}
