//! How HTTP answers and client errors map to [`Outcome`]s (the table is in the module docs).

use std::time::Duration;

use outbox_core::{FailureKind, Outcome};
use reqwest::StatusCode;

/// Most bytes of a response body quoted in a failure reason.
pub(crate) const SNIPPET_BYTES: usize = 256;

/// Longest `Retry-After` honoured; longer requests are capped to this.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);

/// Classifies a response status. `retry_after` is the parsed `Retry-After` header; `snippet` a
/// bounded, cleaned extract of the body (see [`snippet`]).
pub(crate) fn from_status(status: StatusCode, retry_after: Option<Duration>, snippet: &str) -> Outcome {
    if status.is_success() {
        return Outcome::Delivered;
    }
    let code = status.as_u16();
    let mut reason = format!("HTTP {code}");
    if let Some(text) = status.canonical_reason() {
        reason.push(' ');
        reason.push_str(text);
    }
    let (kind, retry_after) = match code {
        // A redirect is not followed (a POST must not silently turn into a GET elsewhere): the
        // URL is wrong, which no retry fixes.
        300..=399 => {
            reason.push_str(" (redirects are not followed; configure the final URL)");
            (FailureKind::Permanent, None)
        }
        // Request Timeout, Too Early, Too Many Requests: try again (later).
        408 | 425 | 429 => (FailureKind::Retryable, retry_after),
        // Bad Gateway, Service Unavailable, Gateway Timeout: what a proxy or load balancer
        // answers when the receiver behind it is down or overloaded. The destination, not the
        // message, is the problem: no attempt is spent and the circuit breaker takes over.
        502..=504 => (FailureKind::Unavailable, retry_after),
        500..=599 => (FailureKind::Retryable, retry_after),
        400..=499 => (FailureKind::Permanent, None),
        _ => (FailureKind::Retryable, None),
    };
    if !snippet.is_empty() {
        reason.push_str(": ");
        reason.push_str(snippet);
    }
    Outcome::Failed { kind, reason, retry_after }
}

/// hyper's words for a connection that closed before a request could be sent on it.
const NOT_READY: &str = "connection was not ready";

/// Classifies a request that got no response. `address` is the redacted target URL.
pub(crate) fn from_error(err: &reqwest::Error, address: &str, timeout: Duration) -> Outcome {
    let detail = causes(err);
    if let Some(why) = outbox_core::tls::explain(&detail) {
        // A TLS failure (with TLS 1.3 a refused client certificate shows only once the request
        // is sent) is the destination's set-up, never the message's.
        return Outcome::unavailable(format!("{address}: cannot connect{detail} ({why})"));
    }
    if err.is_timeout() {
        // No answer in time: the receiver is down, hung or overloaded. Like the relay's own
        // publish timeout, this is the destination being unavailable (no attempt spent; the
        // breaker probes it). It may have processed the request: the message is sent again with
        // the same id, which the receiver deduplicates.
        let phase = if err.is_connect() { "connecting" } else { "waiting for the response" };
        return Outcome::unavailable(format!("{address}: timed out {phase} (timeout {timeout:?}){detail}"));
    }
    if err.is_connect() {
        return Outcome::unavailable(format!("{address}: cannot connect{detail}"));
    }
    if detail.contains(NOT_READY) {
        // The connection closed before the request could be sent (hyper retried it once on a
        // new one): the request never left. Seen when a TLS 1.3 server refuses the client's
        // certificate and its alert arrives before the connection is ready, which loses the
        // alert: the destination's set-up, never the message's.
        return Outcome::unavailable(format!(
            "{address}: cannot connect{detail} (the connection closed before the request was sent; with \
             TLS, the server may have refused this client's certificate)"
        ));
    }
    if err.is_builder() || err.is_redirect() {
        return Outcome::permanent(format!("{address}: invalid request{detail}"));
    }
    // The connection broke while sending or reading: this request failed, another may not.
    Outcome::retryable(format!("{address}: request failed{detail}"))
}

/// `": cause: cause..."` from an error's sources (never the URL: reqwest puts it only in the
/// top-level message), without repeats.
fn causes(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = String::new();
    let mut seen: Vec<String> = Vec::new();
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !s.is_empty() && !seen.iter().any(|p| p.contains(&s)) {
            out.push_str(": ");
            out.push_str(&s);
            seen.push(s);
        }
        cur = e.source();
    }
    out
}

/// Parses `Retry-After` in its delta-seconds form (the HTTP-date form is ignored), capped at
/// [`MAX_RETRY_AFTER`].
pub(crate) fn parse_retry_after(value: &str) -> Option<Duration> {
    let v = value.trim();
    if v.is_empty() || v.len() > 12 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs: u64 = v.parse().ok()?;
    Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER))
}

/// A printable extract of a response body: at most [`SNIPPET_BYTES`] bytes (cut on a character
/// boundary), control characters and runs of whitespace folded into single spaces, and every
/// string in `secrets` (non-empty ones) replaced by `***` in case the receiver echoes them.
pub(crate) fn snippet(body: &[u8], secrets: &[&str]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut cleaned = String::new();
    let mut space = false;
    for c in text.chars() {
        if c.is_whitespace() || c.is_control() {
            space = !cleaned.is_empty();
            continue;
        }
        if space {
            cleaned.push(' ');
            space = false;
        }
        cleaned.push(c);
    }
    let mut cleaned = crate::common::connect::scrub(&cleaned, secrets.iter().copied());
    if cleaned.len() > SNIPPET_BYTES {
        let mut end = SNIPPET_BYTES;
        while !cleaned.is_char_boundary(end) {
            end -= 1;
        }
        cleaned.truncate(end);
    }
    cleaned
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::testing::kind;

    fn status(code: u16) -> StatusCode {
        StatusCode::from_u16(code).unwrap()
    }

    #[test]
    fn statuses() {
        for code in [200, 201, 202, 204, 299] {
            assert_eq!(from_status(status(code), None, ""), Outcome::Delivered, "{code}");
        }
        for code in [400, 401, 403, 404, 405, 409, 410, 413, 415, 422, 451] {
            assert_eq!(kind(&from_status(status(code), None, "")), FailureKind::Permanent, "{code}");
        }
        for code in [301, 302, 307, 308] {
            assert_eq!(kind(&from_status(status(code), None, "")), FailureKind::Permanent, "{code}");
        }
        for code in [408, 425, 429, 500, 501, 505, 507] {
            assert_eq!(kind(&from_status(status(code), None, "")), FailureKind::Retryable, "{code}");
        }
        for code in [502, 503, 504] {
            assert_eq!(kind(&from_status(status(code), None, "")), FailureKind::Unavailable, "{code}");
        }
    }

    #[test]
    fn reasons_carry_status_and_snippet_and_retry_after() {
        let o = from_status(status(400), Some(Duration::from_secs(5)), "bad field");
        assert_eq!(
            o,
            Outcome::Failed {
                kind: FailureKind::Permanent,
                reason: "HTTP 400 Bad Request: bad field".into(),
                retry_after: None
            }
        );
        let o = from_status(status(429), Some(Duration::from_secs(7)), "");
        assert_eq!(
            o,
            Outcome::Failed {
                kind: FailureKind::Retryable,
                reason: "HTTP 429 Too Many Requests".into(),
                retry_after: Some(Duration::from_secs(7))
            }
        );
        match from_status(status(503), Some(Duration::from_secs(3)), "") {
            Outcome::Failed { kind: FailureKind::Unavailable, retry_after, .. } => {
                assert_eq!(retry_after, Some(Duration::from_secs(3)))
            }
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn retry_after_forms() {
        assert_eq!(parse_retry_after("120"), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after(" 0 "), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("999999999999"), Some(MAX_RETRY_AFTER));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse_retry_after("-5"), None);
        assert_eq!(parse_retry_after(""), None);
        assert_eq!(parse_retry_after("99999999999999999999999"), None);
    }

    #[test]
    fn snippets_are_bounded_clean_and_secret_free() {
        assert_eq!(snippet(b"  line one\r\n\tline\x00two  ", &[]), "line one line two");
        let long = "é".repeat(1000);
        let s = snippet(long.as_bytes(), &[]);
        assert!(s.len() <= SNIPPET_BYTES && s.len() >= SNIPPET_BYTES - 1);
        assert_eq!(snippet(b"echo: Bearer s3cret-token", &["s3cret-token", ""]), "echo: Bearer ***");
        assert_eq!(snippet(&[0xff, b'a'], &[]), "\u{fffd}a");
    }

    #[tokio::test]
    async fn connection_refused_and_timeouts_are_unavailable() {
        // A port nobody listens on: bind, note the port, close.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let client = reqwest::Client::new();
        let err = client.post(format!("http://127.0.0.1:{port}/")).send().await.unwrap_err();
        let o = from_error(&err, "http://127.0.0.1", Duration::from_secs(1));
        assert_eq!(kind(&o), FailureKind::Unavailable, "{o:?}");

        // A listener that never answers (the kernel completes the handshake; nobody reads).
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = silent.local_addr().unwrap();
        let client = reqwest::Client::builder().timeout(Duration::from_millis(200)).build().unwrap();
        let err = client.post(format!("http://{addr}/")).body("x").send().await.unwrap_err();
        let o = from_error(&err, "http://x", Duration::from_millis(200));
        assert_eq!(kind(&o), FailureKind::Unavailable, "{o:?}");
        match o {
            Outcome::Failed { reason, .. } => assert!(reason.contains("timed out"), "{reason}"),
            Outcome::Delivered => unreachable!(),
        }
        drop(silent);
    }
}
