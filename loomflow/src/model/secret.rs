//! [`ApiKey`]: a secret that never shows in Debug output, errors or logs.

use std::fmt;

use super::ModelError;

/// An API key. Its `Debug` output is redacted and it has no `Display`, so it cannot leak
/// through logs or error messages by accident.
///
/// # Examples
///
/// ```
/// use loomflow::model::ApiKey;
///
/// let key = ApiKey::new("sk-very-secret");
/// assert_eq!(format!("{key:?}"), "ApiKey(<redacted>)");
/// assert_eq!(key.expose(), "sk-very-secret");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key, without the whitespace around it (a newline or a CR read from a file
    /// would make every request's header invalid).
    pub fn new(key: impl Into<String>) -> Self {
        Self(trimmed(key.into()))
    }

    /// Reads a key from an environment variable, without the whitespace around it (an
    /// `.env` file with CRLF line ends); `None` when unset or empty.
    pub fn from_env(var: &str) -> Option<Self> {
        std::env::var(var)
            .ok()
            .filter(|key| !key.trim().is_empty())
            .map(Self::new)
    }

    /// The key itself, for building a request header.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with every occurrence of the key replaced by `<redacted>`.
    #[cfg_attr(
        not(any(feature = "openai", feature = "anthropic")),
        allow(dead_code) // only the HTTP adapters see keys in errors
    )]
    pub(crate) fn scrub(&self, text: &str) -> String {
        if self.0.len() < 4 {
            return text.to_owned();
        }
        text.replace(&self.0, "<redacted>")
    }
}

impl ApiKey {
    /// Takes the key out of `error`'s messages (a stream's error event that quotes the
    /// request, say).
    #[cfg_attr(
        not(any(feature = "openai", feature = "anthropic")),
        allow(dead_code) // only the HTTP adapters see keys in errors
    )]
    pub(crate) fn scrub_error(&self, error: &mut ModelError) {
        match error {
            ModelError::StreamError { kind, message, .. } => {
                *kind = self.scrub(kind);
                *message = self.scrub(message);
            }
            ModelError::Authentication { message, .. }
            | ModelError::RateLimited { message, .. }
            | ModelError::ContextTooLong { message, .. }
            | ModelError::InvalidRequest { message, .. }
            | ModelError::Server { message, .. }
            | ModelError::Decode { message, .. } => *message = self.scrub(message),
            _ => {}
        }
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

impl From<String> for ApiKey {
    fn from(key: String) -> Self {
        Self::new(key)
    }
}

impl From<&str> for ApiKey {
    fn from(key: &str) -> Self {
        Self::new(key)
    }
}

/// `key` without the whitespace around it, kept as it is when it has none.
fn trimmed(key: String) -> String {
    match key.trim() {
        same if same.len() == key.len() => key,
        inner => inner.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_around_a_key_is_dropped() {
        assert_eq!(ApiKey::new("sk-abc\r\n").expose(), "sk-abc");
        assert_eq!(ApiKey::from(" sk-abc").expose(), "sk-abc");
        assert_eq!(ApiKey::new("sk-abc").expose(), "sk-abc");
    }

    #[test]
    fn scrub_removes_the_key() {
        let key = ApiKey::new("sk-abcdef");
        assert_eq!(
            key.scrub("Incorrect API key provided: sk-abcdef."),
            "Incorrect API key provided: <redacted>."
        );
    }
}
