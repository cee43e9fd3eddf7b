//! Operations queries on PostgreSQL ([`MessageAdmin`]).
//!
//! Single-message actions lock the row (`SELECT ... FOR UPDATE`), check its status and write it
//! and its delivery rows in one short transaction; the relay's claim skips the locked row
//! (`SKIP LOCKED`), so an action never races a claim. Bulk actions work in id-ordered batches,
//! each its own transaction or statement, with the status re-checked by the writing statement.

use std::time::Duration;

use chrono::{DateTime, Utc};
use outbox_core::{Error, MessageId, OutboxMessage, Result, Status};
use sqlx::postgres::{PgConnection, PgRow, Postgres};
use sqlx::{QueryBuilder, Row};

use super::{decode_message, get, MESSAGE_COLUMNS};
use crate::admin::{
    check_actor, check_age, check_batch, check_retry_filter, refused, report, DeliveryRecord,
    DestinationCount, ListFilter, MessageAdmin, MessageDetail, Progress, Stats, TopicCount,
};
use crate::common::parse_status;
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

const CANCEL: &str = "\
UPDATE outbox_message SET status = 'cancelled', lease_owner = NULL, lease_until = NULL,
    updated_at = now(), updated_by = $2
WHERE id = $1 AND status IN ('pending', 'failed')";

const CANCEL_DELIVERIES: &str = "\
UPDATE outbox_delivery SET status = 'cancelled', updated_at = now()
WHERE message_id = $1 AND status IN ('pending', 'sending', 'failed')";

/// The outer predicate repeats the inner one: a row changed since the sub-select read it (a
/// cancelled message re-driven meanwhile) is re-checked on its new version and kept.
const PURGE: &str = "\
DELETE FROM outbox_message
WHERE id IN (SELECT id FROM outbox_message
             WHERE status IN ('sent', 'acked', 'cancelled') AND updated_at <= $1 LIMIT $2)
  AND status IN ('sent', 'acked', 'cancelled') AND updated_at <= $1";

const DELIVERY_COLUMNS: &str = "message_id, destination, status, attempts, next_attempt_at, \
    last_attempt_at, last_error, ack_deadline, acked_at, created_at, updated_at";

/// Appends ` AND ...` for every filter set (all bound as parameters).
fn push_filter(qb: &mut QueryBuilder<'_, Postgres>, f: &ListFilter) {
    if let Some(s) = f.status {
        qb.push(" AND status = ").push_bind(s.as_str());
    }
    if let Some(t) = &f.topic {
        qb.push(" AND topic = ").push_bind(t.clone());
    }
    if let Some(t) = &f.biz_type {
        qb.push(" AND biz_type = ").push_bind(t.clone());
    }
    if let Some(k) = &f.biz_key {
        qb.push(" AND biz_key = ").push_bind(k.clone());
    }
    if let Some(k) = &f.key {
        qb.push(" AND msg_key = ").push_bind(k.clone());
    }
    if let Some(t) = f.created_after {
        qb.push(" AND created_at >= ").push_bind(t);
    }
    if let Some(t) = f.created_before {
        qb.push(" AND created_at < ").push_bind(t);
    }
    if let Some(id) = f.after_id {
        qb.push(" AND id > ").push_bind(id.0);
    }
}

fn count(row: &PgRow) -> Result<u64> {
    let n: i64 = row.try_get("n").map_err(db)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

fn status_of(row: &PgRow, table: &'static str) -> Result<Status> {
    let s: String = row.try_get("status").map_err(db)?;
    parse_status(table, String::new(), &s)
}

fn decode_delivery(row: &PgRow) -> Result<DeliveryRecord> {
    let message_id: i64 = row.try_get("message_id").map_err(db)?;
    let status: String = row.try_get("status").map_err(db)?;
    Ok(DeliveryRecord {
        message_id: MessageId(message_id),
        destination: row.try_get("destination").map_err(db)?,
        status: parse_status("outbox_delivery", message_id.to_string(), &status)?,
        attempts: row.try_get("attempts").map_err(db)?,
        next_attempt_at: row.try_get("next_attempt_at").map_err(db)?,
        last_attempt_at: row.try_get("last_attempt_at").map_err(db)?,
        last_error: row.try_get("last_error").map_err(db)?,
        ack_deadline: row.try_get("ack_deadline").map_err(db)?,
        acked_at: row.try_get("acked_at").map_err(db)?,
        created_at: row.try_get("created_at").map_err(db)?,
        updated_at: row.try_get("updated_at").map_err(db)?,
    })
}

/// Locks one message and returns its status (`None` when it does not exist).
async fn lock_status(conn: &mut PgConnection, id: MessageId) -> Result<Option<Status>> {
    let status: Option<String> =
        sqlx::query_scalar("SELECT status FROM outbox_message WHERE id = $1 FOR UPDATE")
            .bind(id.0)
            .fetch_optional(&mut *conn)
            .await
            .map_err(db)?;
    status.map(|s| parse_status("outbox_message", id.to_string(), &s)).transpose()
}

impl MessageAdmin for Outbox<Postgres> {
    async fn stats(&self) -> Result<Stats> {
        let pool = self.pool();
        let rows = sqlx::query("SELECT status, COUNT(*) AS n FROM outbox_message GROUP BY status")
            .fetch_all(pool)
            .await
            .map_err(db)?;
        let by_status = rows
            .iter()
            .map(|r| Ok((status_of(r, "outbox_message")?, count(r)?)))
            .collect::<Result<Vec<_>>>()?;
        let rows =
            sqlx::query("SELECT topic, status, COUNT(*) AS n FROM outbox_message GROUP BY topic, status")
                .fetch_all(pool)
                .await
                .map_err(db)?;
        let mut by_topic = rows
            .iter()
            .map(|r| {
                Ok(TopicCount {
                    topic: r.try_get("topic").map_err(db)?,
                    status: status_of(r, "outbox_message")?,
                    count: count(r)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        by_topic.sort_by(|a, b| (&a.topic, a.status).cmp(&(&b.topic, b.status)));
        let rows = sqlx::query(
            "SELECT destination, status, COUNT(*) AS n FROM outbox_delivery GROUP BY destination, status",
        )
        .fetch_all(pool)
        .await
        .map_err(db)?;
        let mut by_destination = rows
            .iter()
            .map(|r| {
                Ok(DestinationCount {
                    destination: r.try_get("destination").map_err(db)?,
                    status: status_of(r, "outbox_delivery")?,
                    count: count(r)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        by_destination.sort_by(|a, b| (&a.destination, a.status).cmp(&(&b.destination, b.status)));
        let oldest: Option<i64> = sqlx::query_scalar(
            "SELECT (EXTRACT(EPOCH FROM (now() - MIN(created_at))) * 1000)::int8 \
             FROM outbox_message WHERE status IN ('pending', 'sending')",
        )
        .fetch_one(pool)
        .await
        .map_err(db)?;
        Ok(Stats::from_counts(by_status, by_topic, by_destination, oldest))
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<OutboxMessage>> {
        filter.validate()?;
        let mut qb =
            QueryBuilder::<Postgres>::new(format!("SELECT {MESSAGE_COLUMNS} FROM outbox_message WHERE TRUE"));
        push_filter(&mut qb, filter);
        qb.push(" ORDER BY id LIMIT ").push_bind(filter.limit_i64());
        let rows = qb.build().fetch_all(self.pool()).await.map_err(db)?;
        rows.iter().map(decode_message).collect()
    }

    async fn show(&self, id: MessageId) -> Result<MessageDetail> {
        let mut conn = self.pool().acquire().await.map_err(db)?;
        let message = get(&mut conn, id).await?.ok_or(Error::NotFound { id })?;
        let sql = format!(
            "SELECT {DELIVERY_COLUMNS} FROM outbox_delivery WHERE message_id = $1 ORDER BY destination"
        );
        let rows = sqlx::query(&sql).bind(id.0).fetch_all(&mut *conn).await.map_err(db)?;
        let deliveries = rows.iter().map(decode_delivery).collect::<Result<Vec<_>>>()?;
        Ok(MessageDetail { message, deliveries })
    }

    async fn retry(&self, id: MessageId, actor: &str) -> Result<OutboxMessage> {
        check_actor(actor)?;
        let mut tx = self.pool().begin().await.map_err(db)?;
        let from = lock_status(&mut tx, id).await?;
        if !matches!(from, Some(Status::Failed | Status::Cancelled)) {
            return Err(refused(id, from, "retry"));
        }
        let ids = vec![id.0];
        sqlx::query(REDRIVE)
            .bind(&ids)
            .bind(actor)
            .bind(vec!["failed", "cancelled"])
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        sqlx::query(REDRIVE_DELIVERIES).bind(&ids).execute(&mut *tx).await.map_err(db)?;
        let message = get(&mut tx, id).await?.ok_or(Error::NotFound { id })?;
        tx.commit().await.map_err(db)?;
        self.signal().wake();
        Ok(message)
    }

    async fn retry_failed(
        &self,
        filter: &ListFilter,
        actor: &str,
        batch: usize,
        mut progress: Progress<'_>,
    ) -> Result<u64> {
        check_retry_filter(filter)?;
        check_actor(actor)?;
        let limit = check_batch(batch)?;
        let mut page = ListFilter { status: Some(Status::Failed), ..filter.clone() };
        let mut total = 0_u64;
        loop {
            let mut tx = self.pool().begin().await.map_err(db)?;
            let mut qb = QueryBuilder::<Postgres>::new("SELECT id FROM outbox_message WHERE TRUE");
            push_filter(&mut qb, &page);
            qb.push(" ORDER BY id LIMIT ").push_bind(limit);
            let ids: Vec<i64> = qb.build_query_scalar().fetch_all(&mut *tx).await.map_err(db)?;
            let Some(&last) = ids.last() else {
                tx.commit().await.map_err(db)?;
                break;
            };
            // The update re-checks `failed` on each row's latest version and returns the rows it
            // re-drove; only their delivery rows are reset.
            let redriven: Vec<i64> = sqlx::query_scalar(REDRIVE)
                .bind(&ids)
                .bind(actor)
                .bind(vec!["failed"])
                .fetch_all(&mut *tx)
                .await
                .map_err(db)?;
            if !redriven.is_empty() {
                sqlx::query(REDRIVE_DELIVERIES).bind(&redriven).execute(&mut *tx).await.map_err(db)?;
            }
            tx.commit().await.map_err(db)?;
            total += redriven.len() as u64;
            report(&mut progress, total);
            if ids.len() < batch {
                break;
            }
            page.after_id = Some(MessageId(last));
        }
        if total > 0 {
            self.signal().wake();
        }
        Ok(total)
    }

    async fn cancel(&self, id: MessageId, actor: &str) -> Result<OutboxMessage> {
        check_actor(actor)?;
        let mut tx = self.pool().begin().await.map_err(db)?;
        let from = lock_status(&mut tx, id).await?;
        if !matches!(from, Some(Status::Pending | Status::Failed)) {
            return Err(refused(id, from, "cancel"));
        }
        sqlx::query(CANCEL).bind(id.0).bind(actor).execute(&mut *tx).await.map_err(db)?;
        sqlx::query(CANCEL_DELIVERIES).bind(id.0).execute(&mut *tx).await.map_err(db)?;
        let message = get(&mut tx, id).await?.ok_or(Error::NotFound { id })?;
        tx.commit().await.map_err(db)?;
        Ok(message)
    }

    async fn purge(&self, older_than: Duration, batch: usize, mut progress: Progress<'_>) -> Result<u64> {
        let age_us = check_age(older_than)?;
        let limit = check_batch(batch)?;
        let now: DateTime<Utc> =
            sqlx::query_scalar("SELECT now()").fetch_one(self.pool()).await.map_err(db)?;
        let cutoff = now - chrono::Duration::microseconds(age_us);
        let mut total = 0_u64;
        loop {
            let done = sqlx::query(PURGE)
                .bind(cutoff)
                .bind(limit)
                .execute(self.pool())
                .await
                .map_err(db)?
                .rows_affected();
            total += done;
            report(&mut progress, total);
            if done < batch as u64 {
                break;
            }
        }
        Ok(total)
    }
}
