//! The NATS JetStream [`Transport`].

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_nats::connection::State;
use async_nats::header::{HeaderMap, HeaderName, HeaderValue, NATS_MESSAGE_ID};
use async_nats::jetstream::{self, message::PublishMessage, ErrorCode};
use bytes::Bytes;
use outbox_core::tls::chain;
use outbox_core::{Envelope, Outcome, Transport};
use tokio::time::Instant;

use super::config::{check_header_name, check_header_value, check_subject, covers, NatsConfig};
use super::outcome;
use crate::common::batch::Outcomes;
use crate::common::config::Rules;
use crate::common::connect::Connecting;
use crate::common::tls::TlsMaterial;
use crate::validate::quote;
use crate::TransportError;

const KIND: &str = "nats";
const RULES: Rules = Rules(KIND);

/// Publishes to NATS JetStream and reports a message delivered only when the stream's
/// `PublishAck` arrived. One connection, shared by all calls and re-established by the client
/// after any outage; a batch is pipelined (all publishes sent, then all acks awaited).
pub struct NatsTransport {
    client: async_nats::Client,
    js: jetstream::Context,
    config: NatsConfig,
    address: String,
    timeout: Duration,
}

impl std::fmt::Debug for NatsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsTransport")
            .field("address", &self.address)
            .field("config", &self.config)
            .field("state", &self.client.connection_state())
            .finish()
    }
}

/// A message ready to send.
struct Prepared {
    subject: String,
    headers: HeaderMap,
    payload: Bytes,
}

/// Credentials written into a server URL: `nats://user:password@host` or `nats://token@host`.
#[derive(Debug, PartialEq, Eq)]
enum Credentials {
    UserPassword(String, String),
    Token(String),
}

/// The credentials of the URLs in `servers` (percent-decoded): those of the first URL that has
/// any; every other URL with credentials must carry the same, as the client sends one set to
/// whichever server it reaches. The error never holds a credential.
fn credentials(servers: &[async_nats::ServerAddr]) -> Result<Option<Credentials>, String> {
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8()
            .map(|c| c.into_owned())
            .map_err(|_| "the credentials in the URL are not valid UTF-8 once percent-decoded".to_owned())
    };
    let mut found: Option<Credentials> = None;
    for server in servers {
        let this = match (server.username(), server.password()) {
            (Some(user), Some(password)) => Credentials::UserPassword(decode(user)?, decode(password)?),
            (Some(token), None) => Credentials::Token(decode(token)?),
            (None, Some(_)) => return Err("a URL has a password without a user name".to_owned()),
            (None, None) => continue,
        };
        match &found {
            Some(first) if *first != this => {
                return Err("the server URLs carry different credentials; give every URL the same".to_owned())
            }
            Some(_) => {}
            None => found = Some(this),
        }
    }
    Ok(found)
}

impl NatsTransport {
    /// Validates `config`, connects, and checks the stream (see [`NatsConfig::stream`]). Fails
    /// with [`TransportError::Config`] naming the key, or [`TransportError::Connect`] (URL
    /// redacted) when the server is unreachable, refuses the credentials, or no stream captures
    /// the configured subjects.
    ///
    /// With TLS (a `tls://` URL or a `tls_*` key), a failed handshake says why: the server's
    /// certificate not signed by a trusted CA, not valid for the host name, expired, or this
    /// client's certificate refused or missing.
    pub async fn connect(config: NatsConfig) -> Result<Self, TransportError> {
        let tls = config.checked()?;
        let connecting = Connecting::new(KIND, &config.url);
        let servers = config
            .url
            .split(',')
            .map(|u| async_nats::ServerAddr::from_str(u.trim()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| connecting.fail(e.to_string()))?;
        let timeout = config.timeout;
        let connect_timeout = config.connect_timeout;
        // async-nats reads credentials from its options only, never from the server URL.
        let options = match credentials(&servers).map_err(|e| connecting.fail(e))? {
            Some(Credentials::UserPassword(user, password)) => {
                async_nats::ConnectOptions::with_user_and_password(user, password)
            }
            Some(Credentials::Token(token)) => async_nats::ConnectOptions::with_token(token),
            None => async_nats::ConnectOptions::new(),
        };
        // Every TLS connection uses this crate's rustls configuration (the ring provider, the
        // system's trust store plus `tls_ca_file`), also when a `nats://` server requires TLS on
        // its own: async-nats's fallback would need a process-wide rustls provider.
        let sends_certificate = tls.as_ref().is_some_and(|t| t.client_pem.is_some());
        let tls_config = match &tls {
            Some(files) => files.client_config(RULES)?,
            None => TlsMaterial::none().client_config(RULES)?,
        };
        let options = options
            .tls_client_config(Arc::unwrap_or_clone(tls_config))
            .require_tls(tls.is_some())
            .name(&config.name)
            .connection_timeout(connect_timeout)
            .request_timeout(Some(timeout))
            // Keep reconnecting forever, at most every 2 s: the relay's breaker decides what to do
            // meanwhile, and a recovered server must be used again quickly.
            .max_reconnects(None)
            .reconnect_delay_callback(|attempts| match attempts {
                0 | 1 => Duration::ZERO,
                n => Duration::from_millis((50 * 2_u64.saturating_pow(n.min(8) as u32 - 1)).min(2000)),
            });
        let client = connecting
            .within(
                connect_timeout + Duration::from_secs(1),
                format!("no answer within {connect_timeout:?}"),
                async {
                    // The whole chain: the TLS cause is in a source.
                    async_nats::connect_with_options(servers, options)
                        .await
                        .map_err(|e| without_certificate(chain(&e), sends_certificate))
                },
            )
            .await?;
        let js = jetstream::ContextBuilder::new().timeout(timeout).build(client.clone());
        let address = connecting.address.clone();
        let transport = NatsTransport { client, js, config, address, timeout };
        if let Err(reason) = transport.check_stream(true).await {
            return Err(connecting.fail(reason));
        }
        Ok(transport)
    }

    /// Checks that the configured subjects are captured by a stream; with `create`, creates the
    /// configured stream when missing (if `create_stream` is set).
    async fn check_stream(&self, create: bool) -> Result<(), String> {
        let space = self.config.subject_space();
        match (&self.config.stream, &space) {
            (Some(name), _) => {
                let info = match self.js.get_stream(name).await {
                    Ok(mut s) => s.info().await.map_err(|e| format!("stream {name:?}: {e}"))?.clone(),
                    Err(e) if is_stream_not_found(&e) => {
                        if !(create && self.config.create_stream) {
                            return Err(format!(
                                "JetStream stream {name:?} does not exist (create it, or set create_stream = true)"
                            ));
                        }
                        let subjects = vec![space.clone().unwrap_or_else(|| ">".into())];
                        let cfg = jetstream::stream::Config {
                            name: name.clone(),
                            subjects,
                            duplicate_window: Duration::from_secs(120),
                            ..Default::default()
                        };
                        let mut s = self
                            .js
                            .create_stream(cfg)
                            .await
                            .map_err(|e| format!("cannot create stream {name:?}: {e}"))?;
                        tracing::info!(stream = %name, "Created JetStream stream");
                        s.info().await.map_err(|e| format!("stream {name:?}: {e}"))?.clone()
                    }
                    Err(e) => return Err(format!("cannot look up stream {name:?}: {e}")),
                };
                if let Some(space) = &space {
                    if !info.config.subjects.iter().any(|f| covers(f, space)) {
                        return Err(format!(
                            "stream {name:?} (subjects {:?}) does not capture every subject of {space:?}",
                            info.config.subjects
                        ));
                    }
                }
                Ok(())
            }
            (None, Some(space)) if self.config.subject.is_some() => {
                match self.js.stream_by_subject(space.as_str()).await {
                    Ok(_) => Ok(()),
                    Err(e) => Err(format!("no JetStream stream captures subject {space:?}: {e}")),
                }
            }
            _ => Ok(()),
        }
    }

    /// The effective size limit (payload plus headers) and where it comes from.
    fn limit(&self) -> (usize, &'static str) {
        let server = self.client.server_info().max_payload;
        match self.config.max_payload_bytes {
            Some(l) if server == 0 || l < server => (l, "configured max_payload_bytes"),
            _ => (server, "server's max_payload"),
        }
    }

    fn prepare(&self, env: &Envelope, limit: (usize, &'static str)) -> Result<Prepared, Outcome> {
        // Checked on the subject as built from the configuration: what the server would see.
        let subject = self.config.subject_for(&env.topic);
        check_subject(&subject).map_err(|r| outcome::invalid_subject(&env.topic, &r))?;
        let mut headers = HeaderMap::new();
        // Wire size of the header block: "NATS/1.0\r\n" ... "\r\n".
        let mut size = 12 + env.payload.len();
        for (name, value) in &env.headers {
            // Our own checks first: async-nats's accepts some names the protocol does not
            // (it tests `c as u8`, so 'Ł' passes as 'A').
            check_header_name(name).map_err(|r| outcome::invalid_header(&r))?;
            check_header_value(name, value).map_err(|r| outcome::invalid_header(&r))?;
            let n = HeaderName::from_str(name).map_err(|_| {
                outcome::invalid_header(&format!("header name {} is not valid in NATS", quote(name)))
            })?;
            let v = HeaderValue::from_str(value).map_err(|_| {
                outcome::invalid_header(&format!("the value of header {} is not valid in NATS", quote(name)))
            })?;
            size += name.len() + value.len() + 4;
            headers.insert(n, v);
        }
        let id = env.id.to_string();
        size += "Nats-Msg-Id".len() + id.len() + 4;
        headers.insert(NATS_MESSAGE_ID, id.as_str());
        if limit.0 > 0 && size > limit.0 {
            return Err(outcome::oversized(size, limit.0, limit.1));
        }
        Ok(Prepared { subject, headers, payload: Bytes::copy_from_slice(env.payload.as_bytes()) })
    }
}

/// `reason`, saying so when the server refused the client's certificate and the client sent
/// none: nats-server answers a missing certificate with the same alert as a wrong one
/// (`BadCertificate`).
fn without_certificate(reason: String, sends_certificate: bool) -> String {
    let refused = reason.to_ascii_lowercase().contains("alert: badcertificate");
    if refused && !sends_certificate {
        format!("{reason}; no client certificate was sent (the server may require one: tls_cert_file, tls_key_file)")
    } else {
        reason
    }
}

fn is_stream_not_found(e: &jetstream::context::GetStreamError) -> bool {
    matches!(e.kind(), jetstream::context::GetStreamErrorKind::JetStream(j) if j.error_code() == ErrorCode::STREAM_NOT_FOUND)
}

#[async_trait::async_trait]
impl Transport for NatsTransport {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn publish(&self, batch: &[Envelope]) -> Vec<Outcome> {
        if batch.is_empty() {
            return Vec::new();
        }
        if self.client.connection_state() != State::Connected {
            return vec![outcome::not_connected(&self.address); batch.len()];
        }
        let deadline = Instant::now() + self.timeout;
        let limit = self.limit();
        let mut out = Outcomes::new(batch);
        let mut pending = Vec::with_capacity(batch.len());

        // Send everything first (pipelined on the one connection, in order)...
        for (i, env) in batch.iter().enumerate() {
            if out.held_back(i) {
                continue;
            }
            let p = match self.prepare(env, limit) {
                Ok(p) => p,
                Err(o) => {
                    out.not_sent(i, o);
                    continue;
                }
            };
            let publish = PublishMessage::build().headers(p.headers).payload(p.payload);
            match tokio::time::timeout_at(deadline, self.js.send_publish(p.subject.clone(), publish)).await {
                Ok(Ok(ack)) => pending.push((i, p.subject, ack)),
                Ok(Err(e)) => out.not_sent(i, outcome::publish_error(&e, &p.subject)),
                Err(_) => out.not_sent(i, outcome::deadline(self.timeout, &p.subject)),
            }
        }

        // ...then await every acknowledgement.
        let timeout = self.timeout;
        out.await_answers(pending, deadline, |subject, ack| match ack {
            Some(Ok(_ack)) => Outcome::Delivered,
            Some(Err(e)) => outcome::publish_error(&e, &subject),
            None => outcome::deadline(timeout, &subject),
        })
        .await;
        out.finish()
    }

    fn max_payload_bytes(&self) -> Option<usize> {
        match self.limit().0 {
            0 => None,
            n => Some(n),
        }
    }

    async fn health(&self) -> Result<(), String> {
        if self.client.connection_state() != State::Connected {
            return Err(format!("not connected to NATS at {}", self.address));
        }
        match tokio::time::timeout(self.timeout, self.client.flush()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("NATS at {} did not answer: {e}", self.address)),
            Err(_) => {
                return Err(format!("NATS at {} did not answer within {:?}", self.address, self.timeout))
            }
        }
        self.check_stream(false).await
    }
}
