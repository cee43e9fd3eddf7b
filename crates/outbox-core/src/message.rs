//! Messages: what an application enqueues ([`NewMessage`]) and what the table holds
//! ([`OutboxMessage`]).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::status::Status;

/// Limits that every store enforces with column sizes and that [`NewMessage::validate`] checks
/// before a round trip. Lengths are in characters.
pub mod limits {
    /// Longest topic.
    pub const TOPIC: usize = 255;
    /// Longest ordering key (`msg_key`).
    pub const KEY: usize = 255;
    /// Longest tag.
    pub const TAG: usize = 128;
    /// Longest `biz_type`.
    pub const BIZ_TYPE: usize = 64;
    /// Longest `biz_key`.
    pub const BIZ_KEY: usize = 255;
    /// Longest `created_by` / `updated_by`.
    pub const ACTOR: usize = 128;
    /// Most headers on one message.
    pub const HEADER_COUNT: usize = 64;
    /// Longest header name.
    pub const HEADER_NAME: usize = 128;
    /// Longest header value.
    pub const HEADER_VALUE: usize = 4096;
    /// Longest error text the relay writes to `last_error` (longer texts are cut, see
    /// [`crate::text::bounded_error`]); the schema refuses longer ones from other writers.
    pub const ERROR: usize = 2000;
    /// Longest relay owner name (`lease_owner`, `updated_by`).
    pub const OWNER: usize = 128;
    /// Longest destination name (`outbox_delivery.destination`).
    pub const DESTINATION: usize = 128;
}

/// The identifier of a message: the table's primary key. It is assigned by the database at
/// enqueue, never reused, increases with enqueue order within one database, and travels with
/// every publication of the message (the consumer's deduplication key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MessageId(pub i64);

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// Message headers: string names to string values, stored as a JSON object.
pub type Headers = BTreeMap<String, String>;

/// A message to enqueue. Built with [`NewMessage::new`] and the chained setters; only the
/// topic and the payload are required.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewMessage {
    /// Where the message goes; routes map topics to destinations.
    pub topic: String,
    /// The body, published as is (UTF-8 text, typically JSON).
    pub payload: String,
    /// Ordering / partition key: messages with the same key are published in id order.
    pub key: Option<String>,
    /// Optional tag (RocketMQ tag, a sub-type for filtering).
    pub tag: Option<String>,
    /// Producer-side idempotency key `(biz_type, biz_key)`: enqueueing the same pair twice
    /// returns the first message.
    pub biz: Option<(String, String)>,
    /// Headers published with the message.
    pub headers: Headers,
    /// Do not publish before this instant (a delayed message). `None` = at once.
    pub deliver_at: Option<DateTime<Utc>>,
    /// Delay relative to the database's clock at enqueue; used when `deliver_at` is `None`.
    pub delay: Option<Duration>,
    /// Overrides the destination's max attempts for this message.
    pub max_attempts: Option<u32>,
    /// Who enqueued it (service or user name), for operators.
    pub created_by: Option<String>,
}

impl NewMessage {
    /// A message with the required fields; everything else takes its default.
    #[must_use]
    pub fn new(topic: impl Into<String>, payload: impl Into<String>) -> Self {
        NewMessage {
            topic: topic.into(),
            payload: payload.into(),
            key: None,
            tag: None,
            biz: None,
            headers: Headers::new(),
            deliver_at: None,
            delay: None,
            max_attempts: None,
            created_by: None,
        }
    }

    /// A message whose payload is `value` serialized as JSON.
    pub fn json<T: Serialize + ?Sized>(topic: impl Into<String>, value: &T) -> Result<Self> {
        let payload = serde_json::to_string(value)
            .map_err(|e| Error::invalid("payload", format!("cannot serialize to JSON: {e}")))?;
        Ok(NewMessage::new(topic, payload))
    }

    /// Sets the ordering key. Defaults to none (not ordered with anything).
    #[must_use]
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets the tag. Defaults to none.
    #[must_use]
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tag = Some(tag.into());
        self
    }

    /// Sets the idempotency key. Defaults to none (every enqueue creates a message).
    #[must_use]
    pub fn biz(mut self, biz_type: impl Into<String>, biz_key: impl Into<String>) -> Self {
        self.biz = Some((biz_type.into(), biz_key.into()));
        self
    }

    /// Adds a header (a later value for the same name replaces the earlier one).
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// Schedules the message for `at`. Defaults to now.
    #[must_use]
    pub fn deliver_at(mut self, at: DateTime<Utc>) -> Self {
        self.deliver_at = Some(at);
        self
    }

    /// Schedules the message `delay` after the enqueue, by the database's clock.
    #[must_use]
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Overrides the destination's maximum number of attempts. Defaults to the destination's.
    #[must_use]
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// Records who enqueued the message. Defaults to none.
    #[must_use]
    pub fn created_by(mut self, who: impl Into<String>) -> Self {
        self.created_by = Some(who.into());
        self
    }

    /// The headers as the JSON object text stored in the `headers` column.
    pub fn headers_json(&self) -> String {
        // A map of strings always serializes.
        serde_json::to_string(&self.headers).unwrap_or_else(|_| "{}".to_owned())
    }

    /// The delay in whole microseconds (what the SQL adds to the database clock), if any.
    pub fn delay_micros(&self) -> Option<i64> {
        self.delay.map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
    }

    /// Checks every field against the table's rules, so a bad message fails before a round
    /// trip with an error naming the field.
    pub fn validate(&self) -> Result<()> {
        check_text("topic", &self.topic, limits::TOPIC)?;
        if let Some(k) = &self.key {
            check_text("key", k, limits::KEY)?;
        }
        if let Some(t) = &self.tag {
            check_text("tag", t, limits::TAG)?;
        }
        if let Some((t, k)) = &self.biz {
            check_text("biz_type", t, limits::BIZ_TYPE)?;
            check_text("biz_key", k, limits::BIZ_KEY)?;
        }
        if let Some(c) = &self.created_by {
            check_text("created_by", c, limits::ACTOR)?;
        }
        if self.max_attempts == Some(0) {
            return Err(Error::invalid("max_attempts", "must be at least 1"));
        }
        if self.payload.contains('\0') {
            return Err(Error::invalid(
                "payload",
                "contains a NUL character, which text columns cannot store",
            ));
        }
        if self.headers.len() > limits::HEADER_COUNT {
            return Err(Error::invalid(
                "headers",
                format!("{} headers, at most {} allowed", self.headers.len(), limits::HEADER_COUNT),
            ));
        }
        for (name, value) in &self.headers {
            check_text("headers", name, limits::HEADER_NAME)
                .map_err(|e| Error::invalid("headers", format!("header name {name:?}: {e}")))?;
            if value.chars().count() > limits::HEADER_VALUE || value.contains('\0') {
                return Err(Error::invalid(
                    "headers",
                    format!(
                        "value of header {name:?} is longer than {} characters or contains NUL",
                        limits::HEADER_VALUE
                    ),
                ));
            }
        }
        Ok(())
    }
}

fn check_text(field: &'static str, value: &str, max: usize) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(field, "must not be empty"));
    }
    if value.trim() != value {
        return Err(Error::invalid(field, "must not start or end with white space"));
    }
    if value.chars().any(char::is_control) {
        return Err(Error::invalid(field, "must not contain control characters"));
    }
    let n = value.chars().count();
    if n > max {
        return Err(Error::invalid(field, format!("is {n} characters long, at most {max} allowed")));
    }
    Ok(())
}

/// The outcome of an enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enqueued {
    /// The message's id.
    pub id: MessageId,
    /// `false` when the `(biz_type, biz_key)` pair already existed and `id` is the first
    /// message's id (nothing was written).
    pub created: bool,
}

/// A message row as stored in the outbox table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxMessage {
    /// Primary key.
    pub id: MessageId,
    /// Idempotency key, first half.
    pub biz_type: Option<String>,
    /// Idempotency key, second half.
    pub biz_key: Option<String>,
    /// Topic.
    pub topic: String,
    /// Ordering key.
    pub key: Option<String>,
    /// Tag.
    pub tag: Option<String>,
    /// Headers.
    pub headers: Headers,
    /// Body.
    pub payload: String,
    /// Status.
    pub status: Status,
    /// Failed attempts so far.
    pub attempts: i32,
    /// Per-message override of the destination's max attempts.
    pub max_attempts: Option<i32>,
    /// Not published before this instant; for `sending` rows, the lease expiry.
    pub next_attempt_at: DateTime<Utc>,
    /// When the last attempt was made.
    pub last_attempt_at: Option<DateTime<Utc>>,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// The relay instance holding the lease.
    pub lease_owner: Option<String>,
    /// When that lease expires.
    pub lease_until: Option<DateTime<Utc>>,
    /// Who enqueued it.
    pub created_by: Option<String>,
    /// Who changed it last (relay instance or operator).
    pub updated_by: Option<String>,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

/// Decodes the `headers` column. Values that are not strings (a foreign application wrote a
/// number or an object) are kept as their JSON text rather than rejected.
pub fn decode_headers(json: &str) -> std::result::Result<Headers, String> {
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("headers are not valid JSON: {e}"))?;
    let serde_json::Value::Object(map) = value else {
        return Err("headers must be a JSON object".to_owned());
    };
    Ok(map
        .into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => (k, s),
            other => (k, other.to_string()),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn field_of(e: Error) -> &'static str {
        match e {
            Error::InvalidMessage { field, .. } => field,
            other => panic!("unexpected error {other}"),
        }
    }

    #[test]
    fn minimal_message_is_valid() {
        assert!(NewMessage::new("t", "").validate().is_ok());
    }

    #[test]
    fn rejects_bad_fields_naming_them() {
        assert_eq!(field_of(NewMessage::new("", "x").validate().unwrap_err()), "topic");
        assert_eq!(field_of(NewMessage::new(" t", "x").validate().unwrap_err()), "topic");
        assert_eq!(field_of(NewMessage::new("t", "x").key("").validate().unwrap_err()), "key");
        assert_eq!(field_of(NewMessage::new("t", "x").biz("", "1").validate().unwrap_err()), "biz_type");
        assert_eq!(
            field_of(NewMessage::new("t", "x").biz("o", "k".repeat(256)).validate().unwrap_err()),
            "biz_key"
        );
        assert_eq!(
            field_of(NewMessage::new("t", "x").max_attempts(0).validate().unwrap_err()),
            "max_attempts"
        );
        assert_eq!(field_of(NewMessage::new("t", "a\0b").validate().unwrap_err()), "payload");
        let mut many = NewMessage::new("t", "x");
        for i in 0..=limits::HEADER_COUNT {
            many = many.header(format!("h{i}"), "v");
        }
        assert_eq!(field_of(many.validate().unwrap_err()), "headers");
        assert_eq!(NewMessage::new("", "x").validate().unwrap_err().kind(), ErrorKind::InvalidInput);
    }

    #[test]
    fn length_limits_count_characters_not_bytes() {
        let topic = "é".repeat(limits::TOPIC);
        assert!(NewMessage::new(topic, "x").validate().is_ok());
        let topic = "é".repeat(limits::TOPIC + 1);
        assert!(NewMessage::new(topic, "x").validate().is_err());
    }

    #[test]
    fn headers_round_trip_and_tolerate_foreign_values() {
        let m = NewMessage::new("t", "x").header("a", "1").header("b", "two");
        let decoded = decode_headers(&m.headers_json()).unwrap();
        assert_eq!(decoded, m.headers);
        let foreign = decode_headers(r#"{"n": 5, "o": {"x": true}, "s": "v"}"#).unwrap();
        assert_eq!(foreign["n"], "5");
        assert_eq!(foreign["o"], r#"{"x":true}"#);
        assert_eq!(foreign["s"], "v");
        assert!(decode_headers("[1]").is_err());
        assert!(decode_headers("{").is_err());
    }

    #[test]
    fn json_constructor_serializes() {
        let m = NewMessage::json("t", &serde_json::json!({"a": 1})).unwrap();
        assert_eq!(m.payload, r#"{"a":1}"#);
    }
}
