//! Kafka transport (feature `kafka`, client: `rdkafka` with its bundled librdkafka 2.12).
//!
//! **Why rdkafka.** librdkafka is the client every non-Java Kafka ecosystem builds on (Confluent's
//! Python, Go, .NET and C clients): a complete idempotent producer, batching, compression, all
//! SASL/TLS options, and years of production use. The crate builds its bundled copy with
//! `make` (about 1.5 minutes here); linking Debian's librdkafka 2.0 instead is not an option
//! because that version cannot parse the ApiVersions answer of newer brokers.
//!
//! **Delivery guarantee.** The producer is idempotent (`enable.idempotence=true`, `acks=all`):
//! a message counts as delivered only when its delivery report came back without error, i.e. the
//! partition leader and every in-sync replica stored it. librdkafka retries internally within
//! `timeout` without duplicating or reordering (idempotent sequence numbers). At-least-once across
//! relay restarts: a message whose report was lost is published again, and consumers deduplicate
//! on the `outbox-message-id` header (the inbox does).
//!
//! **Fatal errors.** When the idempotent producer can no longer keep its guarantee (an
//! out-of-order sequence, a fenced epoch), librdkafka raises a fatal error and refuses to
//! produce; a broker that lost the producer's state (restarted) or fenced it answers
//! `UNKNOWN_PRODUCER_ID` / `PRODUCER_FENCED` / `OUT_OF_ORDER_SEQUENCE_NUMBER`. In every such case the
//! transport replaces the producer with a new one (new producer id); the messages of the failed
//! batch are reported unavailable (not their fault: no attempt spent) and published again.
//! Per-key order survives the rebuild because the relay never has two messages of one key in
//! flight (ADR 0003): the next one is claimed only after the previous one is settled.
//!
//! **Mapping.**
//! - Kafka topic: the outbox topic, `<topic_prefix>.<topic>`, or a fixed `topic`
//!   ([`KafkaConfig`]). A name Kafka does not allow fails permanently.
//! - Record key: the message's `key`, so one key always lands on one partition (the Java
//!   client's `murmur2` partitioner by default, so Java producers agree). No key: librdkafka
//!   spreads the messages.
//! - Headers: every envelope header (`outbox-message-id`, `outbox-biz-type`, `outbox-biz-key`,
//!   `outbox-topic`, `outbox-key`, `outbox-attempt`, `outbox-created-at`, `traceparent` and the
//!   application's own) as a record header, plus `outbox-tag` when the message has a tag.
//! - Value: the body's UTF-8 bytes, unchanged. Timestamp: the enqueue time.
//!
//! **Batches** are handed to librdkafka at once, which packs them into record batches per
//! partition (`linger`, `batch_bytes`, `compression`); then all delivery reports are awaited.
//!
//! **Unknown topics.** Before a topic's first message (and every `topic_check_interval`), the
//! transport asks the cluster for the topic's metadata. A topic the cluster does not have (and
//! does not auto-create) fails the message *permanently*, naming the topic: the broker answered,
//! and the answer is about this message's topic, not about the destination, so the other topics
//! of the destination keep flowing (as unavailable it would open the destination's breaker and
//! hold them all). Create the topic and `outbox retry` the failed messages. Without the check,
//! librdkafka would hold such a message silently until `timeout`.
//!
//! **Classification.**
//!
//! | what happened | kind |
//! | --- | --- |
//! | delivery report without error | delivered |
//! | message (key, value, headers) over `max_message_bytes`, broker's `MESSAGE_TOO_LARGE` | permanent |
//! | topic unknown to the cluster, invalid topic name (checked before sending: 1 to 249 of `[A-Za-z0-9._-]`, not `.`/`..`), topic authorization failed, invalid record, bad message, invalid argument, policy violation | permanent |
//! | message timed out, all brokers down, transport failure, no leader, not enough replicas, request timed out, cluster authorization or SASL failure | unavailable |
//! | the producer's local queue is full | unavailable |
//! | fatal producer error, producer fenced, unknown producer id, out-of-order sequence (the producer is rebuilt) | unavailable |
//! | the producer was rebuilt before the report arrived | unavailable |
//! | anything else | retryable |
//!
//! **TLS and SASL** go through `properties`, as librdkafka names them (librdkafka is built with
//! the system's OpenSSL). The broker's certificate is verified against `ssl.ca.location` (or
//! the system's trust store without it) and must be valid for the broker's host name
//! (`ssl.endpoint.identification.algorithm = "https"`, librdkafka's default). A failed
//! handshake at connect is reported with librdkafka's last error and its cause (an unknown CA,
//! a wrong host name, an expired certificate, a client certificate refused or missing). Values
//! of secret properties (`ssl.key.password`, `ssl.key.pem`, `sasl.password`, ...) never appear
//! in errors or `Debug` output.
//!
//! ```toml
//! brokers = "kafka-1.internal:9093"
//! [properties]
//! "security.protocol" = "SSL"                   # or "SASL_SSL" with the sasl.* properties
//! "ssl.ca.location" = "/etc/outbox/kafka-ca.pem"
//! "ssl.certificate.location" = "/etc/outbox/relay.pem"   # a client certificate, if required
//! "ssl.key.location" = "/etc/outbox/relay.key"
//! # "ssl.key.password" = "..."                  # for an encrypted key; redacted
//! ```
//!
//! The test broker (tansu 0.6) has no TLS listener (its `--cert` option is accepted, but the
//! listener stays plain), so the tests take these settings to a TLS endpoint of their own:
//! the handshake, the trust, the host name and the client certificate are tested against a
//! real TLS server; producing over TLS to a real Kafka broker is not.
//!
//! **Limits.** No Kafka transactions (exactly-once sinks): the outbox gives at-least-once plus
//! the consumer's inbox. `properties` passes any other librdkafka setting (security, tuning);
//! those that carry the delivery guarantee are refused.

mod config;
mod outcome;
mod transport;

pub use config::{Compression, KafkaConfig};
pub use transport::KafkaTransport;
