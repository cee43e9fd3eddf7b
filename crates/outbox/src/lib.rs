//! # outbox
//!
//! The transactional outbox ("local message table") for Rust services: write your business
//! rows and a message row in **one** local transaction; the message is published after commit,
//! and retried until a broker confirms it.
//!
//! This crate is the stable facade: it re-exports the producer API from `outbox-store` and the
//! domain types from `outbox-core`. The internal crates may change between releases; this one
//! follows semver.
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
//! ## Features
//! - `postgres`, `mysql`, `sqlite` (all on by default): the databases, as in sqlx.

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
