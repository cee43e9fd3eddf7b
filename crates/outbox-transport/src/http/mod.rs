//! HTTP webhook transport, on [`reqwest`] (rustls).
//!
//! # Delivery guarantee
//! Each message is one `POST` of its payload to the configured URL; it counts as delivered when
//! the receiver answers **2xx**. At-least-once: a request whose answer is lost (a timeout, a
//! broken connection) is sent again later with the same `outbox-message-id`, so receivers must
//! deduplicate on it (the outbox inbox does). A batch is sent concurrently, at most
//! `concurrency` requests at a time, over one pooled client (connections are reused); the
//! relay never puts two messages with the same key in one batch, so per-key order holds.
//! Redirects are not followed.
//!
//! # The request
//! ```text
//! POST <url, with {topic} replaced by the topic, percent-encoded as one path segment or query value>
//! Content-Type: application/json                (the `content_type` setting)
//! Outbox-Timestamp: 1700000000                  (Unix seconds when the request was signed)
//! Outbox-Signature: v1=6948a2dc...              (see below; absent when `unsigned = true`)
//! Outbox-Message-Id: 42
//! Outbox-Topic: order.paid
//! Outbox-Attempt: 1
//! Outbox-Created-At: 2024-05-01T10:00:00.123456+00:00
//! Outbox-Biz-Type: order                        (when set)
//! Outbox-Biz-Key: 42                            (when set)
//! Outbox-Key: order-42                          (when set)
//! traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01   (when set)
//! Outbox-Header-<name>: <value>                 (each of the message's own headers)
//! <static headers of the `headers` setting>
//!
//! <payload, byte for byte>
//! ```
//!
//! **Header names.** The `outbox-*` headers that outbox defines (message id, biz type, biz key,
//! topic, key, attempt, created at), `traceparent` and `tracestate` travel under their own
//! names. Every other message header `name` travels as `Outbox-Header-<name>` (so a message
//! header can never clash with `Content-Type`, `Host` or the signature). HTTP header names are
//! case-insensitive; receivers usually see them in lower case. [`http_header_name`] and
//! [`envelope_header_name`] do the mapping. A message header whose name is not a valid HTTP
//! token fails permanently.
//!
//! **Header values** are percent-encoded: every byte of the UTF-8 value outside visible ASCII
//! (`!` to `~`), and `%` itself, is written `%XX`. Values made of visible ASCII without `%`
//! (ids, attempts, timestamps, `traceparent`) are therefore unchanged, and any value, including
//! non-ASCII text, spaces or line breaks, arrives intact and cannot inject headers. Decode with
//! any percent-decoder that leaves `+` alone, or [`decode_header_value`]. Mapped headers may
//! take at most [`MAX_HEADER_BYTES`] (32 KiB); more fails the message permanently.
//!
//! **The URL.** `{topic}` may appear in the path, the query or the fragment, never in the host.
//! Each occurrence is replaced by the topic percent-encoded: every byte outside `A-Z a-z 0-9 -
//! . _ ~` becomes `%XX` (so `/`, `?`, `#`, `%`, `&`, `=`, `\` and spaces are encoded), and in the
//! path a topic made only of dots has its dots encoded too. A topic is therefore one path
//! segment (or one query value): `a/../../x` arrives as `a%2F..%2F..%2Fx`, `?x=1` as `%3Fx%3D1`.
//! A topic that would still change the path's shape, i.e. `.` or `..` filling a whole segment
//! (URL parsing resolves `%2E%2E` like `..`, so it cannot be sent as a segment), fails
//! permanently: a signed request never leaves the configured path.
//!
//! # Signature (how to verify a request, in any language)
//! With the shared `secret` (its UTF-8 bytes are the key):
//! 1. Read `Outbox-Timestamp` (`t`, decimal Unix seconds) and `Outbox-Signature`.
//! 2. Reject the request if `|now - t|` exceeds your tolerance (e.g. 300 s): this bounds
//!    replays.
//! 3. Compute `HMAC-SHA256(secret, t + "." + body)`, where `t` is the header's exact text and
//!    `body` the raw request body bytes (before any JSON parsing), and hex-encode it in lower
//!    case.
//! 4. `Outbox-Signature` is a comma-separated list of `scheme=value` entries (today exactly
//!    one, `v1=<64 hex digits>`; ignore other schemes). Accept if any `v1` value equals your
//!    digest, comparing in constant time.
//!
//! Test vector: secret `0123456789abcdef-secret`, `t = 1700000000`, body `{"a":1}` give
//! `v1=6948a2dc6985c92d09b9edade5c97dce2ba201452d91a72e4a20d35abe4d3420`.
//! In Rust, [`verify_signature`] does all of this. The signature covers the timestamp and the
//! body, not the other headers: a receiver that must trust the message id against a forger who
//! can replay a captured request within the tolerance should also deduplicate on the signature,
//! or carry the id inside the payload. The secret never appears in logs, errors or `Debug`
//! output.
//!
//! # Classification
//! | answer | outcome | why |
//! | --- | --- | --- |
//! | 2xx | `Delivered` | |
//! | 408, 425, 429 | `Retryable` (with `Retry-After` seconds as `retry_after`) | this request should be tried again later |
//! | 502, 503, 504 | `Unavailable` (with `Retry-After`) | a proxy or load balancer saying the receiver is down or overloaded: the destination, not the message, is at fault, so no attempt is spent and the circuit breaker holds the backlog (an hour-long outage must not fail messages) |
//! | other 5xx | `Retryable` (with `Retry-After`) | the receiver failed on this request |
//! | other 4xx | `Permanent`, with the status and up to 256 bytes of the body | the receiver rejects this message; retrying cannot help |
//! | 3xx | `Permanent` | redirects are not followed: fix the URL |
//! | connection refused, DNS failure, TLS failure, connect timeout | `Unavailable` | the receiver is unreachable |
//! | no response within `timeout` | `Unavailable` | as the relay's own publish timeout: a receiver that does not answer is unavailable; the message is sent again with the same id when it recovers |
//! | connection broken while sending or reading | `Retryable` | |
//! | payload over `max_payload_bytes`, a header name that is not an HTTP token, headers too large, a topic whose URL is invalid or would change the path | `Permanent`, no request | |
//!
//! Only the delta-seconds form of `Retry-After` is honoured (capped at 24 h). Body snippets in
//! reasons are cleaned of control characters and of any configured secret the receiver might
//! echo.
//!
//! # TLS
//! `https://` URLs are verified against the system's trust store (`/etc/ssl/certs`) and, with
//! `tls_ca_file`, a private CA besides; the receiver's certificate must be valid for the URL's
//! host name. A receiver that authenticates the relay by certificate (mutual TLS) gets the one
//! in `tls_cert_file`/`tls_key_file`. The files are PEM, read when the transport is built (a
//! missing or unreadable file is a configuration error naming its key); TLS settings with an
//! `http://` URL are refused. A failed handshake is reported (`Unavailable`) with its cause: an
//! unknown CA, a certificate not valid for the host name or expired, a client certificate the
//! receiver refused or required.
//!
//! ```toml
//! url = "https://hooks.internal/outbox/{topic}"
//! secret = "a-long-random-shared-secret"
//! tls_ca_file = "/etc/outbox/hooks-ca.pem"      # default: the system's trust store only
//! tls_cert_file = "/etc/outbox/relay.pem"       # with tls_key_file: a client certificate
//! tls_key_file = "/etc/outbox/relay.key"
//! ```
//!
//! # Limits
//! Payload up to `max_payload_bytes` (default 16 MiB), headers as above, response bodies read
//! up to 8 KiB (the rest is discarded).
//!
//! ```no_run
//! # async fn demo() -> Result<(), outbox_transport::TransportError> {
//! use outbox_transport::http::{HttpConfig, HttpTransport};
//! let transport =
//!     HttpTransport::connect(HttpConfig::new("https://hooks.example.com/{topic}", "a-long-shared-secret")).await?;
//! # Ok(()) }
//! ```

mod config;
mod outcome;
mod transport;

pub use config::{HttpConfig, WebhookSecret, DEFAULT_MAX_PAYLOAD_BYTES, MIN_SECRET_BYTES, TOPIC_PLACEHOLDER};
pub use outbox_core::webhook::{
    decode_header_value, encode_header_value, envelope_header_name, http_header_name, sign, verify_signature,
    SignatureError, CUSTOM_HEADER_PREFIX, SIGNATURE_HEADER, TIMESTAMP_HEADER,
};
pub use transport::{HttpTransport, MAX_HEADER_BYTES};
