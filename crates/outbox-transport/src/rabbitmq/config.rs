//! Configuration of the RabbitMQ transport.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::common::config::{config_impls, Rules};
use crate::common::tls::TlsMaterial;
use crate::TransportError;

const RULES: Rules = Rules("rabbitmq");

/// Default [`RabbitMqConfig::max_payload_bytes`]: 16 MiB.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 16 * 1024 * 1024;

/// RabbitMQ's own default `max_message_size` (128 MiB); `max_payload_bytes` may not exceed it.
pub const BROKER_MAX_MESSAGE_SIZE: usize = 128 * 1024 * 1024;

/// Longest AMQP short string (exchange names, routing keys, header names, property values), bytes.
pub(crate) const SHORT_STRING_MAX: usize = 255;

/// Headers RabbitMQ reads as routing instructions ("sender-selected distribution"): they must
/// be arrays of routing keys, and any other value makes the broker close the channel
/// (`406 PRECONDITION_FAILED - invalid message: {unacceptable_type_in_header,"CC",longstr}`).
pub(crate) const ROUTING_HEADERS: [&str; 2] = ["CC", "BCC"];

/// Bytes of AMQP framing around a frame's payload (type, channel, size; frame end).
pub(crate) const FRAME_OVERHEAD: usize = 8;

/// Why a message cannot be published as AMQP, if it cannot: the routing key and every header
/// name are short strings (at most 255 bytes), the tag (`type` property) too, and no header
/// may be named `CC` or `BCC` ([`ROUTING_HEADERS`]). The reason names the field and quotes at
/// most a bounded, escaped part of the value.
pub(crate) fn check_message<'a>(
    routing_key: &str,
    tag: Option<&str>,
    header_names: impl IntoIterator<Item = &'a String>,
) -> Result<(), String> {
    use crate::validate::quote;
    if routing_key.len() > SHORT_STRING_MAX {
        return Err(format!(
            "routing key {} is {} bytes; AMQP allows at most {SHORT_STRING_MAX}",
            quote(routing_key),
            routing_key.len()
        ));
    }
    for name in header_names {
        if name.len() > SHORT_STRING_MAX {
            return Err(format!(
                "header name {} is {} bytes; AMQP allows at most {SHORT_STRING_MAX}",
                quote(name),
                name.len()
            ));
        }
        if ROUTING_HEADERS.contains(&name.as_str()) {
            return Err(format!(
                "header name {} is reserved: RabbitMQ reads CC and BCC as extra routing keys and \
                 closes the channel on a text value; rename the header",
                quote(name)
            ));
        }
    }
    if let Some(tag) = tag {
        if tag.len() > SHORT_STRING_MAX {
            return Err(format!(
                "tag {} is {} bytes; the AMQP `type` property allows at most {SHORT_STRING_MAX}",
                quote(tag),
                tag.len()
            ));
        }
    }
    Ok(())
}

/// Size in bytes of the content header frame carrying these properties (one frame: AMQP cannot
/// split it, and a frame over the connection's `frame_max` makes RabbitMQ close the whole
/// connection with `501 FRAME_ERROR`). Matches the broker's count: class, weight, body size and
/// property flags (14 bytes), each short string with its length byte, the headers table with
/// its 4-byte length and each entry as name, type `S` and a 4-byte length, the timestamp (8)
/// and delivery mode (1), plus [`FRAME_OVERHEAD`].
pub(crate) fn content_header_frame_bytes<'a>(
    content_type: &str,
    message_id: &str,
    app_id: &str,
    tag: Option<&str>,
    headers: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> usize {
    let table: usize = headers.into_iter().map(|(n, v)| 1 + n.len() + 1 + 4 + v.len()).sum::<usize>() + 4;
    let short = |s: &str| 1 + s.len();
    let properties = short(content_type)
        + table
        + 1 // delivery mode
        + 8 // timestamp
        + tag.map_or(0, short)
        + short(message_id)
        + short(app_id);
    FRAME_OVERHEAD + 14 + properties
}

/// Where and how to publish on RabbitMQ (AMQP 0-9-1).
///
/// ```toml
/// url = "amqp://app:secret@rabbit:5672/%2f"
/// exchange = "events"
/// # routing_key = "fixed"          # default: the message's topic
/// [declare]
/// kind = "topic"
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RabbitMqConfig {
    /// AMQP URI, `amqp://user:password@host:port/vhost` (`amqps://` for TLS; the vhost is
    /// percent-encoded, `%2f` is `/`). URI query parameters such as `heartbeat=30` and
    /// `frame_max` are passed to the client. Required; the password never appears in errors or
    /// logs.
    pub url: String,
    /// Exchange to publish to. Defaults to `""`, the default exchange, where the routing key is
    /// the name of the queue to deliver to.
    #[serde(default)]
    pub exchange: String,
    /// A fixed routing key for every message. Defaults to none: each message's topic is its
    /// routing key.
    #[serde(default)]
    pub routing_key: Option<String>,
    /// The AMQP `content_type` property. Defaults to none: `application/json` when the payload
    /// is a JSON document, `text/plain; charset=utf-8` otherwise.
    #[serde(default)]
    pub content_type: Option<String>,
    /// Largest payload published, in bytes; a larger message fails permanently without being
    /// sent. Defaults to 16 MiB; at most 128 MiB (RabbitMQ's default `max_message_size`; keep it
    /// at or below the broker's setting, or the broker closes the channel instead).
    #[serde(default = "default_max_payload_bytes")]
    pub max_payload_bytes: usize,
    /// How long opening the connection and channel (and declaring the topology) may take: a
    /// duration such as `"10s"` or a number of milliseconds. Defaults to 10 s.
    #[serde(default = "default_connect_timeout", with = "outbox_core::duration")]
    pub connect_timeout: Duration,
    /// Declare the exchange (and optionally a bound queue) at connect. Defaults to none: the
    /// exchange must already exist (checked with a passive declare at connect), unless it is
    /// the default exchange.
    #[serde(default)]
    pub declare: Option<DeclareConfig>,
    /// A PEM file of the CA (or CAs) that signed the broker's certificate, trusted besides the
    /// system's trust store. Requires an `amqps://` URL. Defaults to none.
    #[serde(default)]
    pub tls_ca_file: Option<String>,
    /// A PEM client certificate (chain) for brokers that authenticate clients by certificate
    /// (`ssl_options.verify = verify_peer`, `fail_if_no_peer_cert = true`, or the
    /// `rabbitmq_auth_mechanism_ssl` plugin). Requires `tls_key_file` and an `amqps://` URL.
    #[serde(default)]
    pub tls_cert_file: Option<String>,
    /// The PEM private key of `tls_cert_file` (PKCS#8, PKCS#1 or SEC1). Never printed.
    #[serde(default)]
    pub tls_key_file: Option<String>,
}

config_impls!(RabbitMqConfig);

/// Topology declared at connect (idempotent declarations; they fail if an existing exchange or
/// queue has different settings).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclareConfig {
    /// Exchange type: `direct`, `fanout`, `topic`, `headers` or a plugin's type. Defaults to
    /// `topic`.
    #[serde(default = "default_exchange_kind")]
    pub kind: String,
    /// Whether the exchange survives a broker restart. Defaults to true.
    #[serde(default = "default_true")]
    pub durable: bool,
    /// A durable queue to declare and bind to the exchange. Defaults to none.
    #[serde(default)]
    pub queue: Option<String>,
    /// Binding key of `queue`. Defaults to `#` (everything, on a topic exchange).
    #[serde(default = "default_binding_key")]
    pub binding_key: String,
}

fn default_max_payload_bytes() -> usize {
    DEFAULT_MAX_PAYLOAD_BYTES
}

fn default_connect_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_exchange_kind() -> String {
    "topic".into()
}

fn default_true() -> bool {
    true
}

fn default_binding_key() -> String {
    "#".into()
}

impl Default for DeclareConfig {
    fn default() -> Self {
        DeclareConfig {
            kind: default_exchange_kind(),
            durable: true,
            queue: None,
            binding_key: default_binding_key(),
        }
    }
}

impl RabbitMqConfig {
    /// A configuration for `url` and `exchange` with every other field at its default.
    pub fn new(url: impl Into<String>, exchange: impl Into<String>) -> Self {
        RabbitMqConfig {
            url: url.into(),
            exchange: exchange.into(),
            routing_key: None,
            content_type: None,
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            connect_timeout: default_connect_timeout(),
            declare: None,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
        }
    }

    /// Whether the URL asks for TLS (`amqps://`).
    pub(crate) fn is_tls(&self) -> bool {
        self.url.get(..8).is_some_and(|s| s.eq_ignore_ascii_case("amqps://"))
    }

    /// The rustls client configuration of an `amqps://` URL: the system's trust store plus
    /// `tls_ca_file`, and the client certificate when given (the files are read now); `None`
    /// for `amqp://`.
    pub(crate) fn tls(&self) -> Result<Option<Arc<rustls::ClientConfig>>, TransportError> {
        let files =
            [self.tls_ca_file.as_deref(), self.tls_cert_file.as_deref(), self.tls_key_file.as_deref()];
        TlsMaterial::for_url(RULES, self.is_tls(), files, "an amqps://", &crate::redact(&self.url))?
            .map(|material| material.client_config(RULES))
            .transpose()
    }

    /// Checks every value, naming the first wrong key.
    pub fn validate(&self) -> Result<(), TransportError> {
        let scheme = self.url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        match scheme.as_deref() {
            Some("amqp" | "amqps") => {}
            _ => {
                return Err(RULES.invalid(
                    "url",
                    format!("must be an amqp:// or amqps:// URI, got {:?}", crate::redact(&self.url)),
                ))
            }
        }
        if let Err(e) = self.url.parse::<lapin::uri::AMQPUri>() {
            let reason = scrub(&e, &self.url);
            let reason = format!("not a valid AMQP URI ({:?}): {reason}", crate::redact(&self.url));
            return Err(RULES.invalid("url", reason));
        }
        short_string("exchange", &self.exchange)?;
        if self.exchange.starts_with("amq.") && self.declare.is_some() {
            return Err(RULES.invalid(
                "declare",
                "exchange names starting with `amq.` are reserved and cannot be declared",
            ));
        }
        if self.exchange.is_empty() && self.declare.is_some() {
            return Err(RULES.invalid("declare", "the default exchange (\"\") cannot be declared"));
        }
        if let Some(rk) = &self.routing_key {
            short_string("routing_key", rk)?;
        }
        if let Some(ct) = &self.content_type {
            if ct.trim().is_empty() {
                return Err(RULES.invalid("content_type", "must not be empty (omit it for automatic)"));
            }
            short_string("content_type", ct)?;
        }
        if self.max_payload_bytes == 0 || self.max_payload_bytes > BROKER_MAX_MESSAGE_SIZE {
            return Err(RULES.invalid(
                "max_payload_bytes",
                format!("must be 1..={BROKER_MAX_MESSAGE_SIZE}, got {}", self.max_payload_bytes),
            ));
        }
        if self.connect_timeout.is_zero() {
            return Err(RULES.invalid("connect_timeout", "must be positive"));
        }
        self.tls()?;
        if let Some(d) = &self.declare {
            if d.kind.trim().is_empty() {
                return Err(RULES.invalid("declare.kind", "must not be empty"));
            }
            short_string("declare.kind", &d.kind)?;
            if let Some(q) = &d.queue {
                if q.is_empty() {
                    return Err(RULES.invalid("declare.queue", "must not be empty"));
                }
                short_string("declare.queue", q)?;
            }
            short_string("declare.binding_key", &d.binding_key)?;
        }
        Ok(())
    }
}

/// `text` with `url` and its password (if any) replaced by their redacted forms: client errors
/// sometimes quote the URI they were given.
pub(crate) fn scrub(text: &str, url: &str) -> String {
    use crate::common::connect::{password_of, scrub as scrub_secrets};
    scrub_secrets(&text.replace(url, &crate::redact(url)), password_of(url))
}

fn short_string(key: &'static str, value: &str) -> Result<(), TransportError> {
    if value.len() > SHORT_STRING_MAX {
        let reason = format!("must be at most {SHORT_STRING_MAX} bytes, got {}", value.len());
        return Err(RULES.invalid(key, reason));
    }
    Ok(())
}

#[cfg(test)]
mod message_tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn short_strings_and_routing_headers() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            check_message("order.paid", Some("urgent"), &names(&["outbox-topic", "cc", "Bcc2"])),
            Ok(())
        );
        let long = "k".repeat(256);
        let e = check_message(&long, None, &names(&[])).unwrap_err();
        assert!(e.starts_with("routing key \"kkk") && e.contains("256 bytes") && e.len() < 200, "{e}");
        let e = check_message("k", None, &names(&[&"n".repeat(70_000)])).unwrap_err();
        assert!(e.contains("header name") && e.contains("70000 bytes") && e.len() < 200, "{e}");
        let e = check_message("k", None, &names(&["CC"])).unwrap_err();
        assert!(e.contains("\"CC\" is reserved"), "{e}");
        assert!(check_message("k", None, &names(&["BCC"])).is_err());
        let e = check_message("k", Some(&"t".repeat(300)), &names(&[])).unwrap_err();
        assert!(e.starts_with("tag"), "{e}");
    }

    #[test]
    fn the_content_header_size_matches_the_broker_count() {
        // RabbitMQ 3.10 refused exactly this message with
        // `501 FRAME_ERROR - {frame_too_large,262893,131064}` (payload 262893 = frame - 8).
        let mut headers = BTreeMap::new();
        for i in 0..64 {
            headers.insert(format!("h{i}"), "v".repeat(4096));
        }
        headers.insert("outbox-message-id".to_string(), "5".to_string());
        headers.insert("outbox-topic".to_string(), "a.b".to_string());
        headers.insert("outbox-attempt".to_string(), "1".to_string());
        headers.insert("outbox-created-at".to_string(), "2024-05-01T10:00:00.123456+00:00".to_string());
        let n = content_header_frame_bytes("text/plain; charset=utf-8", "5", "outbox", None, &headers);
        assert_eq!(n, 262_893 + FRAME_OVERHEAD);
        let with_tag =
            content_header_frame_bytes("text/plain; charset=utf-8", "5", "outbox", Some("t"), &headers);
        assert_eq!(with_tag, n + 2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::testing::key_of;

    #[test]
    fn defaults_from_minimal_toml_like_json() {
        let c: RabbitMqConfig = serde_json::from_str(r#"{"url":"amqp://127.0.0.1:5672/%2f"}"#).unwrap();
        assert_eq!(c, RabbitMqConfig::new("amqp://127.0.0.1:5672/%2f", ""));
        assert_eq!(c.max_payload_bytes, DEFAULT_MAX_PAYLOAD_BYTES);
        c.validate().unwrap();
        let d: DeclareConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(d, DeclareConfig::default());
    }

    #[test]
    fn works_inside_an_internally_tagged_enum() {
        #[derive(Deserialize, Debug)]
        #[serde(tag = "type", rename_all = "lowercase")]
        enum Any {
            Rabbitmq(RabbitMqConfig),
        }
        let Any::Rabbitmq(c) = serde_json::from_str(
            r#"{"type":"rabbitmq","url":"amqp://h","exchange":"x","connect_timeout":"2s","declare":{"queue":"q"}}"#,
        )
        .unwrap();
        assert_eq!(c.connect_timeout, Duration::from_secs(2));
        assert_eq!(c.declare.unwrap().queue.as_deref(), Some("q"));
        assert!(serde_json::from_str::<Any>(r#"{"type":"rabbitmq","url":"amqp://h","nope":1}"#).is_err());
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let e = serde_json::from_str::<RabbitMqConfig>(r#"{"url":"amqp://h","exchang":"x"}"#).unwrap_err();
        assert!(e.to_string().contains("exchang"), "{e}");
    }

    #[test]
    fn validation_names_the_key() {
        let ok = RabbitMqConfig::new("amqp://u:p@127.0.0.1:5672/%2f", "events");
        ok.validate().unwrap();
        assert_eq!(key_of(RabbitMqConfig { url: "http://h".into(), ..ok.clone() }.validate()), "url");
        assert_eq!(
            key_of(RabbitMqConfig { url: "amqp://h:notaport".into(), ..ok.clone() }.validate()),
            "url"
        );
        assert_eq!(key_of(RabbitMqConfig { exchange: "x".repeat(256), ..ok.clone() }.validate()), "exchange");
        assert_eq!(
            key_of(RabbitMqConfig { routing_key: Some("r".repeat(300)), ..ok.clone() }.validate()),
            "routing_key"
        );
        assert_eq!(
            key_of(RabbitMqConfig { max_payload_bytes: 0, ..ok.clone() }.validate()),
            "max_payload_bytes"
        );
        assert_eq!(
            key_of(
                RabbitMqConfig { max_payload_bytes: BROKER_MAX_MESSAGE_SIZE + 1, ..ok.clone() }.validate()
            ),
            "max_payload_bytes"
        );
        assert_eq!(
            key_of(RabbitMqConfig { connect_timeout: Duration::ZERO, ..ok.clone() }.validate()),
            "connect_timeout"
        );
        assert_eq!(
            key_of(RabbitMqConfig { content_type: Some(" ".into()), ..ok.clone() }.validate()),
            "content_type"
        );
        let declare = |d: DeclareConfig| RabbitMqConfig { declare: Some(d), ..ok.clone() };
        assert_eq!(
            key_of(
                declare(DeclareConfig { queue: Some(String::new()), ..DeclareConfig::default() }).validate()
            ),
            "declare.queue"
        );
        assert_eq!(
            key_of(declare(DeclareConfig { kind: String::new(), ..DeclareConfig::default() }).validate()),
            "declare.kind"
        );
        assert_eq!(
            key_of(
                RabbitMqConfig { exchange: String::new(), ..declare(DeclareConfig::default()) }.validate()
            ),
            "declare"
        );
    }

    #[test]
    fn debug_hides_the_password() {
        let c = RabbitMqConfig::new("amqp://app:hunter2hunter2@h/%2f", "x");
        let s = format!("{c:?}");
        assert!(!s.contains("hunter2"), "{s}");
        let e =
            RabbitMqConfig { url: "amqx://app:hunter2hunter2@h".into(), ..c.clone() }.validate().unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        let e =
            RabbitMqConfig { url: "amqp://app:hunter2hunter2@h:99999".into(), ..c }.validate().unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        assert_eq!(scrub("x amqp://a:pw1@h y pw1", "amqp://a:pw1@h"), "x amqp://a:***@h y ***");
    }
}
