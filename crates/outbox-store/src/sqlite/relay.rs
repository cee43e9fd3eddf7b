//! The relay's queries on SQLite. One writer at a time: each claim is a single atomic `UPDATE`
//! statement (no `SKIP LOCKED` needed), and settlements run in `BEGIN IMMEDIATE` transactions so
//! a reader never has to upgrade to a writer mid-transaction (which SQLite answers with BUSY).

use super::render;
use crate::Tables;
use std::collections::HashSet;
use std::time::Duration;

use outbox_core::{MessageId, OutboxMessage, Result};
use sqlx::sqlite::Sqlite;
use sqlx::{QueryBuilder, Row};

use super::decode_message;
use crate::begin::begin_with;
use crate::common::{decode_rows, release_leases, FailSql};
use crate::common::{expire_each, finish_ack, AckSql, ExpireSql};
use crate::error::db;
use crate::outbox::Outbox;
use crate::relay::{runs, settle_isolated, SettleWrites};
use crate::relay::{
    AckOutcome, Acks, ClaimMode, Claimed, Claims, DeliveryState, Hold, NoLocks, SettleReport, Settlement,
    Wakeups,
};
use crate::signal::CommitSignal;
use sqlx::sqlite::SqliteConnection;

macro_rules! now_ms {
    () => {
        "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
    };
}

/// ACK mode, the SQL of each [`AckStep`]: a delivery row inserted `acked`, marked `acked`,
/// the message's deliveries still open, the message completed.
const ACK_INSERT: &str = concat!(
    "INSERT INTO outbox_delivery (message_id, destination, status, acked_at, updated_at) VALUES (?1, ?2, 'acked', ",
    now_ms!(),
    ", ",
    now_ms!(),
    ")"
);
const ACK_MARK: &str = concat!(
    "UPDATE outbox_delivery SET status = 'acked', ack_deadline = NULL, acked_at = ",
    now_ms!(),
    ", updated_at = ",
    now_ms!(),
    " WHERE message_id = ?1 AND destination = ?2"
);
const ACK_OPEN_DELIVERIES: &str = "SELECT COUNT(*) FROM outbox_delivery WHERE message_id = ?1 \
     AND (status IN ('pending', 'sending') OR (status = 'sent' AND ack_deadline IS NOT NULL))";
const ACK_COMPLETE_MESSAGE: &str = concat!(
    "UPDATE outbox_message SET status = 'acked', updated_at = ",
    now_ms!(),
    " WHERE id = ?1 AND status = 'sent'"
);
const ACK_SQL: AckSql =
    AckSql { insert: ACK_INSERT, mark: ACK_MARK, open: ACK_OPEN_DELIVERIES, complete: ACK_COMPLETE_MESSAGE };

/// The columns a claim returns, in `decode_message`'s terms.
macro_rules! returned {
    () => {
        "id, biz_type, biz_key, topic, msg_key, tag, headers, payload, status, attempts, max_attempts,
          next_attempt_at, last_attempt_at, last_error, lease_owner, lease_until, created_by, updated_by,
          created_at, updated_at"
    };
}
const RETURNED: &str = returned!();

/// Candidates come from the heads among the first `?4` due rows, the due rows without a key,
/// and (only when that window is full and holds fewer than `?2` heads: rows held back by an
/// older message of their key) the head of every open key by a loose index scan: see the
/// PostgreSQL claim for why.
///
/// Every probe of a key names the open-key index (`INDEXED BY`) and reads the key's first open
/// entry in `(msg_key, id)` order. Left to the planner, statistics taken while the whole table
/// was one open backlog (`ANALYZE`, or `PRAGMA optimize`) make the partial index look no better
/// than the table, and the head probes walked the primary key from the lowest id through every
/// message already sent, or scanned the table: 1.39 s per claim at 20,000 rows on one key
/// (half sent), 1.3 ms with the index named. The index is the schema's own, so naming it cannot
/// fail on a migrated database.
const CLAIM: &str = concat!(
    "WITH RECURSIVE win AS (
    SELECT m.id, m.msg_key FROM outbox_message m
    WHERE m.status IN ('pending', 'sending') AND m.next_attempt_at <= ",
    now_ms!(),
    "
    ORDER BY m.next_attempt_at, m.id
    LIMIT ?4
), win_heads AS (
    SELECT w.id FROM win w
    WHERE w.msg_key IS NULL OR w.id = (
        SELECT o.id FROM outbox_message o INDEXED BY outbox_message_open_key_idx
        WHERE o.msg_key = w.msg_key AND o.status IN ('pending', 'sending', 'failed')
        ORDER BY o.msg_key, o.id LIMIT 1)
), nokey AS (
    SELECT m.id FROM outbox_message m
    WHERE m.msg_key IS NULL AND m.status IN ('pending', 'sending') AND m.next_attempt_at <= ",
    now_ms!(),
    "
    ORDER BY m.next_attempt_at, m.id
    LIMIT ?2
), open_keys(k) AS (
    SELECT (SELECT o.msg_key FROM outbox_message o INDEXED BY outbox_message_open_key_idx
            WHERE o.msg_key IS NOT NULL AND o.status IN ('pending', 'sending', 'failed')
            ORDER BY o.msg_key LIMIT 1)
    WHERE (SELECT count(*) FROM win) >= ?4 AND (SELECT count(*) FROM win_heads) < ?2
    UNION ALL
    SELECT (SELECT o.msg_key FROM outbox_message o INDEXED BY outbox_message_open_key_idx
            WHERE o.msg_key > open_keys.k AND o.status IN ('pending', 'sending', 'failed')
            ORDER BY o.msg_key LIMIT 1)
    FROM open_keys WHERE open_keys.k IS NOT NULL
), heads AS (
    SELECT (SELECT o.id FROM outbox_message o INDEXED BY outbox_message_open_key_idx
            WHERE o.msg_key = open_keys.k AND o.status IN ('pending', 'sending', 'failed')
            ORDER BY o.msg_key, o.id LIMIT 1) AS id
    FROM open_keys WHERE open_keys.k IS NOT NULL
), cand AS (
    SELECT m.id FROM outbox_message m
    WHERE m.id IN (SELECT id FROM win_heads UNION SELECT id FROM nokey UNION SELECT id FROM heads)
      AND m.status IN ('pending', 'sending') AND m.next_attempt_at <= ",
    now_ms!(),
    "
      AND (m.msg_key IS NULL OR m.id = (
            SELECT o.id FROM outbox_message o INDEXED BY outbox_message_open_key_idx
            WHERE o.msg_key = m.msg_key AND o.status IN ('pending', 'sending', 'failed')
            ORDER BY o.msg_key, o.id LIMIT 1))
    ORDER BY m.next_attempt_at, m.id
    LIMIT ?2
)
UPDATE outbox_message
SET status = 'sending', lease_owner = ?1, lease_until = ",
    now_ms!(),
    " + ?3, next_attempt_at = ",
    now_ms!(),
    " + ?3, updated_at = ",
    now_ms!(),
    ", updated_by = ?1
WHERE id IN (SELECT id FROM cand)
RETURNING ",
    returned!()
);

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn in_list(qb: &mut QueryBuilder<'_, Sqlite>, ids: impl IntoIterator<Item = i64>) {
    qb.push("(");
    let mut sep = qb.separated(", ");
    for id in ids {
        sep.push_bind(id);
    }
    sep.push_unseparated(")");
}

/// The settlement's writes and [`FAIL_ONE`] for [`settle_isolated`], for the rows `owned`
/// (leased by `owner`).
struct SqliteWrites<'a> {
    tables: &'a Tables,
    owner: &'a str,
    owned: &'a HashSet<i64>,
}

impl SettleWrites<Sqlite> for SqliteWrites<'_> {
    async fn write(&self, conn: &mut SqliteConnection, s: &Settlement) -> Result<SettleReport> {
        let tables = self.tables;
        for d in s.deliveries.iter().filter(|d| self.owned.contains(&d.message_id.0)) {
            sqlx::query(&render(
                tables,
                concat!(
                "INSERT INTO outbox_delivery (message_id, destination, status, attempts, next_attempt_at, \
                 last_attempt_at, last_error, ack_deadline, updated_at) VALUES (?1, ?2, ?3, ?4, ",
                now_ms!(),
                " + ?5, CASE WHEN ?6 THEN ",
                now_ms!(),
                " END, ?7, ",
                now_ms!(),
                " + ?8, ",
                now_ms!(),
                ") ON CONFLICT (message_id, destination) DO UPDATE SET \
                 status = CASE WHEN status = 'acked' THEN status ELSE excluded.status END, \
                 attempts = excluded.attempts, next_attempt_at = excluded.next_attempt_at, \
                 last_attempt_at = COALESCE(excluded.last_attempt_at, last_attempt_at), \
                 last_error = COALESCE(excluded.last_error, last_error), \
                 ack_deadline = CASE WHEN status = 'acked' THEN NULL ELSE excluded.ack_deadline END, \
                 updated_at = excluded.updated_at"
            ),
            ))
            .bind(d.message_id.0)
            .bind(&d.destination)
            .bind(d.status.as_str())
            .bind(d.attempts)
            .bind(ms(d.retry_in))
            .bind(d.attempted)
            .bind(d.last_error.as_deref())
            // NULL when the destination needs no ACK: the deadline is NULL too.
            .bind(d.ack_timeout.map(ms))
            .execute(&mut *conn)
            .await
            .map_err(db)?;
        }
        let sent: Vec<i64> = s.sent.iter().map(|i| i.0).filter(|i| self.owned.contains(i)).collect();
        if !sent.is_empty() {
            let mut qb = QueryBuilder::<Sqlite>::new(render(tables, concat!(
                "UPDATE outbox_message SET status = 'sent', lease_owner = NULL, lease_until = NULL, next_attempt_at = ",
                now_ms!(),
                ", last_attempt_at = ",
                now_ms!(),
                ", updated_at = ",
                now_ms!(),
                ", updated_by = "
            )).into_owned());
            qb.push_bind(self.owner.to_owned());
            qb.push(" WHERE id IN ");
            in_list(&mut qb, sent);
            qb.build().execute(&mut *conn).await.map_err(db)?;
        }
        for w in s.messages.iter().filter(|w| self.owned.contains(&w.id.0)) {
            sqlx::query(&render(
                tables,
                concat!(
                    "UPDATE outbox_message SET status = ?1, attempts = ?2, next_attempt_at = ",
                    now_ms!(),
                    " + ?3, last_error = COALESCE(?4, last_error), \
                 last_attempt_at = CASE WHEN ?5 THEN ",
                    now_ms!(),
                    " ELSE last_attempt_at END, lease_owner = NULL, lease_until = NULL, updated_at = ",
                    now_ms!(),
                    ", updated_by = ?6 WHERE id = ?7"
                ),
            ))
            .bind(w.status.as_str())
            .bind(w.attempts)
            .bind(ms(w.retry_in))
            .bind(w.last_error.as_deref())
            .bind(w.attempted)
            .bind(self.owner)
            .bind(w.id.0)
            .execute(&mut *conn)
            .await
            .map_err(db)?;
        }
        let all = s.ids();
        let lost_lease: Vec<MessageId> =
            all.iter().copied().filter(|id| !self.owned.contains(&id.0)).collect();
        Ok(SettleReport { settled: all.len() - lost_lease.len(), lost_lease, ..SettleReport::default() })
    }

    async fn fail(&self, conn: &mut SqliteConnection, id: i64, reason: &str) -> Result<u64> {
        FAIL.fail_one(conn, self.tables, self.owner, id, reason).await
    }
}

/// One message `failed` with its reason (a row `owner` leases): a row that cannot be read, or
/// whose outcome could not be written.
const FAIL_ONE: &str = concat!(
    "UPDATE outbox_message SET status = 'failed', attempts = attempts + 1, last_error = ?1, next_attempt_at = ",
    now_ms!(),
    ", last_attempt_at = ",
    now_ms!(),
    ", lease_owner = NULL, lease_until = NULL, updated_at = ",
    now_ms!(),
    " WHERE id = ?2 AND status = 'sending' AND lease_owner = ?3"
);

const FAIL: FailSql<Sqlite> = FailSql::new(FAIL_ONE);

/// Every message an owner leases back to `pending`, due now; binds the owner.
const RELEASE: &str = concat!(
    "UPDATE outbox_message SET status = 'pending', lease_owner = NULL, lease_until = NULL, next_attempt_at = ",
    now_ms!(),
    ", updated_at = ",
    now_ms!(),
    ", updated_by = ?1 WHERE status = 'sending' AND lease_owner = ?1"
);

/// The runs behind the heads of `plan`, leased in the claim's transaction: one statement reads
/// the open messages after every head (one sub-select per key over `(msg_key, id)`), a second
/// leases the chosen ones that are still due.
async fn lease_runs(
    tx: &mut sqlx::Transaction<'_, Sqlite>,
    tables: &Tables,
    owner: &str,
    lease: Duration,
    plan: &runs::RunPlan,
) -> Result<Vec<OutboxMessage>> {
    let per_key = i64::try_from(plan.per_key).unwrap_or(i64::MAX);
    let mut qb = QueryBuilder::<Sqlite>::new("SELECT id, head, due FROM (");
    for (i, (key, head)) in plan.heads.iter().enumerate() {
        if i > 0 {
            qb.push(" UNION ALL ");
        }
        qb.push("SELECT * FROM (SELECT id, ");
        qb.push_bind(*head);
        qb.push(render(
            tables,
            concat!(
                " AS head, (status IN ('pending', 'sending') AND next_attempt_at <= ",
                now_ms!(),
                ") AS due FROM outbox_message INDEXED BY outbox_message_open_key_idx WHERE msg_key = "
            ),
        ));
        qb.push_bind(key.clone());
        qb.push(" AND id > ");
        qb.push_bind(*head);
        qb.push(" AND status IN ('pending', 'sending', 'failed') ORDER BY id LIMIT ");
        qb.push_bind(per_key);
        qb.push(")");
    }
    qb.push(")");
    let found: Vec<(i64, i64, bool)> = qb.build_query_as().fetch_all(&mut **tx).await.map_err(db)?;
    let mut followers: Vec<runs::Follower> =
        found.into_iter().map(|(id, head, due)| runs::Follower { id, head, due }).collect();
    runs::take(&mut followers, plan.per_key, |wanted| async move {
        let mut qb = QueryBuilder::<Sqlite>::new(
            render(
                tables,
                concat!("UPDATE outbox_message SET status = 'sending', lease_until = ", now_ms!(), " + "),
            )
            .into_owned(),
        );
        qb.push_bind(ms(lease));
        qb.push(concat!(", next_attempt_at = ", now_ms!(), " + "));
        qb.push_bind(ms(lease));
        qb.push(concat!(", updated_at = ", now_ms!(), ", lease_owner = "));
        qb.push_bind(owner.to_owned());
        qb.push(", updated_by = ");
        qb.push_bind(owner.to_owned());
        qb.push(" WHERE id IN ");
        in_list(&mut qb, wanted.iter().copied());
        qb.push(concat!(" AND status IN ('pending', 'sending') AND next_attempt_at <= ", now_ms!()));
        qb.push(" RETURNING ");
        qb.push(RETURNED);
        let rows = qb.build().fetch_all(&mut **tx).await.map_err(db)?;
        Ok(decode_rows(&rows, |r| r.try_get::<i64, _>("id").ok(), decode_message).0)
    })
    .await
}

/// SQLite leases every claim: holding its single writer lock for the length of a publish would
/// block every business transaction, so its [`Claims::Lock`] is [`NoLocks`].
impl Claims for Outbox<Sqlite> {
    type Lock = NoLocks;

    /// The heads, leased by one atomic `UPDATE`; with `run` > 1, in one `BEGIN IMMEDIATE`
    /// transaction with the runs behind them (see `relay::runs`): SQLite's one writer makes the
    /// two statements atomic, so no other claim can take a follower between them. Not by id
    /// (`_committed` is not used): the relay and its writers share the one writer lock, and the
    /// claim is one statement already.
    async fn claim_committed(
        &self,
        _mode: ClaimMode,
        owner: &str,
        _committed: &[MessageId],
        limit: usize,
        run: usize,
        lease: Duration,
    ) -> Result<Claimed<NoLocks>> {
        let tables = self.tables();
        let max = limit;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let sql = render(tables, CLAIM);
        let claim =
            sqlx::query(&sql).bind(owner).bind(limit).bind(ms(lease)).bind(limit.saturating_mul(2).max(256));
        if run <= 1 {
            let rows = claim.fetch_all(self.pool()).await.map_err(db)?;
            return Ok(Claimed::leased(
                FAIL.leased(self.pool(), tables, owner, &rows, decode_message).await?,
            ));
        }
        let mut tx = begin_with(self.pool(), "BEGIN IMMEDIATE").await.map_err(db)?;
        let rows = claim.fetch_all(&mut *tx).await.map_err(db)?;
        let (mut out, poison) = decode_rows(&rows, |r| r.try_get::<i64, _>("id").ok(), decode_message);
        if let Some(plan) = runs::plan(&out, max.saturating_sub(poison.len()), run) {
            let more = lease_runs(&mut tx, tables, owner, lease, &plan).await?;
            out.extend(more);
        }
        if !poison.is_empty() {
            // Leased by this transaction: failed in it.
            FAIL.fail_poison(&mut tx, tables, owner, &poison).await;
        }
        tx.commit().await.map_err(db)?;
        out.sort_by_key(|m| m.id);
        Ok(Claimed::leased(out))
    }

    async fn deliveries_held(
        &self,
        hold: &mut Hold<NoLocks>,
        ids: &[MessageId],
    ) -> Result<Vec<DeliveryState>> {
        let tables = self.tables();
        if let Hold::Lock(never) = hold {
            match *never {}
        }
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut qb = QueryBuilder::<Sqlite>::new(
            render(
                tables,
                concat!(
                    "SELECT message_id, destination, status, attempts, last_error, MAX(0, next_attempt_at - ",
                    now_ms!(),
                    ") AS wait_ms FROM outbox_delivery WHERE message_id IN "
                ),
            )
            .into_owned(),
        );
        in_list(&mut qb, ids.iter().map(|i| i.0));
        let rows = qb.build().fetch_all(self.pool()).await.map_err(db)?;
        rows.iter().map(crate::common::delivery_state).collect()
    }

    async fn settle_held(&self, hold: Hold<NoLocks>, owner: &str, s: &Settlement) -> Result<SettleReport> {
        let tables = self.tables();
        if let Hold::Lock(never) = hold {
            match never {}
        }
        let all = s.ids();
        if all.is_empty() {
            return Ok(SettleReport::default());
        }
        let mut tx = begin_with(self.pool(), "BEGIN IMMEDIATE").await.map_err(db)?;
        let mut qb = QueryBuilder::<Sqlite>::new(
            render(tables, "SELECT id FROM outbox_message WHERE status = 'sending' AND lease_owner = ")
                .into_owned(),
        );
        qb.push_bind(owner.to_owned());
        qb.push(" AND id IN ");
        in_list(&mut qb, all.iter().map(|i| i.0));
        let owned: HashSet<i64> =
            qb.build_query_scalar::<i64>().fetch_all(&mut *tx).await.map_err(db)?.into_iter().collect();
        let report = settle_isolated(&mut *tx, &SqliteWrites { tables, owner, owned: &owned }, s).await?;
        tx.commit().await.map_err(db)?;
        Ok(report)
    }

    async fn extend(&self, owner: &str, ids: &[MessageId], lease: Duration) -> Result<u64> {
        let tables = self.tables();
        if ids.is_empty() {
            return Ok(0);
        }
        let mut qb = QueryBuilder::<Sqlite>::new(
            render(tables, concat!("UPDATE outbox_message SET lease_until = ", now_ms!(), " + "))
                .into_owned(),
        );
        qb.push_bind(ms(lease));
        qb.push(concat!(", next_attempt_at = ", now_ms!(), " + "));
        qb.push_bind(ms(lease));
        qb.push(" WHERE status = 'sending' AND lease_owner = ");
        qb.push_bind(owner.to_owned());
        qb.push(" AND id IN ");
        in_list(&mut qb, ids.iter().map(|i| i.0));
        Ok(qb.build().execute(self.pool()).await.map_err(db)?.rows_affected())
    }

    async fn release(&self, owner: &str) -> Result<u64> {
        release_leases(self, RELEASE, 1, owner).await
    }
}

/// ACK mode, an overdue delivery back to `pending`, then its message.
const EXPIRE_SQL: ExpireSql = ExpireSql {
    delivery: concat!(
        "UPDATE outbox_delivery SET status = 'pending', attempts = attempts + 1, next_attempt_at = ",
        now_ms!(),
        ", ack_deadline = NULL, last_error = 'no ACK before the deadline', updated_at = ",
        now_ms!(),
        " WHERE message_id = ?1 AND destination = ?2"
    ),
    message: concat!(
        "UPDATE outbox_message SET status = 'pending', next_attempt_at = ",
        now_ms!(),
        ", attempts = MAX(attempts, ?1), last_error = '[' || ?2 || '] no ACK before the deadline', \
         lease_owner = NULL, lease_until = NULL, updated_at = ",
        now_ms!(),
        " WHERE id = ?3 AND status IN ('sent', 'acked')"
    ),
};

impl Acks for Outbox<Sqlite> {
    async fn expire_acks(&self, limit: usize) -> Result<u64> {
        let tables = self.tables();
        if limit == 0 {
            return Ok(0);
        }
        // One writer at a time: BEGIN IMMEDIATE takes the write lock up front.
        let mut tx = begin_with(self.pool(), "BEGIN IMMEDIATE").await.map_err(db)?;
        let due: Vec<(i64, String, i32)> = sqlx::query_as(&render(
            tables,
            concat!(
                "SELECT message_id, destination, attempts FROM outbox_delivery \
             WHERE status = 'sent' AND ack_deadline IS NOT NULL AND ack_deadline <= ",
                now_ms!(),
                " ORDER BY ack_deadline LIMIT ?1"
            ),
        ))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&mut *tx)
        .await
        .map_err(db)?;
        let expired = expire_each::<Sqlite>(&mut tx, &EXPIRE_SQL, tables, &due).await?;
        tx.commit().await.map_err(db)?;
        Ok(expired)
    }

    async fn ack(&self, message_id: MessageId, destination: &str) -> Result<AckOutcome> {
        let tables = self.tables();
        let mut tx = begin_with(self.pool(), "BEGIN IMMEDIATE").await.map_err(db)?;
        let msg_status: Option<String> =
            sqlx::query_scalar(&render(tables, "SELECT status FROM outbox_message WHERE id = ?1"))
                .bind(message_id.0)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db)?;
        let status: Option<String> = sqlx::query_scalar(&render(
            tables,
            "SELECT status FROM outbox_delivery WHERE message_id = ?1 AND destination = ?2",
        ))
        .bind(message_id.0)
        .bind(destination)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db)?;
        finish_ack(tx, &ACK_SQL, tables, msg_status.as_deref(), status.as_deref(), message_id.0, destination)
            .await
    }
}

impl Wakeups for Outbox<Sqlite> {
    async fn set_idle(&self, _owner: &str, _idle: bool, _ttl: Duration) -> Result<()> {
        // No push channel: an embedded relay is woken by the in-process commit signal.
        Ok(())
    }

    async fn listen(&self, _signal: CommitSignal) -> Result<Option<crate::relay::Listening>> {
        Ok(None)
    }
}
