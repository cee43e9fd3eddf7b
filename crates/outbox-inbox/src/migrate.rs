//! Versioned migrations of the inbox table, one list per dialect.
//!
//! Each migration is a plain `.sql` file in `migrations/<dialect>/NNNN_<name>.sql` whose last
//! statement records its version in `outbox_inbox_schema_migrations` (its own version table, so
//! a consumer database does not need the outbox tables). The migrator takes a database-wide
//! lock, refuses a database migrated by a newer build
//! ([`Error::SchemaTooNew`](outbox_core::Error::SchemaTooNew)) and applies the missing versions
//! in order; running it twice is a no-op.

use outbox_core::{Error, Result};

/// One schema migration.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Version number (1, 2, ...).
    pub version: i64,
    /// Short description.
    pub description: &'static str,
    /// The SQL, as shipped in `migrations/<dialect>/`.
    pub sql: &'static str,
}

/// What a migration run did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MigrationReport {
    /// Version before the run (0 = no inbox table).
    pub from: i64,
    /// Version after the run.
    pub to: i64,
    /// Versions applied by this run, in order.
    pub applied: Vec<i64>,
}

/// Checks the version found in the database against the shipped migrations and returns the
/// ones still to apply.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")), allow(dead_code))]
pub(crate) fn plan(found: i64, migrations: &'static [Migration]) -> Result<&'static [Migration]> {
    let supported = migrations.last().map_or(0, |m| m.version);
    if found > supported {
        return Err(Error::SchemaTooNew { found, supported });
    }
    let start = migrations.partition_point(|m| m.version <= found);
    Ok(&migrations[start..])
}

/// Wraps a failed migration statement.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")), allow(dead_code))]
pub(crate) fn failed(m: &Migration, e: sqlx::Error) -> Error {
    Error::Database(format!("inbox migration {} ({}) failed: {e}", m.version, m.description).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST: &[Migration] = &[
        Migration { version: 1, description: "a", sql: "" },
        Migration { version: 2, description: "b", sql: "" },
    ];

    #[test]
    fn plans_missing_versions_only() {
        assert_eq!(plan(0, LIST).unwrap().len(), 2);
        assert_eq!(plan(1, LIST).unwrap()[0].version, 2);
        assert!(plan(2, LIST).unwrap().is_empty());
        assert!(matches!(plan(3, LIST), Err(Error::SchemaTooNew { found: 3, supported: 2 })));
    }
}
