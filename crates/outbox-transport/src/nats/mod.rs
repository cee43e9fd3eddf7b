//! NATS JetStream transport (feature `nats`, client: `async-nats`).
//!
//! **Delivery guarantee.** A message counts as delivered only when the JetStream stream that
//! captures its subject answered the publish with a `PublishAck`, i.e. stored it (replicated,
//! when the stream is). At-least-once: a publish whose ack was lost is sent again by the relay,
//! and every publish carries `Nats-Msg-Id` = the outbox message id, so the stream drops the
//! duplicate within its duplicate window (2 minutes by default; raise it on the stream to cover
//! longer outages). A message republished after the window is stored twice, and consumers
//! deduplicate on the `outbox-message-id` header (the inbox does).
//!
//! **Mapping.**
//! - Subject: the envelope's topic (`order.paid`), `<subject_prefix>.<topic>`, or a fixed
//!   `subject` ([`NatsConfig`]). A topic that does not make a valid subject (whitespace, empty
//!   tokens, wildcards) fails permanently.
//! - Headers: every envelope header (`outbox-message-id`, `outbox-biz-type`, `outbox-biz-key`,
//!   `outbox-topic`, `outbox-key`, `outbox-attempt`, `outbox-created-at`, `traceparent` and the
//!   application's own) becomes a NATS header of the same name, plus `Nats-Msg-Id`.
//! - Payload: the body's UTF-8 bytes, unchanged.
//!
//! **Batches** are pipelined on one connection: every publish is written, in order, then all
//! acknowledgements are awaited together. Messages with the same key keep their order (one
//! connection, one stream); one that could not be sent holds back later ones with its key.
//!
//! **Limits.** Payload plus headers must fit the server's `max_payload` (1 MiB by default; the
//! server closes the connection on a larger message, so it is checked before sending and fails
//! permanently) or the smaller `max_payload_bytes`. A stream's own `max_msg_size` is enforced by
//! the server (permanent failure). Each `publish` call is bounded by `timeout`.
//!
//! **TLS.** A `tls://` URL, or any of `tls_ca_file`, `tls_cert_file`, `tls_key_file`, makes TLS
//! required (the connection fails rather than continue in plain text). The server's certificate
//! is verified against the system's trust store plus `tls_ca_file`, and must be valid for the
//! URL's host name; `tls_cert_file`/`tls_key_file` present a client certificate to servers that
//! verify clients (`tls { verify: true }`). A `nats://` URL to a server that requires TLS gets
//! the same verification.
//!
//! ```toml
//! url = "tls://relay:secret@nats.internal:4222"
//! tls_ca_file = "/etc/outbox/nats-ca.pem"
//! tls_cert_file = "/etc/outbox/relay.pem"
//! tls_key_file = "/etc/outbox/relay.key"
//! ```
//!
//! A failed handshake is a connect error naming the server and why: `not signed by a CA this
//! client trusts`, `not valid for the host name in the URL`, `expired`, or `the server refused
//! this client's certificate` (nats-server answers a missing client certificate the same way; the
//! error then adds that none was sent). A file that cannot be read or holds no PEM certificate or
//! key, or a key that does not fit its certificate, is a configuration error naming the key
//! (`outbox check` reports it).
//!
//! **Outages.** The connection is re-established in the background (retrying forever, at most
//! every 2 s); while it is down `publish` answers `Unavailable` at once without queueing.
//!
//! **Classification.**
//!
//! | what happened | kind | why |
//! | --- | --- | --- |
//! | `PublishAck` (also with `duplicate: true`) | delivered | the stream stored it (or already had this `Nats-Msg-Id`) |
//! | client not connected (reconnecting) | unavailable | the server is unreachable; nothing was sent |
//! | no ack within the timeout, connection lost before the ack | unavailable | the server is not answering |
//! | 503 *no responders*: no stream captures the subject | unavailable | see below |
//! | JetStream 503, "cluster not available", "not leader" | unavailable | the stream cannot store anything right now |
//! | stream full (discard new), account/storage/memory limits | retryable | may clear as the stream is consumed or trimmed |
//! | "message size exceeds maximum allowed" (the stream's `max_msg_size`) | permanent | the same message will never fit |
//! | message over the server's `max_payload` or `max_payload_bytes` (checked before sending) | permanent | the server would close the connection |
//! | subject (as built from the configuration) empty, over 3840 bytes, with whitespace, a control character, an empty token or a wildcard token `*`/`>`; header name not printable ASCII, with `:`, or starting with `Nats-`; header value with CR or LF (checked before sending) | permanent | the message cannot be expressed in NATS; an over-long protocol line makes the server close the connection |
//! | a client error about the message itself (invalid subject or header, too large) | permanent | |
//! | other JetStream 4xx errors | permanent | the request itself is wrong |
//! | other JetStream errors, an unparsable ack | retryable | unknown: costs an attempt, so it ends `failed` if it persists |
//!
//! **No stream for the subject is `Unavailable`, not `Permanent`.** A missing stream is a
//! configuration problem of the *destination*, not of the message: every message to that subject
//! fails the same way, and the fix (creating the stream, or correcting the subject mapping)
//! happens outside the outbox. As permanent, a deploy-order mistake or a stream deleted by an
//! operator would turn every message of the outage into `failed`, to be re-driven by hand: the
//! very failure mode the outbox exists to prevent (seed 001). As unavailable, the messages stay
//! `pending` with the reason (naming the subject) in `last_error`, no attempt is consumed, the
//! destination's circuit breaker opens and probes with one message, and the backlog drains by
//! itself once the stream exists. The same 503 is also what JetStream answers while a stream has
//! no leader or JetStream is not enabled yet (a server restarting), which are outages. The
//! misconfiguration is caught early where it can be: with `stream` (or a fixed `subject`) set,
//! [`NatsTransport::connect`] refuses to start unless a stream captures the subjects, and
//! [`health`](outbox_core::Transport::health) reports it. The cost: with per-topic subjects and
//! no `stream` set, a topic no stream captures stays pending (visible in `outbox status` as the
//! oldest pending age) instead of failing; set `stream` to have it checked.

mod config;
mod outcome;
mod transport;

pub use config::NatsConfig;
pub use transport::NatsTransport;
