//! Turn-taking: runs on one session of an agent take turns, and the bookkeeping for a
//! session goes away when nobody holds or waits for its turn.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::OwnedMutexGuard;

/// Hashed with foldhash, seeded per process, like the memory store's maps by thread: each
/// agent run takes and gives back its session's turn.
type Locks = HashMap<String, Arc<tokio::sync::Mutex<()>>, foldhash::fast::RandomState>;

/// One lock per session that has a run going or waiting.
#[derive(Debug, Default)]
pub(crate) struct SessionTurns(Mutex<Locks>);

/// A session's turn: held while a run of that session goes on.
pub(crate) struct Turn {
    turns: Arc<SessionTurns>,
    session: String,
    _guard: OwnedMutexGuard<()>,
}

impl SessionTurns {
    fn locks(&self) -> MutexGuard<'_, Locks> {
        // The critical sections cannot panic, so a poisoned lock still holds sound data.
        crate::sync::lock(&self.0)
    }

    /// Waits for `session`'s turn.
    pub(crate) async fn take(self: &Arc<Self>, session: &str) -> Turn {
        let lock = Arc::clone(self.locks().entry(session.to_owned()).or_default());
        Turn {
            turns: Arc::clone(self),
            session: session.to_owned(),
            _guard: lock.lock_owned().await,
        }
    }

    /// How many sessions have a run going or waiting.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.locks().len()
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut locks = self.turns.locks();
        // Two owners left (the map and this turn's guard): nobody waits, so forget the
        // session. A waiter clones the lock under the map's lock, so it cannot slip in.
        if locks
            .get(&self.session)
            .is_some_and(|lock| Arc::strong_count(lock) == 2)
        {
            locks.remove(&self.session);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_session_is_forgotten_once_its_last_turn_ends() {
        let turns = Arc::new(SessionTurns::default());
        let first = turns.take("s").await;
        let waiting = tokio::spawn({
            let turns = Arc::clone(&turns);
            async move { turns.take("s").await }
        });
        tokio::task::yield_now().await;
        drop(first);
        let second = waiting.await.unwrap();
        assert_eq!(turns.len(), 1, "the waiter's turn keeps the session");
        drop(second);
        assert_eq!(turns.len(), 0, "no run left: nothing kept");
    }
}
