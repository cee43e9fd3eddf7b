//! RabbitMQ (AMQP 0-9-1) transport, on [`lapin`].
//!
//! # Delivery guarantee
//! A message counts as delivered only when RabbitMQ **confirmed** it (publisher confirms:
//! `confirm.select` on the channel, then `basic.ack` for the message) and did **not return** it.
//! Every message is published `persistent` (`delivery_mode = 2`) and `mandatory`, so for durable
//! queues the ack means the message is on disk in every queue it was routed to, and a message
//! that no queue is bound for comes back (`basic.return`) and fails permanently with
//! "no queue bound for routing key ..." instead of silently disappearing. A `basic.nack` is a
//! retryable failure. At-least-once: a confirm lost with the connection makes the relay publish
//! the message again, with the same `message_id`.
//!
//! A batch is pipelined: every message is published, then every confirm awaited. Batches to one
//! destination take turns on one channel (RabbitMQ keeps the publish order of a channel, which
//! keeps the relay's per-key order). The connection and channel are opened by
//! [`RabbitMqTransport::connect`]; when they are lost, the publish reports `Unavailable` (the
//! relay's circuit breaker holds messages back without costing attempts) and the next publish
//! reconnects.
//!
//! The ack covers the broker's side only: make the consumers' queues durable (and quorum queues
//! where a node loss must not lose messages), or a persistent message in a transient queue is
//! still lost on a broker restart. At connect the exchange is checked with a passive declare (it
//! must exist), unless `declare` asks the transport to declare it.
//!
//! ```toml
//! url = "amqp://relay:secret@rabbit:5672/%2f"   # amqps:// for TLS
//! exchange = "events"
//! # routing_key = "all-events"   # default: each message's topic
//! # content_type = "application/json"   # default: detected per message
//! # max_payload_bytes = 16777216
//! # connect_timeout = "10s"
//! # [declare]                    # default: the exchange must exist
//! # kind = "topic"
//! # durable = true
//! # queue = "events.all"         # optionally a durable queue bound to it
//! # binding_key = "#"
//! ```
//!
//! # TLS
//! An `amqps://` URL connects with TLS (port 5671 by default), trusting the system's store
//! (`/etc/ssl/certs`) and, with `tls_ca_file`, a private CA besides; the broker's certificate
//! must be valid for the URL's host name. Brokers that authenticate clients by certificate
//! (`ssl_options.fail_if_no_peer_cert = true`, or the `EXTERNAL` mechanism of
//! `rabbitmq_auth_mechanism_ssl`) get the one in `tls_cert_file`/`tls_key_file`. The files are
//! PEM, read when the transport connects (a missing or unreadable file is a configuration error
//! naming its key); TLS settings with an `amqp://` URL are refused. A failed handshake is
//! reported with its cause: an unknown CA, a certificate not valid for the host name or
//! expired, a client certificate the broker refused or required.
//!
//! ```toml
//! url = "amqps://relay:secret@rabbit.internal:5671/%2f"
//! exchange = "events"
//! tls_ca_file = "/etc/outbox/rabbit-ca.pem"     # default: the system's trust store only
//! tls_cert_file = "/etc/outbox/relay.pem"       # with tls_key_file: a client certificate
//! tls_key_file = "/etc/outbox/relay.key"
//! ```
//!
//! # How a message maps to AMQP
//! | outbox | AMQP |
//! | --- | --- |
//! | exchange | `exchange` of the config (default: the default exchange `""`) |
//! | routing key | `routing_key` of the config, or the message's topic (default) |
//! | message id | `message_id` property (decimal) and the `outbox-message-id` header |
//! | payload | body, as is (UTF-8) |
//! | every envelope header (`outbox-message-id`, `outbox-biz-type`, `outbox-biz-key`, `outbox-topic`, `outbox-key`, `outbox-attempt`, `outbox-created-at`, `traceparent` when present, and the message's own headers) | the `headers` table, each value a long string |
//! | tag | `type` property, when set |
//! | created at | `timestamp` property (Unix seconds) |
//! | | `delivery_mode = 2`, `app_id = "outbox"`, `content_type` from the config, else `application/json` for a JSON object or array and `text/plain; charset=utf-8` otherwise |
//!
//! Consumers deduplicate on `message_id` (or the `outbox-message-id` header).
//!
//! # Limits
//! - Payload: `max_payload_bytes` (default 16 MiB, at most 128 MiB, RabbitMQ's default
//!   `max_message_size`); larger messages fail permanently before publishing.
//! - Routing key, header names, tag and content type: AMQP short strings, at most 255 bytes;
//!   longer ones fail permanently before publishing.
//! - The properties and headers travel in one content header frame, which AMQP cannot split:
//!   larger than the connection's `frame_max` (128 KiB by default), RabbitMQ would close the
//!   whole connection (`501 FRAME_ERROR`), so such a message fails permanently before publishing.
//! - Headers named `CC` or `BCC` are routing instructions to RabbitMQ (arrays of routing keys);
//!   with a text value the broker closes the channel, so they fail permanently before publishing.
//! - lapin itself logs each returned (unroutable) message at `WARN`, payload included; filter the
//!   `lapin` target if payloads must not reach the logs.
//!
//! # Classification
//! | what happened | outcome |
//! | --- | --- |
//! | `basic.ack`, message not returned | `Delivered` |
//! | `basic.return` (no queue bound for the routing key), then the ack | `Permanent` |
//! | `basic.nack` | `Retryable` |
//! | over `max_payload_bytes`, a short string over 255 bytes, a `CC`/`BCC` header, a content header frame over `frame_max` | `Permanent`, nothing published |
//! | connection refused or lost, missed heartbeats, channel/connection closed, connection-level AMQP errors, connection blocked by a broker alarm | `Unavailable` |
//! | channel closed with 404 (exchange missing) or 403 (access refused): the destination itself is misconfigured | `Unavailable` |
//! | channel closed with 406 precondition-failed or 311 content-too-large (the broker does not say which message) | every message in flight is published again alone: the one that still closes the channel is `Permanent`, the others get their own answer |
//! | channel closed with another soft error | `Retryable` |
//!
//! ```no_run
//! # async fn demo() -> Result<(), outbox_transport::TransportError> {
//! use outbox_transport::rabbitmq::{RabbitMqConfig, RabbitMqTransport};
//! let transport = RabbitMqTransport::connect(RabbitMqConfig::new("amqp://guest:guest@127.0.0.1:5672/%2f", "events")).await?;
//! # Ok(()) }
//! ```

mod config;
mod outcome;
mod transport;

pub use config::{DeclareConfig, RabbitMqConfig, BROKER_MAX_MESSAGE_SIZE, DEFAULT_MAX_PAYLOAD_BYTES};
pub use transport::RabbitMqTransport;
