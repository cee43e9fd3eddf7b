//! Configuration of the Redis Streams transport.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::common::config::{config_impls, Rules, TOPIC_PLACEHOLDER};
use crate::common::tls::TlsMaterial;
use crate::TransportError;

const RULES: Rules = Rules("redis");

/// Longest stream key, in bytes. Redis keys are binary-safe up to 512 MB; the bound keeps a
/// foreign row's topic from creating an unbounded key (a topic is at most 255 characters).
pub(crate) const MAX_KEY_BYTES: usize = 4096;

/// Longest entry field name (header prefix and header name), in bytes.
pub(crate) const MAX_FIELD_BYTES: usize = 4096;

/// Redis's default `proto-max-bulk-len` (512 MB): a longer argument makes the server answer
/// `invalid bulk length` and close the connection, so `max_payload_bytes` may not exceed it.
pub(crate) const PROTO_MAX_BULK_LEN: usize = 512 * 1024 * 1024;

/// Why `key` cannot be the stream key, if it cannot: 1 to [`MAX_KEY_BYTES`] bytes.
pub(crate) fn check_stream_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("stream key is empty".into());
    }
    at_most("stream key", key, MAX_KEY_BYTES)
}

/// Why `field` cannot be an entry field name, if it cannot: at most [`MAX_FIELD_BYTES`] bytes.
pub(crate) fn check_field(field: &str) -> Result<(), String> {
    at_most("header field name", field, MAX_FIELD_BYTES)
}

/// Why `value` (a `what`) is too long, if it is longer than `max` bytes.
fn at_most(what: &str, value: &str, max: usize) -> Result<(), String> {
    if value.len() > max {
        let shown = crate::validate::quote(value);
        return Err(format!("{what} {shown} is {} bytes, more than the {max} allowed", value.len()));
    }
    Ok(())
}

/// Settings of a [`RedisTransport`](super::RedisTransport). Every field has a default, so an
/// empty table appends each message to a local Redis stream named after its topic.
///
/// ```toml
/// url = "redis://:secret@redis.internal:6379/0"
/// stream = "outbox:{topic}"   # topic "order.paid" -> stream key "outbox:order.paid"
/// maxlen = 1000000            # XADD ... MAXLEN ~ 1000000
///
/// # TLS: a rediss:// URL; the files are optional.
/// # url = "rediss://:secret@redis.internal:6380/0"
/// # tls_ca_file = "/etc/outbox/redis-ca.pem"     # trusted besides the system's trust store
/// # tls_cert_file = "/etc/outbox/relay.pem"      # a client certificate, for servers with
/// # tls_key_file = "/etc/outbox/relay.key"       # tls-auth-clients yes (or optional)
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisConfig {
    /// Server URL: `redis://[[user]:password@]host[:port][/db]` (or `redis+unix:///path`), or
    /// `rediss://...` for TLS, verified against the system's trust store and `tls_ca_file` (the
    /// `#insecure` fragment, which skips the verification, is refused). Credentials are redacted
    /// in every error and log. Defaults to `redis://127.0.0.1:6379`.
    pub url: String,
    /// Key of the stream to append to. `{topic}` is replaced by the envelope's topic; any other
    /// text (including Redis Cluster hash tags such as `{orders}`) is kept as is. Defaults to
    /// `{topic}`.
    pub stream: String,
    /// Caps the stream's length: every `XADD` carries `MAXLEN ~ <maxlen>` (approximate
    /// trimming, cheap). Defaults to none (the stream grows until consumers or `XTRIM` trim it).
    pub maxlen: Option<u64>,
    /// Prefix of the entry fields that carry headers: header `traceparent` becomes field
    /// `h:traceparent`. Must not be empty, so headers never collide with the `payload` and `id`
    /// fields. Defaults to `h:`.
    pub header_prefix: String,
    /// Longest time one `publish` call may take (the pipelined `XADD`s and their replies), in
    /// milliseconds; envelopes without a reply by then are reported unavailable. Defaults to
    /// `5000`.
    #[serde(with = "outbox_core::duration")]
    pub timeout: Duration,
    /// Longest time to establish a connection, in milliseconds (at start-up and on every
    /// reconnection). Defaults to `5000`.
    #[serde(with = "outbox_core::duration")]
    pub connect_timeout: Duration,
    /// Largest payload to append, in bytes; larger messages fail permanently without being
    /// sent. Redis itself accepts up to `proto-max-bulk-len` (512 MB by default), but entries that
    /// large hurt every consumer of the stream. Header values are bounded by it too. Defaults to
    /// `8388608` (8 MiB); at most `536870912` (512 MiB, Redis's `proto-max-bulk-len`).
    pub max_payload_bytes: usize,
    /// PEM file of the CA (or CAs) that signed the server's certificate, trusted besides the
    /// system's trust store. Needs a `rediss://` URL. Read at connect (and by `outbox check`).
    /// Defaults to none.
    pub tls_ca_file: Option<String>,
    /// PEM file of the client certificate (and its chain) presented to the server (for
    /// `tls-auth-clients yes`); set with `tls_key_file`. Needs a `rediss://` URL. Defaults to
    /// none.
    pub tls_cert_file: Option<String>,
    /// PEM file of the private key of `tls_cert_file` (PKCS#8, PKCS#1 or SEC1). Defaults to none.
    pub tls_key_file: Option<String>,
}

config_impls!(RedisConfig, validate: checked);

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            url: "redis://127.0.0.1:6379".into(),
            stream: TOPIC_PLACEHOLDER.into(),
            maxlen: None,
            header_prefix: "h:".into(),
            timeout: Duration::from_millis(5000),
            connect_timeout: Duration::from_millis(5000),
            max_payload_bytes: 8 * 1024 * 1024,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
        }
    }
}

impl RedisConfig {
    /// Checks every value; the TLS to use (`None` for a plain `redis://` URL).
    pub(crate) fn checked(&self) -> Result<Option<TlsMaterial>, TransportError> {
        RULES.not_blank("url", &self.url)?;
        let shown = crate::redact(&self.url);
        redis::Client::open(self.url.as_str())
            .map_err(|e| RULES.invalid("url", format!("{shown:?} is not a usable Redis URL: {e}")))?;
        let tls = is_tls_url(&self.url);
        if tls && self.url.ends_with("#insecure") {
            return Err(RULES.invalid(
                "url",
                format!("{shown:?}: #insecure (no certificate verification) is not supported; name the CA in tls_ca_file"),
            ));
        }
        let files =
            [self.tls_ca_file.as_deref(), self.tls_cert_file.as_deref(), self.tls_key_file.as_deref()];
        let tls = TlsMaterial::for_url(RULES, tls, files, "a rediss://", &shown)?;
        if self.stream.is_empty() {
            return Err(RULES.invalid("stream", "must not be empty"));
        }
        if self.maxlen == Some(0) {
            return Err(RULES.invalid("maxlen", "must be positive (omit it for an unbounded stream)"));
        }
        if self.header_prefix.is_empty() {
            return Err(RULES.invalid(
                "header_prefix",
                "must not be empty (header fields would collide with `payload` and `id`)",
            ));
        }
        RULES.timeout("timeout", self.timeout)?;
        RULES.timeout("connect_timeout", self.connect_timeout)?;
        if self.max_payload_bytes == 0 || self.max_payload_bytes > PROTO_MAX_BULK_LEN {
            return Err(RULES.invalid(
                "max_payload_bytes",
                format!("must be 1 to {PROTO_MAX_BULK_LEN} (Redis's proto-max-bulk-len)"),
            ));
        }
        check_stream_key(&self.stream.replace(TOPIC_PLACEHOLDER, "t"))
            .map_err(|r| RULES.invalid("stream", r))?;
        check_field(&self.header_prefix).map_err(|r| RULES.invalid("header_prefix", r))?;
        Ok(tls)
    }

    /// The stream key for `topic`.
    pub(crate) fn stream_for(&self, topic: &str) -> String {
        self.stream.replace(TOPIC_PLACEHOLDER, topic)
    }
}

/// Whether `url` asks for TLS (`rediss://`, any case, as the redis crate reads it).
fn is_tls_url(url: &str) -> bool {
    url.get(..9).is_some_and(|s| s.eq_ignore_ascii_case("rediss://"))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::common::testing::invalid_key;

    #[test]
    fn defaults_templates_and_unknown_keys() {
        RedisConfig::default().validate().unwrap();
        let c: RedisConfig = serde_json::from_str(r#"{"stream":"outbox:{topic}:{orders}"}"#).unwrap();
        assert_eq!(c.stream_for("order.paid"), "outbox:order.paid:{orders}");
        assert!(serde_json::from_str::<RedisConfig>(r#"{"streem":"x"}"#).is_err());
    }

    #[test]
    fn invalid_values_name_their_key() {
        let bad = |f: fn(&mut RedisConfig)| invalid_key(RedisConfig::default(), f, RedisConfig::validate);
        assert_eq!(bad(|c| c.url = String::new()), "url");
        assert_eq!(bad(|c| c.url = "http://127.0.0.1".into()), "url");
        assert_eq!(bad(|c| c.stream = String::new()), "stream");
        assert_eq!(bad(|c| c.maxlen = Some(0)), "maxlen");
        assert_eq!(bad(|c| c.header_prefix = String::new()), "header_prefix");
        assert_eq!(bad(|c| c.timeout = Duration::ZERO), "timeout");
        assert_eq!(bad(|c| c.connect_timeout = Duration::ZERO), "connect_timeout");
        assert_eq!(bad(|c| c.max_payload_bytes = 0), "max_payload_bytes");
        assert_eq!(bad(|c| c.max_payload_bytes = PROTO_MAX_BULK_LEN + 1), "max_payload_bytes");
        assert_eq!(bad(|c| c.stream = "s".repeat(MAX_KEY_BYTES + 1)), "stream");
    }

    #[test]
    fn tls_by_scheme_and_files_only_with_it() {
        let c = RedisConfig { url: "rediss://h:6380".into(), ..RedisConfig::default() };
        assert!(c.checked().unwrap().is_some());
        let c = RedisConfig { url: "REDISS://h:6380/2".into(), ..RedisConfig::default() };
        assert!(c.checked().unwrap().is_some());
        assert!(RedisConfig::default().checked().unwrap().is_none());
        let bad = |f: fn(&mut RedisConfig)| invalid_key(RedisConfig::default(), f, RedisConfig::validate);
        assert_eq!(bad(|c| c.url = "rediss://h/#insecure".into()), "url");
        assert_eq!(bad(|c| c.tls_ca_file = Some("/nonexistent/ca.pem".into())), "tls_ca_file");
        assert_eq!(
            bad(|c| {
                c.url = "rediss://h".into();
                c.tls_key_file = Some("/nonexistent/k.pem".into());
            }),
            "tls_cert_file"
        );
        let pki = outbox_testkit::tls::Pki::new();
        let c = RedisConfig { tls_ca_file: Some(pki.path("client.key")), ..RedisConfig::default() };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("tls_ca_file") && e.contains("holds no PEM certificate"), "{e}");
        // A good file with a plain URL: use rediss://.
        let ca = pki.path("ca.pem");
        let c =
            RedisConfig { url: "redis://:hunter2@h".into(), tls_ca_file: Some(ca), ..RedisConfig::default() };
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("tls_ca_file") && e.contains("needs a rediss:// URL") && !e.contains("hunter2"),
            "{e}"
        );
        let c = RedisConfig { url: "rediss://h".into(), ..c };
        assert!(c.checked().unwrap().unwrap().ca_pem.is_some());
    }

    #[test]
    fn keys_and_fields_are_bounded() {
        assert_eq!(check_stream_key("outbox:order.paid"), Ok(()));
        assert_eq!(check_stream_key("a\nb c"), Ok(()), "keys are binary-safe");
        assert!(check_stream_key("").unwrap_err().contains("empty"));
        let e = check_stream_key(&"k".repeat(MAX_KEY_BYTES + 1)).unwrap_err();
        assert!(e.contains("4097 bytes") && e.len() < 200, "{e}");
        assert_eq!(check_field("h:traceparent"), Ok(()));
        let e = check_field(&format!("h:{}", "n".repeat(70_000))).unwrap_err();
        assert!(e.contains("header field name") && e.len() < 200, "{e}");
    }

    #[test]
    fn debug_and_errors_redact_the_password() {
        let c = RedisConfig { url: "redis://:hunter2@h:6379".into(), ..RedisConfig::default() };
        assert!(!format!("{c:?}").contains("hunter2"));
        let c = RedisConfig { url: "bogus://:hunter2@h:6379".into(), ..RedisConfig::default() };
        let e = c.validate().unwrap_err().to_string();
        assert!(!e.contains("hunter2"), "{e}");
    }
}
