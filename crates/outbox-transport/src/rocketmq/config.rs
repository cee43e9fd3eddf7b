//! Configuration of the RocketMQ transport.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::common::config::{config_impls, Naming, Rules};
use crate::TransportError;

const RULES: Rules = Rules("rocketmq");

/// Settings of a [`RocketMqTransport`](super::RocketMqTransport). Every field has a default, so an
/// empty table publishes through a local name server, each message to the topic named by its
/// own topic, with its tag.
///
/// ```toml
/// namesrv = "ns-1:9876;ns-2:9876"
/// topic = "ORDER_EVENTS"           # one RocketMQ topic; consumers filter on the tag
/// producer_group = "order-service-outbox"
/// timeout = "5s"
/// access_key = "relay"             # RocketMQ ACL, when the cluster enables it
/// secret_key = "secret"            # redacted in every log and error
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RocketMqConfig {
    /// Name server addresses, `host:port` separated by `;` (or `,`). Defaults to
    /// `127.0.0.1:9876`.
    pub namesrv: String,
    /// A fixed RocketMQ topic for every message, whatever its outbox topic. Mutually exclusive
    /// with `topic_prefix`. Defaults to none (the RocketMQ topic is the outbox topic, which must
    /// then be a legal RocketMQ topic name: letters, digits, `_`, `-`, `%`, `|`).
    pub topic: Option<String>,
    /// Prefix of the RocketMQ topic derived from the outbox topic: `<topic_prefix>_<topic>`.
    /// Defaults to none.
    pub topic_prefix: Option<String>,
    /// Producer group (shown in the broker's admin tools). Defaults to `outbox-relay`.
    pub producer_group: String,
    /// Longest time one send may take, until the broker's answer. Defaults to 5 s.
    #[serde(with = "outbox_core::duration")]
    pub timeout: Duration,
    /// Largest message body in bytes; larger ones fail permanently without being sent. Keep it at
    /// or below the broker's `maxMessageSize` (4 MiB by default). Defaults to 4,194,304.
    pub max_message_bytes: usize,
    /// Send keyed messages to the queue chosen by the key's hash (the Java client's
    /// `SelectMessageQueueByHash`), so a key's messages stay in one queue and an orderly consumer
    /// sees them in order. Defaults to `true`.
    pub order_by_key: bool,
    /// Access key of RocketMQ's ACL. Defaults to none (no ACL).
    pub access_key: Option<String>,
    /// Secret key of RocketMQ's ACL; redacted in logs and errors. Defaults to none.
    pub secret_key: Option<String>,
}

config_impls!(RocketMqConfig, secret: |key| key == "secret_key");

impl Default for RocketMqConfig {
    fn default() -> Self {
        RocketMqConfig {
            namesrv: "127.0.0.1:9876".into(),
            topic: None,
            topic_prefix: None,
            producer_group: "outbox-relay".into(),
            timeout: Duration::from_secs(5),
            max_message_bytes: 4 * 1024 * 1024,
            order_by_key: true,
            access_key: None,
            secret_key: None,
        }
    }
}

impl RocketMqConfig {
    /// Checks every value; the error names the offending key.
    pub fn validate(&self) -> Result<(), TransportError> {
        RULES.host_ports("namesrv", &self.namesrv_list())?;
        RULES.naming(("topic", "topic_prefix"), &self.naming(), check_topic)?;
        if self.producer_group.is_empty()
            || self.producer_group.len() > 255
            || self
                .producer_group
                .chars()
                .any(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '%' | '|')))
        {
            return Err(RULES.invalid(
                "producer_group",
                format!("{:?} must be 1 to 255 letters, digits, '_', '-', '%' or '|'", self.producer_group),
            ));
        }
        RULES.millis("timeout", self.timeout, Duration::from_secs(600))?;
        if !(1..=u32::MAX as usize).contains(&self.max_message_bytes) {
            return Err(RULES.invalid("max_message_bytes", "must be between 1 and 4294967295"));
        }
        match (&self.access_key, &self.secret_key) {
            (Some(a), Some(s)) if !a.is_empty() && !s.is_empty() => {}
            (None, None) => {}
            _ => {
                let reason = "set both `access_key` and `secret_key` (non-empty), or neither";
                return Err(RULES.invalid("access_key", reason));
            }
        }
        Ok(())
    }

    /// The name server addresses.
    pub(crate) fn namesrv_list(&self) -> Vec<&str> {
        self.namesrv.split([';', ',']).map(str::trim).filter(|a| !a.is_empty()).collect()
    }

    /// The RocketMQ topic is the fixed `topic`, or `<topic_prefix>_<topic>`, or the outbox topic.
    fn naming(&self) -> Naming<'_> {
        Naming { fixed: self.topic.as_deref(), prefix: self.topic_prefix.as_deref(), separator: '_' }
    }

    /// The RocketMQ topic a message with outbox `topic` is published to.
    pub(crate) fn topic_for(&self, topic: &str) -> String {
        self.naming().name_for(topic)
    }
}

/// Most bytes of a message's properties (headers, keys, tag and the client's own): the broker
/// stores them behind a two-byte length and refuses more than 32767 (`MESSAGE_ILLEGAL`); 1 KiB
/// is left for the properties the client adds.
pub(crate) const MAX_PROPERTIES_BYTES: usize = 32_767 - 1024;

/// Why `topic` is not a legal RocketMQ topic to send to, if it is not: 1 to 127 characters of
/// `[%|a-zA-Z0-9_-]` (the Java client's `Validators.checkTopic`), and not a system topic
/// (`TBW102`, `SCHEDULE_TOPIC_XXXX`, `rmq_sys_*`, ...: `TopicValidator`).
pub(crate) fn check_topic(topic: &str) -> Result<(), String> {
    use crate::validate::{describe_char, quote};
    use rocketmq_model::common::topic::TopicValidator;
    if topic.is_empty() || topic.len() > 127 {
        return Err(format!("{} must have 1 to 127 characters (it has {} bytes)", quote(topic), topic.len()));
    }
    if let Some(c) =
        topic.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '%' | '|')))
    {
        return Err(format!(
            "{} contains {}; RocketMQ topics allow only ASCII letters, digits, '_', '-', '%' and '|' \
             (route with a fixed `topic` and use the tag, or rename the outbox topic)",
            quote(topic),
            describe_char(c)
        ));
    }
    if TopicValidator::is_system_topic(topic) || TopicValidator::is_not_allowed_send_topic(topic) {
        return Err(format!("{} is a RocketMQ system topic; sending to it is not allowed", quote(topic)));
    }
    Ok(())
}

/// Why `tag` cannot be a RocketMQ tag, if it cannot: no `|` (subscriptions separate tags with
/// `||`), no control character (properties travel as `name\u{1}value\u{2}`).
pub(crate) fn check_tag(tag: &str) -> Result<(), String> {
    use crate::validate::{describe_char, first_control, quote};
    if tag.contains('|') {
        return Err(format!("tag {} contains '|' (subscriptions separate tags with \"||\")", quote(tag)));
    }
    if let Some(c) = first_control(tag) {
        return Err(format!("tag {} contains the control character {}", quote(tag), describe_char(c)));
    }
    Ok(())
}

/// Why `key` cannot be a RocketMQ key, if it cannot: no control character (keys travel in the
/// `KEYS` property, as `name\u{1}value\u{2}`). Spaces separate keys and are replaced by `_`.
pub(crate) fn check_key(key: &str) -> Result<(), String> {
    use crate::validate::{describe_char, first_control, quote};
    match first_control(key) {
        Some(c) => Err(format!("key {} contains the control character {}", quote(key), describe_char(c))),
        None => Ok(()),
    }
}

/// Why a header cannot be a RocketMQ user property, if it cannot: a non-empty name, and no
/// `\u{1}` or `\u{2}` in the name or the value (the property separators). Names the system
/// uses (`KEYS`, `TAGS`, ...) are refused by the client's builder.
pub(crate) fn check_property(name: &str, value: &str) -> Result<(), String> {
    use crate::validate::quote;
    if name.is_empty() {
        return Err("a header name is empty".into());
    }
    if [name, value].iter().any(|s| s.contains(['\u{1}', '\u{2}'])) {
        return Err(format!(
            "header {} contains a \\u0001 or \\u0002 character, which RocketMQ properties cannot carry",
            quote(name)
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
        RocketMqConfig::default().validate().unwrap();
        let c: RocketMqConfig =
            serde_json::from_str(r#"{"namesrv":"a:9876;b:9876","topic_prefix":"OUTBOX"}"#).unwrap();
        c.validate().unwrap();
        assert_eq!(c.namesrv_list(), vec!["a:9876", "b:9876"]);
        assert_eq!(c.topic_for("ORDER"), "OUTBOX_ORDER");
        assert!(serde_json::from_str::<RocketMqConfig>(r#"{"namesrvv":"x:1"}"#).is_err());
    }

    #[test]
    fn invalid_values_name_their_key() {
        let bad =
            |f: fn(&mut RocketMqConfig)| invalid_key(RocketMqConfig::default(), f, RocketMqConfig::validate);
        assert_eq!(bad(|c| c.namesrv = " ; ".into()), "namesrv");
        assert_eq!(bad(|c| c.namesrv = "host".into()), "namesrv");
        assert_eq!(
            bad(|c| {
                c.topic = Some("A".into());
                c.topic_prefix = Some("B".into());
            }),
            "topic"
        );
        assert_eq!(bad(|c| c.topic = Some("order.paid".into())), "topic");
        assert_eq!(bad(|c| c.topic_prefix = Some(String::new())), "topic_prefix");
        assert_eq!(bad(|c| c.producer_group = "a b".into()), "producer_group");
        assert_eq!(bad(|c| c.timeout = Duration::ZERO), "timeout");
        assert_eq!(bad(|c| c.max_message_bytes = 0), "max_message_bytes");
        assert_eq!(bad(|c| c.access_key = Some("a".into())), "access_key");
    }

    #[test]
    fn debug_redacts_the_secret_key() {
        let c = RocketMqConfig {
            access_key: Some("relay".into()),
            secret_key: Some("hunter2".into()),
            ..RocketMqConfig::default()
        };
        let s = format!("{c:?}");
        assert!(!s.contains("hunter2") && s.contains("relay"), "{s}");
    }

    #[test]
    fn topic_names() {
        assert!(check_topic("ORDER_PAID").is_ok());
        assert!(check_topic("%RETRY%group").is_ok());
        assert!(check_topic("order.paid").is_err());
        assert!(check_topic("").is_err());
        assert!(check_topic(&"x".repeat(128)).is_err());
        assert!(check_topic("a\nb").unwrap_err().contains("U+000A (line feed)"));
        assert!(check_topic(&format!("{} x", "n".repeat(70_000))).unwrap_err().len() < 200);
        for system in ["TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_anything"] {
            assert!(check_topic(system).unwrap_err().contains("system topic"), "{system}");
        }
    }

    #[test]
    fn tags_keys_and_properties() {
        assert_eq!(check_tag("paid"), Ok(()));
        assert!(check_tag("a||b").unwrap_err().contains("'|'"));
        assert!(check_tag("a\u{1}b").unwrap_err().contains("U+0001"));
        assert_eq!(check_key("order 42"), Ok(()));
        assert!(check_key("k\u{2}").unwrap_err().contains("U+0002"));
        assert_eq!(check_property("tenant", "t1"), Ok(()));
        assert!(check_property("", "v").is_err());
        assert!(check_property("a\u{1}", "v").unwrap_err().contains("\\u0001"));
        assert!(check_property("n", "v\u{2}").is_err());
        let e = check_property(&format!("{}\u{1}", "n".repeat(70_000)), "v").unwrap_err();
        assert!(e.len() < 300, "{e}");
    }
}
