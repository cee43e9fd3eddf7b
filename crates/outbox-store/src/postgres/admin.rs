//! Operations queries on PostgreSQL ([`MessageAdmin`](crate::MessageAdmin); the logic is
//! shared, see [`AdminSql`]).
//!
//! Single-message actions lock the row (`SELECT ... FOR UPDATE`), check its status and write it
//! and its delivery rows in one short transaction; the relay's claim skips the locked row
//! (`SKIP LOCKED`), so an action never races a claim. Bulk actions work in id-ordered batches,
//! each its own transaction or statement, with the status re-checked by the writing statement.

use super::render;
use crate::Tables;
use chrono::{DateTime, Utc};
use outbox_core::{OutboxMessage, Result, Status};
use sqlx::postgres::{PgConnection, PgRow, Postgres};
use sqlx::{Encode, Transaction, Type};

use super::{decode_message, MESSAGE_COLUMNS};
use crate::admin::{impl_admin, AdminSql};
use crate::error::db;
use crate::outbox::Outbox;

const REDRIVE: &str = "\
UPDATE outbox_message SET status = 'pending', attempts = 0, next_attempt_at = now(),
    lease_owner = NULL, lease_until = NULL, updated_at = now(), updated_by = $2
WHERE id = ANY($1) AND status = ANY($3)
RETURNING id";

const REDRIVE_DELIVERIES: &str = "\
UPDATE outbox_delivery SET status = 'pending', attempts = 0, next_attempt_at = now(), updated_at = now()
WHERE message_id = ANY($1) AND status IN ('failed', 'cancelled')";

/// The outer predicate repeats the inner one: a row changed since the sub-select read it (a
/// cancelled message re-driven meanwhile) is re-checked on its new version and kept.
const PURGE: &str = "\
DELETE FROM outbox_message
WHERE id IN (SELECT id FROM outbox_message
             WHERE status IN ('sent', 'acked', 'cancelled') AND updated_at <= $1 LIMIT $2)
  AND status IN ('sent', 'acked', 'cancelled') AND updated_at <= $1";

impl AdminSql for Postgres {
    const MESSAGE_COLUMNS: &'static str = MESSAGE_COLUMNS;
    const ALL: &'static str = "TRUE";
    const LOCK_PAGE: &'static str = "";
    const OLDEST_PENDING_MS: &'static str = "\
        SELECT (EXTRACT(EPOCH FROM (now() - MIN(created_at))) * 1000)::int8 \
        FROM outbox_message WHERE status IN ('pending', 'sending')";
    const DELIVERIES: &'static str = "\
        SELECT message_id, destination, status, attempts, next_attempt_at, last_attempt_at, last_error, \
        ack_deadline, acked_at, created_at, updated_at \
        FROM outbox_delivery WHERE message_id = $1 ORDER BY destination";
    const LOCK_STATUS: &'static str = "SELECT status FROM outbox_message WHERE id = $1 FOR UPDATE";
    const CANCEL: &'static str = "\
        UPDATE outbox_message SET status = 'cancelled', lease_owner = NULL, lease_until = NULL, \
        updated_at = now(), updated_by = $1 \
        WHERE id = $2 AND status IN ('pending', 'failed')";
    const CANCEL_DELIVERIES: &'static str = "\
        UPDATE outbox_delivery SET status = 'cancelled', updated_at = now() \
        WHERE message_id = $1 AND status IN ('pending', 'sending', 'failed')";
    const PAUSE: &'static str = "\
        INSERT INTO outbox_destination_pause (destination, paused_by, reason, paused_at) \
        VALUES ($1, $2, $3, now()) ON CONFLICT (destination) DO NOTHING";
    const BEAT: &'static str = "\
        INSERT INTO outbox_relay (owner, host, pid, version, state, started_at, last_claim_at, claimed, delivered, failed, seen_at) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, now()) ON CONFLICT (owner) DO UPDATE SET \
        host = EXCLUDED.host, pid = EXCLUDED.pid, version = EXCLUDED.version, state = EXCLUDED.state, started_at = EXCLUDED.started_at, \
        last_claim_at = EXCLUDED.last_claim_at, claimed = EXCLUDED.claimed, delivered = EXCLUDED.delivered, failed = EXCLUDED.failed, seen_at = EXCLUDED.seen_at";
    const OVERDUE_MS: &'static str = "\
        SELECT (EXTRACT(EPOCH FROM (now() - MIN(next_attempt_at))) * 1000)::int8 \
        FROM outbox_message WHERE status = 'pending' AND next_attempt_at <= now()";
    const RELAYS: &'static str = "\
        SELECT owner, host, pid, version, state, started_at, seen_at, last_claim_at, claimed, delivered, failed, \
        (EXTRACT(EPOCH FROM (now() - seen_at)) * 1000)::int8 AS silent_ms \
        FROM outbox_relay ORDER BY owner LIMIT 1000";

    fn affected(done: &sqlx::postgres::PgQueryResult) -> u64 {
        done.rows_affected()
    }

    const NOW: &'static str = "SELECT now()";

    type Time = DateTime<Utc>;

    fn time(t: DateTime<Utc>) -> DateTime<Utc> {
        t
    }

    fn opt_time(t: Option<DateTime<Utc>>) -> impl for<'q> Encode<'q, Self> + Type<Self> + Send + 'static {
        t
    }

    fn read_message(row: &PgRow) -> Result<OutboxMessage> {
        decode_message(row)
    }

    async fn begin(outbox: &Outbox<Postgres>) -> Result<Transaction<'static, Postgres>> {
        crate::begin::begin(outbox.pool()).await.map_err(db)
    }

    /// The update re-checks `from` on each row's latest version and returns the rows it
    /// re-drove; only their delivery rows are reset.
    async fn redrive(
        conn: &mut PgConnection,
        tables: &Tables,
        ids: &[i64],
        actor: &str,
        from: fn(Status) -> bool,
    ) -> Result<u64> {
        let redriven: Vec<i64> = sqlx::query_scalar(&render(tables, REDRIVE))
            .bind(ids)
            .bind(actor)
            .bind(Status::names_where(from))
            .fetch_all(&mut *conn)
            .await
            .map_err(db)?;
        if !redriven.is_empty() {
            sqlx::query(&render(tables, REDRIVE_DELIVERIES))
                .bind(&redriven)
                .execute(&mut *conn)
                .await
                .map_err(db)?;
        }
        Ok(redriven.len() as u64)
    }

    fn minus_micros(now: DateTime<Utc>, age_us: i64) -> DateTime<Utc> {
        now - chrono::Duration::microseconds(age_us)
    }

    async fn purge_batch(
        outbox: &Outbox<Postgres>,
        cutoff: &DateTime<Utc>,
        limit: i64,
    ) -> Result<Option<(u64, u64)>> {
        let tables = outbox.tables();
        let done = sqlx::query(&render(tables, PURGE))
            .bind(cutoff)
            .bind(limit)
            .execute(outbox.pool())
            .await
            .map_err(db)?;
        Ok(Some((done.rows_affected(), done.rows_affected())))
    }
}

impl_admin!(Postgres);
