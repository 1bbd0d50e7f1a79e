//! What the writer last made each claimed run's row say, so that a step that changes none
//! of it only renews the lease.
//!
//! An `UPDATE` rewrites the entry of every index on a column it sets, whether or not the
//! value changes: setting `runnable_at_ms` to the 0 it already holds deletes and inserts
//! its `runs_by_runnable_at` entry, one more page for the WAL on every commit. Most steps
//! of a run leave its row as the step before left it (running, waiting on nothing), so
//! those steps set the lease and update time only.
//!
//! Only the writer's connection writes rows, and while a claim is held nobody else changes
//! the columns a step sets: a submit refuses a held run, a cancel request sets a column of
//! its own. What is noted for a thread is forgotten when its claim is taken or let go, and
//! everything is forgotten when a group fails, whose writes are rolled back.

use std::collections::HashMap;

use crate::runtime::store::RowUpdate;

/// Past this many threads noted, the notes start again (claims dropped without a release
/// would otherwise keep theirs).
const MAX_NOTED: usize = 4096;

/// What the last step under each held claim wrote on its run's row.
#[derive(Debug, Default)]
pub(super) struct Followed {
    by_thread: HashMap<String, Noted>,
}

#[derive(Debug)]
struct Noted {
    owner: String,
    run: i64,
    update: RowUpdate,
}

impl Followed {
    /// Whether `thread`'s row already says what `update` would make it say for run `run`,
    /// as written under `owner`'s claim.
    pub(super) fn unchanged(
        &self,
        thread: &str,
        owner: &str,
        run: i64,
        update: &RowUpdate,
    ) -> bool {
        self.by_thread.get(thread).is_some_and(|noted| {
            noted.owner == owner && noted.run == run && says_the_same(&noted.update, update)
        })
    }

    /// Notes that `thread`'s row was made to follow `update` for run `run` under `owner`.
    pub(super) fn note(&mut self, thread: &str, owner: &str, run: i64, update: &RowUpdate) {
        if self.by_thread.len() >= MAX_NOTED && !self.by_thread.contains_key(thread) {
            self.by_thread.clear();
        }
        let noted = Noted {
            owner: owner.to_owned(),
            run,
            update: update.clone(),
        };
        self.by_thread.insert(thread.to_owned(), noted);
    }

    /// Forgets `thread`: its claim was taken or let go, or its row written otherwise.
    pub(super) fn forget(&mut self, thread: &str) {
        if !self.by_thread.is_empty() {
            self.by_thread.remove(thread);
        }
    }

    /// Forgets every thread: a group failed and its writes were rolled back.
    pub(super) fn forget_all(&mut self) {
        self.by_thread.clear();
    }
}

/// Whether a row written from `before` already says what `now` would write. A graph or a
/// fingerprint `now` leaves out is kept by the write (`COALESCE`), so it says the same.
fn says_the_same(before: &RowUpdate, now: &RowUpdate) -> bool {
    before.state == now.state
        && before.waiting_on == now.waiting_on
        && before.wake_at_ms == now.wake_at_ms
        && before.error == now.error
        && (now.graph.is_none() || now.graph == before.graph)
        && (now.fingerprint.is_none() || now.fingerprint == before.fingerprint)
}
