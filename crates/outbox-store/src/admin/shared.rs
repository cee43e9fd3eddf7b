//! [`MessageAdmin`] once for every dialect: the logic (checks, status rules, batching, row
//! decoding) lives here; each dialect's `admin.rs` gives only its SQL and the few steps its
//! database does its own way ([`AdminSql`]).

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use outbox_core::{Error, MessageId, OutboxMessage, Result, Status};
use sqlx::{
    Arguments, ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Row, Transaction, Type,
};

use super::{
    check_actor, check_age, check_batch, check_retry_filter, refused, report, DeliveryRecord,
    DestinationCount, ListFilter, MessageDetail, Progress, Stats, TopicCount, BULK_RETRY_FROM,
};
use crate::common::{get, parse_status, At, Cells};
use crate::error::db;
use crate::outbox::{Outbox, OutboxDatabase};

const BY_STATUS: &str = "SELECT status, COUNT(*) AS n FROM outbox_message GROUP BY status";
const BY_TOPIC: &str = "SELECT topic, status, COUNT(*) AS n FROM outbox_message GROUP BY topic, status";
const BY_DESTINATION: &str =
    "SELECT destination, status, COUNT(*) AS n FROM outbox_delivery GROUP BY destination, status";

/// What a dialect's admin queries are written in, and the steps its database takes its own way.
pub(crate) trait AdminSql: OutboxDatabase<Row: Cells> {
    /// The columns its message decoder reads.
    const MESSAGE_COLUMNS: &'static str;
    /// A predicate every row meets (`WHERE <ALL> AND ...`).
    const ALL: &'static str;
    /// Appended to the page a bulk re-drive selects (a locking read where one is needed).
    const LOCK_PAGE: &'static str;
    /// Milliseconds since the oldest unfinished message was created (database clock).
    const OLDEST_PENDING_MS: &'static str;
    /// One message's delivery rows by destination, every column of `outbox_delivery` (see
    /// [`decode_delivery`]); binds the message id.
    const DELIVERIES: &'static str;
    /// One message's status, locked until the transaction ends; binds the id.
    const LOCK_STATUS: &'static str;
    /// Cancels one message already checked; binds the actor, then the id.
    const CANCEL: &'static str;
    /// Cancels its unfinished delivery rows; binds the message id.
    const CANCEL_DELIVERIES: &'static str;

    /// An instant as the tables store it.
    type Time: Send
        + Sync
        + Unpin
        + 'static
        + Type<Self>
        + for<'q> Encode<'q, Self>
        + for<'r> Decode<'r, Self>;

    /// `t` as the tables store it.
    fn time(t: DateTime<Utc>) -> Self::Time;

    /// Decodes a row of [`Self::MESSAGE_COLUMNS`] for people to read.
    fn read_message(row: &Self::Row) -> Result<OutboxMessage>;

    /// Begins a transaction for an action that checks a status and then writes.
    fn begin(outbox: &Outbox<Self>) -> impl Future<Output = Result<Transaction<'static, Self>>> + Send;

    /// Re-drives messages (locked, or re-checked here against `from`) with their failed or
    /// cancelled delivery rows; returns how many messages it re-drove.
    fn redrive(
        conn: &mut Self::Connection,
        ids: &[i64],
        actor: &str,
        from: fn(Status) -> bool,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// The database's clock as the tables store it (`SELECT ...`).
    const NOW: &'static str;

    /// `now` minus `age_us` microseconds (the purge cutoff).
    fn minus_micros(now: Self::Time, age_us: i64) -> Self::Time;

    /// Deletes up to `limit` finished messages last changed at or before `cutoff`: `None` when
    /// none was left, else (rows looked at, rows deleted).
    fn purge_batch(
        outbox: &Outbox<Self>,
        cutoff: &Self::Time,
        limit: i64,
    ) -> impl Future<Output = Result<Option<(u64, u64)>>> + Send;
}

/// Decodes a row of `outbox_delivery` ([`AdminSql::DELIVERIES`]).
pub(crate) fn decode_delivery<R>(row: &R) -> Result<DeliveryRecord>
where
    R: Cells + Row,
    for<'s> &'s str: ColumnIndex<R>,
    i64: Type<R::Database> + for<'r> Decode<'r, R::Database>,
    i32: Type<R::Database> + for<'r> Decode<'r, R::Database>,
{
    let message_id: i64 = get(row, "message_id")?;
    let at = At { table: "outbox_delivery", id: message_id };
    Ok(DeliveryRecord {
        message_id: MessageId(message_id),
        destination: row.text("destination", at)?,
        status: parse_status("outbox_delivery", message_id.to_string(), &row.text("status", at)?)?,
        attempts: get(row, "attempts")?,
        next_attempt_at: row.time("next_attempt_at", at)?,
        last_attempt_at: row.opt_time("last_attempt_at", at)?,
        last_error: row.opt_text("last_error", at)?,
        ack_deadline: row.opt_time("ack_deadline", at)?,
        acked_at: row.opt_time("acked_at", at)?,
        created_at: row.time("created_at", at)?,
        updated_at: row.time("updated_at", at)?,
    })
}

/// The status and count of a `GROUP BY ..., status` row.
fn counted<R>(row: &R, table: &'static str) -> Result<(Status, u64)>
where
    R: Cells + Row,
    for<'s> &'s str: ColumnIndex<R>,
    i64: Type<R::Database> + for<'r> Decode<'r, R::Database>,
{
    let status = parse_status(table, String::new(), &row.text("status", At { table, id: 0 })?)?;
    let n: i64 = get(row, "n")?;
    Ok((status, u64::try_from(n).unwrap_or(0)))
}

/// A statement and its arguments, built together (what `QueryBuilder` does, without borrowing
/// the builder for as long as the arguments live, which generic code cannot afford).
struct Statement<'q, DB: Database> {
    sql: String,
    args: DB::Arguments<'q>,
}

impl<'q, DB: Database> Statement<'q, DB> {
    fn new(sql: String) -> Self {
        Statement { sql, args: DB::Arguments::default() }
    }

    fn into_parts(self) -> (String, DB::Arguments<'q>) {
        (self.sql, self.args)
    }

    fn push(&mut self, sql: &str) -> &mut Self {
        self.sql.push_str(sql);
        self
    }

    fn bind<T: 'q + Encode<'q, DB> + Type<DB>>(&mut self, value: T) -> Result<&mut Self> {
        self.args.add(value).map_err(|e| db(sqlx::Error::Encode(e)))?;
        self.args.format_placeholder(&mut self.sql).map_err(|e| db(sqlx::Error::Encode(e.into())))?;
        Ok(self)
    }
}

impl<'q, DB: AdminSql> Statement<'q, DB> {
    /// Appends ` AND ...` for every filter set (all bound as parameters).
    fn filter(&mut self, f: &ListFilter) -> Result<&mut Self>
    where
        String: Type<DB> + Encode<'q, DB>,
        i64: Type<DB> + Encode<'q, DB>,
    {
        let texts = [
            (" AND status = ", f.status.map(|s| s.as_str().to_owned())),
            (" AND topic = ", f.topic.clone()),
            (" AND biz_type = ", f.biz_type.clone()),
            (" AND biz_key = ", f.biz_key.clone()),
            (" AND msg_key = ", f.key.clone()),
        ];
        for (sql, value) in texts {
            if let Some(v) = value {
                self.push(sql).bind(v)?;
            }
        }
        if let Some(t) = f.created_after {
            self.push(" AND created_at >= ").bind(DB::time(t))?;
        }
        if let Some(t) = f.created_before {
            self.push(" AND created_at < ").bind(DB::time(t))?;
        }
        if let Some(id) = f.after_id {
            self.push(" AND id > ").bind(id.0)?;
        }
        Ok(self)
    }
}

/// The shared implementation of [`MessageAdmin`](super::MessageAdmin) on one outbox.
pub(crate) struct Admin<'a, DB: OutboxDatabase>(pub(crate) &'a Outbox<DB>);

impl<DB> Admin<'_, DB>
where
    DB: AdminSql,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'s> &'s str: ColumnIndex<DB::Row>,
    usize: ColumnIndex<DB::Row>,
    String: Type<DB> + for<'q> Encode<'q, DB> + for<'r> Decode<'r, DB>,
    i64: Type<DB> + for<'q> Encode<'q, DB> + for<'r> Decode<'r, DB>,
    i32: Type<DB> + for<'r> Decode<'r, DB>,
{
    /// The rows of a `GROUP BY [label,] status` count, as (label, status, count) sorted by label
    /// then status (the label empty without one).
    async fn counts(
        &self,
        sql: &str,
        table: &'static str,
        label: Option<&'static str>,
    ) -> Result<Vec<(String, Status, u64)>> {
        let rows = sqlx::query(sql).fetch_all(self.0.pool()).await.map_err(db)?;
        let mut out = rows
            .iter()
            .map(|r| {
                let (status, n) = counted(r, table)?;
                let name = label.map(|col| r.text(col, At { table, id: 0 })).transpose()?.unwrap_or_default();
                Ok((name, status, n))
            })
            .collect::<Result<Vec<_>>>()?;
        out.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        Ok(out)
    }

    pub(crate) async fn stats(&self) -> Result<Stats> {
        let by_status = self.counts(BY_STATUS, "outbox_message", None).await?;
        let by_topic = self.counts(BY_TOPIC, "outbox_message", Some("topic")).await?;
        let by_destination = self.counts(BY_DESTINATION, "outbox_delivery", Some("destination")).await?;
        let oldest: Option<i64> =
            sqlx::query_scalar(DB::OLDEST_PENDING_MS).fetch_one(self.0.pool()).await.map_err(db)?;
        Ok(Stats::from_counts(
            by_status.into_iter().map(|(_, status, n)| (status, n)).collect(),
            by_topic.into_iter().map(|(topic, status, count)| TopicCount { topic, status, count }).collect(),
            by_destination
                .into_iter()
                .map(|(destination, status, count)| DestinationCount { destination, status, count })
                .collect(),
            oldest,
        ))
    }

    pub(crate) async fn list(&self, filter: &ListFilter) -> Result<Vec<OutboxMessage>> {
        filter.validate()?;
        let mut st = Statement::<DB>::new(format!(
            "SELECT {} FROM outbox_message WHERE {}",
            DB::MESSAGE_COLUMNS,
            DB::ALL
        ));
        st.filter(filter)?.push(" ORDER BY id LIMIT ").bind(filter.limit_i64())?;
        let (sql, args) = st.into_parts();
        let rows = sqlx::query_with(&sql, args).fetch_all(self.0.pool()).await.map_err(db)?;
        rows.iter().map(DB::read_message).collect()
    }

    pub(crate) async fn show(&self, id: MessageId) -> Result<MessageDetail> {
        let mut conn = self.0.pool().acquire().await.map_err(db)?;
        let message = DB::get(&mut conn, id).await?.ok_or(Error::NotFound { id })?;
        let rows = sqlx::query(DB::DELIVERIES).bind(id.0).fetch_all(&mut *conn).await.map_err(db)?;
        let deliveries = rows.iter().map(decode_delivery).collect::<Result<Vec<_>>>()?;
        Ok(MessageDetail { message, deliveries })
    }

    /// Begins a transaction holding message `id` in a status `allowed` for `action`.
    async fn begin_checked(
        &self,
        id: MessageId,
        actor: &str,
        action: &'static str,
        allowed: fn(Status) -> bool,
    ) -> Result<Transaction<'static, DB>> {
        check_actor(actor)?;
        let mut tx = DB::begin(self.0).await?;
        let row = sqlx::query(DB::LOCK_STATUS).bind(id.0).fetch_optional(&mut *tx).await.map_err(db)?;
        let at = At { table: "outbox_message", id: id.0 };
        let from = row
            .map(|r| parse_status("outbox_message", id.to_string(), &r.text("status", at)?))
            .transpose()?;
        match from {
            Some(status) if allowed(status) => Ok(tx),
            _ => Err(refused(id, from, action)),
        }
    }

    /// Reads the message as the action left it and commits.
    async fn finish(mut tx: Transaction<'static, DB>, id: MessageId) -> Result<OutboxMessage> {
        let message = DB::get(&mut tx, id).await?.ok_or(Error::NotFound { id })?;
        tx.commit().await.map_err(db)?;
        Ok(message)
    }

    pub(crate) async fn retry(&self, id: MessageId, actor: &str) -> Result<OutboxMessage> {
        let mut tx = self.begin_checked(id, actor, "retry", Status::can_retry).await?;
        DB::redrive(&mut tx, &[id.0], actor, Status::can_retry).await?;
        let message = Self::finish(tx, id).await?;
        self.0.signal().wake();
        Ok(message)
    }

    pub(crate) async fn retry_failed(
        &self,
        filter: &ListFilter,
        actor: &str,
        batch: usize,
        mut progress: Progress<'_>,
    ) -> Result<u64> {
        check_retry_filter(filter)?;
        check_actor(actor)?;
        let limit = check_batch(batch)?;
        let mut page = ListFilter { status: Some(BULK_RETRY_FROM), ..filter.clone() };
        let mut total = 0_u64;
        loop {
            let mut tx = DB::begin(self.0).await?;
            let mut st = Statement::<DB>::new(format!("SELECT id FROM outbox_message WHERE {}", DB::ALL));
            st.filter(&page)?.push(" ORDER BY id LIMIT ").bind(limit)?.push(DB::LOCK_PAGE);
            let (sql, args) = st.into_parts();
            let ids: Vec<i64> = sqlx::query_scalar_with(&sql, args).fetch_all(&mut *tx).await.map_err(db)?;
            let Some(&last) = ids.last() else {
                tx.commit().await.map_err(db)?;
                break;
            };
            let done = DB::redrive(&mut tx, &ids, actor, |s| s == BULK_RETRY_FROM).await?;
            tx.commit().await.map_err(db)?;
            total += done;
            report(&mut progress, total);
            if ids.len() < batch {
                break;
            }
            page.after_id = Some(MessageId(last));
        }
        if total > 0 {
            self.0.signal().wake();
        }
        Ok(total)
    }

    pub(crate) async fn cancel(&self, id: MessageId, actor: &str) -> Result<OutboxMessage> {
        let mut tx = self.begin_checked(id, actor, "cancel", Status::can_cancel).await?;
        sqlx::query(DB::CANCEL).bind(actor.to_owned()).bind(id.0).execute(&mut *tx).await.map_err(db)?;
        sqlx::query(DB::CANCEL_DELIVERIES).bind(id.0).execute(&mut *tx).await.map_err(db)?;
        Self::finish(tx, id).await
    }

    pub(crate) async fn purge(
        &self,
        older_than: Duration,
        batch: usize,
        mut progress: Progress<'_>,
    ) -> Result<u64> {
        let age_us = check_age(older_than)?;
        let limit = check_batch(batch)?;
        let now: DB::Time = sqlx::query_scalar(DB::NOW).fetch_one(self.0.pool()).await.map_err(db)?;
        let cutoff = DB::minus_micros(now, age_us);
        let mut total = 0_u64;
        while let Some((seen, done)) = DB::purge_batch(self.0, &cutoff, limit).await? {
            total += done;
            report(&mut progress, total);
            if seen < batch as u64 {
                break;
            }
        }
        Ok(total)
    }
}

/// `impl MessageAdmin for Outbox<$db>`, every call the shared one above.
macro_rules! impl_admin {
    ($db:ty) => {
        impl $crate::admin::MessageAdmin for $crate::outbox::Outbox<$db> {
            async fn stats(&self) -> ::outbox_core::Result<$crate::admin::Stats> {
                $crate::admin::Admin(self).stats().await
            }

            async fn list(
                &self,
                filter: &$crate::admin::ListFilter,
            ) -> ::outbox_core::Result<Vec<::outbox_core::OutboxMessage>> {
                $crate::admin::Admin(self).list(filter).await
            }

            async fn show(
                &self,
                id: ::outbox_core::MessageId,
            ) -> ::outbox_core::Result<$crate::admin::MessageDetail> {
                $crate::admin::Admin(self).show(id).await
            }

            async fn retry(
                &self,
                id: ::outbox_core::MessageId,
                actor: &str,
            ) -> ::outbox_core::Result<::outbox_core::OutboxMessage> {
                $crate::admin::Admin(self).retry(id, actor).await
            }

            async fn retry_failed(
                &self,
                filter: &$crate::admin::ListFilter,
                actor: &str,
                batch: usize,
                progress: $crate::admin::Progress<'_>,
            ) -> ::outbox_core::Result<u64> {
                $crate::admin::Admin(self).retry_failed(filter, actor, batch, progress).await
            }

            async fn cancel(
                &self,
                id: ::outbox_core::MessageId,
                actor: &str,
            ) -> ::outbox_core::Result<::outbox_core::OutboxMessage> {
                $crate::admin::Admin(self).cancel(id, actor).await
            }

            async fn purge(
                &self,
                older_than: ::std::time::Duration,
                batch: usize,
                progress: $crate::admin::Progress<'_>,
            ) -> ::outbox_core::Result<u64> {
                $crate::admin::Admin(self).purge(older_than, batch, progress).await
            }
        }
    };
}
pub(crate) use impl_admin;
