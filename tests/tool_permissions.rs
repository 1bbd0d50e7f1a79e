//! Placeholder.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code
