//! JSON read as deep as loomflow keeps it.
//!
//! serde_json stops reading at 128 levels of nesting; loomflow keeps states, payloads and
//! resume values up to [`MAX_DEPTH`] levels deep. A program that reads JSON it hands to
//! loomflow (a command line, a handler of its own) reads it here to take the same depth.

use serde::de::DeserializeOwned;

/// How deeply arrays and objects may nest in JSON that loomflow writes and reads back.
pub const MAX_DEPTH: usize = crate::json_depth::MAX_DEPTH;

/// Reads `text` as a `T`, nested up to [`MAX_DEPTH`] levels.
///
/// # Errors
///
/// serde_json's error for text that is not a `T`, or that nests deeper than [`MAX_DEPTH`].
///
/// # Examples
///
/// ```
/// let deep = format!("{}{}", "[".repeat(300), "]".repeat(300));
/// assert!(serde_json::from_str::<serde_json::Value>(&deep).is_err());
/// assert!(loomflow::json::from_str::<serde_json::Value>(&deep).is_ok());
/// ```
pub fn from_str<T: DeserializeOwned + Send>(text: &str) -> serde_json::Result<T> {
    crate::json_depth::from_str(text)
}

/// serde's message for a value that is not the type asked for, with where in the value it
/// went wrong (`at amount: invalid type: …`), unless that is the value as a whole.
pub(crate) fn at_path(error: &serde_path_to_error::Error<serde_json::Error>) -> String {
    match error.path().to_string().as_str() {
        "." => error.inner().to_string(),
        path => format!("at {path}: {}", error.inner()),
    }
}

/// `value` as a `T`; on failure, serde's error with `what` naming where in the value it went
/// wrong (`state of thread t, at amount`), unless that is the value as a whole: a stored
/// state that no longer fits its type names the field that changed.
pub(crate) fn from_value_at<T: DeserializeOwned>(
    value: serde_json::Value,
    what: impl FnOnce() -> String,
) -> Result<T, (String, serde_json::Error)> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let what = match error.path().to_string().as_str() {
            "." => what(),
            path => format!("{}, at {path}", what()),
        };
        (what, error.into_inner())
    })
}
