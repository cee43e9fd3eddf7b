//! The `Transport` trait: how the relay hands messages to a broker, and how a broker's answer
//! is classified. The transport decides *what kind* of failure happened; the relay alone decides
//! *when* to retry (backoff, attempts, circuit breaker).

use std::fmt::Debug;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::message::{Headers, MessageId, OutboxMessage};

/// Header names every published message carries (in the broker's native header mechanism).
pub mod header {
    /// The outbox message id: the consumer's deduplication key.
    pub const MESSAGE_ID: &str = "outbox-message-id";
    /// `biz_type` of the idempotency key.
    pub const BIZ_TYPE: &str = "outbox-biz-type";
    /// `biz_key` of the idempotency key.
    pub const BIZ_KEY: &str = "outbox-biz-key";
    /// Topic.
    pub const TOPIC: &str = "outbox-topic";
    /// Ordering key.
    pub const KEY: &str = "outbox-key";
    /// Tag, on brokers without a native tag (Kafka); RocketMQ carries it as the message's tag,
    /// RabbitMQ as the `type` property.
    pub const TAG: &str = "outbox-tag";
    /// Attempt number (1 for the first publication to this destination).
    pub const ATTEMPT: &str = "outbox-attempt";
    /// Enqueue time, RFC 3339.
    pub const CREATED_AT: &str = "outbox-created-at";
    /// W3C trace context, when the enqueue had one (copied from the message's headers).
    pub const TRACEPARENT: &str = "traceparent";
    /// ACK mode: the token that confirms this delivery (see [`crate::ack`]).
    pub const ACK_TOKEN: &str = "outbox-ack-token";
    /// ACK mode: the destination to confirm.
    pub const ACK_DESTINATION: &str = "outbox-ack-destination";
    /// ACK mode: the store (database) the message came from.
    pub const ACK_STORE: &str = "outbox-ack-store";
}

/// One message as a transport publishes it: the row plus the headers the relay adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// Message id.
    pub id: MessageId,
    /// Topic.
    pub topic: String,
    /// Ordering / partition key.
    pub key: Option<String>,
    /// Tag.
    pub tag: Option<String>,
    /// Body.
    pub payload: String,
    /// The message's own headers plus the `outbox-*` headers of [`header`].
    pub headers: Headers,
    /// Attempt number for this destination (1-based).
    pub attempt: u32,
    /// Enqueue time.
    pub created_at: DateTime<Utc>,
}

impl Envelope {
    /// Builds the envelope for `msg`'s `attempt`-th publication.
    pub fn new(msg: &OutboxMessage, attempt: u32) -> Self {
        let mut headers = msg.headers.clone();
        headers.insert(header::MESSAGE_ID.into(), msg.id.to_string());
        headers.insert(header::TOPIC.into(), msg.topic.clone());
        headers.insert(header::ATTEMPT.into(), attempt.to_string());
        headers.insert(header::CREATED_AT.into(), msg.created_at.to_rfc3339());
        if let Some(t) = &msg.biz_type {
            headers.insert(header::BIZ_TYPE.into(), t.clone());
        }
        if let Some(k) = &msg.biz_key {
            headers.insert(header::BIZ_KEY.into(), k.clone());
        }
        if let Some(k) = &msg.key {
            headers.insert(header::KEY.into(), k.clone());
        }
        Envelope {
            id: msg.id,
            topic: msg.topic.clone(),
            key: msg.key.clone(),
            tag: msg.tag.clone(),
            payload: msg.payload.clone(),
            headers,
            attempt,
            created_at: msg.created_at,
        }
    }
}

/// What kind of failure a publication met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// This message failed but another try may succeed (a 5xx for this request, a broker nack).
    /// Counts as an attempt.
    Retryable,
    /// The destination itself is unreachable or not answering (connection refused, timeout,
    /// broker down). Does not count against the message's attempts; it feeds the destination's
    /// circuit breaker instead.
    Unavailable,
    /// Retrying cannot help (no route, payload too large, a 4xx): the delivery fails at once.
    Permanent,
}

/// The answer for one envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The broker confirmed the message durable.
    Delivered,
    /// It was not delivered.
    Failed {
        /// What kind of failure.
        kind: FailureKind,
        /// Human-readable reason, stored in `last_error` (no secrets).
        reason: String,
        /// The destination asked to wait at least this long (e.g. `Retry-After`).
        retry_after: Option<Duration>,
    },
}

impl Outcome {
    /// A retryable failure.
    pub fn retryable(reason: impl Into<String>) -> Self {
        Outcome::Failed { kind: FailureKind::Retryable, reason: reason.into(), retry_after: None }
    }

    /// The destination is unavailable.
    pub fn unavailable(reason: impl Into<String>) -> Self {
        Outcome::Failed { kind: FailureKind::Unavailable, reason: reason.into(), retry_after: None }
    }

    /// A permanent failure.
    pub fn permanent(reason: impl Into<String>) -> Self {
        Outcome::Failed { kind: FailureKind::Permanent, reason: reason.into(), retry_after: None }
    }
}

/// A broker (or anything else a message can be handed to). Implementations publish a batch,
/// pipelined where the client allows, and return exactly one [`Outcome`] per envelope, in order.
///
/// Object-safe (through `async_trait`) because the daemon builds transports from configuration
/// into `Arc<dyn Transport>`.
#[async_trait::async_trait]
pub trait Transport: Send + Sync + Debug {
    /// Short name of the transport kind (`nats`, `rabbitmq`, ...), for logs and metrics.
    fn kind(&self) -> &'static str;

    /// Publishes `batch`; the result has the same length and order. Must not panic on any
    /// input; a transport-wide failure is reported as `Unavailable` for every envelope.
    async fn publish(&self, batch: &[Envelope]) -> Vec<Outcome>;

    /// Largest payload the destination accepts, if it has a limit; larger messages fail
    /// permanently without a publish.
    fn max_payload_bytes(&self) -> Option<usize> {
        None
    }

    /// Checks that the destination is reachable (used at start-up and by `outbox check`).
    async fn health(&self) -> Result<(), String> {
        Ok(())
    }
}
