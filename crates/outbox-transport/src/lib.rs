//! Transports of the outbox relay: one feature-gated module per broker, each implementing
//! [`outbox_core::Transport`] with a real, well-kept client crate.
//!
//! | module | broker | confirmed when | feature |
//! | --- | --- | --- | --- |
//! | [`nats`] | NATS JetStream | the stream's publish ack (`Nats-Msg-Id` = message id for dedupe) | `nats` |
//! | [`rabbitmq`] | RabbitMQ (AMQP 0-9-1) | publisher confirm (ack), mandatory + persistent | `rabbitmq` |
//! | [`redis`] | Redis Streams | `XADD` reply | `redis` |
//! | [`mqtt`] | MQTT 3.1.1 broker | PUBACK (QoS 1) | `mqtt` |
//! | [`http`] | HTTP webhook | a 2xx answer (HMAC-SHA256 signed request) | `http` |
//! | [`kafka`] | Kafka | the delivery report of an idempotent producer (`acks=all`) | `kafka` |
//! | [`rocketmq`] | RocketMQ (remoting protocol) | the broker's `SEND_OK` | `rocketmq` |
//!
//! Every module has the same files: `mod.rs` (docs and wiring), `config.rs` (a serde config with
//! `deny_unknown_fields`, every field documented with its default, and `validate()`),
//! `transport.rs` (the `Transport` implementation) and `outcome.rs` (maps the client's errors
//! to [`outbox_core::Outcome`]: retryable, unavailable or permanent).
//!
//! Before anything goes on the wire, each transport checks every envelope against its broker's
//! documented rules (topic, subject or routing key, header names and values, sizes) and fails a
//! violation permanently, alone, naming the field: a broker that would close the connection on
//! it can never make one bad message look like an outage of the whole destination. Every reason
//! is bounded and escaped (see `common/validate.rs`; the table is in docs/transports.md, "What
//! each transport refuses before sending").
//!
//! What the brokers share is written once in `common/` (configuration rules, connection errors,
//! the bookkeeping of a batch's outcomes), so each broker's folder holds only its own rules.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]
// The RocketMQ client's futures are deeply nested types: proving them `Send` needs more than
// the default recursion limit.
#![recursion_limit = "512"]

// Each helper is used by some transports only: a build with fewer features leaves some unused.
#[cfg_attr(
    not(all(
        feature = "nats",
        feature = "rabbitmq",
        feature = "redis",
        feature = "mqtt",
        feature = "http",
        feature = "kafka",
        feature = "rocketmq"
    )),
    allow(dead_code)
)]
pub(crate) mod common;
mod error;

pub(crate) use common::validate;

pub use error::{redact, Result, TransportError};

#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "mqtt")]
pub mod mqtt;
#[cfg(feature = "nats")]
pub mod nats;
#[cfg(feature = "rabbitmq")]
pub mod rabbitmq;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "rocketmq")]
pub mod rocketmq;

/// Defines [`TransportConfig`] from the list of brokers, each given once: its feature (also
/// its `type` in the configuration file), its variant and doc line, its module's configuration
/// and transport. Every match over the variants is written here, once.
macro_rules! transport_configs {
    ($(
        $feature:literal => $variant:ident($doc:literal, $module:ident::$config:ident, $transport:ident)
    ),* $(,)?) => {
        /// A transport chosen in the configuration file by `type`, with that transport's own keys
        /// (`[destinations.<name>.transport]`). Closed on purpose: the set of brokers lives here.
        #[derive(Debug, Clone, serde::Deserialize)]
        #[serde(tag = "type", rename_all = "lowercase")]
        #[non_exhaustive]
        pub enum TransportConfig {
            $(
                #[doc = $doc]
                #[cfg(feature = $feature)]
                $variant($module::$config),
            )*
        }

        impl TransportConfig {
            /// The transport kind, as written in `type`.
            pub fn kind(&self) -> &'static str {
                match self {
                    $(
                        #[cfg(feature = $feature)]
                        TransportConfig::$variant(_) => $feature,
                    )*
                    #[allow(unreachable_patterns)]
                    _ => "unknown",
                }
            }

            /// Checks the values without connecting.
            pub fn validate(&self) -> Result<()> {
                match self {
                    $(
                        #[cfg(feature = $feature)]
                        TransportConfig::$variant(c) => c.validate(),
                    )*
                    #[allow(unreachable_patterns)]
                    _ => Ok(()),
                }
            }

            /// Validates, connects, and returns the transport.
            pub async fn build(self) -> Result<std::sync::Arc<dyn outbox_core::Transport>> {
                Ok(match self {
                    $(
                        #[cfg(feature = $feature)]
                        TransportConfig::$variant(c) => {
                            std::sync::Arc::new($module::$transport::connect(c).await?)
                        }
                    )*
                    #[allow(unreachable_patterns)]
                    _ => {
                        return Err(TransportError::Config {
                            transport: "unknown",
                            key: "type",
                            reason: "this transport is not compiled into this build".into(),
                        })
                    }
                })
            }
        }
    };
}

transport_configs!(
    "nats" => Nats("NATS JetStream.", nats::NatsConfig, NatsTransport),
    "rabbitmq" => Rabbitmq("RabbitMQ.", rabbitmq::RabbitMqConfig, RabbitMqTransport),
    "redis" => Redis("Redis Streams.", redis::RedisConfig, RedisTransport),
    "mqtt" => Mqtt("MQTT.", mqtt::MqttConfig, MqttTransport),
    "http" => Http("HTTP webhook.", http::HttpConfig, HttpTransport),
    "kafka" => Kafka("Kafka.", kafka::KafkaConfig, KafkaTransport),
    "rocketmq" => Rocketmq("RocketMQ.", rocketmq::RocketMqConfig, RocketMqTransport),
);
