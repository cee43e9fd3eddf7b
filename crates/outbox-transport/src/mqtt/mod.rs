//! MQTT transport (feature `mqtt`, client: `rumqttc`, protocol MQTT 3.1.1).
//!
//! **Delivery guarantee.** Every message is published at QoS 1 and counts as delivered only when
//! the broker's PUBACK for its packet arrived (the broker then owns it: it has it queued for its
//! subscribers, persistently if the broker persists QoS 1 messages). At-least-once: a PUBLISH
//! whose PUBACK was lost is published again by the relay (a new packet, same message id), so
//! consumers deduplicate on the message id (the inbox does).
//!
//! **Mapping.** MQTT 3.1.1 has no headers, so by default ([`MqttFormat::Envelope`]) the payload
//! is a JSON envelope:
//!
//! ```json
//! {"id":"42","headers":{"outbox-message-id":"42","outbox-topic":"order.paid", ...},"payload":"{\"order\":42}"}
//! ```
//!
//! - `id`: the outbox message id, as a string;
//! - `headers`: every envelope header (`outbox-message-id`, `outbox-biz-type`,
//!   `outbox-biz-key`, `outbox-topic`, `outbox-key`, `outbox-attempt`, `outbox-created-at`,
//!   `traceparent` and the application's own);
//! - `payload`: the body as a JSON string, unchanged whatever it contains.
//!
//! [`MqttFormat::Raw`] sends the body alone and loses the id and the headers (documented
//! trade-off for consumers that cannot unwrap). MQTT 5 user properties would carry headers
//! natively, but many brokers and devices in the field still speak 3.1.1 only; the envelope
//! works with all of them.
//!
//! Topic: [`MqttConfig::topic`], a template where `{topic}` is replaced by the envelope's topic
//! with `.` turned into `/` (`order.paid` -> `order/paid`).
//!
//! **Batches** are pipelined: all PUBLISH packets are written (up to `inflight` awaiting their
//! PUBACK at once), then the PUBACKs are awaited together and matched to their messages by
//! packet id. Messages with the same key keep their order (one connection, written in order); one
//! that could not be sent holds back later ones with its key.
//!
//! **Limits.** A PUBLISH packet larger than `max_packet_bytes` (1 MiB by default; rumqttc's own
//! default of 10 KiB is replaced) fails permanently before sending. Set it to the broker's limit:
//! a 3.1.1 broker answers an oversized packet only by closing the connection. Each `publish`
//! call is bounded by `timeout`.
//!
//! **TLS.** An `mqtts://` (or `ssl://`) URL connects with TLS (rustls), port 8883 by default.
//! The broker's certificate is verified against the system's trust store plus `tls_ca_file`, and
//! must be valid for the URL's host name; `tls_cert_file`/`tls_key_file` present a client
//! certificate (Mosquitto's `require_certificate true`). The files with an `mqtt://` URL are a
//! configuration error saying to use `mqtts://`.
//!
//! ```toml
//! url = "mqtts://relay:secret@broker.internal:8883"
//! tls_ca_file = "/etc/outbox/mqtt-ca.pem"
//! tls_cert_file = "/etc/outbox/relay.pem"
//! tls_key_file = "/etc/outbox/relay.key"
//! ```
//!
//! A failed handshake is a connect error naming the broker and why: `not signed by a CA this
//! client trusts`, `not valid for the host name in the URL`, `expired`, `the server refused this
//! client's certificate`, or `requires a client certificate and none was given`. A file that
//! cannot be read or holds no PEM certificate or key, or a key that does not fit its certificate,
//! is a configuration error naming the key (`outbox check` reports it).
//!
//! **Outages.** A background task drives the connection and reconnects (clean session, pauses
//! from 100 ms doubling up to `reconnect_max_delay`); while disconnected, `publish` answers
//! `Unavailable` at once without queueing, and messages awaiting a PUBACK when the connection
//! dropped are reported `Unavailable` (they are published again after recovery).
//!
//! **Classification.**
//!
//! | what happened | kind |
//! | --- | --- |
//! | PUBACK received | delivered |
//! | not connected, connection lost before the PUBACK, no PUBACK within the timeout | unavailable |
//! | broker refused the connection (bad credentials, not authorized) | unavailable (the destination is unusable until fixed; costs no attempt) |
//! | client request queue full or closed | unavailable |
//! | packet over `max_packet_bytes`; topic (as built from the template) empty, over 65535 bytes, with a wildcard `+`/`#`, a NUL or other control character (U+0001-U+001F, U+007F-U+009F), a Unicode noncharacter, or more than `max_topic_levels` levels (all checked before sending) | permanent |
//!
//! **Why the topic is checked here.** An MQTT 3.1.1 broker has no way to refuse one message: it
//! closes the connection (Mosquitto does for every rule above). Sent, such a message would look
//! like an outage: reported unavailable, the destination's breaker would probe with it forever
//! and nothing else would be delivered. Checked before sending, it fails alone, naming the rule,
//! and the connection is never touched. (MQTT 5 user properties, which brokers also validate,
//! are not used: the transport speaks 3.1.1.)

mod config;
mod outcome;
mod transport;

pub use config::{MqttConfig, MqttFormat};
pub use transport::MqttTransport;
