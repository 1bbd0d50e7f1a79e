//! The memory store's threads: each one's slot, found by its name or by its place.
//!
//! A thread keeps its slot, at the same place, until it is deleted, when the last slot takes
//! its place. A claim taken in line remembers its thread's place, so that the writes under
//! it (every step of the run) find the slot without hashing the name; the name at that
//! place is compared first, and any place that does not hold the thread (any more) falls
//! back to the lookup by name.

use std::collections::HashMap;
use std::sync::Arc;

use super::slot::ThreadSlot;

/// A thread's name as a caller hands it to the store: borrowed, and copied when the store
/// keeps it, or shared already (an execution's), and kept as it is.
pub(crate) trait SharedName: AsRef<str> + Copy {
    /// The name to keep.
    fn to_key(&self) -> Arc<str>;
}

impl SharedName for &str {
    fn to_key(&self) -> Arc<str> {
        Arc::from(*self)
    }
}

impl SharedName for &Arc<str> {
    fn to_key(&self) -> Arc<str> {
        Arc::clone(self)
    }
}

/// A place no thread has: what a caller that knows none passes.
pub(crate) const NO_PLACE: usize = usize::MAX;

#[derive(Debug, Default)]
pub(super) struct Threads {
    /// Each thread's place in `slots`, by name: hashed with foldhash, seeded per process,
    /// which costs a fraction of SipHash. A name is shared: the executor's claims in line
    /// file a thread under the name its execution holds, without a copy (see
    /// [`SharedName`]).
    places: HashMap<Arc<str>, usize, foldhash::fast::RandomState>,
    /// The slots, with their threads' names, in the order the threads came.
    slots: Vec<(Arc<str>, ThreadSlot)>,
}

impl Threads {
    pub(super) fn get(&self, thread: &str) -> Option<&ThreadSlot> {
        let place = *self.places.get(thread)?;
        self.slots.get(place).map(|(_, slot)| slot)
    }

    pub(super) fn get_mut(&mut self, thread: &str) -> Option<&mut ThreadSlot> {
        let place = *self.places.get(thread)?;
        self.slots.get_mut(place).map(|(_, slot)| slot)
    }

    /// `thread`'s slot, from `place` when the thread is there, or else by its name.
    #[inline]
    pub(super) fn at(&self, place: usize, thread: &str) -> Option<&ThreadSlot> {
        match self.slots.get(place) {
            Some((name, slot)) if same(name, thread) => Some(slot),
            _ => self.get(thread),
        }
    }

    /// [`at`](Self::at), to write.
    #[inline]
    pub(super) fn at_mut(&mut self, place: usize, thread: &str) -> Option<&mut ThreadSlot> {
        let here = (self.slots.get(place)).is_some_and(|(name, _)| same(name, thread));
        match here {
            true => self.slots.get_mut(place).map(|(_, slot)| slot),
            false => self.get_mut(thread),
        }
    }

    /// `thread`'s place, and its slot: a new, empty one for a thread the store does not
    /// know yet, whose name is copied only then.
    pub(super) fn place(&mut self, thread: impl SharedName) -> (usize, &mut ThreadSlot) {
        let place = match self.places.get(thread.as_ref()) {
            Some(&place) => place,
            None => {
                let name = thread.to_key();
                let place = self.slots.len();
                self.places.insert(Arc::clone(&name), place);
                self.slots.push((name, ThreadSlot::default()));
                place
            }
        };
        // Every place in `places` has its slot: the two grow and shrink together.
        (place, &mut self.slots[place].1)
    }

    /// Takes `thread`'s slot out, if it has one; the last slot moves to its place.
    pub(super) fn remove(&mut self, thread: &str) -> Option<ThreadSlot> {
        let place = self.places.remove(thread)?;
        let (_, slot) = self.slots.swap_remove(place);
        if let Some((moved, _)) = self.slots.get(place) {
            self.places.insert(Arc::clone(moved), place);
        }
        Some(slot)
    }

    /// `thread`'s slot, a new one for a thread the store does not know yet.
    pub(super) fn slot(&mut self, thread: impl SharedName) -> &mut ThreadSlot {
        self.place(thread).1
    }

    /// Every thread, with its slot.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &ThreadSlot)> {
        self.slots.iter().map(|(name, slot)| (name, slot))
    }

    /// Every thread's slot.
    pub(super) fn values(&self) -> impl Iterator<Item = &ThreadSlot> {
        self.slots.iter().map(|(_, slot)| slot)
    }
}

/// Whether `name`, a slot's, is `thread`: the claim's own name for it is the slot's when
/// it first claimed the thread, and then a pointer is compared rather than the text.
#[inline]
fn same(name: &Arc<str>, thread: &str) -> bool {
    std::ptr::eq(&**name, thread) || **name == *thread
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_place_finds_its_thread_and_any_other_falls_back_to_the_name() {
        let mut threads = Threads::default();
        let a: Arc<str> = Arc::from("a");
        let (place_a, _) = threads.place(&a);
        let (place_b, slot_b) = threads.place("b");
        slot_b.row.run = 7;
        assert_eq!(threads.place("a").0, place_a, "a thread keeps its place");
        assert_ne!(place_a, place_b);

        assert_eq!(threads.at(place_b, "b").unwrap().row.run, 7);
        assert_eq!(
            threads.at(place_a, "b").unwrap().row.run,
            7,
            "the wrong place"
        );
        assert_eq!(threads.at(NO_PLACE, "b").unwrap().row.run, 7, "no place");
        threads.at_mut(place_a, "b").unwrap().row.run = 8;
        assert_eq!(threads.get("b").unwrap().row.run, 8);
        assert!(threads.at(place_a, "c").is_none() && threads.at_mut(NO_PLACE, "c").is_none());

        let names: Vec<&str> = threads.iter().map(|(name, _)| &**name).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(threads.values().count(), 2);

        // `a` goes, and `b` takes its place: `b`'s old place finds it by name.
        assert_eq!(threads.remove("a").unwrap().row.run, 0);
        assert!(threads.remove("a").is_none() && threads.get("a").is_none());
        assert_eq!(threads.place("b").0, place_a);
        assert_eq!(threads.at(place_b, "b").unwrap().row.run, 8);
        assert!(threads.at(place_a, "a").is_none());
        assert_eq!(threads.remove("b").unwrap().row.run, 8);
        assert_eq!(threads.values().count(), 0);
    }
}
