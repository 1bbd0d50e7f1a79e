//! [`Endpoint`]: where an adapter's requests go, and how that is shown.

use std::fmt;

/// A request URL as given, and as shown in errors, logs and `Debug` output: credentials in
/// it (`https://user:token@gateway/v1`, which the HTTP client sends as basic auth) are
/// replaced by `<redacted>` wherever it is shown.
#[derive(Clone)]
#[cfg_attr(not(any(feature = "openai", feature = "anthropic")), allow(dead_code))]
pub(crate) struct Endpoint {
    full: String,
    shown: String,
}

#[cfg_attr(not(any(feature = "openai", feature = "anthropic")), allow(dead_code))]
impl Endpoint {
    pub(crate) fn new(url: String) -> Self {
        let shown = without_credentials(&url);
        Self { full: url, shown }
    }

    /// The URL requests are sent to.
    pub(crate) fn full(&self) -> &str {
        &self.full
    }

    /// The URL to show.
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.shown, f)
    }
}

/// `url` with the user information of its authority (before an `@`) redacted.
pub(crate) fn without_credentials(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    match authority.rfind('@') {
        Some(at) => format!("{scheme}://<redacted>@{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_a_url_are_not_shown() {
        let endpoint = Endpoint::new("https://ada:s3cret@gw.example/v1/chat".to_owned());
        assert_eq!(endpoint.full(), "https://ada:s3cret@gw.example/v1/chat");
        assert_eq!(endpoint.shown(), "https://<redacted>@gw.example/v1/chat");
        assert!(!format!("{endpoint:?}").contains("s3cret"));
        // An `@` past the authority is no credential.
        let plain = "http://127.0.0.1:8080/v1/models/a@b";
        assert_eq!(without_credentials(plain), plain);
        assert_eq!(without_credentials("not a url"), "not a url");
    }
}
