//! The bounds a check or a rewrite of a call's arguments keeps to: a number of steps, and
//! how deep it follows the arguments and the schema.

/// The most steps (schema nodes visited) one check or rewrite of a call's arguments takes.
pub(in crate::tool::schema) const MAX_STEPS: usize = 1_000_000;

/// The steps a check or a rewrite has taken.
#[derive(Default)]
pub(in crate::tool::schema) struct Steps(std::cell::Cell<usize>);

impl Steps {
    /// Takes one; `false` once [`MAX_STEPS`] are spent.
    pub(in crate::tool::schema) fn take(&self) -> bool {
        let taken = self.0.get() + 1;
        self.0.set(taken);
        taken <= MAX_STEPS
    }

    pub(in crate::tool::schema) fn spent(&self) -> bool {
        self.0.get() > MAX_STEPS
    }
}

/// How deep into the arguments a check follows the schema: as deep as serde_json reads JSON
/// text. Arguments nested deeper are refused, not let through unchecked.
pub(in crate::tool::schema) const MAX_DEPTH: usize = 128;

/// How many schema hops that stay at one level of the arguments (a `$ref`, a branch of
/// `allOf`/`anyOf`/`oneOf`) a check follows in a row: a `$ref` that points at itself ends
/// there.
pub(in crate::tool::schema) const MAX_HOPS: usize = 32;

/// How many schema levels (levels down the arguments and hops, together) a check or a
/// rewrite follows from the top, the check a rewrite makes included: each is a frame of a
/// recursion that must fit a task's stack (2 MiB), in a debug build too, where a frame of
/// the check takes 4.6 KiB. [`MAX_DEPTH`] levels of [`MAX_HOPS`] hops each would not; three
/// schema levels for each level of the arguments (a property, its `$ref`, a branch) do.
pub(in crate::tool::schema) const MAX_FRAMES: usize = 3 * MAX_DEPTH;

/// Where a check is: how deep into the arguments, how many hops it made at that level, and
/// how many schema levels it followed in all.
#[derive(Clone, Copy, Default)]
pub(in crate::tool::schema) struct Depth {
    value: usize,
    hops: usize,
    frames: usize,
}

impl Depth {
    /// One level down into the arguments (a property, an item).
    pub(in crate::tool::schema) fn down(self) -> Self {
        Self {
            value: self.value + 1,
            hops: 0,
            frames: self.frames + 1,
        }
    }

    /// One hop at the same level (a `$ref`, a branch).
    pub(in crate::tool::schema) fn hop(self) -> Self {
        Self {
            hops: self.hops + 1,
            frames: self.frames + 1,
            ..self
        }
    }

    /// Past any bound.
    pub(in crate::tool::schema) fn too_deep(self) -> bool {
        self.too_deep_in_arguments() || self.hops > MAX_HOPS || self.frames > MAX_FRAMES
    }

    /// Past the bound on hops at one level.
    pub(in crate::tool::schema) fn too_many_hops(self) -> bool {
        self.hops > MAX_HOPS
    }

    /// Past the bound on how deep into the arguments a check goes.
    pub(in crate::tool::schema) fn too_deep_in_arguments(self) -> bool {
        self.value > MAX_DEPTH
    }
}
