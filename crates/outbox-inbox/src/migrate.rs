//! Versioned migrations of the inbox table, one list per dialect.
//!
//! Each migration is a plain `.sql` file in `migrations/<dialect>/NNNN_<name>.sql` whose last
//! statement records its version in `outbox_inbox_schema_migrations` (its own version table, so
//! a consumer database does not need the outbox tables). The migrator takes a database-wide
//! lock, refuses a database migrated by a newer build
//! ([`Error::SchemaTooNew`](outbox_core::Error::SchemaTooNew)) and applies the missing versions
//! in order; running it twice is a no-op.
//!
//! The migrator itself is `outbox-store`'s ([`Migrator`], one implementation per dialect),
//! run with the inbox's [`SCHEMA`]: the rules are written once, for both schemas. It lives in
//! `outbox-store` rather than `outbox-core` because it is SQL and IO, which `outbox-core`
//! keeps out of; depending on `outbox-store` brings the store's SQL, not the relay engine or
//! any transport.

pub use outbox_store::{Migration, MigrationReport};
pub(crate) use outbox_store::{Migrator, Schema};

/// The inbox's schema: its own version table and locks, so it never waits on, or is taken for,
/// the outbox's migrations.
pub(crate) const SCHEMA: Schema = Schema {
    version_table: "outbox_inbox_schema_migrations",
    // "inbox" in ASCII.
    pg_lock: 0x69_6e62_6f78,
    mysql_lock: "outbox_inbox_migrate",
    label: "inbox migration",
    map_error: crate::error::db,
};

#[cfg(test)]
mod tests {
    use super::SCHEMA;

    #[test]
    fn the_inbox_schema_keeps_its_own_table_and_locks() {
        assert_eq!(SCHEMA.version_table, "outbox_inbox_schema_migrations");
        assert_eq!(&SCHEMA.pg_lock.to_be_bytes()[3..], b"inbox");
        assert_eq!(SCHEMA.mysql_lock, "outbox_inbox_migrate");
    }
}
