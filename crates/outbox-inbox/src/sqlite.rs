//! SQLite 3.37+: `INSERT ... ON CONFLICT (consumer_group, message_id) DO NOTHING`. SQLite has
//! one writer at a time, so concurrent consumers serialize on the database's write lock (make
//! the inbox insert the first statement of the transaction, or begin it with `BEGIN
//! IMMEDIATE`, so waiting uses the busy timeout instead of failing with `SQLITE_BUSY`).

use std::time::Duration;

use outbox_core::{Error, Result};
use sqlx::sqlite::SqliteConnection;
use sqlx::Sqlite;

use crate::migrate::Migration;

/// The shipped migrations, from `migrations/sqlite/`.
pub const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    description: "outbox_inbox",
    sql: include_str!("../migrations/sqlite/0001_inbox.sql"),
}];

/// The claim statement (`?1` group, `?2` message id, `?3` topic); one row changed = new.
pub const CLAIM_SQL: &str =
    "INSERT INTO outbox_inbox (consumer_group, message_id, topic) VALUES (?1, ?2, ?3) \
    ON CONFLICT (consumer_group, message_id) DO NOTHING";

const PRUNE: &str = "DELETE FROM outbox_inbox WHERE rowid IN ( \
    SELECT rowid FROM outbox_inbox \
    WHERE processed_at < CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) - ?1 \
    ORDER BY processed_at LIMIT ?2)";

/// A retention as whole milliseconds (the table keeps Unix milliseconds).
fn millis(older_than: Duration) -> Result<i64> {
    i64::try_from(older_than.as_millis())
        .map_err(|_| Error::Config(format!("retention {older_than:?} is too long")))
}

crate::inbox::inbox_database!(Sqlite, SqliteConnection, outbox_store::Dialect::Sqlite, age: millis);
