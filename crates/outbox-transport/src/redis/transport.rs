//! The Redis Streams [`Transport`].

use std::time::Duration;

use outbox_core::{Envelope, Outcome, Transport};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};

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
    pub async fn connect(config: RedisConfig) -> Result<Self, TransportError> {
        config.validate()?;
        let connecting = Connecting::new(KIND, &config.url);
        let client = redis::Client::open(config.url.as_str()).map_err(|e| connecting.fail(e.to_string()))?;
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
                ConnectionManager::new_with_config(client, cm_config),
            )
            .await?;
        let no_answer = format!("no answer to PING within {timeout:?}");
        connecting.within(timeout, no_answer, redis::cmd("PING").query_async::<String>(&mut conn)).await?;
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
