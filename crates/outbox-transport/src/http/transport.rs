//! The webhook [`Transport`]. The request format (header mapping, signature) is
//! [`outbox_core::webhook`]'s.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use outbox_core::webhook::{encode_header_value, http_header_name, sign, SIGNATURE_HEADER, TIMESTAMP_HEADER};
use outbox_core::{Envelope, Outcome, Transport};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use reqwest::{Client, Url};

use super::config::{HttpConfig, UrlTemplate, TOPIC_PLACEHOLDER};
use super::outcome;
use crate::common::connect::{password_of, scrub};
use crate::validate::{oversized_payload, quote, refuse};
use crate::TransportError;

const KIND: &str = "http";

/// Most bytes of mapped message headers (names + values) on one request; more fails the
/// message permanently (common servers reject requests with more than 8 to 32 KiB of headers).
pub const MAX_HEADER_BYTES: usize = 32 * 1024;

/// Most bytes read from a response body: enough for the error snippet (read past it so a secret
/// echoed across the cut is still scrubbed) and to let small 2xx bodies be drained so the
/// connection can be reused.
const MAX_BODY_READ: usize = 8 * 1024;

/// POSTs each message to a webhook, signed. Build it with [`HttpTransport::connect`]; see the
/// [module docs](super) for the request format.
pub struct HttpTransport {
    config: HttpConfig,
    client: Client,
    target: Target,
    /// The URL template with any password redacted.
    address: String,
    /// `config.headers`, parsed.
    static_headers: HeaderMap,
    content_type: HeaderValue,
    /// Strings scrubbed from response snippets.
    secrets: Vec<String>,
}

enum Target {
    Fixed(Url),
    Template(UrlTemplate),
}

impl fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpTransport")
            .field("url", &self.address)
            .field("signed", &self.config.secret.is_some())
            .field("concurrency", &self.config.concurrency)
            .finish_non_exhaustive()
    }
}

impl HttpTransport {
    /// Validates `config` and builds the pooled client. No request is made: a receiver that is
    /// down at start-up is reported per message (`Unavailable`) and by
    /// [`health`](Transport::health). Fails with [`TransportError::Config`] naming the wrong key,
    /// or [`TransportError::Connect`] if the HTTP client cannot be built (TLS set-up).
    pub async fn connect(config: HttpConfig) -> Result<Self, TransportError> {
        config.validate()?;
        let address = crate::redact(&config.url);
        let config_err =
            |key: &'static str, reason: String| TransportError::Config { transport: KIND, key, reason };
        let target = if config.url.contains(TOPIC_PLACEHOLDER) {
            Target::Template(UrlTemplate::parse(&config.url).map_err(|e| config_err("url", e))?)
        } else {
            Target::Fixed(Url::parse(&config.url).map_err(|e| config_err("url", e.to_string()))?)
        };
        let mut static_headers = HeaderMap::new();
        let mut secrets: Vec<String> = Vec::new();
        for (name, value) in &config.headers {
            let n =
                HeaderName::from_bytes(name.as_bytes()).map_err(|e| config_err("headers", e.to_string()))?;
            let mut v = HeaderValue::from_str(value).map_err(|e| config_err("headers", e.to_string()))?;
            v.set_sensitive(true);
            static_headers.insert(n, v);
            secrets.push(value.clone());
            secrets.extend(value.split_whitespace().filter(|p| p.len() >= 8).map(str::to_owned));
        }
        if let Some(s) = &config.secret {
            secrets.push(String::from_utf8_lossy(s.expose()).into_owned());
        }
        if let Some(pw) = password_of(&config.url) {
            secrets.push(pw.to_owned());
        }
        let content_type = HeaderValue::from_str(&config.content_type)
            .map_err(|e| config_err("content_type", e.to_string()))?;
        let tls = config.tls()?;
        let client = Client::builder()
            .tls_backend_preconfigured(rustls::ClientConfig::clone(&tls))
            .timeout(config.timeout)
            .connect_timeout(config.connect_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(config.concurrency)
            .user_agent(concat!("outbox/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| TransportError::Connect {
                transport: KIND,
                address: address.clone(),
                reason: format!("cannot build the HTTP client: {e}"),
            })?;
        Ok(HttpTransport { config, client, target, address, static_headers, content_type, secrets })
    }

    /// The configuration (its `Debug` form hides the secret, the URL password and header
    /// values).
    pub fn config(&self) -> &HttpConfig {
        &self.config
    }

    fn url_for(&self, topic: &str) -> Result<Url, String> {
        match &self.target {
            Target::Fixed(u) => Ok(u.clone()),
            Target::Template(t) => t.render(topic),
        }
    }

    /// The request headers of `e` (without the signature).
    fn headers_for(&self, e: &Envelope) -> Result<HeaderMap, Outcome> {
        let mut headers = self.static_headers.clone();
        headers.insert(CONTENT_TYPE, self.content_type.clone());
        let mut total = 0usize;
        for (name, value) in &e.headers {
            let http_name = http_header_name(name);
            if let Err(why) = check_header_name(&http_name) {
                return Err(refuse(format!("message header {} cannot be sent: {why}", quote(name))));
            }
            let Ok(n) = HeaderName::from_bytes(http_name.as_bytes()) else {
                return Err(refuse(format!(
                    "message header {} cannot be sent: not a valid HTTP header name",
                    quote(name)
                )));
            };
            let encoded = encode_header_value(value);
            total += http_name.len() + encoded.len();
            if total > MAX_HEADER_BYTES {
                break;
            }
            let Ok(v) = HeaderValue::from_str(&encoded) else {
                return Err(refuse(format!(
                    "message header {} has a value that cannot be sent",
                    quote(name)
                )));
            };
            headers.insert(n, v);
        }
        if total > MAX_HEADER_BYTES {
            return Err(refuse(format!(
                "message headers take more than the {MAX_HEADER_BYTES} bytes allowed on the wire"
            )));
        }
        Ok(headers)
    }

    async fn send(&self, e: &Envelope) -> Outcome {
        if e.payload.len() > self.config.max_payload_bytes {
            return oversized_payload(e.payload.len(), self.config.max_payload_bytes);
        }
        let url = match self.url_for(&e.topic) {
            Ok(u) => u,
            Err(reason) => return refuse(reason),
        };
        let mut headers = match self.headers_for(e) {
            Ok(h) => h,
            Err(o) => return o,
        };
        if let Some(secret) = &self.config.secret {
            let ts = unix_now();
            let sig = sign(secret.expose(), ts, e.payload.as_bytes());
            headers.insert(HeaderName::from_static(TIMESTAMP_HEADER), HeaderValue::from(ts));
            match HeaderValue::from_str(&sig) {
                Ok(v) => {
                    headers.insert(HeaderName::from_static(SIGNATURE_HEADER), v);
                }
                Err(_) => return Outcome::permanent("internal error: signature is not a header value"),
            }
        }
        let timeout = self.config.timeout;
        let response = match self.client.post(url).headers(headers).body(e.payload.clone()).send().await {
            Ok(r) => r,
            Err(err) => return self.scrubbed(outcome::from_error(&err, &self.address, timeout)),
        };
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(outcome::parse_retry_after);
        let body = read_bounded(response, MAX_BODY_READ).await;
        let snippet = if status.is_success() {
            String::new()
        } else {
            let secrets: Vec<&str> = self.secrets.iter().map(String::as_str).collect();
            outcome::snippet(&body, &secrets)
        };
        outcome::from_status(status, retry_after, &snippet)
    }

    fn scrubbed(&self, o: Outcome) -> Outcome {
        crate::validate::with_reason(o, |reason| self.scrub_text(reason))
    }
}

/// Reads at most `limit` bytes of the body; errors end the read (the status is what counts).
async fn read_bounded(mut response: reqwest::Response, limit: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < limit {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = limit - body.len();
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(None) | Err(_) => break,
        }
    }
    body
}

#[async_trait::async_trait]
impl Transport for HttpTransport {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn publish(&self, batch: &[Envelope]) -> Vec<Outcome> {
        // `buffered` keeps the batch order while up to `concurrency` requests are in flight. (A
        // batch never holds two messages with the same key, so this reorders nothing that must
        // stay ordered.)
        let requests: Vec<_> = batch.iter().map(|e| self.send(e)).collect();
        let out: Vec<Outcome> =
            futures::stream::iter(requests).buffered(self.config.concurrency).collect().await;
        out.into_iter().map(crate::validate::bounded).collect()
    }

    fn max_payload_bytes(&self) -> Option<usize> {
        Some(self.config.max_payload_bytes)
    }

    /// Sends `OPTIONS` to the origin of the URL: any HTTP answer proves the receiver reachable.
    async fn health(&self) -> Result<(), String> {
        let mut url = self.url_for("health").map_err(|e| self.scrub_text(&e))?;
        url.set_path("/");
        url.set_query(None);
        match self.client.request(reqwest::Method::OPTIONS, url).send().await {
            Ok(_) => Ok(()),
            Err(e) => {
                let timeout = self.config.timeout;
                match self.scrubbed(outcome::from_error(&e, &self.address, timeout)) {
                    Outcome::Failed { reason, .. } => Err(reason),
                    Outcome::Delivered => Ok(()),
                }
            }
        }
    }
}

impl HttpTransport {
    fn scrub_text(&self, text: &str) -> String {
        scrub(text, self.secrets.iter().map(String::as_str))
    }
}

fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Why `name` is not an HTTP header name (RFC 9110 `token`: 1 or more of ``! # $ % & ' * + - .
/// ^ _ ` | ~``, digits and letters), if it is not.
pub(crate) fn check_header_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty header name".into());
    }
    let tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    match name.chars().find(|&c| !tchar(c)) {
        Some(c) => Err(format!(
            "{} is not allowed in an HTTP header name (a token: letters, digits and !#$%&'*+-.^_`|~)",
            crate::validate::describe_char(c)
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_names_are_tokens() {
        assert_eq!(check_header_name("outbox-header-X_Custom.1"), Ok(()));
        for (bad, shown) in [
            ("outbox-header-a b", "U+0020 (space)"),
            ("outbox-header-a:b", "':'"),
            ("outbox-header-a\r\nInjected", "U+000D"),
            ("outbox-header-é", "U+00E9"),
            ("outbox-header-a\u{0}", "U+0000"),
        ] {
            assert!(check_header_name(bad).unwrap_err().contains(shown), "{bad:?}");
        }
        assert!(check_header_name("").is_err());
    }
}
