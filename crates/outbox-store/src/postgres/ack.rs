//! ACK mode on PostgreSQL: overdue deliveries go back to `pending`; a consumer's ACK
//! completes its delivery, and the message once every destination is done.

use super::render;
use std::collections::HashSet;

use outbox_core::{MessageId, Result};
use sqlx::Postgres;

use crate::common::{expired_per_message, finish_ack, AckSql};
use crate::error::db;
use crate::outbox::Outbox;
use crate::relay::{AckOutcome, Acks};

/// ACK mode: sent deliveries whose ACK deadline has passed. Rows another transaction holds (an
/// ACK being recorded, another reaper) are skipped, never waited for.
const DUE_ACKS: &str = "\
SELECT message_id, destination, attempts FROM outbox_delivery
WHERE status = 'sent' AND ack_deadline IS NOT NULL AND ack_deadline <= now()
ORDER BY ack_deadline
LIMIT $1
FOR UPDATE SKIP LOCKED";

const EXPIRE_DELIVERIES: &str = "\
UPDATE outbox_delivery d
SET status = 'pending', attempts = d.attempts + 1, next_attempt_at = now(), ack_deadline = NULL,
    last_error = 'no ACK before the deadline', updated_at = now()
FROM unnest($1::int8[], $2::text[]) AS w(message_id, destination)
WHERE d.message_id = w.message_id AND d.destination = w.destination";

const EXPIRE_MESSAGES: &str = "\
UPDATE outbox_message m
SET status = 'pending', next_attempt_at = now(), attempts = GREATEST(m.attempts, w.attempts),
    last_error = '[' || w.destination || '] no ACK before the deadline',
    lease_owner = NULL, lease_until = NULL, updated_at = now()
FROM unnest($1::int8[], $2::text[], $3::int4[]) AS w(id, destination, attempts)
WHERE m.id = w.id AND m.status IN ('sent', 'acked')";

/// ACK mode, the SQL of each [`AckStep`]: a delivery row inserted `acked`, marked `acked`,
/// the message's deliveries still open, the message completed.
const INSERT_ACKED: &str =
    "INSERT INTO outbox_delivery (message_id, destination, status, acked_at, updated_at) \
     VALUES ($1, $2, 'acked', now(), now())";
const MARK_ACKED: &str =
    "UPDATE outbox_delivery SET status = 'acked', acked_at = now(), ack_deadline = NULL, \
     updated_at = now() WHERE message_id = $1 AND destination = $2";
const OPEN_DELIVERIES: &str = "SELECT COUNT(*) FROM outbox_delivery WHERE message_id = $1 \
     AND (status IN ('pending', 'sending') OR (status = 'sent' AND ack_deadline IS NOT NULL))";
const COMPLETE_MESSAGE: &str =
    "UPDATE outbox_message SET status = 'acked', updated_at = now() WHERE id = $1 AND status = 'sent'";

const ACK_SQL: AckSql =
    AckSql { insert: INSERT_ACKED, mark: MARK_ACKED, open: OPEN_DELIVERIES, complete: COMPLETE_MESSAGE };

impl Acks for Outbox<Postgres> {
    async fn expire_acks(&self, limit: usize) -> Result<u64> {
        let tables = self.tables();
        if limit == 0 {
            return Ok(0);
        }
        let mut tx = crate::begin::begin(self.pool()).await.map_err(db)?;
        let due: Vec<(i64, String, i32)> = sqlx::query_as(&render(tables, DUE_ACKS))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&mut *tx)
            .await
            .map_err(db)?;
        if due.is_empty() {
            tx.commit().await.map_err(db)?;
            return Ok(0);
        }
        // Lock order is message then delivery everywhere else (settle, ack): take the messages
        // with SKIP LOCKED so this never waits while holding delivery locks (no deadlock); a
        // delivery whose message is busy is left for the next pass.
        let mut ids: Vec<i64> = due.iter().map(|d| d.0).collect();
        ids.sort_unstable();
        ids.dedup();
        let free: HashSet<i64> = sqlx::query_scalar(&render(
            tables,
            "SELECT id FROM outbox_message WHERE id = ANY($1) ORDER BY id FOR UPDATE SKIP LOCKED",
        ))
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await
        .map_err(db)?
        .into_iter()
        .collect();
        let due: Vec<(i64, String, i32)> = due.into_iter().filter(|d| free.contains(&d.0)).collect();
        if due.is_empty() {
            tx.commit().await.map_err(db)?;
            return Ok(0);
        }
        let done = sqlx::query(&render(tables, EXPIRE_DELIVERIES))
            .bind(due.iter().map(|d| d.0).collect::<Vec<_>>())
            .bind(due.iter().map(|d| d.1.clone()).collect::<Vec<_>>())
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        let per_message = expired_per_message(&due);
        sqlx::query(&render(tables, EXPIRE_MESSAGES))
            .bind(per_message.keys().copied().collect::<Vec<_>>())
            .bind(per_message.values().map(|v| v.0.clone()).collect::<Vec<_>>())
            .bind(per_message.values().map(|v| v.1).collect::<Vec<_>>())
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)?;
        Ok(done.rows_affected())
    }

    async fn ack(&self, message_id: MessageId, destination: &str) -> Result<AckOutcome> {
        let tables = self.tables();
        let mut tx = crate::begin::begin(self.pool()).await.map_err(db)?;
        // The message first: two ACKs of the same message serialize here, so the last one sees
        // the other's delivery acked and completes the message.
        let msg: Option<String> =
            sqlx::query_scalar(&render(tables, "SELECT status FROM outbox_message WHERE id = $1 FOR UPDATE"))
                .bind(message_id.0)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db)?;
        let status: Option<String> = if msg.is_none() {
            None
        } else {
            sqlx::query_scalar(&render(
                tables,
                "SELECT status FROM outbox_delivery WHERE message_id = $1 AND destination = $2 FOR UPDATE",
            ))
            .bind(message_id.0)
            .bind(destination)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db)?
        };
        finish_ack(tx, &ACK_SQL, tables, msg.as_deref(), status.as_deref(), message_id.0, destination).await
    }
}
