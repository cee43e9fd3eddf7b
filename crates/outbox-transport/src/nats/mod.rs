//! NATS JetStream transport (feature `nats`, client: `async-nats`).
//!
//! **Delivery guarantee.** A message counts as delivered only when the JetStream stream that
//! captures its subject answered the publish with a `PublishAck`, i.e. stored it (replicated,
//! when the stream is). At-least-once: a publish whose ack was lost is sent again by the relay,
//! and every publish carries `Nats-Msg-Id` = the outbox message id, so the stream drops the
//! duplicate within its duplicate window (2 minutes by default; a stream meant for the outbox
//! should keep it at least as long as the relay's publish timeout plus its first retry delay).
//! Beyond the window, consumers deduplicate on the `outbox-message-id` header (the inbox does).
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
//! the server (permanent failure). Each `publish` call is bounded by `timeout_ms`.
//!
//! **Outages.** The connection is re-established in the background (retrying forever, at most
//! every 2 s); while it is down `publish` answers `Unavailable` at once without queueing. The
//! classification of every error, and why "no stream" is `Unavailable`, is in the `outcome`
//! module's documentation (repeated in the crate README).

mod config;
mod outcome;
mod transport;

pub use config::NatsConfig;
pub use transport::NatsTransport;
