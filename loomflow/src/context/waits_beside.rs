//! The signal waits a node has under way, so that waits raced in a `select!` (a Temporal
//! user's selector over a "shipped" and a "cancel" signal) take one payload between them and
//! suspend the run on all of them: either signal wakes it.
//!
//! A wait is on the list from its first poll. While one of them has not looked at its
//! journal yet (a node run again replays the branch it took), or is looking for a payload
//! or taking one, the others take none: a payload they consumed would be lost when the
//! `select!` drops them. One about to suspend the run waits until each of the others has
//! looked and found none, then lists them all beside itself.
//!
//! Only waits polled beside it hold one back: a wait still alive but no longer polled (pinned
//! outside a `select!` that ended without it) would never look, and is passed over once it
//! was not polled across two naps of the one that deferred to it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use super::Context;
use crate::graph::RunError;
use crate::runtime::Interrupt;

/// A wait under way in the node, as its interrupt will say it should the run suspend.
pub(super) struct WaitUnderWay {
    name: String,
    occurrence: u32,
    details: Option<Value>,
    wake_at_ms: Option<u64>,
    /// Looking for a payload, or taking one it found: it may be about to return, and a
    /// sibling takes none meanwhile, nor suspends the run (dropping it while the store
    /// consumes its payload).
    receiving: bool,
    /// It has looked at its journal (a payload it received before, when the node runs
    /// again) and knows its deadline: until then, its siblings take nothing and do not
    /// suspend, as it may return at once, and its deadline is not known to list.
    ready: bool,
    /// It has looked for a payload and found none (or waits in the mailbox for one): a
    /// sibling may suspend the run, listing it, without taking a payload it would have found.
    looked: bool,
    /// How many times its future was polled (counted by the wait around it).
    polls: Arc<AtomicU64>,
}

/// What a wait that defers to others saw of them: one not polled across two of its naps is
/// not beside it (see the module's docs), and it passes it over. (Across one, it may have
/// been polled before it in the pass that ended the first nap, and after it in the next.)
#[derive(Default)]
pub(super) struct Deferred {
    /// By wait (name, occurrence): its poll count when last seen polled, and how many times
    /// in a row it was found not polled since.
    seen: Vec<(String, u32, u64, u32)>,
}

/// Takes a wait off the node's list when it ends, however it ends (a `select!` drops it).
pub(super) struct UnderWay<'a> {
    ctx: &'a Context,
    name: String,
    occurrence: u32,
}

impl Drop for UnderWay<'_> {
    fn drop(&mut self) {
        let (name, occurrence) = (&self.name, self.occurrence);
        let mut control = self.ctx.control();
        (control.waits_under_way).retain(|w| !(w.name == *name && w.occurrence == occurrence));
    }
}

impl Context {
    /// Puts the `occurrence`-th wait for signal `name` on the node's list until the returned
    /// guard is dropped, with what its interrupt would carry.
    pub(super) fn wait_under_way(
        &self,
        name: &str,
        occurrence: u32,
        details: Option<Value>,
        polls: Arc<AtomicU64>,
    ) -> UnderWay<'_> {
        self.control().waits_under_way.push(WaitUnderWay {
            name: name.to_owned(),
            occurrence,
            details,
            wake_at_ms: None,
            receiving: false,
            ready: false,
            looked: false,
            polls,
        });
        UnderWay {
            ctx: self,
            name: name.to_owned(),
            occurrence,
        }
    }

    /// The `occurrence`-th wait for `name` has looked at its journal, and waits until
    /// `wake_at_ms` (its deadline), if it has one.
    pub(super) fn wait_ready(&self, name: &str, occurrence: u32, wake_at_ms: Option<u64>) {
        let mut control = self.control();
        let waits = control.waits_under_way.iter_mut();
        for wait in waits.filter(|w| w.name == name && w.occurrence == occurrence) {
            (wait.ready, wait.wake_at_ms) = (true, wake_at_ms);
        }
    }

    /// The `occurrence`-th wait for `name` looked for a payload and found none, or waits for
    /// one in the mailbox.
    pub(super) fn wait_looked(&self, name: &str, occurrence: u32) {
        let mut control = self.control();
        let waits = control.waits_under_way.iter_mut();
        for wait in waits.filter(|w| w.name == name && w.occurrence == occurrence) {
            wait.looked = true;
        }
    }

    /// Whether a wait beside the `occurrence`-th for `name` has yet to look for its payload,
    /// or is looking, or taking one: the `occurrence`-th does not suspend the run (which
    /// drops the others) until each has looked and found none.
    pub(super) fn beside_unsettled(
        &self,
        name: &str,
        occurrence: u32,
        seen: &mut Deferred,
    ) -> bool {
        self.beside(name, occurrence, seen, |w| {
            w.receiving || !w.ready || !w.looked
        })
    }

    /// Says whether the `occurrence`-th wait for `name` is looking for a payload or taking
    /// one it found.
    pub(super) fn set_receiving(&self, name: &str, occurrence: u32, receiving: bool) {
        let mut control = self.control();
        let waits = control.waits_under_way.iter_mut();
        for wait in waits.filter(|w| w.name == name && w.occurrence == occurrence) {
            wait.receiving = receiving;
        }
    }

    /// Whether a wait beside the `occurrence`-th for `name` is looking for a payload or
    /// taking one, or has not looked at its journal yet: the `occurrence`-th takes nothing
    /// and does not suspend until it has.
    pub(super) fn beside_busy(&self, name: &str, occurrence: u32, seen: &mut Deferred) -> bool {
        self.beside(name, occurrence, seen, |w| w.receiving || !w.ready)
    }

    /// Whether a wait beside the `occurrence`-th for `name` holds it back: one of the others
    /// that `holds`, and that was polled since it last held it back (noted in `seen`).
    fn beside(
        &self,
        name: &str,
        occurrence: u32,
        seen: &mut Deferred,
        holds: impl Fn(&WaitUnderWay) -> bool,
    ) -> bool {
        let control = self.control();
        let mut held = false;
        let others = (control.waits_under_way.iter())
            .filter(|w| !(w.name == name && w.occurrence == occurrence));
        for wait in others.filter(|w| holds(w)) {
            let polls = wait.polls.load(Ordering::Relaxed);
            let noted = (seen.seen.iter_mut())
                .find(|(n, o, _, _)| *n == wait.name && *o == wait.occurrence);
            match noted {
                // Not polled across two naps: not beside it (pinned outside a `select!` that
                // ended without it).
                Some((_, _, before, idle)) if *before == polls => {
                    *idle += 1;
                    held |= *idle < 2;
                }
                Some((_, _, before, idle)) => {
                    (*before, *idle) = (polls, 0);
                    held = true;
                }
                None => {
                    seen.seen
                        .push((wait.name.clone(), wait.occurrence, polls, 0));
                    held = true;
                }
            }
        }
        held
    }

    /// Records that the node suspends until signal `name` arrives, in its `occurrence`-th
    /// wait for that name (from 0), and with it every other wait the node has under way.
    /// `details`, when given, are shown in the interrupt (a tool approval puts the pending
    /// call there).
    /// `wake_at_ms` is the wait's deadline, when it has one: a worker carries the run on
    /// then, and the wait times out.
    ///
    /// The interrupt's id is `<node>#signal:<name>`, and `#<occurrence>` after it for a
    /// node's second wait for the same name and later: a run suspended on its next wait
    /// is not taken for one still suspended on the wait it got past.
    pub(crate) fn suspend_for_signal_with(
        &self,
        name: &str,
        occurrence: u32,
        details: Option<Value>,
        wake_at_ms: Option<u64>,
    ) -> RunError {
        let mut control = self.control();
        let index = control.interrupts_called;
        let waits = std::iter::once((name, occurrence, details, wake_at_ms));
        let beside = std::mem::take(&mut control.waits_under_way);
        let beside_waits = (beside.iter())
            .filter(|w| !(w.name == name && w.occurrence == occurrence))
            .map(|w| (&*w.name, w.occurrence, w.details.clone(), w.wake_at_ms));
        for (name, occurrence, details, wake_at_ms) in waits.chain(beside_waits) {
            let id = match occurrence {
                0 => format!("{}#signal:{name}", self.qualified_node()),
                n => format!("{}#signal:{name}#{n}", self.qualified_node()),
            };
            // Waits the node runs side by side (the approvals of one turn's tool calls, a
            // `select!`) each suspend, or are listed by the one that does: the run waits on
            // all of them, and lists each once. Not beside an interrupt of another kind.
            let listed = (control.suspension.iter()).all(|i| i.signal.is_some() && i.id != id);
            if listed {
                control.suspension.push(Interrupt {
                    id,
                    node: String::from(&*self.node),
                    index,
                    payload: match details {
                        Some(details) => {
                            serde_json::json!({ "waiting_for_signal": name, "details": details })
                        }
                        None => serde_json::json!({ "waiting_for_signal": name }),
                    },
                    signal: Some(name.to_owned()),
                    wake_at_ms,
                });
            }
        }
        control.waits_under_way = beside;
        RunError::Suspended {
            node: String::from(&*self.node),
        }
    }
}
