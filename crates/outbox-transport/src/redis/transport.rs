//! The Redis Streams [`Transport`].

use std::time::Duration;

use outbox_core::tls::chain;
use outbox_core::{Envelope, Outcome, Transport};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{ClientTlsConfig, TlsCertificates};

use super::config::{check_field, check_stream_key, RedisConfig};
use super::outcome;
use crate::common::batch::Outcomes;
use crate::common::connect::Connecting;
use crate::validate::{quote, refuse};
use crate::TransportError;

const KIND: &str = "redis";

/// Appends messages to Redis streams with `XADD` and reports a message delivered when Redis
/// answered with the new entry's id. One multiplexed connection (a `ConnectionManager`),
/// re-established after any outage; a batch is one pipelined round trip.
pub struct RedisTransport {
    conn: ConnectionManager,
    config: RedisConfig,
    address: String,
    timeout: Duration,
}

impl std::fmt::Debug for RedisTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTransport")
            .field("address", &self.address)
            .field("config", &self.config)
            .finish()
    }
}

impl RedisTransport {
    /// Validates `config`, connects and checks the server answers `PING`. Fails with
    /// [`TransportError::Config`] naming the key, or [`TransportError::Connect`] (URL redacted)
    /// when the server is unreachable or refuses the credentials.
    ///
    /// With a `rediss://` URL, a failed handshake says why: the server's certificate not signed
    /// by a trusted CA, not valid for the host name, expired, or this client's certificate
    /// refused or missing.
    pub async fn connect(config: RedisConfig) -> Result<Self, TransportError> {
        let tls = config.checked()?;
        let connecting = Connecting::new(KIND, &config.url);
        let client = match &tls {
            None => redis::Client::open(config.url.as_str()),
            Some(files) => {
                ensure_crypto_provider();
                let certificates = TlsCertificates {
                    client_tls: files.client_pem.as_ref().map(|(cert, key)| ClientTlsConfig {
                        client_cert: cert.clone(),
                        client_key: key.clone(),
                    }),
                    root_cert: Some(trusted_pem(files.ca_pem.as_deref())),
                };
                redis::Client::build_with_tls(config.url.as_str(), certificates)
            }
        }
        .map_err(|e| connecting.fail(chain(&e)))?;
        let timeout = config.timeout;
        let connect_timeout = config.connect_timeout;
        // No reconnection retries inside the client (its backoff starts at one second): during
        // an outage each publish fails fast, the relay's breaker paces the probes, and each
        // probe triggers a fresh connection attempt.
        let cm_config = ConnectionManagerConfig::new()
            .set_connection_timeout(connect_timeout)
            .set_response_timeout(timeout)
            .set_number_of_retries(0);
        let mut conn = connecting
            .within(
                connect_timeout * 2 + Duration::from_secs(1),
                format!("no answer within {connect_timeout:?}"),
                async {
                    // The whole chain: the TLS cause may be in a source.
                    ConnectionManager::new_with_config(client, cm_config).await.map_err(|e| chain(&e))
                },
            )
            .await?;
        let no_answer = format!("no answer to PING within {timeout:?}");
        let ping = async { redis::cmd("PING").query_async::<String>(&mut conn).await.map_err(|e| chain(&e)) };
        connecting.within(timeout, no_answer, ping).await?;
        let address = connecting.address;
        Ok(RedisTransport { conn, config, address, timeout })
    }

    /// Checks the payload's size, the stream key (as built from the template) and every field
    /// before sending.
    fn check(&self, env: &Envelope, stream: &str) -> Result<(), Outcome> {
        if env.payload.len() > self.config.max_payload_bytes {
            return Err(outcome::oversized(env.payload.len(), self.config.max_payload_bytes));
        }
        check_stream_key(stream).map_err(|r| {
            refuse(format!("topic {} does not make a usable stream key: {r}", quote(&env.topic)))
        })?;
        for (name, value) in &env.headers {
            check_field(&format!("{}{name}", self.config.header_prefix))
                .map_err(|r| refuse(format!("{r}; the message cannot be appended to Redis")))?;
            if value.len() > self.config.max_payload_bytes {
                return Err(refuse(format!(
                    "the value of header {} is {} bytes, larger than max_payload_bytes ({})",
                    quote(name),
                    value.len(),
                    self.config.max_payload_bytes
                )));
            }
        }
        Ok(())
    }

    /// Why a command had no reply: the server did not answer in time.
    fn no_answer(&self) -> String {
        format!("Redis at {} did not answer within {:?}", self.address, self.timeout)
    }

    fn xadd(&self, env: &Envelope, stream: &str) -> redis::Cmd {
        let mut cmd = redis::cmd("XADD");
        cmd.arg(stream);
        if let Some(n) = self.config.maxlen {
            cmd.arg("MAXLEN").arg("~").arg(n);
        }
        cmd.arg("*").arg("payload").arg(env.payload.as_bytes()).arg("id").arg(env.id.0);
        for (name, value) in &env.headers {
            cmd.arg(format!("{}{name}", self.config.header_prefix)).arg(value.as_bytes());
        }
        cmd
    }
}

/// The redis client builds its rustls configuration with the process's default crypto provider,
/// and rustls has none when more than one is compiled in (ring for the NATS client, aws-lc-rs
/// for the MQTT client's defaults): then ring's becomes the default, as this crate uses it
/// everywhere else. A default the application installed is kept.
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another installer leaves theirs in place, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The certificates the server's certificate is checked against, as PEM: the system's trust
/// store and the `tls_ca_file` (the redis client trusts exactly the PEM it is given, and the
/// other transports trust both).
fn trusted_pem(ca_pem: Option<&[u8]>) -> Vec<u8> {
    let mut pem = Vec::new();
    // Only those rustls accepts as trust anchors: the client refuses the whole PEM for one it
    // cannot parse (as system stores hold a few), where the other transports skip it.
    let mut probe = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        if probe.add(cert.clone()).is_err() {
            continue;
        }
        pem.extend_from_slice(b"-----BEGIN CERTIFICATE-----\n");
        for line in base64(cert.as_ref()).as_bytes().chunks(64) {
            pem.extend_from_slice(line);
            pem.push(b'\n');
        }
        pem.extend_from_slice(b"-----END CERTIFICATE-----\n");
    }
    if let Some(ca) = ca_pem {
        pem.extend_from_slice(ca);
        pem.push(b'\n');
    }
    pem
}

/// Standard base64 with padding (RFC 4648), as PEM writes it.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[async_trait::async_trait]
impl Transport for RedisTransport {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn publish(&self, batch: &[Envelope]) -> Vec<Outcome> {
        let mut out = Outcomes::new(batch);
        let mut pipe = redis::pipe();
        let mut sent: Vec<(usize, String)> = Vec::with_capacity(batch.len());
        for (i, env) in batch.iter().enumerate() {
            if out.held_back(i) {
                continue;
            }
            let stream = self.config.stream_for(&env.topic);
            match self.check(env, &stream) {
                Ok(()) => {
                    pipe.add_command(self.xadd(env, &stream));
                    sent.push((i, stream));
                }
                Err(o) => out.not_sent(i, o),
            }
        }
        if !sent.is_empty() {
            let mut conn = self.conn.clone();
            let result =
                tokio::time::timeout(self.timeout, conn.req_packed_commands(&pipe, 0, sent.len())).await;
            match result {
                Err(_) => {
                    for (i, _) in &sent {
                        out.set(*i, Outcome::unavailable(self.no_answer()));
                    }
                }
                Ok(Err(e)) => {
                    for (i, stream) in &sent {
                        out.set(*i, outcome::error(&e, stream));
                    }
                }
                Ok(Ok(values)) => {
                    let mut values = values.into_iter();
                    for (i, stream) in &sent {
                        out.set(
                            *i,
                            match values.next() {
                                Some(v) => outcome::reply(v, stream),
                                None => Outcome::retryable("Redis sent fewer replies than commands"),
                            },
                        );
                    }
                }
            }
        }
        out.finish()
    }

    fn max_payload_bytes(&self) -> Option<usize> {
        Some(self.config.max_payload_bytes)
    }

    async fn health(&self) -> Result<(), String> {
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.timeout, redis::cmd("PING").query_async::<String>(&mut conn)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("Redis at {}: {e}", self.address)),
            Err(_) => Err(self.no_answer()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;

    #[test]
    fn base64_is_rfc_4648() {
        let cases: [(&[u8], &str); 7] = [
            (b"", ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg=="),
            (b"fooba", "Zm9vYmE="),
            (b"\xff\xfe\x00?", "//4APw=="),
        ];
        for (bytes, want) in cases {
            assert_eq!(base64(bytes), want, "{bytes:?}");
        }
    }

    #[test]
    fn the_trusted_pem_holds_the_system_store_and_the_ca_file() {
        let mut probe = rustls::RootCertStore::empty();
        let system: Vec<_> = rustls_native_certs::load_native_certs()
            .certs
            .into_iter()
            .filter(|c| probe.add(c.clone()).is_ok())
            .collect();
        let ca = b"-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n";
        let pem = trusted_pem(Some(ca));
        let parsed: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(&pem).collect::<Result<_, _>>().unwrap();
        assert_eq!(parsed.len(), system.len() + 1);
        assert!(parsed[..system.len()].iter().zip(&system).all(|(a, b)| a == b), "same bytes, same order");
        assert_eq!(parsed.last().unwrap().as_ref(), &[0x30, 0x00]);
    }
}
