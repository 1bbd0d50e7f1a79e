//! [`Endpoint`]: where an adapter's requests go, and how that is shown; which base URLs are taken,
//! and which is the provider's own.

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

    /// The URL requests are sent to, taken out.
    pub(crate) fn into_full(self) -> String {
        self.full
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.shown, f)
    }
}

/// The URL of `path` under `base`: the path goes after the base's own path, before its
/// query (`https://gw/v1?api-version=1` takes `chat/completions` as
/// `https://gw/v1/chat/completions?api-version=1`, for gateways that want one). A base
/// whose path ends in `path` already (the whole endpoint, pasted from a provider's page,
/// in any case, after any number of slashes) is that URL: the path is not added twice.
#[cfg_attr(not(any(feature = "openai", feature = "anthropic")), allow(dead_code))]
pub(crate) fn under(base: &str, path: &str) -> String {
    let (head, rest) = base.split_at(base.find(['?', '#']).unwrap_or(base.len()));
    let head = head.trim_end_matches('/');
    let whole = head
        .len()
        .checked_sub(path.len())
        .filter(|&at| head.is_char_boundary(at))
        .is_some_and(|at| {
            let (before, end) = head.split_at(at);
            // Not a host that happens to be named so (`https://v1/messages`).
            let authority_and_path = before.split_once("://").map_or(before, |(_, r)| r);
            end.eq_ignore_ascii_case(path)
                && before.ends_with('/')
                && !authority_and_path.trim_end_matches('/').is_empty()
        });
    match whole {
        true => format!("{head}{rest}"),
        false => format!("{head}/{path}{rest}"),
    }
}

/// `url` with the user information of its authority (before an `@`) and the values of its
/// query redacted: a gateway may take its key as `?key=…` or `?code=…`. The query's names
/// stay, to say which URL it was.
pub(crate) fn without_credentials(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    let authority = match authority.rfind('@') {
        Some(at) => format!("<redacted>@{}", &authority[at + 1..]),
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        None => tail.to_owned(),
        Some((path, query)) => {
            let (query, fragment) = query.split_at(query.find('#').unwrap_or(query.len()));
            let names: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, _)) => format!("{name}=<redacted>"),
                    // A bare token (`?sk-…`) may be the key itself.
                    None if pair.is_empty() => String::new(),
                    None => "<redacted>".to_owned(),
                })
                .collect();
            format!("{path}?{}{fragment}", names.join("&"))
        }
    };
    format!("{scheme}://{authority}{tail}")
}

/// Refuses a base URL no request could be sent to: not `http(s)://…`, or not a URL (a port
/// out of range, a space in the host). Said at build time, naming the base URL's fault
/// (not the URL itself, which may hold credentials), rather than by every call.
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub(crate) fn check_base_url(base: &str, provider: &str) -> Result<(), super::ModelError> {
    let fault = if !(base.starts_with("http://") || base.starts_with("https://")) {
        "does not start with http:// or https://".to_owned()
    } else {
        match reqwest::Url::parse(base) {
            Ok(_) => return Ok(()),
            Err(error) => format!("is not a URL: {error}"),
        }
    };
    Err(super::ModelError::Config {
        provider: provider.to_owned(),
        message: format!("the base url {fault}"),
    })
}

/// Whether `base_url` addresses exactly `host` over HTTPS on the default port, with no user
/// name or password: only then may the provider's key from the environment be attached. A
/// prefix check would also accept `https://api.example.com.evil.example` or
/// `https://api.example.com@evil.example`, and hand the key to whoever runs those.
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub(crate) fn is_official_host(base_url: &str, host: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(base_url) else {
        return false;
    };
    url.scheme() == "https"
        && url.host_str() == Some(host)
        && url.username().is_empty()
        && url.password().is_none()
        && url.port().is_none()
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
        // A key in the query (`?code=…`, `?key=…`): its value is not shown, its name is.
        assert_eq!(
            without_credentials("https://u:p@gw/v1/chat/completions?api-version=1&code=s3cret#f"),
            "https://<redacted>@gw/v1/chat/completions?api-version=<redacted>&code=<redacted>#f"
        );
        assert_eq!(
            without_credentials("https://gw?key=s3cret"),
            "https://gw?key=<redacted>"
        );
        assert_eq!(
            without_credentials("https://gw/v1?sk-s3cret&a=1"),
            "https://gw/v1?<redacted>&a=<redacted>"
        );
    }

    #[test]
    fn a_request_path_goes_before_the_base_urls_query() {
        let cases = [
            ("https://gw/v1", "https://gw/v1/chat/completions"),
            ("https://gw/v1/", "https://gw/v1/chat/completions"),
            (
                "https://gw/v1?api-version=1",
                "https://gw/v1/chat/completions?api-version=1",
            ),
            (
                "https://gw/v1/?a=1&b=2",
                "https://gw/v1/chat/completions?a=1&b=2",
            ),
            (
                "https://gw/v1?next=@http://x",
                "https://gw/v1/chat/completions?next=@http://x",
            ),
            ("https://gw#frag", "https://gw/chat/completions#frag"),
            // The whole endpoint given: taken as it is, its query kept.
            (
                "https://gw/v1/chat/completions",
                "https://gw/v1/chat/completions",
            ),
            (
                "https://gw/v1/chat/completions/?api-version=1",
                "https://gw/v1/chat/completions?api-version=1",
            ),
            // A path that only ends like it, or a host named so, is a base.
            (
                "https://gw/v1/mychat/completions",
                "https://gw/v1/mychat/completions/chat/completions",
            ),
        ];
        for (base, url) in cases {
            assert_eq!(under(base, "chat/completions"), url, "{base}");
        }
        assert_eq!(
            under("https://gw/v1/messages", "v1/messages"),
            "https://gw/v1/messages"
        );
        assert_eq!(
            under("https://v1/messages", "v1/messages"),
            "https://v1/messages/v1/messages"
        );
        // Pasted with a doubled slash, or in capitals: the whole endpoint all the same.
        for base in ["https://gw//v1/messages", "https://gw/V1/Messages/"] {
            assert_eq!(
                under(base, "v1/messages"),
                base.trim_end_matches('/'),
                "{base}"
            );
        }
    }
}

#[cfg(all(test, any(feature = "openai", feature = "anthropic")))]
mod host_tests {
    use super::is_official_host;

    #[test]
    fn only_the_exact_official_host_is_official() {
        let host = "api.anthropic.com";
        assert!(is_official_host("https://api.anthropic.com", host));
        assert!(is_official_host("https://api.anthropic.com/", host));
        assert!(is_official_host("https://API.anthropic.com:443/v1", host));
        for lookalike in [
            "https://api.anthropic.com.evil.example",
            "https://api.anthropic.com@evil.example",
            "https://user:pw@api.anthropic.com",
            "https://api.anthropic.community",
            "https://api.anthropic.com:8443",
            "http://api.anthropic.com",
            "api.anthropic.com",
        ] {
            assert!(!is_official_host(lookalike, host), "{lookalike}");
        }
    }
}
