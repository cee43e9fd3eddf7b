//! The consumer side of the outbox: process each message **exactly once**.
//!
//! The relay publishes at least once, with a stable message id. A consumer makes the effect of
//! a message happen once by recording `(consumer group, message id)` in the `outbox_inbox`
//! table **first, inside the same transaction** as its business writes:
//!
//! - [`Inbox::process`] inserts the row and runs your closure only when the row is new,
//!   returning [`Processed::Done`] or [`Processed::Duplicate`]; [`Inbox::claim`] is the
//!   closure-free form.
//! - [`Inbox::migrate`] creates the table (its own version table
//!   `outbox_inbox_schema_migrations`, so a consumer database needs no outbox tables);
//!   [`Inbox::prune`] deletes rows older than your retention, in small batches.
//! - Helpers read the id, headers and body from each transport's native message into an
//!   [`InboxMessage`]: `from_nats`, `from_amqp`, `from_redis_stream`, `from_mqtt_envelope`,
//!   `from_http` (which verifies the webhook signature first).
//!
//! One module per dialect ([`postgres`], [`mysql`], [`sqlite`]) holds its migrations and the
//! exact claim SQL; the schema ships as plain `.sql` files in `migrations/<dialect>/`.
//! Each dialect and each transport is a cargo feature of the same name.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
#[cfg(feature = "ack")]
mod ack;
mod error;
mod inbox;
mod message;
mod migrate;

#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "sqlite")]
pub mod sqlite;

pub use inbox::{
    Claim, Inbox, InboxDatabase, InboxKey, Processed, MAX_GROUP_LEN, MAX_MESSAGE_ID_LEN, MAX_PRUNE_BATCH,
};
#[cfg(feature = "rabbitmq")]
pub use message::from_amqp;
#[cfg(feature = "http")]
pub use message::from_http;
#[cfg(feature = "mqtt")]
pub use message::from_mqtt_envelope;
#[cfg(feature = "nats")]
pub use message::from_nats;
pub use message::{from_header_pairs, HeaderError, InboxMessage};
#[cfg(feature = "redis")]
pub use message::{from_redis_stream, from_redis_stream_with_prefix};
pub use migrate::{Migration, MigrationReport};
pub use outbox_core::{Error, MessageId, Result};

/// Highest inbox schema version this build knows.
pub const SCHEMA_VERSION: i64 = 1;

/// A retention as whole microseconds for SQL interval arithmetic.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn micros(d: std::time::Duration) -> Result<i64> {
    i64::try_from(d.as_micros()).map_err(|_| Error::Config(format!("retention {d:?} is too long")))
}

#[cfg(feature = "ack")]
pub use ack::{AckClient, AckClientError, AckSent};
