//! [`InboxMessage`]: a delivered message's id, headers and body, read from each transport's
//! native message, and [`HeaderError`] when that is impossible.

use outbox_core::header;
use outbox_core::Headers;

/// A message as a consumer received it: the outbox message id (the deduplication key), the
/// headers (`outbox-*` and the application's own) and the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxMessage {
    /// The outbox message id, as text (`"42"`; ids of several producer databases may be
    /// namespaced by the consumer, e.g. `"shop:42"`).
    pub id: String,
    /// Every header the message carried, by name.
    pub headers: Headers,
    /// The body, byte for byte.
    pub payload: Vec<u8>,
}

impl InboxMessage {
    /// A message with this id and body and no headers (for tests and custom transports).
    pub fn new(id: impl Into<String>, payload: impl Into<Vec<u8>>) -> Self {
        InboxMessage { id: id.into(), headers: Headers::new(), payload: payload.into() }
    }

    /// One header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// The topic (`outbox-topic` header).
    pub fn topic(&self) -> Option<&str> {
        self.header(header::TOPIC)
    }

    /// The body as UTF-8 text.
    pub fn payload_str(&self) -> Result<&str, HeaderError> {
        std::str::from_utf8(&self.payload)
            .map_err(|_| HeaderError::Malformed("the payload is not UTF-8".into()))
    }

    /// Prefixes the id with a namespace (`"shop"` + `"42"` = `"shop:42"`), for consumers that
    /// receive messages of several producer databases in one group.
    pub fn namespaced(mut self, namespace: &str) -> Self {
        self.id = format!("{namespace}:{}", self.id);
        self
    }
}

/// Why a transport message could not be read as an [`InboxMessage`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// The message carries no outbox message id (not published by the outbox relay, or an
    /// MQTT message sent in the `raw` format).
    #[error("the message carries no outbox message id ({0})")]
    MissingId(&'static str),
    /// The message id is present but empty or not text.
    #[error("invalid outbox message id: {0}")]
    InvalidId(String),
    /// The message or one of its headers is not in the format the relay writes.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// The webhook signature is missing or does not verify.
    #[cfg(feature = "http")]
    #[error("webhook signature rejected: {0}")]
    BadSignature(#[from] outbox_core::webhook::SignatureError),
    /// The webhook request has no `Outbox-Timestamp` or no `Outbox-Signature` header.
    #[cfg(feature = "http")]
    #[error("webhook request without the `{0}` header")]
    Unsigned(&'static str),
}

#[cfg_attr(
    not(any(feature = "nats", feature = "rabbitmq", feature = "redis", feature = "mqtt", feature = "http")),
    allow(dead_code)
)]
fn checked_id(id: String) -> Result<String, HeaderError> {
    if id.trim().is_empty() {
        return Err(HeaderError::InvalidId("empty".into()));
    }
    Ok(id)
}

#[cfg_attr(
    not(any(feature = "nats", feature = "rabbitmq", feature = "redis", feature = "http")),
    allow(dead_code)
)]
fn utf8(what: &str, bytes: &[u8]) -> Result<String, HeaderError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| HeaderError::Malformed(format!("{what} is not UTF-8")))
}

/// Reads a NATS message (core or JetStream: a `jetstream::Message` derefs to it): the id from
/// the `outbox-message-id` header, else `Nats-Msg-Id`; every header (first value of each).
#[cfg(feature = "nats")]
pub fn from_nats(msg: &async_nats::Message) -> Result<InboxMessage, HeaderError> {
    let mut headers = Headers::new();
    let mut nats_id = None;
    if let Some(map) = &msg.headers {
        for (name, values) in map.iter() {
            let Some(value) = values.first() else { continue };
            let name: &str = name.as_ref();
            let value: &str = value.as_ref();
            if name.eq_ignore_ascii_case("Nats-Msg-Id") {
                nats_id = Some(value.to_owned());
            } else {
                headers.insert(name.to_owned(), value.to_owned());
            }
        }
    }
    let id = headers.get(header::MESSAGE_ID).cloned().or(nats_id).ok_or(HeaderError::MissingId("nats"))?;
    Ok(InboxMessage { id: checked_id(id)?, headers, payload: msg.payload.to_vec() })
}

/// Reads a RabbitMQ delivery: the id from the `message_id` property, else the
/// `outbox-message-id` header; every header of the `headers` table that is a string.
#[cfg(feature = "rabbitmq")]
pub fn from_amqp(delivery: &lapin::message::Delivery) -> Result<InboxMessage, HeaderError> {
    use lapin::types::AMQPValue;
    let mut headers = Headers::new();
    if let Some(table) = delivery.properties.headers() {
        for (name, value) in table.inner() {
            let text = match value {
                AMQPValue::LongString(s) => utf8("an AMQP header", s.as_bytes())?,
                AMQPValue::ShortString(s) => s.as_str().to_owned(),
                _ => continue,
            };
            headers.insert(name.as_str().to_owned(), text);
        }
    }
    let id = delivery
        .properties
        .message_id()
        .as_ref()
        .map(|s| s.as_str().to_owned())
        .or_else(|| headers.get(header::MESSAGE_ID).cloned())
        .ok_or(HeaderError::MissingId("amqp"))?;
    Ok(InboxMessage { id: checked_id(id)?, headers, payload: delivery.data.clone() })
}

/// Reads a Redis stream entry written by the relay (fields `id`, `payload` and `h:<name>` per
/// header, the transport's default `header_prefix`).
#[cfg(feature = "redis")]
pub fn from_redis_stream(entry: &redis::streams::StreamId) -> Result<InboxMessage, HeaderError> {
    from_redis_stream_with_prefix(entry, "h:")
}

/// [`from_redis_stream`] for a transport configured with another `header_prefix`.
#[cfg(feature = "redis")]
pub fn from_redis_stream_with_prefix(
    entry: &redis::streams::StreamId,
    header_prefix: &str,
) -> Result<InboxMessage, HeaderError> {
    fn bytes(v: &redis::Value) -> Result<Vec<u8>, HeaderError> {
        match v {
            redis::Value::BulkString(b) => Ok(b.clone()),
            redis::Value::SimpleString(s) => Ok(s.as_bytes().to_vec()),
            redis::Value::VerbatimString { text, .. } => Ok(text.as_bytes().to_vec()),
            redis::Value::Int(i) => Ok(i.to_string().into_bytes()),
            other => Err(HeaderError::Malformed(format!("unexpected stream field value {other:?}"))),
        }
    }
    let mut headers = Headers::new();
    for (field, value) in &entry.map {
        if let Some(name) = field.strip_prefix(header_prefix).filter(|_| !header_prefix.is_empty()) {
            headers.insert(name.to_owned(), utf8("a stream header field", &bytes(value)?)?);
        }
    }
    let id = match entry.map.get("id") {
        Some(v) => utf8("the id field", &bytes(v)?)?,
        None => headers.get(header::MESSAGE_ID).cloned().ok_or(HeaderError::MissingId("redis"))?,
    };
    let payload = match entry.map.get("payload") {
        Some(v) => bytes(v)?,
        None => return Err(HeaderError::Malformed("stream entry without a `payload` field".into())),
    };
    Ok(InboxMessage { id: checked_id(id)?, headers, payload })
}

/// Parses the JSON envelope the MQTT transport publishes by default:
/// `{"id":"42","headers":{...},"payload":"<body>"}`.
#[cfg(feature = "mqtt")]
pub fn from_mqtt_envelope(payload: &[u8]) -> Result<InboxMessage, HeaderError> {
    #[derive(serde::Deserialize)]
    struct Envelope {
        id: Option<serde_json::Value>,
        #[serde(default)]
        headers: Headers,
        payload: String,
    }
    let env: Envelope = serde_json::from_slice(payload)
        .map_err(|e| HeaderError::Malformed(format!("not an outbox MQTT envelope: {e}")))?;
    let id = match env.id {
        Some(serde_json::Value::String(s)) => s,
        Some(serde_json::Value::Number(n)) => n.to_string(),
        Some(other) => return Err(HeaderError::InvalidId(format!("not a string: {other}"))),
        None => {
            env.headers.get(header::MESSAGE_ID).cloned().ok_or(HeaderError::MissingId("mqtt envelope"))?
        }
    };
    Ok(InboxMessage { id: checked_id(id)?, headers: env.headers, payload: env.payload.into_bytes() })
}

/// Reads a webhook request of the HTTP transport, **verifying its signature first** (with
/// [`outbox_core::webhook::verify_signature`]): `headers` are the request's headers as
/// `(name, value)` pairs (`http::HeaderMap::iter()` fits, so do `(&str, &str)` pairs), `body`
/// the raw body, `now_unix` the current Unix time and `tolerance_secs` the replay window
/// (300 is typical). Header values are percent-decoded and `Outbox-Header-<name>` headers come
/// back under `<name>`.
#[cfg(feature = "http")]
pub fn from_http<I, N, V>(
    headers: I,
    body: &[u8],
    secret: &[u8],
    now_unix: i64,
    tolerance_secs: i64,
) -> Result<InboxMessage, HeaderError>
where
    I: IntoIterator<Item = (N, V)>,
    N: AsRef<str>,
    V: AsRef<[u8]>,
{
    use outbox_core::webhook::{
        decode_header_value, envelope_header_name, verify_signature, SIGNATURE_HEADER, TIMESTAMP_HEADER,
    };
    let mut timestamp = None;
    let mut signature = None;
    let mut out = Headers::new();
    let mut malformed = None;
    for (name, value) in headers {
        let name = name.as_ref().to_ascii_lowercase();
        let value = match std::str::from_utf8(value.as_ref()) {
            Ok(v) => v.to_owned(),
            Err(_) => {
                malformed.get_or_insert(name);
                continue;
            }
        };
        if name == TIMESTAMP_HEADER {
            timestamp = Some(value);
        } else if name == SIGNATURE_HEADER {
            signature = Some(value);
        } else if let Some(header_name) = envelope_header_name(&name) {
            match decode_header_value(&value) {
                Some(decoded) => {
                    out.insert(header_name, decoded);
                }
                None => {
                    malformed.get_or_insert(name);
                }
            }
        }
    }
    let timestamp = timestamp.ok_or(HeaderError::Unsigned(TIMESTAMP_HEADER))?;
    let signature = signature.ok_or(HeaderError::Unsigned(SIGNATURE_HEADER))?;
    verify_signature(secret, &timestamp, body, &signature, now_unix, tolerance_secs)?;
    if let Some(name) = malformed {
        return Err(HeaderError::Malformed(format!("header `{name}` is not a valid percent-encoded value")));
    }
    let id = out.get(header::MESSAGE_ID).cloned().ok_or(HeaderError::MissingId("http"))?;
    Ok(InboxMessage { id: checked_id(id)?, headers: out, payload: body.to_vec() })
}

/// Reads a message whose headers arrive as `(name, value)` pairs, as the Kafka and RocketMQ
/// transports publish them: Kafka record headers
/// (`msg.headers().map(|h| h.iter().map(|h| (h.key, h.value.unwrap_or_default())))` with
/// rdkafka) or RocketMQ user properties (`msg_ext.properties()`). The id comes from the
/// `outbox-message-id` header; `what` names the transport in errors. Needs no client crate.
pub fn from_header_pairs<I, N, V>(
    what: &'static str,
    headers: I,
    payload: &[u8],
) -> Result<InboxMessage, HeaderError>
where
    I: IntoIterator<Item = (N, V)>,
    N: AsRef<str>,
    V: AsRef<[u8]>,
{
    let mut out = Headers::new();
    for (name, value) in headers {
        let name = name.as_ref();
        let value = std::str::from_utf8(value.as_ref())
            .map_err(|_| HeaderError::Malformed(format!("header `{name}` is not UTF-8")))?;
        out.insert(name.to_owned(), value.to_owned());
    }
    let id = out.get(header::MESSAGE_ID).cloned().ok_or(HeaderError::MissingId(what))?;
    Ok(InboxMessage { id: checked_id(id)?, headers: out, payload: payload.to_vec() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_pairs_of_kafka_and_rocketmq() {
        let kafka: Vec<(&str, &[u8])> = vec![
            ("outbox-message-id", &b"42"[..]),
            ("outbox-topic", &b"order.paid"[..]),
            ("tenant", &b"t1"[..]),
        ];
        let m = from_header_pairs("kafka", kafka, b"{}").unwrap();
        assert_eq!((m.id.as_str(), m.topic(), m.header("tenant")), ("42", Some("order.paid"), Some("t1")));
        let props = std::collections::HashMap::from([("outbox-message-id".to_owned(), "7".to_owned())]);
        assert_eq!(from_header_pairs("rocketmq", &props, b"x").unwrap().id, "7");
        let none: Vec<(&str, &str)> = vec![("other", "1")];
        assert!(matches!(from_header_pairs("kafka", none, b""), Err(HeaderError::MissingId("kafka"))));
        let bad: Vec<(&str, &[u8])> = vec![("outbox-message-id", &[0xff_u8][..])];
        assert!(matches!(from_header_pairs("kafka", bad, b""), Err(HeaderError::Malformed(_))));
        let empty: Vec<(&str, &str)> = vec![("outbox-message-id", " ")];
        assert!(matches!(from_header_pairs("kafka", empty, b""), Err(HeaderError::InvalidId(_))));
    }

    #[cfg(feature = "mqtt")]
    #[test]
    fn mqtt_envelope() {
        let m = from_mqtt_envelope(
            br#"{"id":"42","headers":{"outbox-message-id":"42","outbox-topic":"order.paid"},"payload":"{\"a\":1}"}"#,
        )
        .unwrap();
        assert_eq!(m.id, "42");
        assert_eq!(m.topic(), Some("order.paid"));
        assert_eq!(m.payload_str().unwrap(), r#"{"a":1}"#);
        assert_eq!(from_mqtt_envelope(br#"{"id":7,"payload":""}"#).unwrap().id, "7");
        assert!(matches!(from_mqtt_envelope(b"{\"a\":1}"), Err(HeaderError::Malformed(_))));
        assert!(matches!(from_mqtt_envelope(b"plain body"), Err(HeaderError::Malformed(_))));
        assert!(matches!(from_mqtt_envelope(br#"{"payload":"x"}"#), Err(HeaderError::MissingId(_))));
        assert!(matches!(from_mqtt_envelope(br#"{"id":"","payload":"x"}"#), Err(HeaderError::InvalidId(_))));
    }

    #[test]
    fn namespacing() {
        assert_eq!(InboxMessage::new("42", "x").namespaced("shop").id, "shop:42");
    }
}
