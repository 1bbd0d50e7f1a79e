//! [`SessionGuard`]: what keeps a session's mailbox open.

use std::sync::Arc;

use super::Inner;

/// Keeps a session's mailbox open; see [`Mailbox::open_session`](super::Mailbox::open_session).
///
/// Cloning a guard opens the session once more.
#[must_use = "the session closes when the guard drops"]
pub struct SessionGuard {
    pub(super) inner: Arc<Inner>,
    pub(super) session: Arc<str>,
    /// On the last exit, undelivered signals go back to the pending mailbox instead of
    /// being discarded.
    pub(super) keep_leftovers: std::sync::atomic::AtomicBool,
}

impl SessionGuard {
    /// The session this guard keeps open.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// When this guard is the session's last exit, its undelivered signals are kept as
    /// pending signals rather than discarded: a run that suspends keeps what was sent to it
    /// meanwhile, for when it carries on.
    pub(crate) fn keep_leftovers(&self) {
        self.keep_leftovers
            .store(true, std::sync::atomic::Ordering::Release);
    }
}

impl std::fmt::Debug for SessionGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionGuard")
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

impl Clone for SessionGuard {
    fn clone(&self) -> Self {
        self.inner.lock().open(&self.inner.config, &self.session);
        Self {
            inner: Arc::clone(&self.inner),
            session: Arc::clone(&self.session),
            keep_leftovers: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        let keep = *self.keep_leftovers.get_mut();
        self.inner
            .lock()
            .close(&self.inner.config, &self.session, keep);
    }
}
