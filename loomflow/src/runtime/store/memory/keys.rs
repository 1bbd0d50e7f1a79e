//! The idempotency keys of the memory store's signals.
//!
//! A key is remembered while its signal is pending and for
//! [`CONSUMED_KEY_KEPT_MS`] after the signal leaves the store (received, discarded or
//! pruned), as the durable stores keep a consumed row: a send retried within that time is
//! still a duplicate, and a long-lived process does not remember every key it ever saw.

use std::collections::{HashSet, VecDeque};

use crate::runtime::store::StoredSignal;
use crate::runtime::store::records::CONSUMED_KEY_KEPT_MS;

/// (session, name, key).
type Key = (String, String, String);

#[derive(Debug, Default)]
pub(super) struct SignalKeys {
    /// Every key remembered: those of pending signals and of recently consumed ones.
    remembered: HashSet<Key>,
    /// The keys of signals that left the store, oldest first, with when they left.
    released: VecDeque<(u64, Key)>,
}

impl SignalKeys {
    /// Remembers `signal`'s key; `false` when it is remembered already (a duplicate).
    /// Keys released long enough ago are forgotten first, `now_ms` being the send's time.
    pub(super) fn remember(&mut self, signal: &StoredSignal, now_ms: u64) -> bool {
        self.forget_released_before(now_ms.saturating_sub(CONSUMED_KEY_KEPT_MS));
        match key_of(signal) {
            Some(key) => self.remembered.insert(key),
            None => true,
        }
    }

    /// Whether (`session`, `name`, `key`) is remembered at `now_ms`.
    pub(super) fn knows(&mut self, session: &str, name: &str, key: &str, now_ms: u64) -> bool {
        self.forget_released_before(now_ms.saturating_sub(CONSUMED_KEY_KEPT_MS));
        let key = (session.to_owned(), name.to_owned(), key.to_owned());
        self.remembered.contains(&key)
    }

    /// Notes that `signal` left the store at `now_ms`: its key is forgotten
    /// [`CONSUMED_KEY_KEPT_MS`] later.
    pub(super) fn released(&mut self, signal: &StoredSignal, now_ms: u64) {
        if let Some(key) = key_of(signal) {
            self.released.push_back((now_ms, key));
        }
    }

    /// Forgets the keys of signals that left the store before `cutoff_ms`.
    pub(super) fn forget_released_before(&mut self, cutoff_ms: u64) {
        while let Some((at, _)) = self.released.front()
            && *at < cutoff_ms
        {
            if let Some((_, key)) = self.released.pop_front() {
                self.remembered.remove(&key);
            }
        }
    }
}

fn key_of(signal: &StoredSignal) -> Option<Key> {
    let key = signal.idempotency_key.as_ref()?;
    Some((signal.session.clone(), signal.name.clone(), key.clone()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use serde_json::Value;

    use super::*;

    fn keyed(key: Option<&str>) -> StoredSignal {
        StoredSignal {
            seq: 0,
            session: "s".into(),
            name: "approval".into(),
            payload: Value::Null,
            idempotency_key: key.map(str::to_owned),
            sent_at_ms: 0,
        }
    }

    #[test]
    fn a_key_is_a_duplicate_while_pending_and_for_an_hour_after() {
        let mut keys = SignalKeys::default();
        let signal = keyed(Some("k1"));
        assert!(keys.remember(&signal, 1_000));
        assert!(!keys.remember(&signal, 2_000), "pending: a duplicate");
        // Pending for days: never forgotten while it is in the store.
        assert!(!keys.remember(&signal, 1_000 + 10 * CONSUMED_KEY_KEPT_MS));

        keys.released(&signal, 5_000);
        let just_before = 5_000 + CONSUMED_KEY_KEPT_MS - 1;
        assert!(
            !keys.remember(&signal, just_before),
            "consumed a moment ago"
        );
        let after = 5_000 + CONSUMED_KEY_KEPT_MS + 1;
        assert!(keys.remember(&signal, after), "forgotten after an hour");
        assert!(keys.released.is_empty());
    }

    #[test]
    fn signals_without_a_key_remember_nothing() {
        let mut keys = SignalKeys::default();
        let signal = keyed(None);
        assert!(keys.remember(&signal, 0));
        assert!(keys.remember(&signal, 0));
        keys.released(&signal, 0);
        assert!(keys.remembered.is_empty() && keys.released.is_empty());
    }

    #[test]
    fn keys_are_forgotten_in_the_order_they_were_released() {
        let mut keys = SignalKeys::default();
        let (a, b) = (keyed(Some("a")), keyed(Some("b")));
        assert!(keys.remember(&a, 0) && keys.remember(&b, 0));
        keys.released(&a, 10);
        keys.released(&b, 20);
        keys.forget_released_before(15);
        assert!(keys.remember(&a, 15), "a was released before the cutoff");
        assert!(!keys.remember(&b, 15), "b was not");
    }

    /// Receiving, discarding and pruning a signal all start its key's hour.
    #[tokio::test]
    async fn every_way_a_signal_leaves_the_store_releases_its_key() {
        use crate::runtime::store::{MemoryStore, SignalPush, Store};

        let store = MemoryStore::new();
        let push = |key: &str| {
            let mut signal = keyed(Some(key));
            signal.sent_at_ms = 1;
            store.push_signal(signal)
        };
        let seq = |pushed| match pushed {
            SignalPush::Stored(seq) => seq,
            SignalPush::Duplicate => panic!("a duplicate"),
        };
        let taken = seq(push("taken").await.unwrap());
        let discarded = seq(push("discarded").await.unwrap());
        seq(push("pruned").await.unwrap());

        assert!(store.try_take_signal("s", taken).await.unwrap());
        store.discard_signal("s", discarded).await.unwrap();
        assert_eq!(store.prune_signals(2, &[]).await.unwrap(), 1);
        for key in ["taken", "discarded", "pruned"] {
            assert_eq!(push(key).await.unwrap(), SignalPush::Duplicate, "{key}");
        }

        store.lock().unwrap().keys.forget_released_before(u64::MAX);
        for key in ["taken", "discarded", "pruned"] {
            assert!(
                matches!(push(key).await.unwrap(), SignalPush::Stored(_)),
                "{key}"
            );
        }
    }
}
