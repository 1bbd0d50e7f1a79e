//! How long an error answer asks us to wait: `retry-after-ms`, or `retry-after` as seconds or
//! as an HTTP date.

use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, RETRY_AFTER};

/// The longest wait read from a header; anything longer is taken as this long, and the retry
/// policy's `max_retry_after` decides whether to wait or give up.
const LONGEST: Duration = Duration::from_secs(86_400);

/// The wait an answer's headers ask for. `retry-after-ms` (OpenAI) is the more precise of
/// the two when both are sent.
pub(crate) fn from_headers(headers: &HeaderMap) -> Option<Duration> {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    text("retry-after-ms")
        .and_then(|ms| seconds(ms, 1000.0))
        .or_else(|| text(RETRY_AFTER.as_str()).and_then(parse_retry_after))
}

/// `retry-after` in its seconds form (`"3"`, `"1.5"`) or its HTTP-date form
/// (`"Wed, 21 Oct 2015 07:28:00 GMT"`): a date is the time from now until then, zero when it
/// has passed.
fn parse_retry_after(value: &str) -> Option<Duration> {
    seconds(value, 1.0).or_else(|| until(value, SystemTime::now()))
}

/// `value` as a non-negative number of `per_second` units.
fn seconds(value: &str, per_second: f64) -> Option<Duration> {
    let n: f64 = value.trim().parse().ok()?;
    // Capped before it becomes a `Duration`, which cannot hold some numbers a header can.
    (n.is_finite() && n >= 0.0).then(|| {
        Duration::try_from_secs_f64(n / per_second).map_or(LONGEST, |wait| wait.min(LONGEST))
    })
}

/// The time from `now` until the HTTP date `value`.
fn until(value: &str, now: SystemTime) -> Option<Duration> {
    let then = httpdate::parse_http_date(value.trim()).ok()?;
    Some(
        then.duration_since(now)
            .unwrap_or(Duration::ZERO)
            .min(LONGEST),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_form() {
        assert_eq!(parse_retry_after("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after(" 0.5 "), Some(Duration::from_millis(500)));
        assert_eq!(parse_retry_after("-1"), None);
        assert_eq!(parse_retry_after("1e9"), Some(LONGEST));
        // Past what a `Duration` holds: the longest wait, not a panic.
        assert_eq!(parse_retry_after("99999999999999999999"), Some(LONGEST));
        assert_eq!(seconds("1e25", 1000.0), Some(LONGEST));
    }

    #[test]
    fn http_date_form_is_the_time_until_then() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        let date = "Wed, 21 Oct 2015 07:28:03 GMT";
        assert_eq!(until(date, now), Some(Duration::from_secs(3)));
        let past = "Wed, 21 Oct 2015 07:27:00 GMT";
        assert_eq!(until(past, now), Some(Duration::ZERO));
        assert_eq!(until("Fri, 21 Oct 2016 07:28:00 GMT", now), Some(LONGEST));
        assert_eq!(until("soon", now), None);
    }

    #[test]
    fn milliseconds_header_wins() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", "3".parse().unwrap());
        assert_eq!(from_headers(&headers), Some(Duration::from_secs(3)));
        headers.insert("retry-after-ms", "250".parse().unwrap());
        assert_eq!(from_headers(&headers), Some(Duration::from_millis(250)));
    }
}
