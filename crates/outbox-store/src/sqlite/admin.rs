//! Operations queries on SQLite ([`MessageAdmin`](crate::MessageAdmin); the logic is shared,
//! see [`AdminSql`]).
//!
//! Writes run in `BEGIN IMMEDIATE` transactions (SQLite has one writer: the check of a
//! message's status and its change cannot interleave with a claim). Timestamps are INTEGER
//! milliseconds; the database's clock (`julianday('now')`) is the only clock. Purge relies on
//! `PRAGMA foreign_keys = ON` (set by [`super::connect_options`]) to cascade to `outbox_delivery`.

use super::render;
use crate::Tables;

use chrono::{DateTime, Utc};
use outbox_core::{OutboxMessage, Result, Status};
use sqlx::sqlite::{Sqlite, SqliteConnection, SqliteRow};
use sqlx::{Encode, QueryBuilder, Transaction, Type};

use super::{read_message, MESSAGE_COLUMNS};
use crate::admin::{impl_admin, AdminSql};
use crate::error::db;
use crate::outbox::Outbox;

macro_rules! now_ms {
    () => {
        "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
    };
}

const FINISHED: &str = "status IN ('sent', 'acked', 'cancelled')";

fn in_list(qb: &mut QueryBuilder<'_, Sqlite>, ids: &[i64]) {
    qb.push("(");
    let mut sep = qb.separated(", ");
    for id in ids {
        sep.push_bind(*id);
    }
    sep.push_unseparated(")");
}

impl AdminSql for Sqlite {
    const MESSAGE_COLUMNS: &'static str = MESSAGE_COLUMNS;
    const ALL: &'static str = "1";
    /// `BEGIN IMMEDIATE` already excludes every other writer.
    const LOCK_PAGE: &'static str = "";
    const OLDEST_PENDING_MS: &'static str = concat!(
        "SELECT ",
        now_ms!(),
        " - MIN(created_at) FROM outbox_message WHERE status IN ('pending', 'sending')"
    );
    const DELIVERIES: &'static str = "\
        SELECT message_id, destination, status, attempts, next_attempt_at, last_attempt_at, last_error, \
        ack_deadline, acked_at, created_at, updated_at \
        FROM outbox_delivery WHERE message_id = ?1 ORDER BY destination";
    /// Inside `BEGIN IMMEDIATE`, nothing can change the status before the transaction ends.
    const LOCK_STATUS: &'static str = "SELECT status FROM outbox_message WHERE id = ?1";
    const CANCEL: &'static str = concat!(
        "UPDATE outbox_message SET status = 'cancelled', lease_owner = NULL, lease_until = NULL, updated_at = ",
        now_ms!(),
        ", updated_by = ?1 WHERE id = ?2"
    );
    const CANCEL_DELIVERIES: &'static str = concat!(
        "UPDATE outbox_delivery SET status = 'cancelled', updated_at = ",
        now_ms!(),
        " WHERE message_id = ?1 AND status IN ('pending', 'sending', 'failed')"
    );
    const PAUSE: &'static str = concat!(
        "INSERT INTO outbox_destination_pause (destination, paused_by, reason, paused_at) VALUES (?1, ?2, ?3, ",
        now_ms!(),
        ") ON CONFLICT (destination) DO NOTHING"
    );
    const BEAT: &'static str = concat!(
        "INSERT INTO outbox_relay (owner, host, pid, version, state, started_at, last_claim_at, claimed, delivered, failed, seen_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ",
        now_ms!(),
        ") ON CONFLICT (owner) DO UPDATE SET \
         host = excluded.host, pid = excluded.pid, version = excluded.version, state = excluded.state, started_at = excluded.started_at, \
         last_claim_at = excluded.last_claim_at, claimed = excluded.claimed, delivered = excluded.delivered, failed = excluded.failed, seen_at = excluded.seen_at"
    );
    const OVERDUE_MS: &'static str = concat!(
        "SELECT ",
        now_ms!(),
        " - MIN(next_attempt_at) FROM outbox_message WHERE status = 'pending' AND next_attempt_at <= ",
        now_ms!()
    );
    const RELAYS: &'static str = concat!(
        "SELECT owner, host, pid, version, state, started_at, seen_at, last_claim_at, claimed, delivered, failed, ",
        now_ms!(),
        " - seen_at AS silent_ms FROM outbox_relay ORDER BY owner LIMIT 1000"
    );

    fn affected(done: &sqlx::sqlite::SqliteQueryResult) -> u64 {
        done.rows_affected()
    }

    const NOW: &'static str = concat!("SELECT ", now_ms!());

    /// Milliseconds since the epoch.
    type Time = i64;

    fn time(t: DateTime<Utc>) -> i64 {
        t.timestamp_millis()
    }

    fn opt_time(t: Option<DateTime<Utc>>) -> impl for<'q> Encode<'q, Self> + Type<Self> + Send + 'static {
        t.map(|t| t.timestamp_millis())
    }

    fn read_message(row: &SqliteRow) -> Result<OutboxMessage> {
        read_message(row)
    }

    async fn begin(outbox: &Outbox<Sqlite>) -> Result<Transaction<'static, Sqlite>> {
        crate::begin::begin_with(outbox.pool(), "BEGIN IMMEDIATE").await.map_err(db)
    }

    /// The caller checked the rows inside `BEGIN IMMEDIATE`.
    async fn redrive(
        conn: &mut SqliteConnection,
        tables: &Tables,
        ids: &[i64],
        actor: &str,
        _: fn(Status) -> bool,
    ) -> Result<u64> {
        let mut qb = QueryBuilder::<Sqlite>::new(
            render(
                tables,
                concat!(
                    "UPDATE outbox_message SET status = 'pending', attempts = 0, next_attempt_at = ",
                    now_ms!(),
                    ", lease_owner = NULL, lease_until = NULL, updated_at = ",
                    now_ms!(),
                    ", updated_by = "
                ),
            )
            .into_owned(),
        );
        qb.push_bind(actor.to_owned());
        qb.push(" WHERE id IN ");
        in_list(&mut qb, ids);
        let done = qb.build().execute(&mut *conn).await.map_err(db)?.rows_affected();
        let mut qb = QueryBuilder::<Sqlite>::new(
            render(
                tables,
                concat!(
                    "UPDATE outbox_delivery SET status = 'pending', attempts = 0, next_attempt_at = ",
                    now_ms!(),
                    ", updated_at = ",
                    now_ms!(),
                    " WHERE status IN ('failed', 'cancelled') AND message_id IN "
                ),
            )
            .into_owned(),
        );
        in_list(&mut qb, ids);
        qb.build().execute(&mut *conn).await.map_err(db)?;
        Ok(done)
    }

    /// Millisecond precision, the sub-millisecond part of the age dropped.
    fn minus_micros(now: i64, age_us: i64) -> i64 {
        now - age_us / 1000
    }

    async fn purge_batch(outbox: &Outbox<Sqlite>, cutoff: &i64, limit: i64) -> Result<Option<(u64, u64)>> {
        let tables = outbox.tables();
        let delete = format!(
            "DELETE FROM outbox_message WHERE id IN \
             (SELECT id FROM outbox_message WHERE {FINISHED} AND updated_at <= ?1 LIMIT ?2) \
             AND {FINISHED} AND updated_at <= ?1"
        );
        let done = sqlx::query(&render(tables, &delete))
            .bind(cutoff)
            .bind(limit)
            .execute(outbox.pool())
            .await
            .map_err(db)?;
        Ok(Some((done.rows_affected(), done.rows_affected())))
    }
}

impl_admin!(Sqlite);
