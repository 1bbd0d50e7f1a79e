//! The idempotency keys the mailbox remembers, so that a repeated send delivers once.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use tokio::time::Instant;

use super::MailboxConfig;

/// Idempotency keys remembered, oldest first.
#[derive(Default)]
pub(super) struct Remembered {
    keys: HashSet<Arc<str>>,
    /// Expiry order equals insertion order because every key lives equally long.
    order: VecDeque<(Option<Instant>, Arc<str>)>,
}

impl Remembered {
    /// Whether `(session, name, key)` was already seen; remembers it if not.
    pub(super) fn seen(
        &mut self,
        config: &MailboxConfig,
        session: &str,
        name: &str,
        key: &str,
        now: Instant,
    ) -> bool {
        self.forget_expired(now);
        let joined = joined(session, name, key);
        if self.keys.contains(joined.as_str()) {
            return true;
        }
        if let Some(max) = config.max_idempotency_keys {
            if max == 0 {
                return false;
            }
            while self.keys.len() >= max {
                let Some((_, old)) = self.order.pop_front() else {
                    break;
                };
                self.keys.remove(&old);
            }
        }
        let joined: Arc<str> = Arc::from(joined);
        // A TTL past what an instant holds is no expiry.
        let expiry = config
            .effective_key_ttl()
            .and_then(|ttl| now.checked_add(ttl));
        self.keys.insert(Arc::clone(&joined));
        self.order.push_back((expiry, joined));
        false
    }

    /// Whether `(session, name, key)` is remembered, without remembering it.
    pub(super) fn remembers(&mut self, session: &str, name: &str, key: &str, now: Instant) -> bool {
        self.forget_expired(now);
        self.keys.contains(joined(session, name, key).as_str())
    }

    fn forget_expired(&mut self, now: Instant) {
        while let Some((Some(expiry), _)) = self.order.front()
            && *expiry <= now
        {
            if let Some((_, old)) = self.order.pop_front() {
                self.keys.remove(&old);
            }
        }
    }
}

/// One text for the three: lengths make it unambiguous whatever the parts contain.
fn joined(session: &str, name: &str, key: &str) -> String {
    format!("{}:{session}{}:{name}{key}", session.len(), name.len())
}
