//! The configuration rules several brokers share. Each `<broker>/config.rs` names its transport
//! once (`const RULES: Rules = Rules("nats")`) and checks its own keys with these; every error
//! is a [`TransportError::Config`] naming the transport and the key.

use std::fmt;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::{Result, TransportError};

/// The placeholder of a name template (a stream key, an MQTT topic, a webhook URL) replaced by
/// the envelope's topic.
pub(crate) const TOPIC_PLACEHOLDER: &str = "{topic}";

/// The rules of one transport's configuration (the value is the transport kind).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules(pub(crate) &'static str);

impl Rules {
    /// `key` is wrong, for `reason`.
    pub(crate) fn invalid(self, key: &'static str, reason: impl Into<String>) -> TransportError {
        TransportError::Config { transport: self.0, key, reason: reason.into() }
    }

    /// `key` must not be empty (or only white space).
    pub(crate) fn not_blank(self, key: &'static str, value: &str) -> Result<()> {
        if value.trim().is_empty() {
            return Err(self.invalid(key, "must not be empty"));
        }
        Ok(())
    }

    /// A timeout must be positive and at most 10 minutes.
    pub(crate) fn timeout(self, key: &'static str, d: Duration) -> Result<()> {
        if d.is_zero() || d > Duration::from_secs(600) {
            return Err(self.invalid(key, format!("must be more than 0 and at most 10 min, got {d:?}")));
        }
        Ok(())
    }

    /// A duration of at least 1 ms and at most `max` (librdkafka's and RocketMQ's settings are
    /// whole milliseconds).
    pub(crate) fn millis(self, key: &'static str, d: Duration, max: Duration) -> Result<()> {
        if d < Duration::from_millis(1) || d > max {
            return Err(self.invalid(key, format!("must be at least 1 ms and at most {max:?}, got {d:?}")));
        }
        Ok(())
    }

    /// A name shown to operators (a connection name, a client id): non-empty, no control
    /// characters.
    pub(crate) fn label(self, key: &'static str, value: &str) -> Result<()> {
        if value.is_empty() || value.chars().any(char::is_control) {
            return Err(self.invalid(key, "must be non-empty text without control characters"));
        }
        Ok(())
    }

    /// A list of servers: at least one, each `host:port` (a host, and a port from 1 to 65535).
    pub(crate) fn host_ports(self, key: &'static str, servers: &[&str]) -> Result<()> {
        if servers.is_empty() {
            return Err(self.invalid(key, "must list at least one host:port"));
        }
        for s in servers {
            match s.rsplit_once(':').map(|(h, p)| (h, p.parse::<u16>())) {
                Some((h, Ok(p))) if !h.is_empty() && p > 0 => {}
                _ => return Err(self.invalid(key, format!("{s:?} is not host:port"))),
            }
        }
        Ok(())
    }

    /// Where messages go, as [`Naming`] says: `fixed` and `prefix` (keys `keys.0` and `keys.1`)
    /// exclude each other, and each must be a name `check` accepts.
    pub(crate) fn naming(
        self,
        keys: (&'static str, &'static str),
        naming: &Naming<'_>,
        check: impl Fn(&str) -> std::result::Result<(), String>,
    ) -> Result<()> {
        let (fixed_key, prefix_key) = keys;
        if naming.fixed.is_some() && naming.prefix.is_some() {
            return Err(
                self.invalid(fixed_key, format!("set either `{fixed_key}` or `{prefix_key}`, not both"))
            );
        }
        for (key, name) in [(fixed_key, naming.fixed), (prefix_key, naming.prefix)] {
            if let Some(name) = name {
                check(name).map_err(|r| self.invalid(key, r))?;
            }
        }
        Ok(())
    }
}

/// Where a message goes on brokers named by a fixed name or a prefix (a NATS subject, a Kafka or
/// RocketMQ topic): the fixed name for every message, else `<prefix><separator><topic>`, else the
/// message's topic itself.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Naming<'a> {
    pub(crate) fixed: Option<&'a str>,
    pub(crate) prefix: Option<&'a str>,
    pub(crate) separator: char,
}

impl Naming<'_> {
    /// The name a message with `topic` goes to.
    pub(crate) fn name_for(&self, topic: &str) -> String {
        match (self.fixed, self.prefix) {
            (Some(f), _) => f.to_owned(),
            (None, Some(p)) => format!("{p}{}{topic}", self.separator),
            (None, None) => topic.to_owned(),
        }
    }
}

/// Writes `config` (named `name`) for `Debug`: its keys and values as they serialize, that is
/// as the configuration file writes them, with the password of `url` and the value of every key
/// `secret` names (at any depth) replaced by `***`.
pub(crate) fn debug_config<C: Serialize>(
    f: &mut fmt::Formatter<'_>,
    name: &str,
    config: &C,
    secret: fn(&str) -> bool,
) -> fmt::Result {
    let Ok(Value::Object(fields)) = serde_json::to_value(config) else {
        return f.write_str(name);
    };
    let mut s = f.debug_struct(name);
    for (key, value) in fields {
        s.field(&key, &Shown(redacted(&key, value, secret)));
    }
    s.finish()
}

/// Implements what every broker's configuration has the same way: `Debug`, as [`debug_config`]
/// writes it (with `secret: <fn>`, the values of the keys it accepts shown as `***` too) and,
/// with `validate: checked`, the public `validate`, which is the crate's `checked` (what
/// `connect` uses) without its result. (Unused when only the HTTP transport is compiled in.)
#[allow(unused_macros)]
macro_rules! config_impls {
    ($config:ident, secret: $secret:expr) => {
        impl std::fmt::Debug for $config {
            /// The keys and values, as in the configuration file; the password of `url` and
            /// secret values shown as `***`.
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                $crate::common::config::debug_config(f, stringify!($config), self, $secret)
            }
        }
    };
    ($config:ident) => {
        $crate::common::config::config_impls!($config, secret: |_| false);
    };
    ($config:ident, validate: checked) => {
        $crate::common::config::config_impls!($config);

        impl $config {
            /// Checks every value, and reads the TLS files; the error names the offending key.
            pub fn validate(&self) -> std::result::Result<(), $crate::TransportError> {
                self.checked().map(|_| ())
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use config_impls;

/// `value` of `key` as [`debug_config`] shows it.
fn redacted(key: &str, value: Value, secret: fn(&str) -> bool) -> Value {
    match value {
        Value::Null => Value::Null,
        Value::String(url) if key == "url" => Value::String(crate::redact(&url)),
        _ if secret(key) => Value::String("***".into()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k.clone(), redacted(&k, v, secret))).collect())
        }
        other => other,
    }
}

/// A value shown as JSON.
struct Shown(Value);

impl fmt::Debug for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::testing::key_of;

    const RULES: Rules = Rules("test");

    #[test]
    fn each_rule_names_its_key() {
        assert_eq!(key_of(RULES.not_blank("url", " ")), "url");
        assert_eq!(key_of(RULES.timeout("timeout", Duration::from_secs(601))), "timeout");
        RULES.timeout("timeout", Duration::from_secs(600)).unwrap();
        assert_eq!(key_of(RULES.millis("linger", Duration::ZERO, Duration::from_secs(1))), "linger");
        RULES.millis("linger", Duration::from_millis(1), Duration::from_secs(1)).unwrap();
        assert_eq!(key_of(RULES.label("name", "a\nb")), "name");
        RULES.label("name", "outbox-relay").unwrap();
        assert_eq!(key_of(RULES.host_ports("brokers", &[])), "brokers");
        for bad in ["host", ":9092", "h:0", "h:x", ""] {
            assert_eq!(key_of(RULES.host_ports("brokers", &["a:1", bad])), "brokers", "{bad:?}");
        }
        RULES.host_ports("brokers", &["a:1", "[::1]:9092"]).unwrap();
        let e = RULES.invalid("k", "why").to_string();
        assert_eq!(e, "invalid test configuration: k: why");
    }

    #[test]
    fn debug_shows_the_keys_without_secrets() {
        #[derive(Serialize)]
        struct C {
            url: &'static str,
            timeout: u64,
            token: Option<&'static str>,
            properties: std::collections::BTreeMap<&'static str, &'static str>,
        }
        struct D(C);
        impl fmt::Debug for D {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                debug_config(f, "C", &self.0, |k| k.contains("token") || k.contains("password"))
            }
        }
        let c = C {
            url: "nats://u:hunter2@h:4222",
            timeout: 5,
            token: Some("t0ken"),
            properties: [("sasl.password", "s3cret"), ("sasl.username", "relay")].into(),
        };
        let shown = format!("{:?}", D(c));
        assert!(shown.starts_with("C { "), "{shown}");
        for part in [
            r#"properties: {"sasl.password":"***","sasl.username":"relay"}"#,
            "timeout: 5",
            r#"token: "***""#,
            r#"url: "nats://u:***@h:4222""#,
        ] {
            assert!(shown.contains(part), "{shown} lacks {part}");
        }
        let none = C { url: "h", timeout: 1, token: None, properties: Default::default() };
        assert!(format!("{:?}", D(none)).contains("token: null"));
    }

    #[test]
    fn a_fixed_name_or_a_prefix() {
        let ok = |s: &str| if s.contains(' ') { Err("has a space".to_owned()) } else { Ok(()) };
        let naming = |fixed, prefix| Naming { fixed, prefix, separator: '.' };
        let check = |n: &Naming<'_>| RULES.naming(("topic", "topic_prefix"), n, ok);
        assert_eq!(key_of(check(&naming(Some("a"), Some("b")))), "topic");
        assert_eq!(key_of(check(&naming(Some("a b"), None))), "topic");
        assert_eq!(key_of(check(&naming(None, Some("a b")))), "topic_prefix");
        check(&naming(None, Some("outbox"))).unwrap();
        assert_eq!(naming(Some("fixed"), None).name_for("order.paid"), "fixed");
        assert_eq!(naming(None, Some("outbox")).name_for("order.paid"), "outbox.order.paid");
        assert_eq!(naming(None, None).name_for("order.paid"), "order.paid");
    }
}
