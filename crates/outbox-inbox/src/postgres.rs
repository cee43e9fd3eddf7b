//! PostgreSQL 12+: `INSERT ... ON CONFLICT (consumer_group, message_id) DO NOTHING`; a
//! concurrent insert of the same key waits for the first transaction and then inserts nothing.

use sqlx::postgres::PgConnection;
use sqlx::Postgres;

use crate::migrate::Migration;

/// The shipped migrations, from `migrations/postgres/`.
pub const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    description: "outbox_inbox",
    sql: include_str!("../migrations/postgres/0001_inbox.sql"),
}];

/// The claim statement (`$1` group, `$2` message id, `$3` topic); one row affected = new.
pub const CLAIM_SQL: &str =
    "INSERT INTO outbox_inbox (consumer_group, message_id, topic) VALUES ($1, $2, $3) \
    ON CONFLICT (consumer_group, message_id) DO NOTHING";

const PRUNE: &str = "DELETE FROM outbox_inbox WHERE (consumer_group, message_id) IN ( \
    SELECT consumer_group, message_id FROM outbox_inbox \
    WHERE processed_at < now() - $1::bigint * interval '1 microsecond' \
    ORDER BY processed_at LIMIT $2 FOR UPDATE SKIP LOCKED)";

crate::inbox::inbox_database!(Postgres, PgConnection, outbox_store::Dialect::Postgres, age: crate::micros);
