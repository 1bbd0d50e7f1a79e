//! [`Untried`]: the signalled threads a worker took from its wake-ups and has not tried.

use std::collections::VecDeque;
use std::ops::{Deref, DerefMut};

use crate::runtime::wakes::WakeInbox;

/// Signalled threads (with the signals' names) taken from `wakes` and not tried yet. They
/// go back to it however the worker stops trying them, an error, a panic or a future
/// dropped included: on a store that keeps no signals (the memory store) nothing else
/// would find their runs.
pub(super) struct Untried<'a> {
    wakes: &'a WakeInbox,
    queue: VecDeque<(String, String)>,
}

impl<'a> Untried<'a> {
    pub(super) fn new(wakes: &'a WakeInbox) -> Self {
        Self {
            wakes,
            queue: VecDeque::new(),
        }
    }
}

impl Deref for Untried<'_> {
    type Target = VecDeque<(String, String)>;

    fn deref(&self) -> &Self::Target {
        &self.queue
    }
}

impl DerefMut for Untried<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.queue
    }
}

impl Drop for Untried<'_> {
    fn drop(&mut self) {
        if !self.queue.is_empty() {
            self.wakes.put_back(std::mem::take(&mut self.queue));
        }
    }
}
