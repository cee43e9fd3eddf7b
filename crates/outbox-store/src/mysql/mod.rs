//! MySQL 8.0.16+ and MariaDB 10.6+ (both enforce CHECK constraints and have
//! `FOR UPDATE SKIP LOCKED`, which the relay's claim needs).
//!
//! Enqueue is one plain `INSERT` round trip. For a message with a `(biz_type, biz_key)` that
//! already exists, InnoDB rejects the insert with a duplicate-key error that rolls back only
//! that statement; the existing id is then read with a locking read (`LOCK IN SHARE MODE`),
//! which sees the latest committed row whatever the transaction's snapshot. The common path
//! stays one round trip, and no duplicate ever writes. (`INSERT ... ON DUPLICATE KEY UPDATE`
//! is avoided: sqlx sets `CLIENT_FOUND_ROWS`, so it cannot tell an insert from a duplicate.)
//!
//! Timestamps are `DATETIME(6)` holding UTC (`UTC_TIMESTAMP(6)`), independent of the session
//! time zone.

use chrono::{DateTime, Utc};
use outbox_core::{Enqueued, Error, MessageId, NewMessage, OutboxMessage, Result};
use sqlx::mysql::{MySqlConnection, MySqlRow};
use sqlx::{MySql, MySqlPool, QueryBuilder, Row, Transaction};

use crate::common::{decoded_cells, enqueue_args, enqueued_before, At, Cells};
use crate::error::{db, is_biz_duplicate};
use crate::migrate::{recorded_version, upgrade, Migration, MigrationReport, Migrator, Schema};
use crate::names::{Dialect, Tables};
use crate::outbox::{impl_dialect, Outbox};

/// The shipped migrations, from `migrations/mysql/`.
pub const MIGRATIONS: &[Migration] = crate::migrate::outbox_migrations!("mysql");

const ENQUEUE: &str = "INSERT INTO outbox_message \
    (biz_type, biz_key, topic, msg_key, tag, headers, payload, max_attempts, next_attempt_at, created_by, updated_by) \
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, COALESCE(?, UTC_TIMESTAMP(6) + INTERVAL COALESCE(?, 0) MICROSECOND), ?, ?)";

/// [`ENQUEUE`] for the plainest message (no business key, headers, schedule or actor): five
/// parameters instead of twelve, the rest the table's defaults (the same values the full
/// statement would write). Binding and sending the seven NULLs cost the business transaction
/// 2-3% with one client (`outbox bench --scenario enqueue` and an interleaved probe).
const ENQUEUE_PLAIN: &str =
    "INSERT INTO outbox_message (topic, msg_key, tag, payload, max_attempts) VALUES (?, ?, ?, ?, ?)";

const EXISTING: &str = "SELECT id FROM outbox_message WHERE biz_type = ? AND biz_key = ? LOCK IN SHARE MODE";

/// Columns read into an [`OutboxMessage`], in [`decode_message`]'s order.
pub(crate) const MESSAGE_COLUMNS: &str = "id, biz_type, biz_key, topic, msg_key, tag, \
    CAST(headers AS CHAR) AS headers, payload, status, attempts, max_attempts, next_attempt_at, \
    last_attempt_at, last_error, lease_owner, lease_until, created_by, updated_by, created_at, updated_at";

mod ack;
mod admin;
mod relay;
pub(crate) use relay::deliveries_locked;
pub use relay::MySqlLock;

impl_dialect!(MySqlConnection, MySql, Dialect::MySql, id = "?", read = decode_message);

/// The migrator of any [`Schema`] (the outbox's, the inbox's), under the session lock
/// `GET_LOCK(schema.mysql_lock, 60)`, so concurrent migrators serialize.
impl Migrator for MySql {
    async fn migrate_schema(
        pool: &MySqlPool,
        schema: &'static Schema,
        tables: &Tables,
        migrations: &'static [Migration],
    ) -> Result<MigrationReport> {
        // Run to the end even if the caller is dropped (see `crate::begin`): a migration dropped
        // between GET_LOCK and RELEASE_LOCK would leave the session lock with a pooled
        // connection, and every later migration would wait its 60 s for it and fail.
        let (pool, tables) = (pool.clone(), tables.clone());
        crate::begin::detached(async move { migrate_locked(&pool, schema, &tables, migrations).await }).await
    }

    async fn version_on(conn: &mut MySqlConnection, schema: &'static Schema, tables: &Tables) -> Result<i64> {
        // Names matched Tables' pattern: safe inside a literal.
        let name = tables.name(schema.version_table);
        let database = tables.schema().map_or_else(|| "DATABASE()".to_owned(), |s| format!("'{s}'"));
        let exists = format!(
            "SELECT COUNT(*) FROM information_schema.tables \
             WHERE table_schema = {database} AND table_name = '{name}'"
        );
        let table = tables.table(Dialect::MySql, schema.version_table);
        let max = format!("SELECT CAST(COALESCE(MAX(version), 0) AS SIGNED) FROM {table}");
        recorded_version::<MySql>(conn, schema, exists, max).await
    }
}

/// [`Migrator::migrate_schema`] on MySQL: takes the session lock, applies, releases it.
async fn migrate_locked(
    pool: &MySqlPool,
    schema: &'static Schema,
    tables: &Tables,
    migrations: &'static [Migration],
) -> Result<MigrationReport> {
    let db = schema.map_error;
    let lock = tables.mysql_lock(schema.mysql_lock);
    let mut conn = pool.acquire().await.map_err(db)?;
    let locked: Option<i64> =
        sqlx::query_scalar("SELECT GET_LOCK(?, 60)").bind(&lock).fetch_one(&mut *conn).await.map_err(db)?;
    if locked != Some(1) {
        return Err(Error::Database(
            format!("could not take the migration lock `{lock}` within 60 s (another migration is running)")
                .into(),
        ));
    }
    // MySQL commits DDL implicitly; each table is one CREATE statement, and the version row
    // is written last, so an interrupted migration is visible and re-runnable.
    let result = async {
        if let Some(name) = tables.schema() {
            // Created only when missing (CREATE DATABASE needs a privilege an account owning
            // only its database lacks, even with IF NOT EXISTS).
            let found: Option<String> = sqlx::query_scalar(
                "SELECT CAST(schema_name AS CHAR) FROM information_schema.schemata WHERE schema_name = ?",
            )
            .bind(name)
            .fetch_optional(&mut *conn)
            .await
            .map_err(db)?;
            if found.is_none() {
                // `name` matched Tables' pattern ([a-z_][a-z0-9_]*): nothing to escape.
                sqlx::query(&format!(
                    "CREATE DATABASE IF NOT EXISTS `{name}` DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
                ))
                .execute(&mut *conn)
                .await
                .map_err(db)?;
            }
        }
        upgrade::<MySql>(&mut conn, schema, tables, Dialect::MySql, migrations).await
    }
    .await;
    let released = sqlx::query("SELECT RELEASE_LOCK(?)").bind(&lock).execute(&mut *conn).await;
    let report = result?;
    released.map_err(db)?;
    Ok(report)
}

/// [`enqueue`] into the tables named by `tables`.
pub async fn enqueue_in(conn: &mut MySqlConnection, tables: &Tables, msg: &NewMessage) -> Result<Enqueued> {
    msg.validate()?;
    let plain = msg.biz.is_none()
        && msg.headers.is_empty()
        && msg.deliver_at.is_none()
        && msg.delay.is_none()
        && msg.created_by.is_none();
    let inserted = if plain {
        sqlx::query(&tables.render(Dialect::MySql, ENQUEUE_PLAIN))
            .bind(msg.topic.as_str())
            .bind(msg.key.as_deref())
            .bind(msg.tag.as_deref())
            .bind(msg.payload.as_str())
            .bind(crate::common::max_attempts(msg)?)
            .execute(&mut *conn)
            .await
    } else {
        let args = enqueue_args::<MySql, _>(msg, msg.deliver_at, msg.delay_micros(), 2)?;
        sqlx::query_with(&tables.render(Dialect::MySql, ENQUEUE), args).execute(&mut *conn).await
    };
    match inserted {
        Ok(done) => {
            let id = i64::try_from(done.last_insert_id())
                .map_err(|_| Error::Database("auto-increment id out of range".into()))?;
            Ok(Enqueued { id: MessageId(id), created: true })
        }
        Err(e) if is_biz_duplicate(&e, &tables.name("outbox_message_biz_unique")) => {
            enqueued_before::<MySql>(conn, tables, EXISTING, msg).await
        }
        Err(e) => Err(db(e)),
    }
}

/// [`enqueue_batch`] into the tables named by `tables`: one statement each (MySQL cannot return
/// the ids of a multi-row insert reliably under every `innodb_autoinc_lock_mode`).
pub async fn enqueue_batch_in(
    conn: &mut MySqlConnection,
    tables: &Tables,
    msgs: &[NewMessage],
) -> Result<Vec<Enqueued>> {
    crate::common::enqueue_each::<MySql>(conn, tables, msgs).await
}

/// Reads a text column. The tables use the `utf8mb4_bin` collation (exact, case-sensitive keys),
/// which the MySQL protocol reports as binary; decode the bytes as UTF-8 ourselves.
pub(crate) fn opt_text(row: &MySqlRow, col: &'static str) -> Result<Option<String>> {
    let bytes: Option<Vec<u8>> = row.try_get(col).map_err(db)?;
    bytes
        .map(|b| {
            String::from_utf8(b).map_err(|e| Error::MalformedRow {
                table: "outbox_message",
                id: String::new(),
                reason: format!("{col} is not UTF-8: {e}"),
            })
        })
        .transpose()
}

/// Reads a NOT NULL text column; see [`opt_text`].
pub(crate) fn text(row: &MySqlRow, col: &'static str) -> Result<String> {
    opt_text(row, col)?.ok_or_else(|| Error::MalformedRow {
        table: "outbox_message",
        id: String::new(),
        reason: format!("{col} is NULL"),
    })
}

/// Decodes a row selected with [`MESSAGE_COLUMNS`].
pub(crate) fn decode_message(row: &MySqlRow) -> Result<OutboxMessage> {
    crate::common::decode_message_with(row, row)
}

impl Cells for MySqlRow {
    fn text(&self, col: &'static str, _: At) -> Result<String> {
        text(self, col)
    }

    fn opt_text(&self, col: &'static str, _: At) -> Result<Option<String>> {
        opt_text(self, col)
    }

    decoded_cells!(time: DateTime<Utc>, opt_time: Option<DateTime<Utc>>);
}

/// Appends `(?, ?, ...)` binding `ids`.
pub(crate) fn in_list(qb: &mut QueryBuilder<'_, MySql>, ids: impl IntoIterator<Item = i64>) {
    qb.push("(");
    let mut sep = qb.separated(", ");
    for id in ids {
        sep.push_bind(id);
    }
    sep.push_unseparated(")");
}

/// Begins a READ COMMITTED transaction: a locking read then locks only the rows it returns
/// (REPEATABLE READ would take gap locks and block the application's INSERTs).
pub(crate) async fn begin_read_committed(outbox: &Outbox<MySql>) -> Result<Transaction<'static, MySql>> {
    begin_read_committed_with(outbox, "").await
}

/// [`begin_read_committed`], with `session` (statements ending in `;`, such as MariaDB's
/// `SET SESSION idle_transaction_timeout = N;`) run between `SET TRANSACTION` and `BEGIN` in the
/// same round trip.
pub(crate) async fn begin_read_committed_with(
    outbox: &Outbox<MySql>,
    session: &str,
) -> Result<Transaction<'static, MySql>> {
    // Begun to the end even if the caller is dropped (see `crate::begin`): a `SET TRANSACTION`
    // left behind would apply to the next user's transaction on this connection. On an idle
    // connection without the pool's ping first (see `begin_untested_first`): these are the
    // store's own transactions (claims, settlements, admin reads), not the application's.
    //
    // `SET TRANSACTION` applies to the next transaction on this connection only. Both
    // statements go in one round trip (a text-protocol query; sqlx asks the server for
    // multi-statement support), which then checks that a transaction is open: one round trip
    // fewer on every claim, settlement and admin transaction (a claim of a trickle on MariaDB
    // made six).
    let statements: std::borrow::Cow<'static, str> = if session.is_empty() {
        "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; BEGIN".into()
    } else {
        format!("SET TRANSACTION ISOLATION LEVEL READ COMMITTED; {session}BEGIN").into()
    };
    crate::begin::begin_untested_first(outbox.pool(), Some(statements)).await.map_err(db)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// The claim's transaction reads at READ COMMITTED (each statement sees what committed
    /// before it), not at the server's default REPEATABLE READ (the first read's snapshot for
    /// the whole transaction), now that `SET TRANSACTION` and `BEGIN` go in one query; and the
    /// level does not stay on the connection for the transaction after it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_transaction_begun_read_committed_sees_each_commit_and_the_next_one_does_not() {
        let db = outbox_testkit::fresh_mysql().await;
        let pool = sqlx::pool::PoolOptions::<MySql>::new().max_connections(1).connect(&db.url).await.unwrap();
        let outbox = Outbox::new(pool.clone());
        sqlx::query("CREATE TABLE rc_probe (id INT PRIMARY KEY)").execute(&db.pool).await.unwrap();
        let count = "SELECT COUNT(*) FROM rc_probe";

        let mut tx = begin_read_committed(&outbox).await.unwrap();
        let before: i64 = sqlx::query_scalar(count).fetch_one(&mut *tx).await.unwrap();
        sqlx::query("INSERT INTO rc_probe VALUES (1)").execute(&db.pool).await.unwrap();
        let after: i64 = sqlx::query_scalar(count).fetch_one(&mut *tx).await.unwrap();
        assert_eq!((before, after), (0, 1), "READ COMMITTED sees the row committed meanwhile");
        tx.commit().await.unwrap();

        // The same (only) connection, a plain transaction: the server's REPEATABLE READ again.
        let mut tx = pool.begin().await.unwrap();
        let before: i64 = sqlx::query_scalar(count).fetch_one(&mut *tx).await.unwrap();
        sqlx::query("INSERT INTO rc_probe VALUES (2)").execute(&db.pool).await.unwrap();
        let after: i64 = sqlx::query_scalar(count).fetch_one(&mut *tx).await.unwrap();
        assert_eq!((before, after), (1, 1), "the next transaction keeps its first snapshot");
        tx.rollback().await.unwrap();
        drop((outbox, pool));
        db.drop_db().await;
    }

    /// A locked claim bounds how long its transaction may sit idle by the lease, with
    /// MariaDB's `idle_transaction_timeout` or, on MySQL, which lacks it, `wait_timeout`, and
    /// the settlement sets it back for whoever uses the connection next. Which variable the
    /// server has is learned on the first claim: the second claim on MySQL no longer tries
    /// MariaDB's, and still sets and resets `wait_timeout`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mysql_a_locked_claim_bounds_its_idle_transaction_by_the_lease_and_sets_it_back() {
        use crate::relay::{ClaimMode, Claims, Settlement};
        let db = outbox_testkit::fresh_mysql().await;
        let version: String = sqlx::query_scalar("SELECT VERSION()").fetch_one(&db.pool).await.unwrap();
        let mariadb = version.contains("MariaDB");
        let variable = if mariadb { "idle_transaction_timeout" } else { "wait_timeout" };
        let pool = sqlx::pool::PoolOptions::<MySql>::new().max_connections(1).connect(&db.url).await.unwrap();
        let outbox = Outbox::new(pool.clone());
        outbox.migrate().await.unwrap();
        let session = format!("SELECT CAST(@@SESSION.{variable} AS SIGNED)");
        let global: i64 = sqlx::query_scalar(&format!("SELECT CAST(@@GLOBAL.{variable} AS SIGNED)"))
            .fetch_one(&db.pool)
            .await
            .unwrap();
        assert_ne!(global, 7, "the lease below must differ from the server's {variable}");
        for round in 0..2 {
            let id = outbox.enqueue(&crate::NewMessage::new("t", "{}")).await.unwrap().id;
            let claim = outbox
                .claim_with(ClaimMode::Lock, "relay", 10, std::time::Duration::from_secs(7))
                .await
                .unwrap();
            assert_eq!(claim.messages.iter().map(|m| m.id).collect::<Vec<_>>(), vec![id], "round {round}");
            // (That the claim's transaction then ends after the lease is what
            // tests/claim.rs a_frozen_claimer_loses_its_rows_after_the_lease proves on both.)
            assert_eq!(
                outbox.no_idle_transaction_timeout.load(std::sync::atomic::Ordering::Relaxed),
                !mariadb,
                "round {round}: {version}"
            );
            let settlement = Settlement { sent: vec![id], messages: Vec::new(), deliveries: Vec::new() };
            outbox.settle_held(claim.hold, "relay", &settlement).await.unwrap();
            let after: i64 = sqlx::query_scalar(&session).fetch_one(&pool).await.unwrap();
            assert_eq!(after, global, "round {round}: {variable} set back after the settlement on {version}");
            // MariaDB: from the second claim on, the bound goes with the claim's BEGIN.
            assert_eq!(
                outbox.has_idle_transaction_timeout.load(std::sync::atomic::Ordering::Relaxed),
                mariadb,
                "round {round}: {version}"
            );
        }
        // A claim that finds nothing sets it back too (on MariaDB it was set in its BEGIN).
        let claim =
            outbox.claim_with(ClaimMode::Lock, "relay", 10, std::time::Duration::from_secs(7)).await.unwrap();
        assert!(claim.messages.is_empty());
        drop(claim);
        let after: i64 = sqlx::query_scalar(&session).fetch_one(&pool).await.unwrap();
        assert_eq!(after, global, "{variable} set back after an empty claim on {version}");
        drop((outbox, pool));
        db.drop_db().await;
    }
}
