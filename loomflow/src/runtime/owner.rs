//! Who holds a run's claim.
//!
//! An execution's owner id is its runtime's id and its number, `runtime#n` as text. A
//! store that keeps rows takes the text; the memory store keeps and compares the two
//! parts, so that an execution that writes only there never writes the text out.

use std::fmt;
use std::sync::Arc;

use crate::numbered::{is_numbered, numbered_shared};

/// An owner id: an execution's (its runtime's id and its number), or one taken as text (a
/// claim made through the [`Store`](crate::runtime::Store) API, a worker's).
///
/// The two forms of one id are the same owner: `runtime#n` taken as text holds what the
/// execution `n` of `runtime` holds.
#[derive(Clone, Debug)]
pub(crate) struct OwnerId {
    /// The runtime's id, or the whole id when it was taken as text.
    base: Arc<str>,
    /// The execution's number; `None` for an id taken as text.
    execution: Option<u64>,
}

impl OwnerId {
    /// The id of execution `execution` of the runtime whose id is `runtime`.
    pub(crate) fn of_execution(runtime: &Arc<str>, execution: u64) -> Self {
        Self {
            base: Arc::clone(runtime),
            execution: Some(execution),
        }
    }

    /// An id taken as text.
    pub(crate) fn from_text(text: Arc<str>) -> Self {
        Self {
            base: text,
            execution: None,
        }
    }

    /// The id as text: `runtime#n` for an execution's, written out here.
    pub(crate) fn to_text(&self) -> Arc<str> {
        match self.execution {
            Some(n) => numbered_shared(&self.base, n),
            None => Arc::clone(&self.base),
        }
    }

    /// Whether `self` and `other` are the same owner, whichever form each was taken in. The
    /// common case, a claim and the row it took, shares the runtime's id: a pointer is
    /// compared rather than the text.
    #[inline]
    pub(crate) fn is(&self, other: &Self) -> bool {
        match (self.execution, other.execution) {
            (Some(n), Some(m)) => {
                n == m && (Arc::ptr_eq(&self.base, &other.base) || self.base == other.base)
            }
            (_, None) => self.is_text(&other.base),
            (None, Some(_)) => other.is_text(&self.base),
        }
    }

    /// Whether `text` is this owner's id.
    #[inline]
    pub(crate) fn is_text(&self, text: &str) -> bool {
        match self.execution {
            Some(n) => is_numbered(text, &self.base, n),
            None => std::ptr::eq(&*self.base, text) || *self.base == *text,
        }
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.execution {
            Some(n) => write!(f, "{}#{n}", self.base),
            None => f.write_str(&self.base),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_forms_of_an_id_are_one_owner() {
        let runtime: Arc<str> = Arc::from("pid7-0badf00d");
        let execution = OwnerId::of_execution(&runtime, 12);
        let text = OwnerId::from_text(Arc::from("pid7-0badf00d#12"));
        assert_eq!(&*execution.to_text(), "pid7-0badf00d#12");
        assert_eq!(execution.to_string(), "pid7-0badf00d#12");
        assert_eq!(text.to_string(), "pid7-0badf00d#12");
        for (a, b) in [(&execution, &text), (&text, &execution)] {
            assert!(a.is(b) && a.is(a));
            assert!(a.is_text("pid7-0badf00d#12"));
            assert!(!a.is_text("pid7-0badf00d#1") && !a.is_text("pid7-0badf00d"));
        }
        let copy = OwnerId::of_execution(&Arc::from("pid7-0badf00d"), 12);
        assert!(copy.is(&execution), "the same text in another allocation");

        let other_execution = OwnerId::of_execution(&runtime, 13);
        let other_runtime = OwnerId::of_execution(&Arc::from("pid8-0badf00d"), 12);
        let other_text = OwnerId::from_text(Arc::from("pid7-0badf00d#012"));
        for other in [&other_execution, &other_runtime, &other_text] {
            assert!(!execution.is(other) && !other.is(&execution));
            assert!(!text.is(other) && !other.is(&text));
        }
    }
}
