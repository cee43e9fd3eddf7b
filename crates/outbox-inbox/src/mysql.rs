//! MySQL 8.0.16+ and MariaDB 10.6+: a plain `INSERT`; a duplicate-key error (1062) on the
//! primary key means "already processed". (`INSERT IGNORE` would also hide other errors, such
//! as a too-long id or a failed check, so it is not used.) A duplicate-key error rolls back only
//! that statement: the caller's transaction stays usable. A concurrent insert of the same key
//! waits on the first transaction's row lock and then fails with 1062.

use sqlx::mysql::{MySqlConnection, MySqlDatabaseError};
use sqlx::MySql;

use crate::migrate::Migration;

/// The shipped migrations, from `migrations/mysql/`.
pub const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    description: "outbox_inbox",
    sql: include_str!("../migrations/mysql/0001_inbox.sql"),
}];

/// The claim statement (group, message id, topic); error 1062 on `PRIMARY` = duplicate.
pub const CLAIM_SQL: &str = "INSERT INTO outbox_inbox (consumer_group, message_id, topic) VALUES (?, ?, ?)";

const PRUNE: &str = "DELETE FROM outbox_inbox \
    WHERE processed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND ORDER BY processed_at LIMIT ?";

/// True when `err` is MySQL's duplicate-key error (1062) on the inbox's primary key.
fn is_duplicate(err: &sqlx::Error) -> bool {
    let sqlx::Error::Database(dbe) = err else { return false };
    let Some(my) = dbe.try_downcast_ref::<MySqlDatabaseError>() else { return false };
    // MariaDB: "... for key 'PRIMARY'"; MySQL 8: "... for key 'outbox_inbox.PRIMARY'".
    my.number() == 1062 && my.message().contains("PRIMARY")
}

crate::inbox::inbox_database!(
    MySql, MySqlConnection, outbox_store::Dialect::MySql, age: crate::micros, duplicate: is_duplicate
);
