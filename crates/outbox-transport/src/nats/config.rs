//! Configuration of the NATS JetStream transport.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::common::config::{config_impls, Naming, Rules};
use crate::common::tls::TlsMaterial;
use crate::TransportError;

const RULES: Rules = Rules("nats");

/// Settings of a [`NatsTransport`](super::NatsTransport). Every field has a default, so an empty
/// table connects to a local server and publishes each message to the subject named by its topic.
///
/// ```toml
/// url = "nats://relay:secret@nats.internal:4222"
/// subject_prefix = "outbox"      # topic "order.paid" -> subject "outbox.order.paid"
/// stream = "OUTBOX"              # must exist (or set create_stream) and capture "outbox.>"
/// timeout = "5s"
///
/// # TLS: a `tls://` URL, or any of the three keys, makes TLS required.
/// # url = "tls://relay:secret@nats.internal:4222"
/// # tls_ca_file = "/etc/outbox/nats-ca.pem"      # trusted besides the system's trust store
/// # tls_cert_file = "/etc/outbox/relay.pem"      # a client certificate, for servers that
/// # tls_key_file = "/etc/outbox/relay.key"       # verify clients (`verify: true`)
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NatsConfig {
    /// Server URL, or several separated by commas (`nats://`, `tls://`, or `host:port`). Credentials
    /// may be given as `nats://user:password@host:port` or `nats://token@host:port`; they are
    /// redacted in every error and log. `tls://` requires TLS (the connection fails rather than
    /// continue in plain text), verified against the system's trust store and `tls_ca_file`.
    /// Defaults to `nats://127.0.0.1:4222`.
    pub url: String,
    /// A fixed subject for every message, whatever its topic. Mutually exclusive with
    /// `subject_prefix`. Defaults to none (the subject derives from the topic).
    pub subject: Option<String>,
    /// Prefix of the subject derived from the topic: `<subject_prefix>.<topic>`. Defaults to none
    /// (the subject is the topic itself).
    pub subject_prefix: Option<String>,
    /// Name of the JetStream stream that must capture the published subjects. When set, `connect`
    /// fails unless the stream exists (or `create_stream` is set) and its subjects cover every
    /// subject this transport can publish to. Defaults to none (no check beyond a fixed
    /// `subject` being captured by some stream).
    pub stream: Option<String>,
    /// Create `stream` at connect when it does not exist (file storage, subjects `<prefix>.>` or
    /// the fixed subject, default limits, a 2-minute duplicate window). Defaults to `false`.
    pub create_stream: bool,
    /// Longest time one `publish` call may take, sending and awaiting every acknowledgement,
    /// ; envelopes not acknowledged by then are reported unavailable. Defaults
    /// to 5 s.
    #[serde(with = "outbox_core::duration")]
    pub timeout: Duration,
    /// Longest time to establish the connection, Defaults to 5 s.
    #[serde(with = "outbox_core::duration")]
    pub connect_timeout: Duration,
    /// Largest message (payload plus headers) to send, in bytes; the smaller of this and the
    /// server's `max_payload` applies. Larger messages fail permanently without being sent.
    /// Defaults to none (the server's `max_payload`, 1 MiB unless configured).
    pub max_payload_bytes: Option<usize>,
    /// Connection name shown in the server's monitoring. Defaults to `outbox-relay`.
    pub name: String,
    /// PEM file of the CA (or CAs) that signed the server's certificate, trusted besides the
    /// system's trust store. Setting it (or `tls_cert_file`/`tls_key_file`) makes TLS required,
    /// as a `tls://` URL does. Read at connect (and by `outbox check`). Defaults to none.
    pub tls_ca_file: Option<String>,
    /// PEM file of the client certificate (and its chain) presented to servers that verify
    /// clients (`tls { verify: true }`); set with `tls_key_file`. Makes TLS required. Defaults to
    /// none.
    pub tls_cert_file: Option<String>,
    /// PEM file of the private key of `tls_cert_file` (PKCS#8, PKCS#1 or SEC1). Defaults to none.
    pub tls_key_file: Option<String>,
}

config_impls!(NatsConfig, validate: checked);

impl Default for NatsConfig {
    fn default() -> Self {
        NatsConfig {
            url: "nats://127.0.0.1:4222".into(),
            subject: None,
            subject_prefix: None,
            stream: None,
            create_stream: false,
            timeout: Duration::from_millis(5000),
            connect_timeout: Duration::from_millis(5000),
            max_payload_bytes: None,
            name: "outbox-relay".into(),
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
        }
    }
}

impl NatsConfig {
    /// Checks every value; the TLS to use (`None`: TLS not required, though a server that
    /// requires it still gets it, verified against the system's trust store).
    pub(crate) fn checked(&self) -> Result<Option<TlsMaterial>, TransportError> {
        RULES.not_blank("url", &self.url)?;
        for part in self.url.split(',') {
            part.trim().parse::<async_nats::ServerAddr>().map_err(|e| {
                let shown = crate::redact(part.trim());
                RULES.invalid("url", format!("{shown:?} is not a NATS server address: {e}"))
            })?;
        }
        RULES.naming(("subject", "subject_prefix"), &self.naming(), check_subject)?;
        if let Some(s) = &self.stream {
            if s.is_empty()
                || s.len() > 255
                || s.chars().any(|c| c.is_whitespace() || matches!(c, '.' | '*' | '>' | '/' | '\\'))
            {
                return Err(RULES.invalid(
                    "stream",
                    format!("{s:?} is not a valid stream name (1 to 255 characters, no spaces, '.', '*', '>', '/' or '\\')"),
                ));
            }
        } else if self.create_stream {
            let reason = "requires `stream` (the name of the stream to create)";
            return Err(RULES.invalid("create_stream", reason));
        }
        RULES.timeout("timeout", self.timeout)?;
        RULES.timeout("connect_timeout", self.connect_timeout)?;
        if self.max_payload_bytes == Some(0) {
            return Err(RULES.invalid("max_payload_bytes", "must be positive"));
        }
        RULES.label("name", &self.name)?;
        // The files make TLS required, whatever the URL's scheme.
        let named =
            [self.tls_ca_file.as_deref(), self.tls_cert_file.as_deref(), self.tls_key_file.as_deref()];
        let files = TlsMaterial::load(RULES, named[0], named[1], named[2])?;
        Ok(match files {
            Some(files) => Some(files),
            None if self.url.split(',').any(|u| is_tls_url(u.trim())) => Some(TlsMaterial::none()),
            None => None,
        })
    }

    /// The subject is the fixed `subject`, or `<subject_prefix>.<topic>`, or the topic.
    fn naming(&self) -> Naming<'_> {
        Naming { fixed: self.subject.as_deref(), prefix: self.subject_prefix.as_deref(), separator: '.' }
    }

    /// The subject pattern covering everything this configuration publishes to, when it can
    /// be known in advance: the fixed subject, or `<prefix>.>`.
    pub(crate) fn subject_space(&self) -> Option<String> {
        let naming = self.naming();
        (naming.fixed.is_some() || naming.prefix.is_some()).then(|| naming.name_for(">"))
    }

    /// The subject a message with `topic` is published to.
    pub(crate) fn subject_for(&self, topic: &str) -> String {
        self.naming().name_for(topic)
    }
}

/// Whether `url` asks for TLS (`tls://`, any case, as async-nats reads it).
fn is_tls_url(url: &str) -> bool {
    url.get(..6).is_some_and(|s| s.eq_ignore_ascii_case("tls://"))
}

/// Longest subject published, in bytes. The server reads a publish as one protocol line
/// (`HPUB <subject> <reply inbox> <header size> <total size>`) and closes the connection when the
/// line exceeds its `max_control_line` (4096 bytes by default): what would look like an outage.
/// 3840 leaves room for the reply inbox and the sizes.
pub(crate) const MAX_SUBJECT_BYTES: usize = 3840;

/// Why `subject` cannot be published to, if it cannot (the NATS subject rules, as the server
/// and the clients apply them): 1 to [`MAX_SUBJECT_BYTES`] bytes, no whitespace or control
/// character (they end the protocol line's field or the line), no empty token (leading,
/// trailing or double `.`), no wildcard token `*` or `>` (publish subjects are literal). The
/// reason quotes at most a bounded, escaped part of the subject.
pub(crate) fn check_subject(subject: &str) -> Result<(), String> {
    use crate::validate::{describe_char, quote};
    if subject.is_empty() {
        return Err("must not be empty".into());
    }
    if subject.len() > MAX_SUBJECT_BYTES {
        return Err(format!(
            "{} is {} bytes, more than the {MAX_SUBJECT_BYTES} allowed (the server's max_control_line)",
            quote(subject),
            subject.len()
        ));
    }
    if let Some(c) = subject.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "{} contains {}: no whitespace or control characters",
            quote(subject),
            describe_char(c)
        ));
    }
    for token in subject.split('.') {
        if token.is_empty() {
            return Err(format!("{} has an empty token (leading, trailing or double '.')", quote(subject)));
        }
        if token == "*" || token == ">" {
            return Err(format!(
                "{} contains the wildcard token '{token}'; publish subjects must be literal",
                quote(subject)
            ));
        }
    }
    Ok(())
}

/// Why a message header name cannot be a NATS header name, if it cannot: 1 or more printable
/// ASCII characters (`!` to `~`) other than `:` (the header block is `Name: value` lines, as in
/// HTTP), and not starting with `Nats-` (any case): those names are instructions to the server
/// (`Nats-Msg-Id` is the transport's own; `Nats-Expected-*`, `Nats-Rollup`, `Nats-TTL` would
/// make a message's headers reject, roll up or expire stream content).
pub(crate) fn check_header_name(name: &str) -> Result<(), String> {
    use crate::validate::{describe_char, quote};
    if name.is_empty() {
        return Err("header name is empty".into());
    }
    if let Some(c) = name.chars().find(|&c| !matches!(c, '!'..='~') || c == ':') {
        return Err(format!(
            "header name {} contains {}: NATS header names are printable ASCII without ':' or spaces",
            quote(name),
            describe_char(c)
        ));
    }
    if name.len() >= 5 && name[..5].eq_ignore_ascii_case("nats-") {
        return Err(format!(
            "header name {} is reserved: names starting with Nats- are instructions to the NATS server",
            quote(name)
        ));
    }
    Ok(())
}

/// Why a header value cannot be a NATS header value, if it cannot: no CR or LF (they end the
/// header line).
pub(crate) fn check_header_value(name: &str, value: &str) -> Result<(), String> {
    use crate::validate::{describe_char, quote};
    match value.chars().find(|c| matches!(c, '\r' | '\n')) {
        Some(c) => Err(format!(
            "the value of header {} contains {}: NATS header values cannot hold line breaks",
            quote(name),
            describe_char(c)
        )),
        None => Ok(()),
    }
}

/// Whether the stream subject `filter` (which may hold wildcards) matches every subject that
/// `pattern` (which may end with `>` or hold `*`) matches.
pub(crate) fn covers(filter: &str, pattern: &str) -> bool {
    let mut f = filter.split('.');
    let mut p = pattern.split('.');
    loop {
        match (f.next(), p.next()) {
            (None, None) | (Some(">"), Some(_)) => return true,
            (Some("*"), Some(pt)) if pt != ">" => {}
            (Some(ft), Some(pt)) if ft == pt && ft != ">" => {}
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::common::testing::invalid_key;

    #[test]
    fn defaults_are_valid_and_unknown_keys_are_rejected() {
        NatsConfig::default().validate().unwrap();
        let c: NatsConfig = serde_json::from_str(r#"{"subject_prefix":"outbox"}"#).unwrap();
        assert_eq!(c.subject_for("order.paid"), "outbox.order.paid");
        assert_eq!(c.subject_space().as_deref(), Some("outbox.>"));
        assert!(serde_json::from_str::<NatsConfig>(r#"{"subjct":"x"}"#).is_err());
    }

    #[test]
    fn invalid_values_name_their_key() {
        let bad = |f: fn(&mut NatsConfig)| invalid_key(NatsConfig::default(), f, NatsConfig::validate);
        assert_eq!(bad(|c| c.url = String::new()), "url");
        assert_eq!(bad(|c| c.url = "nats://host:notaport".into()), "url");
        assert_eq!(
            bad(|c| {
                c.subject = Some("a".into());
                c.subject_prefix = Some("b".into());
            }),
            "subject"
        );
        assert_eq!(bad(|c| c.subject = Some("a.*".into())), "subject");
        assert_eq!(bad(|c| c.subject_prefix = Some("a..b".into())), "subject_prefix");
        assert_eq!(bad(|c| c.stream = Some("has.dot".into())), "stream");
        assert_eq!(bad(|c| c.create_stream = true), "create_stream");
        assert_eq!(bad(|c| c.timeout = Duration::ZERO), "timeout");
        assert_eq!(bad(|c| c.connect_timeout = Duration::from_secs(700)), "connect_timeout");
        assert_eq!(bad(|c| c.max_payload_bytes = Some(0)), "max_payload_bytes");
        assert_eq!(bad(|c| c.name = String::new()), "name");
    }

    #[test]
    fn tls_by_scheme_or_by_files() {
        assert!(NatsConfig::default().checked().unwrap().is_none());
        for url in ["tls://h:4222", "nats://a:4222, TLS://b:4222"] {
            let c = NatsConfig { url: url.into(), ..NatsConfig::default() };
            assert!(c.checked().unwrap().is_some(), "{url}");
        }
        let bad = |f: fn(&mut NatsConfig)| invalid_key(NatsConfig::default(), f, NatsConfig::validate);
        assert_eq!(bad(|c| c.tls_ca_file = Some("/nonexistent/ca.pem".into())), "tls_ca_file");
        assert_eq!(bad(|c| c.tls_cert_file = Some("/nonexistent/c.pem".into())), "tls_key_file");
        let pki = outbox_testkit::tls::Pki::new();
        let c = NatsConfig { tls_ca_file: Some(pki.path("client.key")), ..NatsConfig::default() };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("tls_ca_file") && e.contains("holds no PEM certificate"), "{e}");
    }

    #[test]
    fn debug_redacts_the_password() {
        let c = NatsConfig { url: "nats://u:hunter2@h:4222".into(), ..NatsConfig::default() };
        let s = format!("{c:?}");
        assert!(!s.contains("hunter2"), "{s}");
    }

    #[test]
    fn subjects_follow_the_nats_rules() {
        let longest = "x".repeat(MAX_SUBJECT_BYTES);
        for s in ["a", "order.paid", "a.b-c_d", "a*b.c>d", "é.ü", longest.as_str()] {
            assert_eq!(check_subject(s), Ok(()), "{s:?}");
        }
        let err = |s: &str| check_subject(s).unwrap_err();
        assert!(err("").contains("empty"));
        assert!(err("a b").contains("U+0020 (space)"), "{}", err("a b"));
        assert!(err("a\tb").contains("U+0009"));
        assert!(err("sec.a\nb").contains("U+000A (line feed)"));
        assert!(err("a\u{85}").contains("U+0085"));
        assert!(err("a\u{a0}b").contains("U+00A0"));
        assert!(err(".a").contains("empty token"));
        assert!(err("a..b").contains("empty token"));
        assert!(err("a.").contains("empty token"));
        assert!(err("a.*").contains("wildcard token '*'"));
        assert!(err("a.>").contains("wildcard token '>'"));
        let long = err(&"x".repeat(MAX_SUBJECT_BYTES + 1));
        assert!(long.contains("3841 bytes") && long.len() < 300, "{long}");
    }

    #[test]
    fn header_names_and_values_follow_the_nats_rules() {
        for n in ["outbox-message-id", "traceparent", "X-Custom_1", "a!#$%&'*+.^`|~"] {
            assert_eq!(check_header_name(n), Ok(()), "{n:?}");
        }
        let err = |n: &str| check_header_name(n).unwrap_err();
        assert!(err("").contains("empty"));
        assert!(err("bad name").contains("U+0020 (space)"));
        assert!(err("a:b").contains("':'"));
        assert!(err("a\nb").contains("U+000A"));
        assert!(err("Łx").contains("U+0141"), "non-ASCII (async-nats would accept it: 'Ł' as u8 is 'A')");
        assert!(err("a\u{7f}").contains("U+007F"));
        assert!(err("Nats-Rollup").contains("reserved"));
        assert!(err("nats-expected-stream").contains("reserved"));
        // The 70 KB name with a space: the reason stays short.
        let huge = format!("{} x", "n".repeat(70_000));
        assert!(err(&huge).len() < 300, "{}", err(&huge).len());
        assert_eq!(check_header_value("h", "any text, ünïcode\tand tabs"), Ok(()));
        assert!(check_header_value("h", "a\r\nInjected: x").unwrap_err().contains("U+000D"));
        assert!(check_header_value("h", "a\nb").unwrap_err().contains("line breaks"));
    }

    #[test]
    fn subject_coverage() {
        assert!(covers("outbox.>", "outbox.>"));
        assert!(covers(">", "outbox.>"));
        assert!(covers("outbox.>", "outbox.order.paid"));
        assert!(covers("outbox.*.paid", "outbox.order.paid"));
        assert!(!covers("outbox.*", "outbox.>"));
        assert!(!covers("outbox.order.>", "outbox.>"));
        assert!(!covers("outbox", "outbox.>"));
        assert!(covers("a.b", "a.b"));
        assert!(!covers("a.b", "a.c"));
        assert!(!covers("a.b.c", "a.b"));
    }
}
