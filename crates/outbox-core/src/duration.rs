//! Serde support for durations in configuration: a human string (`"250ms"`, `"1s"`, `"5m"`,
//! `"7d"`) or an integer number of milliseconds. Serialized as the human string.
//!
//! Use with `#[serde(with = "outbox_core::duration")]`.

use std::time::Duration;

use serde::de::{self, Visitor};
use serde::{Deserializer, Serializer};

/// Serializes as a human string (`"1s"`).
pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&humantime::format_duration(*d).to_string())
}

/// Deserializes a human string or integer milliseconds.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    d.deserialize_any(DurationVisitor)
}

/// Parses a human duration string, with a readable error.
pub fn parse(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("invalid duration {s:?} ({e}); write it like \"250ms\", \"1s\", \"5m\", \"7d\""))
}

struct DurationVisitor;

impl Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a duration such as \"250ms\", \"1s\", \"5m\", or a number of milliseconds")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
        Ok(Duration::from_millis(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
        u64::try_from(v).map(Duration::from_millis).map_err(|_| E::custom("a duration must not be negative"))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
        parse(v).map_err(E::custom)
    }
}

/// The same for `Option<Duration>`.
pub mod option {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Serializes `Some` as a human string, `None` as none.
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    /// Deserializes an optional human string or integer milliseconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        #[derive(Deserialize)]
        struct W(#[serde(with = "super")] Duration);
        Option::<W>::deserialize(d).map(|o| o.map(|w| w.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, serde::Serialize, Debug, PartialEq)]
    struct C {
        #[serde(with = "super")]
        d: Duration,
    }

    #[test]
    fn human_strings_and_millis() {
        let c: C = serde_json::from_str(r#"{"d":"1m 30s"}"#).unwrap();
        assert_eq!(c.d, Duration::from_secs(90));
        let c: C = serde_json::from_str(r#"{"d":250}"#).unwrap();
        assert_eq!(c.d, Duration::from_millis(250));
        assert!(serde_json::from_str::<C>(r#"{"d":"soon"}"#)
            .unwrap_err()
            .to_string()
            .contains("invalid duration"));
        assert!(serde_json::from_str::<C>(r#"{"d":-1}"#).is_err());
        assert_eq!(
            serde_json::to_string(&C { d: Duration::from_secs(7 * 86400) }).unwrap(),
            r#"{"d":"7days"}"#
        );
    }
}
