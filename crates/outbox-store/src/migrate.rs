//! Versioned migrations, one list per dialect.
//!
//! Each migration is a plain `.sql` file in `migrations/<dialect>/NNNN_<name>.sql` whose last
//! statement records its version in `outbox_schema_migrations`, so a file applied by hand counts
//! as applied. The migrator takes a database-wide lock, refuses a database migrated by a newer
//! build ([`Error::SchemaTooNew`](outbox_core::Error::SchemaTooNew)) and applies the missing
//! versions in order; running it twice is a no-op.

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
    /// Version before the run (0 = no outbox tables).
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

/// Fails unless the database is at exactly the version this build needs.
pub(crate) fn require(found: i64, required: i64) -> Result<()> {
    if found > required {
        return Err(Error::SchemaTooNew { found, supported: required });
    }
    if found < required {
        return Err(Error::SchemaNotMigrated { found, required });
    }
    Ok(())
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
    }

    #[test]
    fn newer_schema_is_a_clear_error() {
        let err = plan(3, LIST).unwrap_err();
        assert!(matches!(err, Error::SchemaTooNew { found: 3, supported: 2 }));
        assert!(err.to_string().contains("upgrade outbox"));
        assert!(matches!(require(1, 2), Err(Error::SchemaNotMigrated { .. })));
        assert!(require(2, 2).is_ok());
    }
}
