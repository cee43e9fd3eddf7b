//! Versioned migrations, one list per dialect.
//!
//! Each migration is a plain `.sql` file in `migrations/<dialect>/NNNN_<name>.sql` whose last
//! statement records its version in `outbox_schema_migrations`, so a file applied by hand counts
//! as applied. The migrator takes a database-wide lock, refuses a database migrated by a newer
//! build ([`Error::SchemaTooNew`](outbox_core::Error::SchemaTooNew)) and applies the missing
//! versions in order; running it twice is a no-op.
//!
//! The migrator is written once for any versioned [`Schema`]: [`plan`] and [`apply`] here, and
//! the lock and version read once per dialect ([`Migrator`], in each dialect's module). The
//! outbox's schema is [`OUTBOX_SCHEMA`]; `outbox-inbox` runs the same code with its own version
//! table (`outbox_inbox_schema_migrations`) and migrations, so a consumer database needs no outbox
//! tables. (This lives here rather than in `outbox-core`, which stays free of IO and of sqlx.)

use std::future::Future;

use outbox_core::{Error, Result};
use sqlx::{Database, Pool};

use crate::names::{Dialect, Tables};

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

/// The outbox's shipped migrations on the dialect whose files are in `migrations/$dir/`: every
/// dialect ships the same versions, each in a file of the same name.
#[allow(unused_macros)]
macro_rules! outbox_migrations {
    ($dir:literal) => {
        $crate::migrate::outbox_migrations!(@ $dir;
            1 "0001_outbox.sql" "outbox_message and outbox_delivery",
            2 "0002_relay_wakeup.sql" "relay wake-up",
            3 "0003_claim_heads.sql" "claim heads",
            4 "0004_open_key.sql" "open key",
            5 "0005_bounds.sql" "bounds",
            6 "0006_destination_pause.sql" "destination pause",
            7 "0007_relay_presence.sql" "relay presence",
            8 "0008_push_rows.sql" "push rows",
            9 "0009_key_index.sql" "key index",
            10 "0010_cheap_checks.sql" "cheap checks",
            11 "0011_one_check.sql" "one check",
        )
    };
    (@ $dir:literal; $($version:literal $file:literal $description:literal,)*) => {
        &[$($crate::migrate::Migration {
            version: $version,
            description: $description,
            sql: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/", $dir, "/", $file)),
        }),*]
    };
}
#[allow(unused_imports)]
pub(crate) use outbox_migrations;

/// What a migration run did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MigrationReport {
    /// Version before the run (0 = no tables of this schema).
    pub from: i64,
    /// Version after the run.
    pub to: i64,
    /// Versions applied by this run, in order.
    pub applied: Vec<i64>,
}

/// A versioned schema, whatever the dialect: where it records its versions, the locks that
/// serialize concurrent migrators, and how its errors read. Each dialect has its own list of
/// [`Migration`]s for it.
#[derive(Debug, Clone, Copy)]
pub struct Schema {
    /// The table each migration's last statement records its version in.
    pub version_table: &'static str,
    /// PostgreSQL: key of the transaction-scoped advisory lock (`pg_advisory_xact_lock`).
    pub pg_lock: i64,
    /// MySQL/MariaDB: name of the session lock (`GET_LOCK`, 60 s).
    pub mysql_lock: &'static str,
    /// What a failed migration is called in its error (`"migration"` in `migration 2 (...) failed`).
    pub label: &'static str,
    /// Maps the migrator's own database errors (lock, version read, commit).
    pub map_error: fn(sqlx::Error) -> Error,
}

/// The outbox's schema.
pub(crate) const OUTBOX_SCHEMA: Schema = Schema {
    version_table: "outbox_schema_migrations",
    // "outbox" in ASCII.
    pg_lock: 0x6f75_7462_6f78,
    mysql_lock: "outbox_migrate",
    label: "migration",
    map_error: crate::error::db,
};

/// A dialect's migrator for any [`Schema`]: takes the database-wide lock, reads the version,
/// refuses a newer schema ([`Error::SchemaTooNew`]) and applies the missing migrations in order.
/// Implemented for `sqlx::Postgres`, `sqlx::MySql` and `sqlx::Sqlite`.
pub trait Migrator: Database {
    /// Applies the `migrations` of `schema` still missing in the database, for the object
    /// names `tables` (the default names: [`Tables::canonical`]).
    fn migrate_schema(
        pool: &Pool<Self>,
        schema: &'static Schema,
        tables: &Tables,
        migrations: &'static [Migration],
    ) -> impl Future<Output = Result<MigrationReport>> + Send;

    /// The version of `schema` recorded on `conn` (0 when its version table does not exist).
    fn version_on<'a>(
        conn: &'a mut Self::Connection,
        schema: &'static Schema,
        tables: &'a Tables,
    ) -> impl Future<Output = Result<i64>> + Send + 'a;

    /// The version of `schema` recorded in the database (0 when its version table does not exist).
    fn schema_version_of(
        pool: &Pool<Self>,
        schema: &'static Schema,
        tables: &Tables,
    ) -> impl Future<Output = Result<i64>> + Send {
        async move {
            let mut conn = pool.acquire().await.map_err(schema.map_error)?;
            Self::version_on(&mut conn, schema, tables).await
        }
    }
}

/// Reads the recorded version on `conn` (locked by the caller) and applies the migrations
/// [`plan`] finds missing above it.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")), allow(dead_code))]
pub(crate) async fn upgrade<DB: Migrator>(
    conn: &mut DB::Connection,
    schema: &'static Schema,
    tables: &Tables,
    dialect: Dialect,
    migrations: &'static [Migration],
) -> Result<MigrationReport>
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    let from = DB::version_on(&mut *conn, schema, tables).await?;
    let mut applied = Vec::new();
    for m in plan(from, migrations)? {
        let sql = tables.render(dialect, m.sql);
        sqlx::Executor::execute(&mut *conn, &*sql).await.map_err(|e| {
            Error::Database(format!("{} {} ({}) failed: {e}", schema.label, m.version, m.description).into())
        })?;
        applied.push(m.version);
    }
    let to = applied.last().copied().unwrap_or(from);
    Ok(MigrationReport { from, to, applied })
}

/// The version recorded in `schema`'s table on `conn`: `exists` counts that table (0 or 1) in
/// the dialect's catalogue, `max` reads its highest version as a 64-bit integer.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")), allow(dead_code))]
pub(crate) async fn recorded_version<DB: Database>(
    conn: &mut DB::Connection,
    schema: &'static Schema,
    exists: String,
    max: String,
) -> Result<i64>
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    (i64,): for<'r> sqlx::FromRow<'r, DB::Row>,
{
    let (found,): (i64,) = sqlx::query_as(&exists).fetch_one(&mut *conn).await.map_err(schema.map_error)?;
    if found == 0 {
        return Ok(0);
    }
    let (version,): (i64,) = sqlx::query_as(&max).fetch_one(&mut *conn).await.map_err(schema.map_error)?;
    Ok(version)
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
    fn the_outbox_schema_keeps_its_table_and_locks() {
        assert_eq!(OUTBOX_SCHEMA.version_table, "outbox_schema_migrations");
        assert_eq!(&OUTBOX_SCHEMA.pg_lock.to_be_bytes()[2..], b"outbox");
        assert_eq!(OUTBOX_SCHEMA.mysql_lock, "outbox_migrate");
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
