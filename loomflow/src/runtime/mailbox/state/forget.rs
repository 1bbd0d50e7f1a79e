//! Forgetting what is queued for a session whose thread was deleted.

use std::collections::VecDeque;

use super::super::Mailbox;
use super::super::queued::Queued;
use super::State;

impl State {
    /// Forgets the payloads queued for `session`, live or pending, that were sent before
    /// `mark` was taken; returns how many. Those sent since stay queued, and its parked
    /// waiters stay in line, for what comes next.
    fn forget_queued(&mut self, session: &str, mark: SendMark) -> usize {
        let before = |queued: &Queued| queued.order <= mark.0;
        let mut forgotten = 0;
        if let Some(live) = self.live.get_mut(session) {
            for channel in live.names.values_mut() {
                forgotten += forget_from(&mut channel.queue, before);
            }
            live.names.retain(|_, channel| !channel.is_idle());
        }
        if let Some(pending) = self.pending.get_mut(session) {
            for queue in pending.names.values_mut() {
                forgotten += forget_from(queue, before);
            }
            pending.names.retain(|_, queue| !queue.is_empty());
            if pending.names.is_empty() {
                let tick = pending.tick;
                self.pending.remove(session);
                self.lru.remove(&tick);
            }
        }
        forgotten
    }

    /// Where the next payload sent takes its place in send order.
    fn send_mark(&self) -> SendMark {
        SendMark(self.next_id)
    }
}

/// Removes the payloads of `queue` that `before` picks; returns how many.
fn forget_from(queue: &mut VecDeque<Queued>, before: impl Fn(&Queued) -> bool) -> usize {
    let had = queue.len();
    queue.retain(|queued| !before(queued));
    had - queue.len()
}

/// A point in a mailbox's send order: what was sent before it was taken sorts at or before
/// it, what is sent after sorts after (a payload given back keeps its place).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendMark(u64);

impl Mailbox {
    /// Forgets the payloads queued for `session` in this mailbox, open or pending, sent
    /// before `mark` (its thread was deleted, with the signals the store kept for it);
    /// returns how many. Nothing is reported as dropped: the store's rows are gone already.
    pub(crate) fn forget_queued(&self, session: &str, mark: SendMark) -> usize {
        self.inner.lock().forget_queued(session, mark)
    }

    /// The point in send order now: [`forget_queued`](Self::forget_queued) given it spares
    /// what is sent from now on.
    pub(crate) fn send_mark(&self) -> SendMark {
        self.inner.lock().send_mark()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::super::super::{Mailbox, MailboxConfig};

    /// A thread's delete forgets what was sent before it began, live or pending, and keeps
    /// what was sent while it deleted, for the name's next run.
    #[test]
    fn only_what_was_sent_before_the_mark_is_forgotten() {
        let mb = Mailbox::new(MailboxConfig::default());
        let open = mb.open_session("live");
        mb.signal("live", "n", json!("old")).unwrap();
        mb.signal("pending", "n", json!("old")).unwrap();
        mb.signal("pending", "m", json!("old")).unwrap();
        let mark = mb.send_mark();
        mb.signal("live", "n", json!("new")).unwrap();
        mb.signal("pending", "n", json!("new")).unwrap();
        assert_eq!(mb.forget_queued("live", mark), 1);
        assert_eq!(mb.forget_queued("pending", mark), 2);
        assert_eq!(mb.poll("live", "n").unwrap(), Some(json!("new")));
        assert_eq!(mb.poll("live", "n").unwrap(), None);
        drop(open);
        let _open = mb.open_session("pending");
        assert_eq!(mb.poll("pending", "n").unwrap(), Some(json!("new")));
        assert_eq!(mb.poll("pending", "m").unwrap(), None);
        // Nothing left: a later delete finds nothing to forget.
        assert_eq!(mb.forget_queued("pending", mb.send_mark()), 0);
    }
}
