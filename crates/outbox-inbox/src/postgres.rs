//! PostgreSQL 12+: `INSERT ... ON CONFLICT (consumer_group, message_id) DO NOTHING`; a
//! concurrent insert of the same key waits for the first transaction and then inserts nothing.

use std::time::Duration;

use outbox_core::Result;
use sqlx::postgres::PgConnection;
use sqlx::{PgPool, Postgres};

use crate::error::db;
use crate::inbox::InboxDatabase;
use crate::migrate::{failed, plan, Migration, MigrationReport};

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

/// Key of the advisory lock that serializes concurrent migrations ("inbox" in ASCII).
const MIGRATION_LOCK: i64 = 0x69_6e62_6f78;

const PRUNE: &str = "DELETE FROM outbox_inbox WHERE (consumer_group, message_id) IN ( \
    SELECT consumer_group, message_id FROM outbox_inbox \
    WHERE processed_at < now() - $1::bigint * interval '1 microsecond' \
    ORDER BY processed_at LIMIT $2 FOR UPDATE SKIP LOCKED)";

impl InboxDatabase for Postgres {
    async fn migrate(pool: &PgPool) -> Result<MigrationReport> {
        let mut tx = pool.begin().await.map_err(db)?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(MIGRATION_LOCK)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        let from = version_on(&mut tx).await?;
        let mut applied = Vec::new();
        for m in plan(from, MIGRATIONS)? {
            sqlx::Executor::execute(&mut *tx, m.sql).await.map_err(|e| failed(m, e))?;
            applied.push(m.version);
        }
        tx.commit().await.map_err(db)?;
        let to = applied.last().copied().unwrap_or(from);
        Ok(MigrationReport { from, to, applied })
    }

    async fn schema_version(pool: &PgPool) -> Result<i64> {
        let mut conn = pool.acquire().await.map_err(db)?;
        version_on(&mut conn).await
    }

    async fn claim<'a>(
        conn: &'a mut PgConnection,
        group: &'a str,
        message_id: &'a str,
        topic: Option<&'a str>,
    ) -> Result<bool> {
        let done = sqlx::query(CLAIM_SQL)
            .bind(group)
            .bind(message_id)
            .bind(topic)
            .execute(&mut *conn)
            .await
            .map_err(db)?;
        Ok(done.rows_affected() == 1)
    }

    async fn prune_batch(pool: &PgPool, older_than: Duration, batch: u32) -> Result<u64> {
        let done = sqlx::query(PRUNE)
            .bind(crate::micros(older_than)?)
            .bind(i64::from(batch))
            .execute(pool)
            .await
            .map_err(db)?;
        Ok(done.rows_affected())
    }
}

async fn version_on(conn: &mut PgConnection) -> Result<i64> {
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('outbox_inbox_schema_migrations') IS NOT NULL")
        .fetch_one(&mut *conn)
        .await
        .map_err(db)?;
    if !exists {
        return Ok(0);
    }
    sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM outbox_inbox_schema_migrations")
        .fetch_one(&mut *conn)
        .await
        .map_err(db)
}
