//! ACK mode on MySQL/MariaDB: overdue deliveries go back to `pending`; a consumer's ACK
//! completes its delivery, and the message once every destination is done.

use super::render;
use std::collections::HashSet;

use outbox_core::{MessageId, Result};
use sqlx::{MySql, QueryBuilder, Row};

use super::{begin_read_committed, in_list, text};
use crate::common::{expire_each, finish_ack, AckSql, ExpireSql};
use crate::error::db;
use crate::outbox::Outbox;
use crate::relay::{AckOutcome, Acks};

/// ACK mode, the SQL of each [`AckStep`]: a delivery row inserted `acked`, marked `acked`,
/// the message's deliveries still open, the message completed.
const INSERT_ACKED: &str =
    "INSERT INTO outbox_delivery (message_id, destination, status, acked_at, updated_at) \
     VALUES (?, ?, 'acked', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))";
const MARK_ACKED: &str =
    "UPDATE outbox_delivery SET status = 'acked', acked_at = UTC_TIMESTAMP(6), ack_deadline = NULL, \
     updated_at = UTC_TIMESTAMP(6) WHERE message_id = ? AND destination = ?";
const OPEN_DELIVERIES: &str = "SELECT COUNT(*) FROM outbox_delivery WHERE message_id = ? \
     AND (status IN ('pending', 'sending') OR (status = 'sent' AND ack_deadline IS NOT NULL))";
const COMPLETE_MESSAGE: &str = "UPDATE outbox_message SET status = 'acked', updated_at = UTC_TIMESTAMP(6) WHERE id = ? AND status = 'sent'";

/// ACK mode, an overdue delivery back to `pending`, then its message.
const EXPIRE_SQL: ExpireSql = ExpireSql {
    delivery: "UPDATE outbox_delivery SET status = 'pending', attempts = attempts + 1, \
        next_attempt_at = UTC_TIMESTAMP(6), ack_deadline = NULL, \
        last_error = 'no ACK before the deadline', updated_at = UTC_TIMESTAMP(6) \
        WHERE message_id = ? AND destination = ?",
    message: "UPDATE outbox_message SET status = 'pending', next_attempt_at = UTC_TIMESTAMP(6), \
        attempts = GREATEST(attempts, ?), last_error = CONCAT('[', ?, '] no ACK before the deadline'), \
        lease_owner = NULL, lease_until = NULL, updated_at = UTC_TIMESTAMP(6) \
        WHERE id = ? AND status IN ('sent', 'acked')",
};

const ACK_SQL: AckSql =
    AckSql { insert: INSERT_ACKED, mark: MARK_ACKED, open: OPEN_DELIVERIES, complete: COMPLETE_MESSAGE };

impl Acks for Outbox<MySql> {
    async fn expire_acks(&self, limit: usize) -> Result<u64> {
        let tables = self.tables();
        if limit == 0 {
            return Ok(0);
        }
        // READ COMMITTED: the locking read locks only the rows it returns (no gap locks), and
        // SKIP LOCKED passes over deliveries an ACK or another reaper holds.
        let mut tx = begin_read_committed(self).await?;
        let rows = sqlx::query(&render(
            tables,
            "SELECT message_id, destination, attempts FROM outbox_delivery \
             WHERE status = 'sent' AND ack_deadline IS NOT NULL AND ack_deadline <= UTC_TIMESTAMP(6) \
             ORDER BY ack_deadline LIMIT ? FOR UPDATE SKIP LOCKED",
        ))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&mut *tx)
        .await
        .map_err(db)?;
        let due = rows
            .iter()
            .map(|r| {
                Ok((
                    r.try_get::<i64, _>("message_id").map_err(db)?,
                    text(r, "destination")?,
                    r.try_get::<i32, _>("attempts").map_err(db)?,
                ))
            })
            .collect::<Result<Vec<(i64, String, i32)>>>()?;
        if due.is_empty() {
            tx.commit().await.map_err(db)?;
            return Ok(0);
        }
        // Message then delivery is the lock order of settle and ack: take the messages with
        // SKIP LOCKED so this never waits while holding delivery locks; a delivery whose
        // message is busy is left for the next pass.
        let mut qb = QueryBuilder::<MySql>::new(
            render(tables, "SELECT id FROM outbox_message WHERE id IN ").into_owned(),
        );
        in_list(&mut qb, due.iter().map(|d| d.0).collect::<HashSet<_>>());
        qb.push(" ORDER BY id FOR UPDATE SKIP LOCKED");
        let free: HashSet<i64> =
            qb.build_query_scalar::<i64>().fetch_all(&mut *tx).await.map_err(db)?.into_iter().collect();
        let due: Vec<(i64, String, i32)> = due.into_iter().filter(|d| free.contains(&d.0)).collect();
        let expired = expire_each::<MySql>(&mut tx, &EXPIRE_SQL, tables, &due).await?;
        tx.commit().await.map_err(db)?;
        Ok(expired)
    }

    async fn ack(&self, message_id: MessageId, destination: &str) -> Result<AckOutcome> {
        let tables = self.tables();
        let mut tx = begin_read_committed(self).await?;
        // The message first: two ACKs of the same message serialize here, so the last one sees
        // the other's delivery acked and completes the message.
        let msg = sqlx::query(&render(tables, "SELECT status FROM outbox_message WHERE id = ? FOR UPDATE"))
            .bind(message_id.0)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db)?;
        let msg_status = msg.as_ref().map(|r| text(r, "status")).transpose()?;
        let status = match msg {
            None => None,
            Some(_) => sqlx::query(&render(
                tables,
                "SELECT status FROM outbox_delivery WHERE message_id = ? AND destination = ? FOR UPDATE",
            ))
            .bind(message_id.0)
            .bind(destination)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db)?
            .map(|r| text(&r, "status"))
            .transpose()?,
        };
        finish_ack(tx, &ACK_SQL, tables, msg_status.as_deref(), status.as_deref(), message_id.0, destination)
            .await
    }
}
