//! Forgetting what is queued for a session whose thread was deleted.

use super::super::Mailbox;
use super::State;

impl State {
    /// Forgets the payloads queued for `session`, live or pending; returns how many. Its
    /// parked waiters stay in line, for what comes next.
    fn forget_queued(&mut self, session: &str) -> usize {
        let mut forgotten = 0;
        if let Some(live) = self.live.get_mut(session) {
            for channel in live.names.values_mut() {
                forgotten += channel.queue.len();
                channel.queue.clear();
            }
            live.names.retain(|_, channel| !channel.is_idle());
        }
        if let Some(pending) = self.pending.remove(session) {
            self.lru.remove(&pending.tick);
            forgotten += pending
                .names
                .values()
                .map(|queue| queue.len())
                .sum::<usize>();
        }
        forgotten
    }
}

impl Mailbox {
    /// Forgets the payloads queued for `session` in this mailbox, open or pending (its
    /// thread was deleted, with the signals the store kept for it); returns how many.
    /// Nothing is reported as dropped: the store's rows are gone already.
    pub(crate) fn forget_queued(&self, session: &str) -> usize {
        self.inner.lock().forget_queued(session)
    }
}
