//! # outbox
//!
//! The transactional outbox ("local message table") for Rust services: write your business
//! rows and a message row in **one** local transaction; the message is published after commit,
//! and retried until a broker confirms it.
//!
//! This crate is the stable facade: it re-exports the producer API from `outbox-store`, the
//! domain types from `outbox-core`, and behind features the relay ([`Relay`]), the inbox
//! (`Inbox`) and the transports (`transport::nats`, ...). The internal crates may change
//! between releases; this one follows semver.
//!
//! ```no_run
//! use outbox::{NewMessage, Outbox};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = sqlx::PgPool::connect("postgres://localhost/shop").await?;
//! let outbox = Outbox::new(pool);
//! outbox.migrate().await?;                         // creates outbox_message & co.
//!
//! let mut tx = outbox.begin().await?;              // your transaction
//! sqlx::query("UPDATE orders SET status = 'paid' WHERE id = $1")
//!     .bind(42_i64)
//!     .execute(&mut *tx)
//!     .await?;
//! tx.enqueue(
//!     &NewMessage::new("order.paid", r#"{"order":42}"#)
//!         .key("order-42")                          // per-key order
//!         .biz("order-paid", "42"),                 // idempotent enqueue
//! )
//! .await?;
//! tx.commit().await?;                              // commit, then wake the relay
//! # Ok(()) }
//! ```
//!
//! Already inside your own `sqlx::Transaction`? Use [`OutboxConnection::enqueue`] on it
//! (`tx.enqueue(&msg)`) and commit with [`Outbox::commit`] to keep the after-commit fast path.
//!
//! Publishing from the service itself (no daemon): the relay (feature `relay`, on by default)
//! with a transport (feature `nats`: `outbox::transport::nats::NatsTransport`, and so on):
//!
//! ```no_run
//! # async fn run(outbox: outbox::Outbox<sqlx::Postgres>, broker: std::sync::Arc<dyn outbox::transport::Transport>)
//! # -> Result<(), Box<dyn std::error::Error>> {
//! use outbox::{Destination, Relay, Route};
//! let relay = Relay::builder(&outbox)
//!     .destination(Destination::new("broker", broker))
//!     .route(Route::new("order.#", ["broker"]))
//!     .build()?;
//! let stop = outbox::CancellationToken::new();
//! let running = tokio::spawn(relay.run(stop.clone()));
//! // ... on SIGTERM:
//! stop.cancel();
//! running.await?;
//! # Ok(()) }
//! ```
//!
//! ## Features
//! - `postgres`, `mysql`, `sqlite` (all on by default): the databases, as in sqlx.
//! - `relay` (on by default): [`Relay`] and its configuration types.
//! - `inbox`: the consumer-side `Inbox`; `inbox-nats`, `inbox-rabbitmq`, `inbox-redis`,
//!   `inbox-mqtt`, `inbox-http`, `inbox-ack` add each broker's message conversion.
//! - `nats`, `rabbitmq`, `redis`, `mqtt`, `http`, `kafka`, `rocketmq`: one transport each,
//!   under `outbox::transport`.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use outbox_core::{
    limits, Enqueued, Error, ErrorKind, Headers, MessageId, NewMessage, OutboxMessage, Result, Status,
};
pub use outbox_store::{
    CommitSignal, DeliveryRecord, ListFilter, MessageAdmin, MessageDetail, Migration, MigrationReport,
    Outbox, OutboxConnection, OutboxDatabase, OutboxTransaction, Stats, SCHEMA_VERSION,
};

/// Dialect-specific functions (migration lists, free `enqueue` functions, SQLite options).
pub mod dialect {
    #[cfg(feature = "mysql")]
    pub use outbox_store::mysql;
    #[cfg(feature = "postgres")]
    pub use outbox_store::postgres;
    #[cfg(feature = "sqlite")]
    pub use outbox_store::sqlite;
}

/// The relay engine: claims due messages, publishes them through transports, settles outcomes.
#[cfg(feature = "relay")]
#[cfg_attr(docsrs, doc(cfg(feature = "relay")))]
pub use outbox_relay::{
    AckConfig, AlertHook, BreakerConfig, BuildError, Destination, LogAlert, Relay, RelayBuilder, RelayConfig,
    RelayStats, Retention, Route,
};

/// W3C trace context between the enqueue and the relay's publish span (the enqueue records
/// the current span's context as `traceparent` by itself with this feature).
#[cfg(feature = "otel")]
#[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
pub use outbox_core::trace;

/// Stops a running [`Relay`] (`tokio_util`'s token, re-exported so a service needs no direct
/// dependency for it).
#[cfg(feature = "relay")]
#[cfg_attr(docsrs, doc(cfg(feature = "relay")))]
pub use tokio_util::sync::CancellationToken;

/// The consumer-side inbox: each message's effect exactly once, in the consumer's transaction.
#[cfg(feature = "inbox")]
#[cfg_attr(docsrs, doc(cfg(feature = "inbox")))]
pub mod inbox {
    pub use outbox_inbox::*;
}

#[cfg(feature = "inbox")]
#[cfg_attr(docsrs, doc(cfg(feature = "inbox")))]
pub use outbox_inbox::{Inbox, InboxMessage};

/// Transports, one feature each (`nats`, `rabbitmq`, `redis`, `mqtt`, `http`, `kafka`,
/// `rocketmq`), and the [`Transport`](outbox_core::Transport) trait to write your own.
pub mod transport {
    pub use outbox_core::{Envelope, FailureKind, Outcome, Transport};
    #[cfg(feature = "http")]
    #[cfg_attr(docsrs, doc(cfg(feature = "http")))]
    pub use outbox_transport::http;
    #[cfg(feature = "kafka")]
    #[cfg_attr(docsrs, doc(cfg(feature = "kafka")))]
    pub use outbox_transport::kafka;
    #[cfg(feature = "mqtt")]
    #[cfg_attr(docsrs, doc(cfg(feature = "mqtt")))]
    pub use outbox_transport::mqtt;
    #[cfg(feature = "nats")]
    #[cfg_attr(docsrs, doc(cfg(feature = "nats")))]
    pub use outbox_transport::nats;
    #[cfg(feature = "rabbitmq")]
    #[cfg_attr(docsrs, doc(cfg(feature = "rabbitmq")))]
    pub use outbox_transport::rabbitmq;
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub use outbox_transport::redis;
    #[cfg(feature = "rocketmq")]
    #[cfg_attr(docsrs, doc(cfg(feature = "rocketmq")))]
    pub use outbox_transport::rocketmq;
    #[cfg(feature = "transport")]
    pub use outbox_transport::TransportError;
}
