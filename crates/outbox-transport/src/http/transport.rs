//! The webhook [`Transport`], request signing and its verification for receivers.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use hmac::{Hmac, Mac};
use outbox_core::{header, Envelope, Outcome, Transport};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use reqwest::{Client, Url};
use sha2::Sha256;

use super::config::{HttpConfig, UrlTemplate, TOPIC_PLACEHOLDER};
use super::outcome;
use crate::validate::{quote, refuse};
use crate::TransportError;

const KIND: &str = "http";

/// Header carrying the signing time, Unix seconds.
pub const TIMESTAMP_HEADER: &str = "outbox-timestamp";
/// Header carrying the signature(s): `v1=<hex>`, comma-separated when there are several.
pub const SIGNATURE_HEADER: &str = "outbox-signature";
/// Prefix of the HTTP header that carries a message header not defined by outbox.
pub const CUSTOM_HEADER_PREFIX: &str = "outbox-header-";
/// Most bytes of mapped message headers (names + values) on one request; more fails the
/// message permanently (common servers reject requests with more than 8 to 32 KiB of headers).
pub const MAX_HEADER_BYTES: usize = 32 * 1024;

/// Most bytes read from a response body: enough for the error snippet (read past it so a secret
/// echoed across the cut is still scrubbed) and to let small 2xx bodies be drained so the
/// connection can be reused.
const MAX_BODY_READ: usize = 8 * 1024;

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

/// POSTs each message to a webhook, signed. Build it with [`HttpTransport::connect`]; see the
/// [module docs](super) for the request format.
pub struct HttpTransport {
    config: HttpConfig,
    client: Client,
    target: Target,
    /// The URL template with any password redacted.
    address: String,
    /// `config.headers`, parsed.
    static_headers: HeaderMap,
    content_type: HeaderValue,
    /// Strings scrubbed from response snippets.
    secrets: Vec<String>,
}

enum Target {
    Fixed(Url),
    Template(UrlTemplate),
}

impl fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpTransport")
            .field("url", &self.address)
            .field("signed", &self.config.secret.is_some())
            .field("concurrency", &self.config.concurrency)
            .finish_non_exhaustive()
    }
}

impl HttpTransport {
    /// Validates `config` and builds the pooled client. No request is made: a receiver that is
    /// down at start-up is reported per message (`Unavailable`) and by
    /// [`health`](Transport::health). Fails with [`TransportError::Config`] naming the wrong key,
    /// or [`TransportError::Connect`] if the HTTP client cannot be built (TLS set-up).
    pub async fn connect(config: HttpConfig) -> Result<Self, TransportError> {
        config.validate()?;
        let address = crate::redact(&config.url);
        let config_err =
            |key: &'static str, reason: String| TransportError::Config { transport: KIND, key, reason };
        let target = if config.url.contains(TOPIC_PLACEHOLDER) {
            Target::Template(UrlTemplate::parse(&config.url).map_err(|e| config_err("url", e))?)
        } else {
            Target::Fixed(Url::parse(&config.url).map_err(|e| config_err("url", e.to_string()))?)
        };
        let mut static_headers = HeaderMap::new();
        let mut secrets: Vec<String> = Vec::new();
        for (name, value) in &config.headers {
            let n =
                HeaderName::from_bytes(name.as_bytes()).map_err(|e| config_err("headers", e.to_string()))?;
            let mut v = HeaderValue::from_str(value).map_err(|e| config_err("headers", e.to_string()))?;
            v.set_sensitive(true);
            static_headers.insert(n, v);
            secrets.push(value.clone());
            secrets.extend(value.split_whitespace().filter(|p| p.len() >= 8).map(str::to_owned));
        }
        if let Some(s) = &config.secret {
            secrets.push(String::from_utf8_lossy(s.expose()).into_owned());
        }
        if let Some(pw) = password_of(&config.url) {
            secrets.push(pw.to_owned());
        }
        let content_type = HeaderValue::from_str(&config.content_type)
            .map_err(|e| config_err("content_type", e.to_string()))?;
        let client = Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.connect_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(config.concurrency)
            .user_agent(concat!("outbox/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| TransportError::Connect {
                transport: KIND,
                address: address.clone(),
                reason: format!("cannot build the HTTP client: {e}"),
            })?;
        Ok(HttpTransport { config, client, target, address, static_headers, content_type, secrets })
    }

    /// The configuration (its `Debug` form hides the secret, the URL password and header
    /// values).
    pub fn config(&self) -> &HttpConfig {
        &self.config
    }

    fn url_for(&self, topic: &str) -> Result<Url, String> {
        match &self.target {
            Target::Fixed(u) => Ok(u.clone()),
            Target::Template(t) => t.render(topic),
        }
    }

    /// The request headers of `e` (without the signature).
    fn headers_for(&self, e: &Envelope) -> Result<HeaderMap, Outcome> {
        let mut headers = self.static_headers.clone();
        headers.insert(CONTENT_TYPE, self.content_type.clone());
        let mut total = 0usize;
        for (name, value) in &e.headers {
            let http_name = http_header_name(name);
            if let Err(why) = check_header_name(&http_name) {
                return Err(refuse(format!("message header {} cannot be sent: {why}", quote(name))));
            }
            let Ok(n) = HeaderName::from_bytes(http_name.as_bytes()) else {
                return Err(refuse(format!(
                    "message header {} cannot be sent: not a valid HTTP header name",
                    quote(name)
                )));
            };
            let encoded = encode_header_value(value);
            total += http_name.len() + encoded.len();
            if total > MAX_HEADER_BYTES {
                break;
            }
            let Ok(v) = HeaderValue::from_str(&encoded) else {
                return Err(refuse(format!(
                    "message header {} has a value that cannot be sent",
                    quote(name)
                )));
            };
            headers.insert(n, v);
        }
        if total > MAX_HEADER_BYTES {
            return Err(refuse(format!(
                "message headers take more than the {MAX_HEADER_BYTES} bytes allowed on the wire"
            )));
        }
        Ok(headers)
    }

    async fn send(&self, e: &Envelope) -> Outcome {
        if e.payload.len() > self.config.max_payload_bytes {
            return refuse(format!(
                "payload is {} bytes, larger than max_payload_bytes ({})",
                e.payload.len(),
                self.config.max_payload_bytes
            ));
        }
        let url = match self.url_for(&e.topic) {
            Ok(u) => u,
            Err(reason) => return refuse(reason),
        };
        let mut headers = match self.headers_for(e) {
            Ok(h) => h,
            Err(o) => return o,
        };
        if let Some(secret) = &self.config.secret {
            let ts = unix_now();
            let sig = sign(secret.expose(), ts, e.payload.as_bytes());
            headers.insert(HeaderName::from_static(TIMESTAMP_HEADER), HeaderValue::from(ts));
            match HeaderValue::from_str(&sig) {
                Ok(v) => {
                    headers.insert(HeaderName::from_static(SIGNATURE_HEADER), v);
                }
                Err(_) => return Outcome::permanent("internal error: signature is not a header value"),
            }
        }
        let timeout = self.config.timeout;
        let response = match self.client.post(url).headers(headers).body(e.payload.clone()).send().await {
            Ok(r) => r,
            Err(err) => return self.scrubbed(outcome::from_error(&err, &self.address, timeout)),
        };
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(outcome::parse_retry_after);
        let body = read_bounded(response, MAX_BODY_READ).await;
        let snippet = if status.is_success() {
            String::new()
        } else {
            let secrets: Vec<&str> = self.secrets.iter().map(String::as_str).collect();
            outcome::snippet(&body, &secrets)
        };
        outcome::from_status(status, retry_after, &snippet)
    }

    fn scrubbed(&self, o: Outcome) -> Outcome {
        match o {
            Outcome::Failed { kind, mut reason, retry_after } => {
                for s in self.secrets.iter().filter(|s| !s.is_empty()) {
                    reason = reason.replace(s.as_str(), "***");
                }
                Outcome::Failed { kind, reason, retry_after }
            }
            d => d,
        }
    }
}

/// Reads at most `limit` bytes of the body; errors end the read (the status is what counts).
async fn read_bounded(mut response: reqwest::Response, limit: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < limit {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = limit - body.len();
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(None) | Err(_) => break,
        }
    }
    body
}

#[async_trait::async_trait]
impl Transport for HttpTransport {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn publish(&self, batch: &[Envelope]) -> Vec<Outcome> {
        // `buffered` keeps the batch order while up to `concurrency` requests are in flight. (A
        // batch never holds two messages with the same key, so this reorders nothing that must
        // stay ordered.)
        let requests: Vec<_> = batch.iter().map(|e| self.send(e)).collect();
        let out: Vec<Outcome> =
            futures::stream::iter(requests).buffered(self.config.concurrency).collect().await;
        out.into_iter().map(crate::validate::bounded).collect()
    }

    fn max_payload_bytes(&self) -> Option<usize> {
        Some(self.config.max_payload_bytes)
    }

    /// Sends `OPTIONS` to the origin of the URL: any HTTP answer proves the receiver reachable.
    async fn health(&self) -> Result<(), String> {
        let mut url = self.url_for("health").map_err(|e| self.scrub_text(e))?;
        url.set_path("/");
        url.set_query(None);
        match self.client.request(reqwest::Method::OPTIONS, url).send().await {
            Ok(_) => Ok(()),
            Err(e) => {
                let timeout = self.config.timeout;
                match self.scrubbed(outcome::from_error(&e, &self.address, timeout)) {
                    Outcome::Failed { reason, .. } => Err(reason),
                    Outcome::Delivered => Ok(()),
                }
            }
        }
    }
}

impl HttpTransport {
    fn scrub_text(&self, mut text: String) -> String {
        for s in self.secrets.iter().filter(|s| !s.is_empty()) {
            text = text.replace(s.as_str(), "***");
        }
        text
    }
}

fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn password_of(url: &str) -> Option<&str> {
    let rest = &url[url.find("://")? + 3..];
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    let userinfo = &authority[..authority.rfind('@')?];
    userinfo.split_once(':').map(|(_, pw)| pw).filter(|pw| !pw.is_empty())
}

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

/// Why `name` is not an HTTP header name (RFC 9110 `token`: 1 or more of ``! # $ % & ' * + - .
/// ^ _ ` | ~``, digits and letters), if it is not.
pub(crate) fn check_header_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty header name".into());
    }
    let tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    match name.chars().find(|&c| !tchar(c)) {
        Some(c) => Err(format!(
            "{} is not allowed in an HTTP header name (a token: letters, digits and !#$%&'*+-.^_`|~)",
            crate::validate::describe_char(c)
        )),
        None => Ok(()),
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
        assert_eq!(http_header_name(header::MESSAGE_ID), "outbox-message-id");
        assert_eq!(http_header_name("traceparent"), "traceparent");
        assert_eq!(http_header_name("source"), "outbox-header-source");
        assert_eq!(http_header_name("outbox-signature"), "outbox-header-outbox-signature");
        assert_eq!(http_header_name("Content-Type"), "outbox-header-Content-Type");
        for h in CORE_HEADERS.iter().chain(TRACE_HEADERS.iter()) {
            assert_eq!(envelope_header_name(&http_header_name(h)).as_deref(), Some(*h));
        }
        assert_eq!(envelope_header_name("outbox-header-source").as_deref(), Some("source"));
        assert_eq!(envelope_header_name("Outbox-Header-X-Foo").as_deref(), Some("x-foo"));
        assert_eq!(envelope_header_name("outbox-signature"), None);
        assert_eq!(envelope_header_name("outbox-timestamp"), None);
        assert_eq!(envelope_header_name("content-type"), None);
        assert_eq!(envelope_header_name("outbox-header-"), None);
    }

    #[test]
    fn header_values_round_trip() {
        for v in
            ["42", "2024-05-01T10:00:00.123+00:00", "order 42", "100%", "订单-1", "a\r\nInjected: x", "+", ""]
        {
            let e = encode_header_value(v);
            assert!(HeaderValue::from_str(&e).is_ok(), "{e}");
            assert!(e.bytes().all(|b| (0x21..=0x7e).contains(&b)), "{e}");
            assert_eq!(decode_header_value(&e).as_deref(), Some(v));
        }
        assert_eq!(encode_header_value("2024-05-01T10:00:00+00:00"), "2024-05-01T10:00:00+00:00");
        assert_eq!(encode_header_value("a b%"), "a%20b%25");
        assert_eq!(decode_header_value("%zz"), None);
        assert_eq!(decode_header_value("%4"), None);
        assert_eq!(decode_header_value("%FF"), None);
    }

    #[test]
    fn header_names_are_tokens() {
        assert_eq!(check_header_name("outbox-header-X_Custom.1"), Ok(()));
        for (bad, shown) in [
            ("outbox-header-a b", "U+0020 (space)"),
            ("outbox-header-a:b", "':'"),
            ("outbox-header-a\r\nInjected", "U+000D"),
            ("outbox-header-é", "U+00E9"),
            ("outbox-header-a\u{0}", "U+0000"),
        ] {
            assert!(check_header_name(bad).unwrap_err().contains(shown), "{bad:?}");
        }
        assert!(check_header_name("").is_err());
    }

    #[test]
    fn passwords_are_found() {
        assert_eq!(password_of("https://u:p@h/x"), Some("p"));
        assert_eq!(password_of("https://h/x@y"), None);
        assert_eq!(password_of("https://u@h/"), None);
    }
}
