//! Webhook requests: how message headers travel as HTTP headers, and the request signature
//! (HMAC-SHA256 over the timestamp and the body). The sender is the HTTP transport
//! (`outbox_transport::http`); receivers (the inbox's `from_http`, or any service) verify with
//! [`verify_signature`]. Here, in core, so that a receiver needs no transport crate.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::header;

/// Header carrying the signing time, Unix seconds.
pub const TIMESTAMP_HEADER: &str = "outbox-timestamp";
/// Header carrying the signature(s): `v1=<hex>`, comma-separated when there are several.
pub const SIGNATURE_HEADER: &str = "outbox-signature";
/// Prefix of the HTTP header that carries a message header not defined by outbox.
pub const CUSTOM_HEADER_PREFIX: &str = "outbox-header-";
/// Header names (besides `outbox-*` ones) that travel under their own name.
const TRACE_HEADERS: [&str; 2] = [header::TRACEPARENT, "tracestate"];

/// The `outbox-*` headers [`Envelope::new`] sets, which travel under their own name.
const CORE_HEADERS: [&str; 7] = [
    header::MESSAGE_ID,
    header::BIZ_TYPE,
    header::BIZ_KEY,
    header::TOPIC,
    header::KEY,
    header::ATTEMPT,
    header::CREATED_AT,
];

type HmacSha256 = Hmac<Sha256>;

// ---------------------------------------------------------------------------------------------
// Header mapping

/// The HTTP header name a message header travels under: the `outbox-*` headers outbox defines
/// and `traceparent` / `tracestate` keep their name; any other header `name` becomes
/// `outbox-header-<name>`. (HTTP header names are case-insensitive: receivers may see them in
/// lower case.)
pub fn http_header_name(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    if CORE_HEADERS.contains(&lower.as_str()) || TRACE_HEADERS.contains(&lower.as_str()) {
        lower
    } else {
        format!("{CUSTOM_HEADER_PREFIX}{name}")
    }
}

/// The message header an HTTP header carries, the inverse of [`http_header_name`] (given the
/// lower-case HTTP name): `None` for headers that are not message headers (`content-type`,
/// `outbox-signature`, ...). Custom header names come back in lower case.
pub fn envelope_header_name(http_name: &str) -> Option<String> {
    let lower = http_name.to_ascii_lowercase();
    if let Some(rest) = lower.strip_prefix(CUSTOM_HEADER_PREFIX) {
        return (!rest.is_empty()).then(|| rest.to_owned());
    }
    (CORE_HEADERS.contains(&lower.as_str()) || TRACE_HEADERS.contains(&lower.as_str())).then_some(lower)
}

/// Encodes a message header value for HTTP: every byte outside visible ASCII (`!` to `~`), and
/// `%` itself, becomes `%XX` (upper-case hex of the UTF-8 bytes). Plain ASCII values without
/// spaces or `%` (ids, timestamps, `traceparent`) travel unchanged.
pub fn encode_header_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for &b in value.as_bytes() {
        if (0x21..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX_UPPER[usize::from(b >> 4)]));
            out.push(char::from(HEX_UPPER[usize::from(b & 0xf)]));
        }
    }
    out
}

/// Decodes a value made by [`encode_header_value`] (any correct percent-decoder does the same;
/// `+` is a plain `+`). `None` if an escape is malformed or the bytes are not UTF-8.
pub fn decode_header_value(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hi = hex_val(*bytes.get(i + 1)?)?;
            let lo = hex_val(*bytes.get(i + 2)?)?;
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Signatures

/// Why a webhook request's signature was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// The timestamp header is missing or not a decimal number of seconds.
    #[error("malformed timestamp header")]
    MalformedTimestamp,
    /// The timestamp is older than the tolerance: a replay, or a very late delivery.
    #[error("timestamp is {age_secs} s old, more than the {tolerance_secs} s tolerated")]
    Stale {
        /// How old it is.
        age_secs: i64,
        /// The tolerance.
        tolerance_secs: i64,
    },
    /// The timestamp is further in the future than the tolerance.
    #[error("timestamp is {ahead_secs} s in the future, more than the {tolerance_secs} s tolerated")]
    FromTheFuture {
        /// How far ahead it is.
        ahead_secs: i64,
        /// The tolerance.
        tolerance_secs: i64,
    },
    /// The signature header holds no well-formed `v1=<64 hex digits>` entry.
    #[error("malformed signature header")]
    MalformedSignature,
    /// No signature matches: wrong secret, or the body or timestamp was altered.
    #[error("signature does not match")]
    Mismatch,
}

fn mac(secret: &[u8], timestamp: &str, body: &[u8]) -> HmacSha256 {
    // HMAC accepts keys of any length: `new_from_slice` cannot fail for it.
    let mut mac = match HmacSha256::new_from_slice(secret) {
        Ok(m) => m,
        Err(_) => HmacSha256::new(&Default::default()),
    };
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The `Outbox-Signature` value for `body` sent at `timestamp` (Unix seconds):
/// `v1=` + lower-case hex of HMAC-SHA256(`secret`, `"<timestamp>.<body>"`).
pub fn sign(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let tag = mac(secret, &timestamp.to_string(), body).finalize().into_bytes();
    format!("v1={}", hex::encode(tag))
}

/// Verifies a webhook request, for receivers: `timestamp` and `signature_header` are the values
/// of the `Outbox-Timestamp` and `Outbox-Signature` headers, `body` the raw request body (before
/// any parsing), `now_unix` the current Unix time and `tolerance_secs` how far the timestamp may
/// be from it (300 is typical; this is the replay window).
///
/// The signature header may carry several comma-separated entries (e.g. during a secret
/// rotation); entries of unknown versions are ignored and one matching `v1` entry suffices. The
/// comparison is constant-time.
pub fn verify_signature(
    secret: &[u8],
    timestamp: &str,
    body: &[u8],
    signature_header: &str,
    now_unix: i64,
    tolerance_secs: i64,
) -> Result<(), SignatureError> {
    let ts = timestamp.trim();
    if ts.is_empty() || ts.len() > 18 || !ts.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SignatureError::MalformedTimestamp);
    }
    let sent: i64 = ts.parse().map_err(|_| SignatureError::MalformedTimestamp)?;
    let tolerance_secs = tolerance_secs.max(0);
    let age = now_unix.saturating_sub(sent);
    if age > tolerance_secs {
        return Err(SignatureError::Stale { age_secs: age, tolerance_secs });
    }
    let ahead = sent.saturating_sub(now_unix);
    if ahead > tolerance_secs {
        return Err(SignatureError::FromTheFuture { ahead_secs: ahead, tolerance_secs });
    }
    let mut candidates = Vec::new();
    for entry in signature_header.split(',') {
        let Some((version, value)) = entry.trim().split_once('=') else { continue };
        if version.trim() != "v1" {
            continue;
        }
        let value = value.trim();
        if value.len() != 64 {
            continue;
        }
        if let Ok(bytes) = hex::decode(value) {
            candidates.push(bytes);
        }
    }
    if candidates.is_empty() {
        return Err(SignatureError::MalformedSignature);
    }
    let expected = mac(secret, ts, body);
    if candidates.iter().any(|c| expected.clone().verify_slice(c).is_ok()) {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef-secret";

    #[test]
    fn signature_matches_the_documented_construction() {
        // A fixed vector, so receivers in other languages can check their implementation:
        // HMAC-SHA256("0123456789abcdef-secret", "1700000000.{\"a\":1}").
        let sig = sign(SECRET, 1_700_000_000, br#"{"a":1}"#);
        assert_eq!(sig, "v1=6948a2dc6985c92d09b9edade5c97dce2ba201452d91a72e4a20d35abe4d3420");
        assert!(sig.starts_with("v1=") && sig.len() == 3 + 64, "{sig}");
        let mut m = HmacSha256::new_from_slice(SECRET).unwrap();
        m.update(br#"1700000000.{"a":1}"#);
        assert_eq!(sig, format!("v1={}", hex::encode(m.finalize().into_bytes())));
    }

    #[test]
    fn verification() {
        let now = 1_700_000_000;
        let body = br#"{"order":42}"#;
        let sig = sign(SECRET, now, body);
        let ts = now.to_string();
        assert_eq!(verify_signature(SECRET, &ts, body, &sig, now + 10, 300), Ok(()));
        assert_eq!(verify_signature(SECRET, &ts, body, &sig, now - 10, 300), Ok(()));
        // Tampering.
        assert_eq!(
            verify_signature(SECRET, &ts, br#"{"order":43}"#, &sig, now, 300),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify_signature(SECRET, &(now + 1).to_string(), body, &sig, now, 300),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify_signature(b"another-secret-16b", &ts, body, &sig, now, 300),
            Err(SignatureError::Mismatch)
        );
        // Replay window.
        assert_eq!(
            verify_signature(SECRET, &ts, body, &sig, now + 301, 300),
            Err(SignatureError::Stale { age_secs: 301, tolerance_secs: 300 })
        );
        assert_eq!(
            verify_signature(SECRET, &ts, body, &sig, now - 301, 300),
            Err(SignatureError::FromTheFuture { ahead_secs: 301, tolerance_secs: 300 })
        );
        // Malformed input.
        for bad in ["", "abc", "-5", "1.5", "99999999999999999999"] {
            assert_eq!(
                verify_signature(SECRET, bad, body, &sig, now, 300),
                Err(SignatureError::MalformedTimestamp),
                "{bad:?}"
            );
        }
        for bad in ["", "v1", "v1=", "v1=zz", "v2=abcd", &sig[3..], "v1=abcdef"] {
            assert_eq!(
                verify_signature(SECRET, &ts, body, bad, now, 300),
                Err(SignatureError::MalformedSignature),
                "{bad:?}"
            );
        }
        // Rotation: several entries, one valid.
        let other = sign(b"old-secret-old-secret", now, body);
        assert_eq!(verify_signature(SECRET, &ts, body, &format!("{other}, {sig}"), now, 300), Ok(()));
        assert_eq!(verify_signature(SECRET, &ts, body, &format!("v2=xyz,{sig}"), now, 300), Ok(()));
        // Extreme clocks do not overflow.
        assert!(verify_signature(SECRET, &ts, body, &sig, i64::MIN, 300).is_err());
        assert!(verify_signature(SECRET, &ts, body, &sig, i64::MAX, i64::MAX).is_ok());
    }

    #[test]
    fn header_names_map_both_ways() {
        for (name, http) in [
            (header::MESSAGE_ID, "outbox-message-id"),
            ("traceparent", "traceparent"),
            ("source", "outbox-header-source"),
            ("outbox-signature", "outbox-header-outbox-signature"),
            ("Content-Type", "outbox-header-Content-Type"),
        ] {
            assert_eq!(http_header_name(name), http, "{name}");
        }
        for h in CORE_HEADERS.iter().chain(TRACE_HEADERS.iter()) {
            assert_eq!(envelope_header_name(&http_header_name(h)).as_deref(), Some(*h));
        }
        for (http, name) in [
            ("outbox-header-source", Some("source")),
            ("Outbox-Header-X-Foo", Some("x-foo")),
            ("outbox-signature", None),
            ("outbox-timestamp", None),
            ("content-type", None),
            ("outbox-header-", None),
        ] {
            assert_eq!(envelope_header_name(http).as_deref(), name, "{http}");
        }
    }

    #[test]
    fn header_values_round_trip() {
        for v in
            ["42", "2024-05-01T10:00:00.123+00:00", "order 42", "100%", "订单-1", "a\r\nInjected: x", "+", ""]
        {
            let e = encode_header_value(v);
            // Visible ASCII only: a valid HTTP field value for every client and server.
            assert!(e.bytes().all(|b| (0x21..=0x7e).contains(&b)), "{e}");
            assert_eq!(decode_header_value(&e).as_deref(), Some(v));
        }
        assert_eq!(encode_header_value("2024-05-01T10:00:00+00:00"), "2024-05-01T10:00:00+00:00");
        assert_eq!(encode_header_value("a b%"), "a%20b%25");
        assert_eq!(decode_header_value("%zz"), None);
        assert_eq!(decode_header_value("%4"), None);
        assert_eq!(decode_header_value("%FF"), None);
    }
}
