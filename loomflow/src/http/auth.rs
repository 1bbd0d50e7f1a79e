//! Who is calling: bearer tokens, and webhook signatures (HMAC-SHA256), all compared in
//! constant time.

use axum::http::{HeaderMap, Method, StatusCode, header};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::{ApiError, HttpConfig};

/// Equal, in time that depends only on the lengths.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    constant_time_eq(a, b)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Without authentication, a web page on another site must not act through the operator's
/// browser (a form posted to the loopback listener): a request that may change something
/// is refused when the browser says it comes from another site (`Sec-Fetch-Site`), or,
/// from a browser that does not say, when its `Origin` is not the host it was sent to.
/// Clients that are not browsers send neither header.
pub(crate) fn refuse_cross_site(method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
    if method.is_safe() {
        return Ok(());
    }
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let cross = match text("sec-fetch-site") {
        Some(site) => matches!(site, "cross-site" | "same-site"),
        None => match (text(header::ORIGIN.as_str()), text(header::HOST.as_str())) {
            (Some(origin), host) => origin.split_once("://").map(|(_, at)| at) != host,
            (None, _) => false,
        },
    };
    if cross {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "a {method} from another site is refused: this server runs without \
                 authentication (HttpConfig::without_auth), so only its own pages and \
                 clients that are not browsers may change anything"
            ),
        ));
    }
    Ok(())
}

/// Without authentication, a request addressed to a host name is refused unless the name is
/// `localhost` (or under it) or one `allowed`: a page on a site whose name resolves to the
/// listener's address (DNS rebinding) is the listener's own origin to the browser, and would
/// otherwise read and change everything. IP addresses are answered; so are clients that
/// send no `Host` (no browser).
pub(crate) fn refuse_rebound_host(headers: &HeaderMap, allowed: &[String]) -> Result<(), ApiError> {
    let Some(host) = headers.get(header::HOST) else {
        return Ok(());
    };
    let host = host.to_str().unwrap_or_default();
    // An IPv6 literal, `[::1]:8080`.
    if host.starts_with('[') {
        return Ok(());
    }
    let name = host_name(host);
    let name = name.as_str();
    let local = name == "localhost" || name.ends_with(".localhost");
    if local || name.parse::<std::net::Ipv4Addr>().is_ok() || allowed.iter().any(|a| a == name) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        "forbidden",
        format!(
            "requests to host {name:?} are refused: this server runs without authentication \
             (HttpConfig::without_auth), and answers localhost and IP addresses only; allow \
             the name with HttpConfig::allow_host (loomflow serve --allow-host)"
        ),
    ))
}

/// The host name in `host` (a `Host` header, or a name given to allow), as compared: in
/// lower case, without a port and without the final dot of a fully qualified name.
pub(crate) fn host_name(host: &str) -> String {
    let name = match host.starts_with('[') {
        true => host,
        false => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// Whether the request carries one of the configured bearer tokens (or auth is off).
pub(crate) fn bearer(config: &HttpConfig, headers: &HeaderMap) -> Result<(), ApiError> {
    if config.open {
        return Ok(());
    }
    let Some(presented) = presented_token(headers) else {
        return Err(ApiError::unauthorized(
            "missing Authorization: Bearer <token>",
        ));
    };
    // Every token is compared, so the time does not tell which one came close.
    let matched = config.tokens.iter().fold(false, |found, token| {
        found | constant_time_eq(token.as_bytes(), presented.as_bytes())
    });
    if matched {
        Ok(())
    } else {
        Err(ApiError::unauthorized("the bearer token is not accepted"))
    }
}

/// The token of the request's `Authorization: Bearer <token>` header, if it has one.
pub(crate) fn presented_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        // The scheme's name is case-insensitive (RFC 9110, section 11.1).
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
}

fn hmac(secret: &str, parts: &[&[u8]]) -> Hmac<Sha256> {
    // HMAC takes keys of any length.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
    for part in parts {
        mac.update(part);
    }
    mac
}

fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// What a signed request proved.
pub(crate) enum Signed {
    /// Not signed at all: the bearer token decides.
    No,
    /// Signed with a configured secret. `delivery` is the delivery id the signature covers
    /// (`X-Loomflow-Delivery`), which must be the idempotency key: any other key would let a
    /// captured request be delivered again under a key of the sender's choosing. GitHub signs
    /// only the body, so its requests have none.
    Yes { delivery: Option<String> },
}

/// A request's signature, its headers checked and its MAC not yet: what can be refused
/// without the body is refused before the body is looked at, so a caller with a malformed,
/// stale or unconfigured signature learns that (401) and not that its body is too large.
pub(crate) enum Signature<'a> {
    /// No signature header: the bearer token decides.
    Absent,
    /// GitHub's `X-Hub-Signature-256`, over the body.
    GitHub { secrets: &'a [String], mac: Vec<u8> },
    /// `X-Loomflow-Signature`, over the time, the path, the delivery id and the body: one
    /// MAC for each `v1=` the header carries.
    Loomflow {
        secrets: &'a [String],
        time: u64,
        delivery: &'a str,
        macs: Vec<Vec<u8>>,
    },
}

fn bad_signature(message: &str) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::UNAUTHORIZED,
        "bad_signature",
        message.to_owned(),
    )
}

/// Reads a webhook signature's headers, if the request has one: GitHub's
/// `X-Hub-Signature-256`, or `X-Loomflow-Signature` ([`signature_header`]) within the replay
/// window, received at `now_secs`. A signature header that is present but malformed, stale
/// or not configured is refused, whatever else the request has.
/// The most `v1=` signatures an `X-Loomflow-Signature` header may carry.
const MAX_TAGS: usize = 4;

pub(crate) fn signature<'a>(
    config: &'a HttpConfig,
    headers: &'a HeaderMap,
    now_secs: u64,
) -> Result<Signature<'a>, ApiError> {
    let bad = bad_signature;
    if let Some(value) = headers.get("x-hub-signature-256") {
        let secrets = &config.github_secrets[..];
        if secrets.is_empty() {
            return Err(bad(
                "GitHub signatures are not configured (no github secret)",
            ));
        }
        let mac = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("sha256="))
            .and_then(from_hex)
            .ok_or_else(|| bad("X-Hub-Signature-256 is not sha256=<hex>"))?;
        return Ok(Signature::GitHub { secrets, mac });
    }
    let Some(value) = headers.get("x-loomflow-signature") else {
        return Ok(Signature::Absent);
    };
    let secrets = &config.signing_secrets[..];
    if secrets.is_empty() {
        return Err(bad(
            "signed requests are not configured (no signing secret)",
        ));
    }
    let text = value
        .to_str()
        .map_err(|_| bad("X-Loomflow-Signature is not text"))?;
    let mut time = None;
    let mut macs = Vec::new();
    for part in text.split(',') {
        match part.trim().split_once('=') {
            Some(("t", t)) => time = t.parse::<u64>().ok(),
            // A SHA-256 tag is 32 bytes: anything else cannot match, and is not hashed for.
            Some(("v1", v)) => macs.extend(from_hex(v).filter(|mac| mac.len() == 32)),
            _ => {}
        }
    }
    let Some(time) = time.filter(|_| !macs.is_empty()) else {
        return Err(bad("X-Loomflow-Signature is not t=<seconds>,v1=<hex>"));
    };
    // One for each secret a sender moves between: a header with many is refused before
    // anything is hashed.
    if macs.len() > MAX_TAGS {
        return Err(bad(&format!(
            "X-Loomflow-Signature carries more than {MAX_TAGS} v1= signatures"
        )));
    }
    let window = config.replay_window_or_default().as_secs();
    if now_secs.saturating_sub(time) > window {
        return Err(bad(
            "the signed time is outside the replay window; a replayed request is refused",
        ));
    }
    // A time ahead of ours only by a clock's drift: one further ahead would stretch the
    // window past how long a delivery id is remembered, and a replay late in it would be
    // a new signal.
    let ahead = super::FUTURE_SKEW.as_secs().min(window);
    if time.saturating_sub(now_secs) > ahead {
        return Err(bad(&format!(
            "the signed time is more than {ahead} s ahead of this server's clock"
        )));
    }
    let delivery = match headers.get("x-loomflow-delivery").map(|v| v.to_str()) {
        Some(Ok(delivery)) if !delivery.is_empty() => delivery,
        Some(Err(_)) => {
            return Err(bad(
                "X-Loomflow-Delivery is not text: a delivery id is visible ASCII",
            ));
        }
        _ => {
            return Err(bad(
                "a signed request needs its delivery id in X-Loomflow-Delivery (signed too)",
            ));
        }
    };
    Ok(Signature::Loomflow {
        secrets,
        time,
        delivery,
        macs,
    })
}

impl Signature<'_> {
    /// Checks the MAC against the request to `path` (as sent, so a router nested under a
    /// prefix checks the whole path) with `body`. A signature that does not match is
    /// refused.
    pub(crate) fn verify(self, path: &str, body: &[u8]) -> Result<Signed, ApiError> {
        match self {
            Self::Absent => Ok(Signed::No),
            Self::GitHub { secrets, mac } => {
                let signs = |secret: &String| hmac(secret, &[body]).verify_slice(&mac).is_ok();
                match secrets.iter().any(signs) {
                    true => Ok(Signed::Yes { delivery: None }),
                    false => Err(bad_signature("X-Hub-Signature-256 does not match the body")),
                }
            }
            Self::Loomflow {
                secrets,
                time,
                delivery,
                macs,
            } => {
                let time = time.to_string();
                let parts = signed_parts(&time, path, delivery, body);
                // One HMAC over the body for each secret, compared with every tag.
                let signs = |secret: &String| {
                    let expected = hmac(secret, &parts).finalize().into_bytes();
                    (macs.iter()).any(|mac| constant_time_eq(&expected, mac))
                };
                match secrets.iter().any(signs) {
                    true => Ok(Signed::Yes {
                        delivery: Some(delivery.to_owned()),
                    }),
                    false => Err(bad_signature(
                        "X-Loomflow-Signature does not match the time, path, delivery id and body",
                    )),
                }
            }
        }
    }
}

/// What `X-Loomflow-Signature` signs, newline-separated (no part but the body can hold a
/// newline, so no two requests sign the same text): the time, the path, the delivery id and
/// the body. The path names the thread and the signal, and the delivery id is the
/// idempotency key, so a captured request cannot be sent to another thread or signal, nor
/// delivered twice.
fn signed_parts<'a>(
    time: &'a str,
    path: &'a str,
    delivery: &'a str,
    body: &'a [u8],
) -> [&'a [u8]; 7] {
    [
        time.as_bytes(),
        b"\n",
        path.as_bytes(),
        b"\n",
        delivery.as_bytes(),
        b"\n",
        body,
    ]
}

/// The `X-Loomflow-Signature` header's value for a signal POST: to `path` (the whole path
/// as sent, `/v1/threads/{thread}/signals/{name}` under any prefix the router is nested
/// in), at `time` (Unix seconds), with delivery id `delivery` (sent as
/// `X-Loomflow-Delivery`, which also makes a redelivery one signal) and `body`. The
/// secret's surrounding whitespace is not part of it, as for the server
/// ([`HttpConfig::signing_secret`](super::HttpConfig::signing_secret)): a sender and a server
/// that read one secret file, newline included, agree.
///
/// # Examples
///
/// ```
/// let body = br#"{"approved": true}"#;
/// let value = loomflow::http::signature_header(
///     "shared-secret",
///     1_767_225_600,
///     "/v1/threads/pr-7/signals/review",
///     "delivery-41",
///     body,
/// );
/// assert!(value.starts_with("t=1767225600,v1="));
/// ```
pub fn signature_header(
    secret: &str,
    time: u64,
    path: &str,
    delivery: &str,
    body: &[u8],
) -> String {
    let time = time.to_string();
    let signature = sign(secret.trim(), &signed_parts(&time, path, delivery, body));
    format!("t={time},v1={signature}")
}

/// The hex HMAC-SHA256 of `parts` under `secret`: what a sender puts in a signature header
/// (GitHub's `X-Hub-Signature-256` is `sha256=` and this, over the body). `secret` is used
/// as given; the server checks with its configured secret trimmed
/// ([`HttpConfig::github_secret`](super::HttpConfig::github_secret)).
pub fn sign(secret: &str, parts: &[&[u8]]) -> String {
    hmac(secret, parts)
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_only_when_every_byte_is() {
        assert!(constant_time_eq(b"token", b"token"));
        assert!(!constant_time_eq(b"token", b"tokem"));
        assert!(!constant_time_eq(b"token", b"token!"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(from_hex("00ff10"), Some(vec![0, 255, 16]));
        assert_eq!(from_hex("0"), None);
        assert_eq!(from_hex("zz"), None);
    }
}
