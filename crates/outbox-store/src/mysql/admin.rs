//! Operations queries on MySQL 8 / MariaDB 10.6+ ([`MessageAdmin`](crate::MessageAdmin); the
//! logic is shared, see [`AdminSql`]).
//!
//! Transactions that lock rows run under READ COMMITTED, like the relay's claim: under the
//! default REPEATABLE READ a locking read of a range would take gap locks and block the
//! application's INSERTs. Single-message actions lock the row by primary key, check its status
//! and write it and its delivery rows in one short transaction (the relay's claim skips the
//! locked row). MySQL cannot `LIMIT` inside an `IN (subquery)`, so purge selects a batch of ids
//! first, then deletes exactly those (re-checking status and age on each row's latest version).
//! Text columns are read as bytes (`utf8mb4_bin`, see the module docs of [`crate::mysql`]).

use super::render;
use crate::Tables;
use chrono::{DateTime, Utc};
use outbox_core::{OutboxMessage, Result, Status};
use sqlx::mysql::{MySql, MySqlConnection, MySqlRow};
use sqlx::{Encode, QueryBuilder, Transaction, Type};

use super::{begin_read_committed, decode_message, in_list, MESSAGE_COLUMNS};
use crate::admin::{impl_admin, AdminSql};
use crate::error::db;
use crate::outbox::Outbox;

const FINISHED: &str = "status IN ('sent', 'acked', 'cancelled')";

impl AdminSql for MySql {
    const MESSAGE_COLUMNS: &'static str = MESSAGE_COLUMNS;
    const ALL: &'static str = "TRUE";
    /// A locking read returns each row's latest committed version: the page is `failed` now and
    /// stays so until the commit.
    const LOCK_PAGE: &'static str = " FOR UPDATE";
    const OLDEST_PENDING_MS: &'static str = "\
        SELECT CAST(TIMESTAMPDIFF(MICROSECOND, MIN(created_at), UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED) \
        FROM outbox_message WHERE status IN ('pending', 'sending')";
    const DELIVERIES: &'static str = "\
        SELECT message_id, destination, status, attempts, next_attempt_at, last_attempt_at, last_error, \
        ack_deadline, acked_at, created_at, updated_at \
        FROM outbox_delivery WHERE message_id = ? ORDER BY destination";
    const LOCK_STATUS: &'static str = "SELECT status FROM outbox_message WHERE id = ? FOR UPDATE";
    const CANCEL: &'static str = "\
        UPDATE outbox_message SET status = 'cancelled', lease_owner = NULL, lease_until = NULL, \
        updated_at = UTC_TIMESTAMP(6), updated_by = ? WHERE id = ?";
    const CANCEL_DELIVERIES: &'static str = "\
        UPDATE outbox_delivery SET status = 'cancelled', updated_at = UTC_TIMESTAMP(6) \
        WHERE message_id = ? AND status IN ('pending', 'sending', 'failed')";
    /// `IGNORE` counts a duplicate as 0 rows whatever the client's found-rows flag (every
    /// value is checked for length before, so it hides nothing else).
    const PAUSE: &'static str = "\
        INSERT IGNORE INTO outbox_destination_pause (destination, paused_by, reason, paused_at) \
        VALUES (?, ?, ?, UTC_TIMESTAMP(6))";
    /// The whole row is written, so `REPLACE` is the upsert (`ON DUPLICATE KEY UPDATE
    /// col = VALUES(col)` is deprecated since MySQL 8.0.20, and its replacement is MySQL-only).
    const BEAT: &'static str = "\
        REPLACE INTO outbox_relay (owner, host, pid, version, state, started_at, last_claim_at, claimed, delivered, failed, seen_at) \
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6))";
    const OVERDUE_MS: &'static str = "\
        SELECT CAST(TIMESTAMPDIFF(MICROSECOND, MIN(next_attempt_at), UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED) \
        FROM outbox_message WHERE status = 'pending' AND next_attempt_at <= UTC_TIMESTAMP(6)";
    const RELAYS: &'static str = "\
        SELECT owner, host, pid, version, state, started_at, seen_at, last_claim_at, claimed, delivered, failed, \
        CAST(TIMESTAMPDIFF(MICROSECOND, seen_at, UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED) AS silent_ms \
        FROM outbox_relay ORDER BY owner LIMIT 1000";

    fn affected(done: &sqlx::mysql::MySqlQueryResult) -> u64 {
        done.rows_affected()
    }

    const NOW: &'static str = "SELECT UTC_TIMESTAMP(6)";

    type Time = DateTime<Utc>;

    fn time(t: DateTime<Utc>) -> DateTime<Utc> {
        t
    }

    fn opt_time(t: Option<DateTime<Utc>>) -> impl for<'q> Encode<'q, Self> + Type<Self> + Send + 'static {
        t
    }

    fn read_message(row: &MySqlRow) -> Result<OutboxMessage> {
        decode_message(row)
    }

    async fn begin(outbox: &Outbox<MySql>) -> Result<Transaction<'static, MySql>> {
        begin_read_committed(outbox).await
    }

    /// The rows are locked and checked by the caller.
    async fn redrive(
        conn: &mut MySqlConnection,
        tables: &Tables,
        ids: &[i64],
        actor: &str,
        _: fn(Status) -> bool,
    ) -> Result<u64> {
        let mut qb = QueryBuilder::<MySql>::new(render(tables, "UPDATE outbox_message SET status = 'pending', attempts = 0, next_attempt_at = UTC_TIMESTAMP(6), \
             lease_owner = NULL, lease_until = NULL, updated_at = UTC_TIMESTAMP(6), updated_by = ",).into_owned());
        qb.push_bind(actor.to_owned());
        qb.push(" WHERE id IN ");
        in_list(&mut qb, ids.iter().copied());
        let done = qb.build().execute(&mut *conn).await.map_err(db)?.rows_affected();
        let mut qb = QueryBuilder::<MySql>::new(render(tables, "UPDATE outbox_delivery SET status = 'pending', attempts = 0, next_attempt_at = UTC_TIMESTAMP(6), \
             updated_at = UTC_TIMESTAMP(6) WHERE status IN ('failed', 'cancelled') AND message_id IN ",).into_owned());
        in_list(&mut qb, ids.iter().copied());
        qb.build().execute(&mut *conn).await.map_err(db)?;
        Ok(done)
    }

    fn minus_micros(now: DateTime<Utc>, age_us: i64) -> DateTime<Utc> {
        now - chrono::Duration::microseconds(age_us)
    }

    async fn purge_batch(
        outbox: &Outbox<MySql>,
        cutoff: &DateTime<Utc>,
        limit: i64,
    ) -> Result<Option<(u64, u64)>> {
        let tables = outbox.tables();
        let select = format!("SELECT id FROM outbox_message WHERE {FINISHED} AND updated_at <= ? LIMIT ?");
        let ids: Vec<i64> = sqlx::query_scalar(&render(tables, &select))
            .bind(cutoff)
            .bind(limit)
            .fetch_all(outbox.pool())
            .await
            .map_err(db)?;
        if ids.is_empty() {
            return Ok(None);
        }
        let mut qb = QueryBuilder::<MySql>::new(
            render(tables, "DELETE FROM outbox_message WHERE id IN ").into_owned(),
        );
        in_list(&mut qb, ids.iter().copied());
        qb.push(format!(" AND {FINISHED} AND updated_at <= ")).push_bind(*cutoff);
        let done = qb.build().execute(outbox.pool()).await.map_err(db)?.rows_affected();
        Ok(Some((ids.len() as u64, done)))
    }
}

impl_admin!(MySql);
