//! Configuration of the MQTT transport.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::common::config::{config_impls, Rules, TOPIC_PLACEHOLDER};
use crate::common::tls::TlsMaterial;
use crate::TransportError;

const RULES: Rules = Rules("mqtt");

/// Largest MQTT packet the protocol can carry: 1 byte of fixed header, 4 of remaining length,
/// and a remaining length of at most 268,435,455 bytes.
pub(crate) const PROTOCOL_MAX_PACKET: usize = 268_435_455 + 5;

/// Longest MQTT topic, in bytes of UTF-8 (a two-byte length prefix on the wire).
pub(crate) const MAX_TOPIC_BYTES: usize = 65_535;

/// Default [`MqttConfig::max_topic_levels`].
pub(crate) const DEFAULT_MAX_TOPIC_LEVELS: usize = 128;

/// How a message is laid out in the MQTT payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum MqttFormat {
    /// A JSON object `{"id": "<message id>", "headers": {"<name>": "<value>", ...},
    /// "payload": "<body>"}`: MQTT 3.1.1 has no headers, so they travel inside. `id` is a string
    /// (message ids may exceed what JavaScript numbers hold exactly), and `payload` is the body
    /// as a JSON string, whatever it contains. The default.
    #[default]
    Envelope,
    /// The body alone, unchanged. The message id and every header are lost: consumers cannot
    /// deduplicate redeliveries or follow the trace. Use only for consumers that cannot unwrap.
    Raw,
}

/// Settings of an [`MqttTransport`](super::MqttTransport). Every field has a default, so an
/// empty table publishes each message at QoS 1 to a local broker, on the topic named after its
/// outbox topic with `.` turned into `/`.
///
/// ```toml
/// url = "mqtt://relay:secret@broker.internal:1883"
/// topic = "outbox/{topic}"     # outbox topic "order.paid" -> MQTT topic "outbox/order/paid"
/// format = "envelope"          # or "raw" (loses the headers)
///
/// # TLS: an mqtts:// (or ssl://) URL, port 8883 by default; the files are optional.
/// # url = "mqtts://relay:secret@broker.internal:8883"
/// # tls_ca_file = "/etc/outbox/mqtt-ca.pem"      # trusted besides the system's trust store
/// # tls_cert_file = "/etc/outbox/relay.pem"      # a client certificate, for brokers that
/// # tls_key_file = "/etc/outbox/relay.key"       # require one (require_certificate true)
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MqttConfig {
    /// Broker URL: `mqtt://[user[:password]@]host[:port]` (or `tcp://`; port 1883 by default),
    /// or `mqtts://...` (or `ssl://`; port 8883 by default) for TLS, verified against the
    /// system's trust store and `tls_ca_file`. Credentials are redacted in every error and log.
    /// Defaults to `mqtt://127.0.0.1:1883`.
    pub url: String,
    /// MQTT topic to publish to. `{topic}` is replaced by the envelope's topic (with `.` turned
    /// into `/` when `dots_to_slashes` is set); the rest is kept as is. Must not contain the
    /// wildcards `+` or `#`. Defaults to `{topic}`.
    pub topic: String,
    /// Turn the `.` separators of the outbox topic into MQTT's `/` levels when substituting
    /// `{topic}`. Defaults to `true`.
    pub dots_to_slashes: bool,
    /// Payload layout: `envelope` (JSON with id, headers and payload) or `raw` (the body alone,
    /// headers lost). Defaults to `envelope`.
    pub format: MqttFormat,
    /// Publish with the retain flag. Defaults to `false`.
    pub retain: bool,
    /// MQTT client identifier. Two connections with the same identifier make the broker drop
    /// one of them, so every relay instance needs its own. Defaults to
    /// `outbox-<pid>-<random>`, unique per process.
    pub client_id: Option<String>,
    /// Largest PUBLISH packet (fixed header, topic, packet id and payload) to send, in bytes.
    /// Larger messages fail permanently without being sent. Set it to the broker's limit
    /// (Mosquitto's `message_size_limit`/`max_packet_size`, 1 MiB on EMQX, 128 KiB on AWS IoT):
    /// an MQTT 3.1.1 broker answers an oversized packet only by closing the connection, which
    /// would look like an outage. Defaults to `1048576` (1 MiB).
    pub max_packet_bytes: usize,
    /// Most levels (`/`-separated parts) of a topic; a message whose topic has more fails
    /// permanently without being sent. Brokers limit the depth and close the connection of a
    /// client publishing deeper (Mosquitto 2.0: about 200 levels; EMQX: `max_topic_levels`,
    /// 128 by default; AWS IoT: 8). Defaults to `128`.
    pub max_topic_levels: usize,
    /// PUBLISH packets awaiting their PUBACK at once (MQTT flow control). Defaults to `100`.
    pub inflight: u16,
    /// Longest time one `publish` call may take, sending and awaiting every PUBACK, in
    /// milliseconds; envelopes not acknowledged by then are reported unavailable. Defaults to
    /// `5000`.
    #[serde(with = "outbox_core::duration")]
    pub timeout: Duration,
    /// Longest time to establish a connection (TCP and CONNACK), in milliseconds, rounded up to
    /// whole seconds. Defaults to `5000`.
    #[serde(with = "outbox_core::duration")]
    pub connect_timeout: Duration,
    /// Keep-alive interval, in seconds: a silent connection is pinged, and declared dead when the
    /// ping is not answered. Defaults to `30`.
    #[serde(with = "outbox_core::duration")]
    pub keep_alive: Duration,
    /// Longest pause between reconnection attempts, in milliseconds (the pause starts at 100 ms
    /// and doubles). Defaults to `2000`.
    #[serde(with = "outbox_core::duration")]
    pub reconnect_max_delay: Duration,
    /// PEM file of the CA (or CAs) that signed the broker's certificate, trusted besides the
    /// system's trust store. Needs an `mqtts://` URL. Read at connect (and by `outbox check`).
    /// Defaults to none.
    pub tls_ca_file: Option<String>,
    /// PEM file of the client certificate (and its chain) presented to the broker (Mosquitto's
    /// `require_certificate true`); set with `tls_key_file`. Needs an `mqtts://` URL. Defaults to
    /// none.
    pub tls_cert_file: Option<String>,
    /// PEM file of the private key of `tls_cert_file` (PKCS#8, PKCS#1 or SEC1). Defaults to none.
    pub tls_key_file: Option<String>,
}

config_impls!(MqttConfig, validate: checked);

impl Default for MqttConfig {
    fn default() -> Self {
        MqttConfig {
            url: "mqtt://127.0.0.1:1883".into(),
            topic: TOPIC_PLACEHOLDER.into(),
            dots_to_slashes: true,
            format: MqttFormat::Envelope,
            retain: false,
            client_id: None,
            max_packet_bytes: 1024 * 1024,
            max_topic_levels: DEFAULT_MAX_TOPIC_LEVELS,
            inflight: 100,
            timeout: Duration::from_millis(5000),
            connect_timeout: Duration::from_millis(5000),
            keep_alive: Duration::from_secs(30),
            reconnect_max_delay: Duration::from_millis(2000),
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
        }
    }
}

/// The parts of [`MqttConfig::url`].
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct BrokerAddress {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) credentials: Option<(String, String)>,
    /// `mqtts://` or `ssl://`.
    pub(crate) tls: bool,
}

impl MqttConfig {
    /// Checks every value; the broker and the TLS to use (`None` for `mqtt://`).
    pub(crate) fn checked(&self) -> Result<(BrokerAddress, Option<TlsMaterial>), TransportError> {
        let broker = self.broker()?;
        if self.max_topic_levels == 0 || self.max_topic_levels > MAX_TOPIC_BYTES {
            return Err(RULES.invalid("max_topic_levels", format!("must be 1 to {MAX_TOPIC_BYTES}")));
        }
        if self.topic.is_empty() {
            return Err(RULES.invalid("topic", "must not be empty"));
        }
        // The template itself must make a valid topic (with a one-level topic in place).
        check_topic(&self.topic.replace(TOPIC_PLACEHOLDER, "t"), self.max_topic_levels)
            .map_err(|r| RULES.invalid("topic", r))?;
        if let Some(id) = &self.client_id {
            if id.is_empty() || id.len() > 65_535 {
                return Err(RULES.invalid("client_id", "must be 1 to 65535 bytes"));
            }
        }
        if self.max_packet_bytes < 64 || self.max_packet_bytes > PROTOCOL_MAX_PACKET {
            let reason = format!("must be 64 to {PROTOCOL_MAX_PACKET} bytes");
            return Err(RULES.invalid("max_packet_bytes", reason));
        }
        if self.inflight == 0 {
            return Err(RULES.invalid("inflight", "must be positive"));
        }
        RULES.timeout("timeout", self.timeout)?;
        RULES.timeout("connect_timeout", self.connect_timeout)?;
        RULES.timeout("reconnect_max_delay", self.reconnect_max_delay)?;
        if self.keep_alive < Duration::from_secs(5) || self.keep_alive > Duration::from_secs(65_535) {
            return Err(RULES.invalid("keep_alive", "must be 5 s to 65535 s"));
        }
        let files =
            [self.tls_ca_file.as_deref(), self.tls_cert_file.as_deref(), self.tls_key_file.as_deref()];
        let tls = TlsMaterial::for_url(RULES, broker.tls, files, "an mqtts://", &crate::redact(&self.url))?;
        Ok((broker, tls))
    }

    /// Parses `url`.
    pub(crate) fn broker(&self) -> Result<BrokerAddress, TransportError> {
        let shown = crate::redact(&self.url);
        let scheme = |s: &str| {
            self.url.get(..s.len()).filter(|p| p.eq_ignore_ascii_case(s)).map(|_| &self.url[s.len()..])
        };
        let (rest, tls) = match (scheme("mqtt://"), scheme("tcp://"), scheme("mqtts://"), scheme("ssl://")) {
            (Some(rest), _, _, _) | (_, Some(rest), _, _) => (rest, false),
            (_, _, Some(rest), _) | (_, _, _, Some(rest)) => (rest, true),
            _ => {
                let reason =
                    format!("{shown:?} must start with mqtt:// or tcp://, or mqtts:// or ssl:// for TLS");
                return Err(RULES.invalid("url", reason));
            }
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#']) {
            return Err(RULES.invalid("url", format!("{shown:?} must not have a path or query")));
        }
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let credentials = userinfo.map(|u| match u.split_once(':') {
            Some((user, pass)) => (user.to_owned(), pass.to_owned()),
            None => (u.to_owned(), String::new()),
        });
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, after) =
                v6.split_once(']').ok_or_else(|| RULES.invalid("url", format!("{shown:?}: unclosed '['")))?;
            (h.to_owned(), after.strip_prefix(':'))
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h.to_owned(), Some(p)),
                None => (hostport.to_owned(), None),
            }
        };
        if host.is_empty() {
            return Err(RULES.invalid("url", format!("{shown:?} has no host")));
        }
        let port = match port {
            None if tls => 8883,
            None => 1883,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| RULES.invalid("url", format!("{shown:?}: {p:?} is not a port number")))?,
        };
        Ok(BrokerAddress { host, port, credentials, tls })
    }

    /// The MQTT topic for an envelope topic.
    pub(crate) fn topic_for(&self, topic: &str) -> String {
        let t = if self.dots_to_slashes { topic.replace('.', "/") } else { topic.to_owned() };
        self.topic.replace(TOPIC_PLACEHOLDER, &t)
    }
}

/// Why `topic` cannot be published to, if it cannot: the rules of MQTT 3.1.1 / 5.0 (section
/// 4.7 "Topic Names", 1.5.3 "UTF-8 Encoded String") as brokers enforce them, each of which
/// makes Mosquitto close the connection:
/// - 1 to 65535 bytes of UTF-8;
/// - no wildcard `+` or `#` (they are for subscriptions);
/// - no U+0000, no control character (U+0001 to U+001F, U+007F to U+009F), no Unicode
///   noncharacter (U+FDD0 to U+FDEF, U+xFFFE, U+xFFFF);
/// - at most `max_levels` levels.
pub(crate) fn check_topic(topic: &str, max_levels: usize) -> Result<(), String> {
    use crate::validate::{describe_char, first_control, is_noncharacter};
    if topic.is_empty() {
        return Err("is empty".into());
    }
    if topic.len() > MAX_TOPIC_BYTES {
        return Err(format!("is {} bytes, more than the {MAX_TOPIC_BYTES} MQTT allows", topic.len()));
    }
    if let Some(c) = topic.chars().find(|c| matches!(c, '+' | '#')) {
        return Err(format!("contains the wildcard {} (not allowed in a publish topic)", describe_char(c)));
    }
    if let Some(c) = first_control(topic) {
        return Err(format!("contains the control character {}", describe_char(c)));
    }
    if let Some(c) = topic.chars().find(|&c| is_noncharacter(c)) {
        return Err(format!("contains the Unicode noncharacter {}", describe_char(c)));
    }
    let levels = topic.bytes().filter(|&b| b == b'/').count() + 1;
    if levels > max_levels {
        return Err(format!("has {levels} levels, more than max_topic_levels ({max_levels})"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::common::testing::invalid_key;

    #[test]
    fn defaults_urls_and_topics() {
        MqttConfig::default().validate().unwrap();
        let c: MqttConfig = serde_json::from_str(
            r#"{"url":"mqtt://u:p@broker:1884","topic":"outbox/{topic}","format":"raw"}"#,
        )
        .unwrap();
        let b = c.broker().unwrap();
        assert_eq!((b.host.as_str(), b.port), ("broker", 1884));
        assert_eq!(b.credentials, Some(("u".into(), "p".into())));
        assert_eq!(c.format, MqttFormat::Raw);
        assert_eq!(c.topic_for("order.paid"), "outbox/order/paid");
        let c = MqttConfig { url: "tcp://[::1]".into(), dots_to_slashes: false, ..MqttConfig::default() };
        let b = c.broker().unwrap();
        assert_eq!((b.host.as_str(), b.port), ("::1", 1883));
        assert_eq!(c.topic_for("order.paid"), "order.paid");
        assert!(serde_json::from_str::<MqttConfig>(r#"{"qos":2}"#).is_err());
    }

    #[test]
    fn invalid_values_name_their_key() {
        let bad = |f: fn(&mut MqttConfig)| invalid_key(MqttConfig::default(), f, MqttConfig::validate);
        assert_eq!(bad(|c| c.url = "mqtts2://h".into()), "url");
        assert_eq!(bad(|c| c.url = "http://h".into()), "url");
        assert_eq!(bad(|c| c.url = "mqtt://h:99999".into()), "url");
        assert_eq!(bad(|c| c.url = "mqtt://".into()), "url");
        assert_eq!(bad(|c| c.url = "mqtt://h/path".into()), "url");
        assert_eq!(bad(|c| c.topic = "a/+/b".into()), "topic");
        assert_eq!(bad(|c| c.topic = String::new()), "topic");
        assert_eq!(bad(|c| c.topic = "a\n/{topic}".into()), "topic");
        assert_eq!(bad(|c| c.max_topic_levels = 0), "max_topic_levels");
        assert_eq!(bad(|c| c.client_id = Some(String::new())), "client_id");
        assert_eq!(bad(|c| c.max_packet_bytes = 10), "max_packet_bytes");
        assert_eq!(bad(|c| c.inflight = 0), "inflight");
        assert_eq!(bad(|c| c.timeout = Duration::ZERO), "timeout");
        assert_eq!(bad(|c| c.connect_timeout = Duration::ZERO), "connect_timeout");
        assert_eq!(bad(|c| c.keep_alive = Duration::from_secs(1)), "keep_alive");
        assert_eq!(bad(|c| c.reconnect_max_delay = Duration::ZERO), "reconnect_max_delay");
    }

    #[test]
    fn topics_follow_the_mqtt_rules() {
        let ok = |t: &str| check_topic(t, 128);
        let longest = "x".repeat(65_535);
        for t in ["a/b", "sec/a b", "$aws/things/x", "/", "a//b", "é/ü", "a\u{202e}b", longest.as_str()] {
            assert_eq!(ok(t), Ok(()), "{t:?}");
        }
        let err = |t: &str| ok(t).unwrap_err();
        assert!(err("").contains("empty"));
        assert!(err("sec/a\nb").contains("control character U+000A (line feed)"), "{}", err("sec/a\nb"));
        assert!(err("a\0b").contains("U+0000"));
        assert!(err("a\tb").contains("U+0009"));
        assert!(err("a\u{7f}").contains("U+007F"));
        assert!(err("a\u{85}").contains("U+0085"));
        assert!(err("a\u{fffe}").contains("noncharacter U+FFFE"));
        assert!(err("a\u{fdd0}").contains("noncharacter"));
        assert!(err("a/+/b").contains("wildcard '+'"));
        assert!(err("a/#").contains("wildcard '#'"));
        assert!(err(&"x".repeat(65_536)).contains("65535"));
        let deep = vec!["x"; 129].join("/");
        assert!(err(&deep).contains("129 levels"), "{}", err(&deep));
        assert_eq!(check_topic(&deep, 200), Ok(()));
    }

    #[test]
    fn errors_and_debug_redact_the_password() {
        let c = MqttConfig { url: "mqtts://u:hunter2@h:0".into(), ..MqttConfig::default() };
        assert!(!c.validate().unwrap_err().to_string().contains("hunter2"));
        assert!(!format!("{c:?}").contains("hunter2"));
        let c = MqttConfig {
            url: "mqtt://u:hunter2@h".into(),
            tls_ca_file: Some("/nonexistent/ca.pem".into()),
            ..MqttConfig::default()
        };
        assert!(!c.validate().unwrap_err().to_string().contains("hunter2"));
    }

    #[test]
    fn tls_by_scheme_and_files_only_with_it() {
        let cases = [
            ("mqtts://h", 8883, true),
            ("SSL://h", 8883, true),
            ("mqtts://h:8884", 8884, true),
            ("mqtt://h", 1883, false),
        ];
        for (url, port, with_tls) in cases {
            let c = MqttConfig { url: url.into(), ..MqttConfig::default() };
            let (broker, tls) = c.checked().unwrap();
            assert_eq!((broker.port, broker.tls, tls.is_some()), (port, with_tls, with_tls), "{url}");
        }
        let bad = |f: fn(&mut MqttConfig)| invalid_key(MqttConfig::default(), f, MqttConfig::validate);
        assert_eq!(bad(|c| c.tls_ca_file = Some("/nonexistent/ca.pem".into())), "tls_ca_file");
        assert_eq!(
            bad(|c| {
                c.url = "mqtts://h".into();
                c.tls_ca_file = Some("/nonexistent/ca.pem".into());
            }),
            "tls_ca_file"
        );
        assert_eq!(bad(|c| c.tls_cert_file = Some("/nonexistent/c.pem".into())), "tls_key_file");
        let pki = outbox_testkit::tls::Pki::new();
        let c = MqttConfig { tls_ca_file: Some(pki.path("client.key")), ..MqttConfig::default() };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("tls_ca_file") && e.contains("holds no PEM certificate"), "{e}");
    }
}
