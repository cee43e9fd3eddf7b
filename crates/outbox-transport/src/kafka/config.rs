//! Configuration of the Kafka transport.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::common::config::{config_impls, Naming, Rules};
use crate::TransportError;

const RULES: Rules = Rules("kafka");

/// librdkafka properties this transport sets itself: they carry the delivery guarantee or
/// have a dedicated key, so `properties` may not override them.
const OWNED_PROPERTIES: &[(&str, &str)] = &[
    ("bootstrap.servers", "brokers"),
    ("metadata.broker.list", "brokers"),
    ("enable.idempotence", "(always true)"),
    ("acks", "(always all)"),
    ("request.required.acks", "(always all)"),
    ("message.timeout.ms", "timeout"),
    ("delivery.timeout.ms", "timeout"),
    ("compression.type", "compression"),
    ("compression.codec", "compression"),
    ("linger.ms", "linger"),
    ("queue.buffering.max.ms", "linger"),
    ("batch.size", "batch_bytes"),
    ("message.max.bytes", "max_message_bytes"),
    ("client.id", "client_id"),
    ("partitioner", "partitioner"),
    ("max.in.flight.requests.per.connection", "(set by idempotence)"),
    ("max.in.flight", "(set by idempotence)"),
    ("retries", "(librdkafka retries within timeout)"),
    ("message.send.max.retries", "(librdkafka retries within timeout)"),
    ("transactional.id", "(transactions are not used)"),
];

/// Compression of record batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// No compression (the default).
    #[default]
    None,
    /// gzip.
    Gzip,
    /// Snappy.
    Snappy,
    /// LZ4.
    Lz4,
    /// Zstandard.
    Zstd,
}

impl Compression {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

/// Settings of a [`KafkaTransport`](super::KafkaTransport). Every field has a default, so an
/// empty table publishes to a local broker, each message to the topic named by its own topic.
///
/// ```toml
/// brokers = "kafka-1:9092,kafka-2:9092"
/// topic_prefix = "outbox"        # topic "order.paid" -> Kafka topic "outbox.order.paid"
/// compression = "lz4"
/// linger = "5ms"
/// timeout = "30s"
/// [properties]                   # any other librdkafka property, e.g. security
/// "security.protocol" = "SASL_SSL"
/// "sasl.mechanisms" = "PLAIN"
/// "sasl.username" = "relay"
/// "sasl.password" = "secret"     # redacted in every log and error
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaConfig {
    /// Bootstrap servers, `host:port` separated by commas. Defaults to `127.0.0.1:9092`.
    pub brokers: String,
    /// A fixed Kafka topic for every message, whatever its outbox topic. Mutually exclusive
    /// with `topic_prefix`. Defaults to none (the Kafka topic is derived from the topic).
    pub topic: Option<String>,
    /// Prefix of the Kafka topic derived from the outbox topic: `<topic_prefix>.<topic>`.
    /// Defaults to none (the Kafka topic is the outbox topic itself).
    pub topic_prefix: Option<String>,
    /// Longest time from handing a message to the producer until the broker's acknowledgement
    /// (librdkafka `message.timeout.ms`; librdkafka retries within it). A message not
    /// acknowledged by then is reported unavailable. Defaults to 10 s.
    #[serde(with = "outbox_core::duration")]
    pub timeout: Duration,
    /// Longest time to reach the cluster when connecting and when looking up a topic's
    /// metadata. Defaults to 5 s.
    #[serde(with = "outbox_core::duration")]
    pub connect_timeout: Duration,
    /// Compression of record batches. Defaults to `none`.
    pub compression: Compression,
    /// How long the producer waits to fill a batch (librdkafka `linger.ms`). Defaults to 5 ms.
    #[serde(with = "outbox_core::duration")]
    pub linger: Duration,
    /// Largest record batch in bytes (librdkafka `batch.size`). Defaults to 1,000,000.
    pub batch_bytes: usize,
    /// Largest message (key, value and headers) in bytes (librdkafka `message.max.bytes`);
    /// larger ones fail permanently without being sent. Keep it at or below the broker's and
    /// the topic's `max.message.bytes`. Defaults to 1,000,000.
    pub max_message_bytes: usize,
    /// Partitioner for keyed messages. Defaults to `murmur2_random`, the Java client's
    /// partitioner, so the same key lands on the same partition as from Java producers.
    pub partitioner: String,
    /// Client id shown in the broker's logs and quotas. Defaults to `outbox-relay`.
    pub client_id: String,
    /// How long a topic found to exist is trusted before its metadata is looked up again.
    /// Defaults to 5 min.
    #[serde(with = "outbox_core::duration")]
    pub topic_check_interval: Duration,
    /// Any other librdkafka producer property (security, SASL, TLS, tuning). Values of keys that
    /// look secret (`password`, `secret`, `token`, `jaas`, `key`) are redacted in logs and
    /// errors. Properties that carry the delivery guarantee (`enable.idempotence`, `acks`, ...)
    /// or have a dedicated key here are refused. Defaults to none.
    pub properties: BTreeMap<String, String>,
}

config_impls!(KafkaConfig, secret: is_secret);

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            brokers: "127.0.0.1:9092".into(),
            topic: None,
            topic_prefix: None,
            timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            compression: Compression::None,
            linger: Duration::from_millis(5),
            batch_bytes: 1_000_000,
            max_message_bytes: 1_000_000,
            partitioner: "murmur2_random".into(),
            client_id: "outbox-relay".into(),
            topic_check_interval: Duration::from_secs(300),
            properties: BTreeMap::new(),
        }
    }
}

/// Whether a librdkafka property's value must not be shown.
pub(crate) fn is_secret(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    ["password", "secret", "token", "jaas", "key", "oauthbearer.config"].iter().any(|s| k.contains(s))
}

/// Partitioners librdkafka knows.
const PARTITIONERS: &[&str] =
    &["random", "consistent", "consistent_random", "murmur2", "murmur2_random", "fnv1a", "fnv1a_random"];

impl KafkaConfig {
    /// Checks every value; the error names the offending key.
    pub fn validate(&self) -> Result<(), TransportError> {
        let brokers: Vec<&str> = match self.brokers.trim() {
            "" => Vec::new(),
            _ => self.brokers.split(',').map(str::trim).collect(),
        };
        RULES.host_ports("brokers", &brokers)?;
        RULES.naming(("topic", "topic_prefix"), &self.naming(), check_topic)?;
        RULES.millis("timeout", self.timeout, Duration::from_secs(3600))?;
        RULES.millis("connect_timeout", self.connect_timeout, Duration::from_secs(600))?;
        RULES.millis("topic_check_interval", self.topic_check_interval, Duration::from_secs(86_400))?;
        if self.linger > Duration::from_secs(10) {
            return Err(RULES.invalid("linger", format!("must be at most 10 s, got {:?}", self.linger)));
        }
        if !(1..=2_147_483_647).contains(&self.batch_bytes) {
            return Err(RULES.invalid("batch_bytes", "must be between 1 and 2147483647"));
        }
        if !(1000..=1_000_000_000).contains(&self.max_message_bytes) {
            return Err(RULES.invalid("max_message_bytes", "must be between 1000 and 1000000000"));
        }
        if !PARTITIONERS.contains(&self.partitioner.as_str()) {
            return Err(RULES.invalid(
                "partitioner",
                format!("{:?} is not one of {}", self.partitioner, PARTITIONERS.join(", ")),
            ));
        }
        RULES.label("client_id", &self.client_id)?;
        for key in self.properties.keys() {
            if let Some((_, instead)) = OWNED_PROPERTIES.iter().find(|(k, _)| k == key) {
                return Err(RULES.invalid(
                    "properties",
                    format!("{key:?} is set by the transport; use {instead} instead"),
                ));
            }
            if key.trim().is_empty() {
                return Err(RULES.invalid("properties", "a property name is empty"));
            }
        }
        Ok(())
    }

    /// The Kafka topic is the fixed `topic`, or `<topic_prefix>.<topic>`, or the outbox topic.
    fn naming(&self) -> Naming<'_> {
        Naming { fixed: self.topic.as_deref(), prefix: self.topic_prefix.as_deref(), separator: '.' }
    }

    /// The Kafka topic a message with outbox `topic` is published to.
    pub(crate) fn topic_for(&self, topic: &str) -> String {
        self.naming().name_for(topic)
    }
}

/// Why `topic` is not a legal Kafka topic name, if it is not: 1 to 249 characters of
/// `[A-Za-z0-9._-]`, not `.` or `..` (Kafka's `Topic.validate`). The reason quotes at most a
/// bounded, escaped part of the name.
pub(crate) fn check_topic(topic: &str) -> Result<(), String> {
    use crate::validate::{describe_char, quote};
    if topic.is_empty() || topic.len() > 249 {
        return Err(format!("{} must have 1 to 249 characters (it has {} bytes)", quote(topic), topic.len()));
    }
    if topic == "." || topic == ".." {
        return Err(format!("{} is not a legal topic name", quote(topic)));
    }
    if let Some(c) = topic.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Err(format!(
            "{} contains {}; Kafka topics allow only ASCII letters, digits, '.', '_' and '-'",
            quote(topic),
            describe_char(c)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::common::testing::invalid_key;

    #[test]
    fn defaults_are_valid_and_unknown_keys_are_rejected() {
        KafkaConfig::default().validate().unwrap();
        let c: KafkaConfig =
            serde_json::from_str(r#"{"topic_prefix":"outbox","compression":"zstd","linger":"10ms"}"#)
                .unwrap();
        c.validate().unwrap();
        assert_eq!(c.topic_for("order.paid"), "outbox.order.paid");
        assert_eq!(c.compression, Compression::Zstd);
        assert_eq!(c.linger, Duration::from_millis(10));
        assert!(serde_json::from_str::<KafkaConfig>(r#"{"brokerz":"x:1"}"#).is_err());
        assert!(serde_json::from_str::<KafkaConfig>(r#"{"compression":"brotli"}"#).is_err());
    }

    #[test]
    fn invalid_values_name_their_key() {
        let bad = |f: fn(&mut KafkaConfig)| invalid_key(KafkaConfig::default(), f, KafkaConfig::validate);
        assert_eq!(bad(|c| c.brokers = " ".into()), "brokers");
        assert_eq!(bad(|c| c.brokers = "host".into()), "brokers");
        assert_eq!(bad(|c| c.brokers = "a:9092,b:x".into()), "brokers");
        assert_eq!(
            bad(|c| {
                c.topic = Some("a".into());
                c.topic_prefix = Some("b".into());
            }),
            "topic"
        );
        assert_eq!(bad(|c| c.topic = Some("has space".into())), "topic");
        assert_eq!(bad(|c| c.topic_prefix = Some("..".into())), "topic_prefix");
        assert_eq!(bad(|c| c.timeout = Duration::ZERO), "timeout");
        assert_eq!(bad(|c| c.connect_timeout = Duration::from_secs(700)), "connect_timeout");
        assert_eq!(bad(|c| c.linger = Duration::from_secs(11)), "linger");
        assert_eq!(bad(|c| c.batch_bytes = 0), "batch_bytes");
        assert_eq!(bad(|c| c.max_message_bytes = 10), "max_message_bytes");
        assert_eq!(bad(|c| c.partitioner = "round_robin".into()), "partitioner");
        assert_eq!(bad(|c| c.client_id = String::new()), "client_id");
        assert_eq!(
            bad(|c| {
                c.properties.insert("enable.idempotence".into(), "false".into());
            }),
            "properties"
        );
        assert_eq!(
            bad(|c| {
                c.properties.insert("acks".into(), "1".into());
            }),
            "properties"
        );
    }

    #[test]
    fn debug_redacts_secret_properties() {
        let mut c = KafkaConfig::default();
        c.properties.insert("sasl.password".into(), "hunter2".into());
        c.properties.insert("sasl.username".into(), "relay".into());
        c.properties.insert("ssl.key.pem".into(), "PRIVATE".into());
        let s = format!("{c:?}");
        assert!(!s.contains("hunter2") && !s.contains("PRIVATE"), "{s}");
        assert!(s.contains("relay"), "{s}");
    }

    #[test]
    fn topic_names() {
        assert!(check_topic("order.paid").is_ok());
        assert!(check_topic("a_b-C.9").is_ok());
        assert!(check_topic("").is_err());
        assert!(check_topic(".").is_err());
        assert!(check_topic("a/b").is_err());
        assert!(check_topic("订单").is_err());
        assert!(check_topic(&"x".repeat(250)).is_err());
        assert!(check_topic("sec.a\nb").unwrap_err().contains("U+000A (line feed)"));
        let e = check_topic(&format!("{} x", "n".repeat(70_000))).unwrap_err();
        assert!(e.len() < 200, "bounded: {e}");
    }
}
