//! Operations queries on SQLite ([`MessageAdmin`]).
//!
//! Writes run in `BEGIN IMMEDIATE` transactions (SQLite has one writer: the check of a
//! message's status and its change cannot interleave with a claim). Timestamps are INTEGER
//! milliseconds; the database's clock (`julianday('now')`) is the only clock. Purge relies on
//! `PRAGMA foreign_keys = ON` (set by [`super::connect_options`]) to cascade to `outbox_delivery`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use outbox_core::{Error, MessageId, OutboxMessage, Result, Status};
use sqlx::sqlite::{Sqlite, SqliteConnection, SqliteRow};
use sqlx::{Connection, QueryBuilder, Row};

use super::{from_millis, get, read_message, MESSAGE_COLUMNS};
use crate::admin::{
    check_actor, check_age, check_batch, check_retry_filter, refused, report, DeliveryRecord,
    DestinationCount, ListFilter, MessageAdmin, MessageDetail, Progress, Stats, TopicCount,
};
use crate::common::parse_status;
use crate::error::db;
use crate::outbox::Outbox;

macro_rules! now_ms {
    () => {
        "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
    };
}

const FINISHED: &str = "status IN ('sent', 'acked', 'cancelled')";

const DELIVERY_COLUMNS: &str = "message_id, destination, status, attempts, next_attempt_at, \
    last_attempt_at, last_error, ack_deadline, acked_at, created_at, updated_at";

/// Appends ` AND ...` for every filter set (all bound as parameters).
fn push_filter(qb: &mut QueryBuilder<'_, Sqlite>, f: &ListFilter) {
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
        qb.push(" AND created_at >= ").push_bind(t.timestamp_millis());
    }
    if let Some(t) = f.created_before {
        qb.push(" AND created_at < ").push_bind(t.timestamp_millis());
    }
    if let Some(id) = f.after_id {
        qb.push(" AND id > ").push_bind(id.0);
    }
}

fn in_list(qb: &mut QueryBuilder<'_, Sqlite>, ids: &[i64]) {
    qb.push("(");
    let mut sep = qb.separated(", ");
    for id in ids {
        sep.push_bind(*id);
    }
    sep.push_unseparated(")");
}

fn count(row: &SqliteRow) -> Result<u64> {
    let n: i64 = row.try_get("n").map_err(db)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

fn status_of(row: &SqliteRow, table: &'static str) -> Result<Status> {
    let s: String = row.try_get("status").map_err(db)?;
    parse_status(table, String::new(), &s)
}

fn decode_delivery(row: &SqliteRow) -> Result<DeliveryRecord> {
    let message_id: i64 = row.try_get("message_id").map_err(db)?;
    let malformed =
        |reason: String| Error::MalformedRow { table: "outbox_delivery", id: message_id.to_string(), reason };
    let time = |col: &'static str| -> Result<DateTime<Utc>> {
        let ms: i64 = row.try_get(col).map_err(db)?;
        from_millis(ms).ok_or_else(|| malformed(format!("{col} = {ms} is not a valid time")))
    };
    let opt_time = |col: &'static str| -> Result<Option<DateTime<Utc>>> {
        let ms: Option<i64> = row.try_get(col).map_err(db)?;
        ms.map(|ms| from_millis(ms).ok_or_else(|| malformed(format!("{col} = {ms} is not a valid time"))))
            .transpose()
    };
    let status: String = row.try_get("status").map_err(db)?;
    Ok(DeliveryRecord {
        message_id: MessageId(message_id),
        destination: row.try_get("destination").map_err(db)?,
        status: parse_status("outbox_delivery", message_id.to_string(), &status)?,
        attempts: row.try_get("attempts").map_err(db)?,
        next_attempt_at: time("next_attempt_at")?,
        last_attempt_at: opt_time("last_attempt_at")?,
        last_error: row.try_get("last_error").map_err(db)?,
        ack_deadline: opt_time("ack_deadline")?,
        acked_at: opt_time("acked_at")?,
        created_at: time("created_at")?,
        updated_at: time("updated_at")?,
    })
}

/// The status of one message (`None` when it does not exist); inside `BEGIN IMMEDIATE`, nothing
/// can change it before the transaction ends.
async fn status(conn: &mut SqliteConnection, id: MessageId) -> Result<Option<Status>> {
    let status: Option<String> = sqlx::query_scalar("SELECT status FROM outbox_message WHERE id = ?1")
        .bind(id.0)
        .fetch_optional(&mut *conn)
        .await
        .map_err(db)?;
    status.map(|s| parse_status("outbox_message", id.to_string(), &s)).transpose()
}

/// Re-drives messages checked by the caller, with their delivery rows.
async fn redrive(conn: &mut SqliteConnection, ids: &[i64], actor: &str) -> Result<u64> {
    let mut qb = QueryBuilder::<Sqlite>::new(concat!(
        "UPDATE outbox_message SET status = 'pending', attempts = 0, next_attempt_at = ",
        now_ms!(),
        ", lease_owner = NULL, lease_until = NULL, updated_at = ",
        now_ms!(),
        ", updated_by = "
    ));
    qb.push_bind(actor.to_owned());
    qb.push(" WHERE id IN ");
    in_list(&mut qb, ids);
    let done = qb.build().execute(&mut *conn).await.map_err(db)?.rows_affected();
    let mut qb = QueryBuilder::<Sqlite>::new(concat!(
        "UPDATE outbox_delivery SET status = 'pending', attempts = 0, next_attempt_at = ",
        now_ms!(),
        ", updated_at = ",
        now_ms!(),
        " WHERE status IN ('failed', 'cancelled') AND message_id IN "
    ));
    in_list(&mut qb, ids);
    qb.build().execute(&mut *conn).await.map_err(db)?;
    Ok(done)
}

impl MessageAdmin for Outbox<Sqlite> {
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
        let oldest: Option<i64> = sqlx::query_scalar(concat!(
            "SELECT ",
            now_ms!(),
            " - MIN(created_at) FROM outbox_message WHERE status IN ('pending', 'sending')"
        ))
        .fetch_one(pool)
        .await
        .map_err(db)?;
        Ok(Stats::from_counts(by_status, by_topic, by_destination, oldest))
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<OutboxMessage>> {
        filter.validate()?;
        let mut qb =
            QueryBuilder::<Sqlite>::new(format!("SELECT {MESSAGE_COLUMNS} FROM outbox_message WHERE 1"));
        push_filter(&mut qb, filter);
        qb.push(" ORDER BY id LIMIT ").push_bind(filter.limit_i64());
        let rows = qb.build().fetch_all(self.pool()).await.map_err(db)?;
        rows.iter().map(read_message).collect()
    }

    async fn show(&self, id: MessageId) -> Result<MessageDetail> {
        let mut conn = self.pool().acquire().await.map_err(db)?;
        let message = get(&mut conn, id).await?.ok_or(Error::NotFound { id })?;
        let sql = format!(
            "SELECT {DELIVERY_COLUMNS} FROM outbox_delivery WHERE message_id = ?1 ORDER BY destination"
        );
        let rows = sqlx::query(&sql).bind(id.0).fetch_all(&mut *conn).await.map_err(db)?;
        let deliveries = rows.iter().map(decode_delivery).collect::<Result<Vec<_>>>()?;
        Ok(MessageDetail { message, deliveries })
    }

    async fn retry(&self, id: MessageId, actor: &str) -> Result<OutboxMessage> {
        check_actor(actor)?;
        let mut conn = self.pool().acquire().await.map_err(db)?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.map_err(db)?;
        let from = status(&mut tx, id).await?;
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
            let mut conn = self.pool().acquire().await.map_err(db)?;
            let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.map_err(db)?;
            let mut qb = QueryBuilder::<Sqlite>::new("SELECT id FROM outbox_message WHERE 1");
            push_filter(&mut qb, &page);
            qb.push(" ORDER BY id LIMIT ").push_bind(limit);
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
        let mut conn = self.pool().acquire().await.map_err(db)?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.map_err(db)?;
        let from = status(&mut tx, id).await?;
        if !matches!(from, Some(Status::Pending | Status::Failed)) {
            return Err(refused(id, from, "cancel"));
        }
        sqlx::query(concat!(
            "UPDATE outbox_message SET status = 'cancelled', lease_owner = NULL, lease_until = NULL, updated_at = ",
            now_ms!(),
            ", updated_by = ?1 WHERE id = ?2"
        ))
        .bind(actor)
        .bind(id.0)
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        sqlx::query(concat!(
            "UPDATE outbox_delivery SET status = 'cancelled', updated_at = ",
            now_ms!(),
            " WHERE message_id = ?1 AND status IN ('pending', 'sending', 'failed')"
        ))
        .bind(id.0)
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        let message = get(&mut tx, id).await?.ok_or(Error::NotFound { id })?;
        tx.commit().await.map_err(db)?;
        Ok(message)
    }

    async fn purge(&self, older_than: Duration, batch: usize, mut progress: Progress<'_>) -> Result<u64> {
        let age_ms = check_age(older_than)? / 1000;
        let limit = check_batch(batch)?;
        let now: i64 =
            sqlx::query_scalar(concat!("SELECT ", now_ms!())).fetch_one(self.pool()).await.map_err(db)?;
        let cutoff = now - age_ms;
        let delete = format!(
            "DELETE FROM outbox_message WHERE id IN \
             (SELECT id FROM outbox_message WHERE {FINISHED} AND updated_at <= ?1 LIMIT ?2) \
             AND {FINISHED} AND updated_at <= ?1"
        );
        let mut total = 0_u64;
        loop {
            let done = sqlx::query(&delete)
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
