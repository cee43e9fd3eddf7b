//! Operations queries on MySQL 8 / MariaDB 10.6+ ([`MessageAdmin`]).
//!
//! Transactions that lock rows run under READ COMMITTED, like the relay's claim: under the
//! default REPEATABLE READ a locking read of a range would take gap locks and block the
//! application's INSERTs. Single-message actions lock the row by primary key, check its status
//! and write it and its delivery rows in one short transaction (the relay's claim skips the
//! locked row). MySQL cannot `LIMIT` inside an `IN (subquery)`, so purge selects a batch of ids
//! first, then deletes exactly those (re-checking status and age on each row's latest version).
//! Text columns are read as bytes (`utf8mb4_bin`, see the module docs of [`crate::mysql`]).

use std::time::Duration;

use chrono::{DateTime, Utc};
use outbox_core::{Error, MessageId, OutboxMessage, Result, Status};
use sqlx::mysql::{MySql, MySqlConnection, MySqlRow};
use sqlx::{QueryBuilder, Row, Transaction};

use super::{decode_message, get, opt_text, text, MESSAGE_COLUMNS};
use crate::admin::{
    check_actor, check_age, check_batch, check_retry_filter, refused, report, DeliveryRecord,
    DestinationCount, ListFilter, MessageAdmin, MessageDetail, Progress, Stats, TopicCount,
};
use crate::common::parse_status;
use crate::error::db;
use crate::outbox::Outbox;

const FINISHED: &str = "status IN ('sent', 'acked', 'cancelled')";

const DELIVERY_COLUMNS: &str = "message_id, destination, status, attempts, next_attempt_at, \
    last_attempt_at, last_error, ack_deadline, acked_at, created_at, updated_at";

/// Appends ` AND ...` for every filter set (all bound as parameters).
fn push_filter(qb: &mut QueryBuilder<'_, MySql>, f: &ListFilter) {
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

fn in_list(qb: &mut QueryBuilder<'_, MySql>, ids: &[i64]) {
    qb.push("(");
    let mut sep = qb.separated(", ");
    for id in ids {
        sep.push_bind(*id);
    }
    sep.push_unseparated(")");
}

async fn begin_read_committed(outbox: &Outbox<MySql>) -> Result<Transaction<'static, MySql>> {
    let mut conn = outbox.pool().acquire().await.map_err(db)?;
    // Applies to the next transaction on this connection only.
    sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED").execute(&mut *conn).await.map_err(db)?;
    Transaction::begin(conn, None).await.map_err(db)
}

fn count(row: &MySqlRow) -> Result<u64> {
    let n: i64 = row.try_get("n").map_err(db)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

fn status_of(row: &MySqlRow, table: &'static str) -> Result<Status> {
    parse_status(table, String::new(), &text(row, "status")?)
}

fn decode_delivery(row: &MySqlRow) -> Result<DeliveryRecord> {
    let message_id: i64 = row.try_get("message_id").map_err(db)?;
    Ok(DeliveryRecord {
        message_id: MessageId(message_id),
        destination: text(row, "destination")?,
        status: parse_status("outbox_delivery", message_id.to_string(), &text(row, "status")?)?,
        attempts: row.try_get("attempts").map_err(db)?,
        next_attempt_at: row.try_get("next_attempt_at").map_err(db)?,
        last_attempt_at: row.try_get("last_attempt_at").map_err(db)?,
        last_error: opt_text(row, "last_error")?,
        ack_deadline: row.try_get("ack_deadline").map_err(db)?,
        acked_at: row.try_get("acked_at").map_err(db)?,
        created_at: row.try_get("created_at").map_err(db)?,
        updated_at: row.try_get("updated_at").map_err(db)?,
    })
}

/// Locks one message by primary key and returns its status (`None` when it does not exist).
async fn lock_status(conn: &mut MySqlConnection, id: MessageId) -> Result<Option<Status>> {
    let row = sqlx::query("SELECT status FROM outbox_message WHERE id = ? FOR UPDATE")
        .bind(id.0)
        .fetch_optional(&mut *conn)
        .await
        .map_err(db)?;
    row.map(|r| parse_status("outbox_message", id.to_string(), &text(&r, "status")?)).transpose()
}

/// Re-drives messages already locked and checked by the caller, with their delivery rows.
async fn redrive(conn: &mut MySqlConnection, ids: &[i64], actor: &str) -> Result<u64> {
    let mut qb = QueryBuilder::<MySql>::new(
        "UPDATE outbox_message SET status = 'pending', attempts = 0, next_attempt_at = UTC_TIMESTAMP(6), \
         lease_owner = NULL, lease_until = NULL, updated_at = UTC_TIMESTAMP(6), updated_by = ",
    );
    qb.push_bind(actor.to_owned());
    qb.push(" WHERE id IN ");
    in_list(&mut qb, ids);
    let done = qb.build().execute(&mut *conn).await.map_err(db)?.rows_affected();
    let mut qb = QueryBuilder::<MySql>::new(
        "UPDATE outbox_delivery SET status = 'pending', attempts = 0, next_attempt_at = UTC_TIMESTAMP(6), \
         updated_at = UTC_TIMESTAMP(6) WHERE status IN ('failed', 'cancelled') AND message_id IN ",
    );
    in_list(&mut qb, ids);
    qb.build().execute(&mut *conn).await.map_err(db)?;
    Ok(done)
}

impl MessageAdmin for Outbox<MySql> {
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
                    topic: text(r, "topic")?,
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
                    destination: text(r, "destination")?,
                    status: status_of(r, "outbox_delivery")?,
                    count: count(r)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        by_destination.sort_by(|a, b| (&a.destination, a.status).cmp(&(&b.destination, b.status)));
        let oldest: Option<i64> = sqlx::query_scalar(
            "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, MIN(created_at), UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED) \
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
            QueryBuilder::<MySql>::new(format!("SELECT {MESSAGE_COLUMNS} FROM outbox_message WHERE TRUE"));
        push_filter(&mut qb, filter);
        qb.push(" ORDER BY id LIMIT ").push_bind(filter.limit_i64());
        let rows = qb.build().fetch_all(self.pool()).await.map_err(db)?;
        rows.iter().map(decode_message).collect()
    }

    async fn show(&self, id: MessageId) -> Result<MessageDetail> {
        let mut conn = self.pool().acquire().await.map_err(db)?;
        let message = get(&mut conn, id).await?.ok_or(Error::NotFound { id })?;
        let sql = format!(
            "SELECT {DELIVERY_COLUMNS} FROM outbox_delivery WHERE message_id = ? ORDER BY destination"
        );
        let rows = sqlx::query(&sql).bind(id.0).fetch_all(&mut *conn).await.map_err(db)?;
        let deliveries = rows.iter().map(decode_delivery).collect::<Result<Vec<_>>>()?;
        Ok(MessageDetail { message, deliveries })
    }

    async fn retry(&self, id: MessageId, actor: &str) -> Result<OutboxMessage> {
        check_actor(actor)?;
        let mut tx = begin_read_committed(self).await?;
        let from = lock_status(&mut tx, id).await?;
        if !matches!(from, Some(Status::Failed | Status::Cancelled)) {
            return Err(refused(id, from, "retry"));
        }
        redrive(&mut tx, &[id.0], actor).await?;
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
            let mut tx = begin_read_committed(self).await?;
            // A locking read returns each row's latest committed version: these are `failed`
            // now and stay so until the commit.
            let mut qb = QueryBuilder::<MySql>::new("SELECT id FROM outbox_message WHERE TRUE");
            push_filter(&mut qb, &page);
            qb.push(" ORDER BY id LIMIT ").push_bind(limit);
            qb.push(" FOR UPDATE");
            let ids: Vec<i64> = qb.build_query_scalar().fetch_all(&mut *tx).await.map_err(db)?;
            let Some(&last) = ids.last() else {
                tx.commit().await.map_err(db)?;
                break;
            };
            let done = redrive(&mut tx, &ids, actor).await?;
            tx.commit().await.map_err(db)?;
            total += done;
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
        let mut tx = begin_read_committed(self).await?;
        let from = lock_status(&mut tx, id).await?;
        if !matches!(from, Some(Status::Pending | Status::Failed)) {
            return Err(refused(id, from, "cancel"));
        }
        sqlx::query(
            "UPDATE outbox_message SET status = 'cancelled', lease_owner = NULL, lease_until = NULL, \
             updated_at = UTC_TIMESTAMP(6), updated_by = ? WHERE id = ?",
        )
        .bind(actor)
        .bind(id.0)
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        sqlx::query(
            "UPDATE outbox_delivery SET status = 'cancelled', updated_at = UTC_TIMESTAMP(6) \
             WHERE message_id = ? AND status IN ('pending', 'sending', 'failed')",
        )
        .bind(id.0)
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        let message = get(&mut tx, id).await?.ok_or(Error::NotFound { id })?;
        tx.commit().await.map_err(db)?;
        Ok(message)
    }

    async fn purge(&self, older_than: Duration, batch: usize, mut progress: Progress<'_>) -> Result<u64> {
        let age_us = check_age(older_than)?;
        let limit = check_batch(batch)?;
        let now: DateTime<Utc> =
            sqlx::query_scalar("SELECT UTC_TIMESTAMP(6)").fetch_one(self.pool()).await.map_err(db)?;
        let cutoff = now - chrono::Duration::microseconds(age_us);
        let select = format!("SELECT id FROM outbox_message WHERE {FINISHED} AND updated_at <= ? LIMIT ?");
        let mut total = 0_u64;
        loop {
            let ids: Vec<i64> = sqlx::query_scalar(&select)
                .bind(cutoff)
                .bind(limit)
                .fetch_all(self.pool())
                .await
                .map_err(db)?;
            if ids.is_empty() {
                break;
            }
            let mut qb = QueryBuilder::<MySql>::new("DELETE FROM outbox_message WHERE id IN ");
            in_list(&mut qb, &ids);
            qb.push(format!(" AND {FINISHED} AND updated_at <= ")).push_bind(cutoff);
            total += qb.build().execute(self.pool()).await.map_err(db)?.rows_affected();
            report(&mut progress, total);
            if ids.len() < batch {
                break;
            }
        }
        Ok(total)
    }
}
