//! The outbox table on PostgreSQL, MySQL/MariaDB and SQLite.
//!
//! - [`Outbox`]: a handle over a sqlx pool: migrations, transactions whose commit wakes the
//!   relay ([`OutboxTransaction`]), and the [`CommitSignal`] the relay listens to.
//! - [`OutboxConnection::enqueue`]: enqueue inside *your own* sqlx transaction, on
//!   `PgConnection`, `MySqlConnection` or `SqliteConnection` (a `Transaction` derefs to one).
//! - One module per dialect ([`postgres`], [`mysql`], [`sqlite`]) with the same functions, and
//!   the schema as plain `.sql` files in `migrations/<dialect>/` for teams that run their own
//!   migrations.
//!
//! - [`MessageAdmin`]: operations for people and tools (counts, search, re-drive, cancel,
//!   retention), on every dialect and on [`AnyOutbox`].
//!
//! Every dialect is a cargo feature of the same name.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
mod admin;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
mod any;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
mod any_tables;
mod begin;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
mod common;
mod error;
mod migrate;
mod names;
mod outbox;
mod relay;
mod signal;

#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "sqlite")]
pub mod sqlite;

#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
pub use admin::{
    BulkAction, DeliveryRecord, DestinationCount, DestinationPause, FailureGroup, FailureReport, ListFilter,
    MessageAdmin, MessageDetail, MessageEdit, Progress, RelayPresence, Resent, Selection, Stats, StatusCount,
    TopicCount, MAX_BATCH, MAX_FAILURE_GROUPS, MAX_FAILURE_SCAN, MAX_LIST_LIMIT, MAX_PAUSE_REASON,
    MAX_PURGE_AGE, MAX_RELAYS, RESENT_FROM,
};
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
pub use any::{ensure_crypto_provider, redact_url, AnyLock, AnyOutbox, Dialect, POOL_IDLE_TIMEOUT};
#[doc(hidden)]
pub use error::{map_sqlx_error, name_in};
pub use migrate::{Migration, MigrationReport, Migrator, Schema};
#[cfg(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")))]
pub use names::Dialect;
pub use names::{Tables, CANONICAL_PREFIX, MAX_NAME_LEN, MAX_PREFIX_LEN, MAX_SCHEMA_LEN};
pub use outbox::{Outbox, OutboxConnection, OutboxDatabase, OutboxTransaction};
pub use outbox_core::{Enqueued, Error, ErrorKind, MessageId, NewMessage, OutboxMessage, Result, Status};
pub use relay::{
    AckOutcome, Acks, Backlog, ClaimMode, Claimed, Claims, DeliveryState, DeliveryWrite, Hold, Keeper,
    Listening, MessageWrite, Newer, NoLocks, Pauses, Presence, RelayBeat, RelayState, RelayStore, RowLock,
    RunAfter, RunsTold, SettleReport, Settlement, Wakeups, LOOK_BACK, MAX_PRESENCE_TEXT,
};
pub use signal::{CommitSignal, Signalled};

/// Highest schema version this build knows.
pub const SCHEMA_VERSION: i64 = 11;

/// Maps a sqlx error the way the library does (for tests of the error mapping; not API).
#[doc(hidden)]
pub fn __private_map_error(err: sqlx::Error) -> Error {
    error::db(err)
}
