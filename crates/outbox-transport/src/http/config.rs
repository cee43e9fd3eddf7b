//! Configuration of the HTTP webhook transport.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use serde::Deserialize;

use crate::common::config::Rules;
use crate::common::tls::TlsMaterial;
use crate::TransportError;

const RULES: Rules = Rules("http");

/// Default [`HttpConfig::max_payload_bytes`]: 16 MiB.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 16 * 1024 * 1024;

/// Shortest accepted signing secret, in bytes.
pub const MIN_SECRET_BYTES: usize = 16;

/// The placeholder in [`HttpConfig::url`] replaced by the message's topic.
pub const TOPIC_PLACEHOLDER: &str = crate::common::config::TOPIC_PLACEHOLDER;

/// The part of the URL a `{topic}` placeholder sits in, which decides how the topic is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    /// In the path: one path segment's worth (see [`encode_component`]).
    Path,
    /// In the query (`?...`).
    Query,
    /// In the fragment (`#...`; not sent, but kept consistent).
    Fragment,
}

/// A marker that cannot occur in a URL template's own text (checked), standing for the topic
/// when the template's shape is worked out.
const SENTINEL: &str = "outbox-topic-sentinel-7f3a";

/// `value` percent-encoded for `part`: every byte outside the RFC 3986 unreserved characters
/// (`A-Z a-z 0-9 - . _ ~`) becomes `%XX`, so `/`, `?`, `#`, `%`, `&`, `=`, `\`, spaces and
/// everything non-ASCII are encoded and the value stays one path segment or one query value.
/// In the path, a value made only of dots (`.`, `..`) has its dots encoded too (`%2E`, `%2E%2E`),
/// so it is not a literal dot segment; [`UrlTemplate::render`] still refuses any result whose
/// path climbs (WHATWG URL parsing, which reqwest uses, resolves `%2E%2E` like `..`).
pub(crate) fn encode_component(value: &str, part: Part) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let dots_only = part == Part::Path && !value.is_empty() && value.bytes().all(|b| b == b'.');
    let mut out = String::with_capacity(value.len());
    for &b in value.as_bytes() {
        let unreserved = b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~');
        if unreserved && !(dots_only && b == b'.') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
    out
}

/// The URL template split at its `{topic}` placeholders, with the shape every rendered URL
/// must keep: the topic may fill its path segment or query value, never add, remove or climb
/// path segments, and never reach the scheme, host or port (refused by the configuration).
#[derive(Debug, Clone)]
pub(crate) struct UrlTemplate {
    /// The literal text around the placeholders: `pieces.len() == parts.len() + 1`.
    pieces: Vec<String>,
    /// The part of the URL each placeholder sits in.
    parts: Vec<Part>,
    /// The template parsed with a sentinel in place of the topic.
    sample: reqwest::Url,
    /// When a placeholder is in the path: the parsed path before the first one.
    path_prefix: Option<String>,
}

impl UrlTemplate {
    /// Splits `url` (which must hold the placeholder only in its path, query or fragment).
    pub(crate) fn parse(url: &str) -> Result<UrlTemplate, String> {
        if url.contains(SENTINEL) {
            return Err("contains the reserved text outbox-topic-sentinel-7f3a".into());
        }
        let start = url.find("://").map_or(0, |i| i + 3);
        let authority_end = url[start..].find(['/', '?', '#']).map_or(url.len(), |i| start + i);
        let fragment = url[authority_end..].find('#').map_or(url.len(), |i| authority_end + i);
        let query = url[authority_end..fragment].find('?').map_or(fragment, |i| authority_end + i);
        let mut pieces = Vec::new();
        let mut parts = Vec::new();
        let mut last = 0;
        for (at, _) in url.match_indices(TOPIC_PLACEHOLDER) {
            let part = if at < authority_end {
                return Err(format!(
                    "{TOPIC_PLACEHOLDER} may appear only in the path, the query or the fragment: a topic \
                     must never choose the scheme, host or port"
                ));
            } else if at < query {
                Part::Path
            } else if at < fragment {
                Part::Query
            } else {
                Part::Fragment
            };
            pieces.push(url[last..at].to_owned());
            parts.push(part);
            last = at + TOPIC_PLACEHOLDER.len();
        }
        pieces.push(url[last..].to_owned());
        let sample =
            reqwest::Url::parse(&url.replace(TOPIC_PLACEHOLDER, SENTINEL)).map_err(|e| e.to_string())?;
        let path_prefix = if parts.contains(&Part::Path) {
            let path = sample.path();
            let at = path.find(SENTINEL).ok_or("the URL's path does not keep the placeholder")?;
            Some(path[..at].to_owned())
        } else {
            None
        };
        Ok(UrlTemplate { pieces, parts, sample, path_prefix })
    }

    /// The URL for `topic`, or why there is none (the reason quotes the topic bounded).
    pub(crate) fn render(&self, topic: &str) -> Result<reqwest::Url, String> {
        use crate::validate::quote;
        let mut text =
            String::with_capacity(self.pieces.iter().map(String::len).sum::<usize>() + topic.len());
        for (piece, part) in self.pieces.iter().zip(&self.parts) {
            text.push_str(piece);
            text.push_str(&encode_component(topic, *part));
        }
        text.push_str(self.pieces.last().map_or("", String::as_str));
        let url = reqwest::Url::parse(&text)
            .map_err(|e| format!("topic {} does not make a valid URL: {e}", quote(topic)))?;
        let same_origin = url.scheme() == self.sample.scheme()
            && url.host_str() == self.sample.host_str()
            && url.port_or_known_default() == self.sample.port_or_known_default();
        let same_path = match &self.path_prefix {
            Some(prefix) => {
                url.path().starts_with(prefix.as_str())
                    && url.path_segments().map(Iterator::count)
                        == self.sample.path_segments().map(Iterator::count)
            }
            None => url.path() == self.sample.path(),
        };
        if !same_origin || !same_path {
            return Err(format!(
                "topic {} would change the URL's path (a \".\" or \"..\" path segment, which URL \
                 normalisation resolves and which would climb out of {}); refused",
                quote(topic),
                quote(self.path_prefix.as_deref().unwrap_or(self.sample.path()))
            ));
        }
        Ok(url)
    }
}

/// Where and how to POST messages.
///
/// ```toml
/// url = "https://hooks.example.com/outbox/{topic}"
/// secret = "a-long-random-shared-secret"
/// timeout = "10s"
/// concurrency = 16
/// [headers]
/// Authorization = "Bearer ..."
/// ```
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// The URL each message is POSTed to, `http://` or `https://`. May contain `{topic}` in its
    /// path, query or fragment (not in the host: a topic must never choose where a signed
    /// request goes), replaced by the message's topic percent-encoded as one path segment or
    /// one query value (every byte but `A-Z a-z 0-9 - . _ ~`; a topic of dots only has them
    /// encoded too): a topic such as `a/b`, `?x=1` or `..` can never add a path segment, climb
    /// the path or inject a query; a topic whose URL would still change the path is refused
    /// (permanent). Required. A password in it never appears in errors or logs.
    pub url: String,
    /// The shared secret requests are signed with (HMAC-SHA256, see the module docs). Required
    /// unless `unsigned = true`; at least 16 bytes. Never logged or printed by `Debug`.
    #[serde(default)]
    pub secret: Option<WebhookSecret>,
    /// Send requests without the `Outbox-Timestamp` and `Outbox-Signature` headers (for
    /// receivers that authenticate otherwise, e.g. mutual TLS on a private network). Defaults to
    /// false; must not be combined with `secret`.
    #[serde(default)]
    pub unsigned: bool,
    /// The `Content-Type` of every request. Defaults to `application/json`.
    #[serde(default = "default_content_type")]
    pub content_type: String,
    /// How long one request may take, from connecting to the end of the response: a duration
    /// such as `"10s"` or a number of milliseconds. Defaults to 10 s. Keep the relay's
    /// `publish_timeout` above `ceil(batch_size / concurrency) * timeout`, or lower the batch
    /// size.
    #[serde(default = "default_timeout", with = "outbox_core::duration")]
    pub timeout: Duration,
    /// How long establishing a connection (TCP and TLS) may take. Defaults to 5 s.
    #[serde(default = "default_connect_timeout", with = "outbox_core::duration")]
    pub connect_timeout: Duration,
    /// Requests in flight at once within a batch (over one pooled client: connections are
    /// reused). Defaults to 16; 1 to 1024.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Largest payload sent, in bytes; a larger message fails permanently without a request.
    /// Defaults to 16 MiB.
    #[serde(default = "default_max_payload_bytes")]
    pub max_payload_bytes: usize,
    /// Extra headers sent with every request (e.g. `Authorization`). Defaults to none. Values
    /// are treated as secrets: `Debug` shows only the names, and they are scrubbed from error
    /// snippets. `Content-Type`, `Host`, `Content-Length`, `Transfer-Encoding`, `Connection`,
    /// `traceparent`, `tracestate` and names starting with `outbox-` are reserved.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// A PEM file of the CA (or CAs) that signed the receiver's certificate, trusted besides the
    /// system's trust store. Requires an `https://` URL. Defaults to none.
    #[serde(default)]
    pub tls_ca_file: Option<String>,
    /// A PEM client certificate (chain) for receivers that authenticate the relay by certificate
    /// (mutual TLS). Requires `tls_key_file` and an `https://` URL. Defaults to none.
    #[serde(default)]
    pub tls_cert_file: Option<String>,
    /// The PEM private key of `tls_cert_file` (PKCS#8, PKCS#1 or SEC1). Never printed.
    #[serde(default)]
    pub tls_key_file: Option<String>,
}

/// A signing secret: deserialized from a string, never printed.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct WebhookSecret(String);

impl WebhookSecret {
    /// Wraps a secret.
    pub fn new(secret: impl Into<String>) -> Self {
        WebhookSecret(secret.into())
    }

    /// The secret's bytes (UTF-8 of the configured string), the HMAC key.
    pub fn expose(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(***)")
    }
}

fn default_content_type() -> String {
    "application/json".into()
}

fn default_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_connect_timeout() -> Duration {
    Duration::from_secs(5)
}

fn default_concurrency() -> usize {
    16
}

fn default_max_payload_bytes() -> usize {
    DEFAULT_MAX_PAYLOAD_BYTES
}

/// Header names the transport sets itself (compared in lower case).
const RESERVED: &[&str] = &[
    "content-type",
    "content-length",
    "transfer-encoding",
    "host",
    "connection",
    "traceparent",
    "tracestate",
];

impl HttpConfig {
    /// A signed configuration for `url` with every other field at its default.
    pub fn new(url: impl Into<String>, secret: impl Into<String>) -> Self {
        HttpConfig {
            url: url.into(),
            secret: Some(WebhookSecret::new(secret)),
            unsigned: false,
            content_type: default_content_type(),
            timeout: default_timeout(),
            connect_timeout: default_connect_timeout(),
            concurrency: default_concurrency(),
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            headers: BTreeMap::new(),
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
        }
    }

    /// The rustls client configuration of every `https://` request: the system's trust store
    /// plus `tls_ca_file`, and the client certificate when given (the files are read now).
    pub(crate) fn tls(&self) -> Result<Arc<rustls::ClientConfig>, TransportError> {
        self.tls_files()?.unwrap_or_else(TlsMaterial::none).client_config(RULES)
    }

    /// The TLS files, read and checked (`None` when none is named).
    fn tls_files(&self) -> Result<Option<TlsMaterial>, TransportError> {
        let https = self.url.get(..8).is_some_and(|s| s.eq_ignore_ascii_case("https://"));
        let files =
            [self.tls_ca_file.as_deref(), self.tls_cert_file.as_deref(), self.tls_key_file.as_deref()];
        TlsMaterial::for_url(RULES, https, files, "an https://", &crate::redact(&self.url))
    }

    /// Checks every value, naming the first wrong key.
    pub fn validate(&self) -> Result<(), TransportError> {
        let url = self.url.replace(TOPIC_PLACEHOLDER, "topic");
        if url.contains(['{', '}']) {
            return Err(RULES.invalid(
                "url",
                format!(
                    "the only placeholder allowed is {TOPIC_PLACEHOLDER}, got {:?}",
                    crate::redact(&self.url)
                ),
            ));
        }
        if let Err(e) = UrlTemplate::parse(&self.url) {
            return Err(RULES.invalid("url", format!("{:?}: {e}", crate::redact(&self.url))));
        }
        match reqwest::Url::parse(&url) {
            Ok(u)
                if matches!(u.scheme(), "http" | "https") && u.host_str().is_some_and(|h| !h.is_empty()) => {}
            Ok(_) => {
                return Err(RULES.invalid(
                    "url",
                    format!(
                        "must be an http:// or https:// URL with a host, got {:?}",
                        crate::redact(&self.url)
                    ),
                ))
            }
            Err(e) => {
                let reason = format!("not a valid URL ({:?}): {e}", crate::redact(&self.url));
                return Err(RULES.invalid("url", reason));
            }
        }
        match (&self.secret, self.unsigned) {
            (None, false) => {
                return Err(RULES.invalid(
                    "secret",
                    "required to sign requests (or set `unsigned = true` to send them unsigned)",
                ))
            }
            (Some(_), true) => {
                return Err(RULES.invalid("unsigned", "`unsigned = true` contradicts the configured `secret`"))
            }
            (Some(s), false) if s.expose().len() < MIN_SECRET_BYTES => {
                return Err(RULES.invalid(
                    "secret",
                    format!("must be at least {MIN_SECRET_BYTES} bytes, got {}", s.expose().len()),
                ))
            }
            _ => {}
        }
        if HeaderValue::from_str(&self.content_type).is_err() || self.content_type.trim().is_empty() {
            let reason = format!("not a valid header value: {:?}", self.content_type);
            return Err(RULES.invalid("content_type", reason));
        }
        if self.timeout.is_zero() {
            return Err(RULES.invalid("timeout", "must be positive"));
        }
        if self.connect_timeout.is_zero() {
            return Err(RULES.invalid("connect_timeout", "must be positive"));
        }
        if !(1..=1024).contains(&self.concurrency) {
            return Err(RULES.invalid("concurrency", format!("must be 1..=1024, got {}", self.concurrency)));
        }
        if self.max_payload_bytes == 0 {
            return Err(RULES.invalid("max_payload_bytes", "must be positive"));
        }
        self.tls_files()?;
        for (name, value) in &self.headers {
            let lower = name.to_ascii_lowercase();
            if HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(RULES.invalid("headers", format!("{name:?} is not a valid HTTP header name")));
            }
            if RESERVED.contains(&lower.as_str()) || lower.starts_with("outbox-") {
                return Err(RULES.invalid("headers", format!("{name:?} is set by the transport itself")));
            }
            if HeaderValue::from_str(value).is_err() {
                let reason = format!("the value of {name:?} is not a valid HTTP header value");
                return Err(RULES.invalid("headers", reason));
            }
        }
        Ok(())
    }
}

impl fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpConfig")
            .field("url", &crate::redact(&self.url))
            .field("secret", &self.secret)
            .field("unsigned", &self.unsigned)
            .field("content_type", &self.content_type)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("concurrency", &self.concurrency)
            .field("max_payload_bytes", &self.max_payload_bytes)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("tls_ca_file", &self.tls_ca_file)
            .field("tls_cert_file", &self.tls_cert_file)
            .field("tls_key_file", &self.tls_key_file)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::testing::key_of;

    const SECRET: &str = "0123456789abcdef-secret";

    #[test]
    fn defaults() {
        let c: HttpConfig =
            serde_json::from_str(&format!(r#"{{"url":"https://h/x/{{topic}}","secret":"{SECRET}"}}"#))
                .unwrap();
        c.validate().unwrap();
        assert_eq!(c.content_type, "application/json");
        assert_eq!(
            (c.timeout, c.connect_timeout, c.concurrency),
            (Duration::from_secs(10), Duration::from_secs(5), 16)
        );
        let c: HttpConfig = serde_json::from_str(&format!(
            r#"{{"url":"https://h/","secret":"{SECRET}","timeout":"1500ms","connect_timeout":250}}"#
        ))
        .unwrap();
        assert_eq!((c.timeout, c.connect_timeout), (Duration::from_millis(1500), Duration::from_millis(250)));
        assert!(!c.unsigned && c.headers.is_empty());
        let e = serde_json::from_str::<HttpConfig>(r#"{"url":"http://h","secrett":"x"}"#).unwrap_err();
        assert!(e.to_string().contains("secrett"), "{e}");
    }

    #[test]
    fn validation_names_the_key() {
        let ok = HttpConfig::new("http://127.0.0.1:9/hook", SECRET);
        ok.validate().unwrap();
        let with = |f: &dyn Fn(&mut HttpConfig)| {
            let mut c = ok.clone();
            f(&mut c);
            c.validate()
        };
        assert_eq!(key_of(with(&|c| c.url = "ftp://h/x".into())), "url");
        assert_eq!(key_of(with(&|c| c.url = "not a url".into())), "url");
        assert_eq!(key_of(with(&|c| c.url = "http://h/{other}".into())), "url");
        assert_eq!(key_of(with(&|c| c.url = "http://{topic}.example.com/x".into())), "url");
        assert_eq!(key_of(with(&|c| c.secret = None)), "secret");
        assert_eq!(key_of(with(&|c| c.secret = Some(WebhookSecret::new("short")))), "secret");
        assert_eq!(key_of(with(&|c| c.unsigned = true)), "unsigned");
        assert_eq!(key_of(with(&|c| c.timeout = Duration::ZERO)), "timeout");
        assert_eq!(key_of(with(&|c| c.connect_timeout = Duration::ZERO)), "connect_timeout");
        assert_eq!(key_of(with(&|c| c.concurrency = 0)), "concurrency");
        assert_eq!(key_of(with(&|c| c.max_payload_bytes = 0)), "max_payload_bytes");
        assert_eq!(key_of(with(&|c| c.content_type = "a\nb".into())), "content_type");
        assert_eq!(key_of(with(&|c| drop(c.headers.insert("bad name".into(), "v".into())))), "headers");
        assert_eq!(
            key_of(with(&|c| drop(c.headers.insert("Outbox-Signature".into(), "v".into())))),
            "headers"
        );
        assert_eq!(key_of(with(&|c| drop(c.headers.insert("X-Ok".into(), "a\r\nb".into())))), "headers");
        with(&|c| {
            c.secret = None;
            c.unsigned = true;
            c.headers.insert("Authorization".into(), "Bearer t".into());
        })
        .unwrap();
    }

    #[test]
    fn topics_cannot_climb_the_path_or_inject_a_query() {
        let t = UrlTemplate::parse("http://h/tenant-a/hooks/{topic}/deliver").unwrap();
        let path = |topic: &str| t.render(topic).map(|u| u.path().to_owned());
        assert_eq!(path("order.paid").unwrap(), "/tenant-a/hooks/order.paid/deliver");
        assert_eq!(path("a/../../x").unwrap(), "/tenant-a/hooks/a%2F..%2F..%2Fx/deliver");
        assert_eq!(path("?x=1").unwrap(), "/tenant-a/hooks/%3Fx%3D1/deliver");
        assert_eq!(t.render("?x=1").unwrap().query(), None);
        assert_eq!(path("#frag").unwrap(), "/tenant-a/hooks/%23frag/deliver");
        assert_eq!(path("a\\b").unwrap(), "/tenant-a/hooks/a%5Cb/deliver");
        assert_eq!(path("%2E%2E").unwrap(), "/tenant-a/hooks/%252E%252E/deliver");
        assert_eq!(path("...").unwrap(), "/tenant-a/hooks/%2E%2E%2E/deliver");
        assert_eq!(path("a..").unwrap(), "/tenant-a/hooks/a../deliver");
        assert_eq!(path("é x").unwrap(), "/tenant-a/hooks/%C3%A9%20x/deliver");
        for climbing in ["..", "."] {
            let e = path(climbing).unwrap_err();
            assert!(e.contains("would change the URL's path") && e.contains("/tenant-a/hooks/"), "{e}");
        }
        assert_eq!(encode_component("..", Part::Path), "%2E%2E");
        assert_eq!(encode_component(".", Part::Path), "%2E");
        assert_eq!(encode_component("..", Part::Query), "..");
        assert_eq!(encode_component("a.b/c", Part::Path), "a.b%2Fc");

        // Inside a segment, dots are just text.
        let t = UrlTemplate::parse("http://h/hooks/x{topic}").unwrap();
        assert_eq!(t.render("..").unwrap().path(), "/hooks/x%2E%2E");
        // In the query: one value, whatever it holds.
        let t = UrlTemplate::parse("http://h/hooks?topic={topic}&v=1").unwrap();
        let u = t.render("a&b=c#d").unwrap();
        assert_eq!(u.path(), "/hooks");
        assert_eq!(u.query(), Some("topic=a%26b%3Dc%23d&v=1"));
        assert_eq!(u.query_pairs().count(), 2);
        assert_eq!(t.render("..").unwrap().query(), Some("topic=..&v=1"));
        // Twice in a path segment: still one segment, never a dot segment.
        let t = UrlTemplate::parse("http://h/a/{topic}{topic}/b").unwrap();
        assert!(t.render(".").is_err());
        assert_eq!(t.render("x").unwrap().path(), "/a/xx/b");
        // No placeholder: always the same URL.
        assert_eq!(UrlTemplate::parse("http://h/x").unwrap().render("..").unwrap().path(), "/x");
        // Never in the host.
        for bad in
            ["http://{topic}/x", "http://{topic}.example.com/", "http://h:{topic}/", "http://u:{topic}@h/"]
        {
            assert!(UrlTemplate::parse(bad).unwrap_err().contains("only in the path"), "{bad}");
        }
    }

    #[test]
    fn debug_hides_secrets() {
        let mut c = HttpConfig::new("https://user:pa55word@h/x", SECRET);
        c.headers.insert("Authorization".into(), "Bearer tok3n".into());
        let s = format!("{c:?}");
        assert!(!s.contains(SECRET) && !s.contains("pa55word") && !s.contains("tok3n"), "{s}");
        assert!(s.contains("Authorization"));
    }
}
