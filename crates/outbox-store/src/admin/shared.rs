//! [`MessageAdmin`] once for every dialect: the logic (checks, status rules, batching, row
//! decoding) lives here; each dialect's `admin.rs` gives only its SQL and the few steps its
//! database does its own way ([`AdminSql`]).

use std::collections::HashMap;
use std::time::Duration;

use chrono::Utc;
use futures::TryStreamExt as _;
use outbox_core::text::printable;
use outbox_core::{Error, MessageId, OutboxMessage, Result, Status};
use sqlx::{ColumnIndex, Decode, Encode, Executor, IntoArguments, Transaction, Type};

use super::failures::{fold, Failed};
use super::rows::{counted, decode_delivery, decode_pause, decode_presence};
use super::statement::{among, matching, Conditions, Statement};
use super::{
    bulk_statuses, check_actor, check_age, check_batch, check_ids, check_pause, check_scan, refused, report,
    AdminSql, BulkAction, DeliveryRecord, DestinationCount, DestinationPause, FailureGroup, FailureReport,
    ListFilter, MessageDetail, MessageEdit, Progress, RelayPresence, Resent, Selection, Stats, TopicCount,
    BULK_RETRY_FROM, MAX_RELAYS,
};
use crate::common::{parse_status, At, Cells};
use crate::error::db;
use crate::outbox::{Outbox, OutboxDatabase};
use crate::relay::{RelayBeat, MAX_PRESENCE_TEXT};

const BY_STATUS: &str = "SELECT status, COUNT(*) AS n FROM outbox_message GROUP BY status";
const BY_TOPIC: &str = "SELECT topic, status, COUNT(*) AS n FROM outbox_message GROUP BY topic, status";
const BY_DESTINATION: &str =
    "SELECT destination, status, COUNT(*) AS n FROM outbox_delivery GROUP BY destination, status";
/// The failed messages, most recently failed first (the `(status, updated_at)` index).
const FAILED: &str = "SELECT id, topic, last_error, updated_at FROM outbox_message \
    WHERE status = 'failed' ORDER BY updated_at DESC, id DESC LIMIT ";
const PAUSES: &str =
    "SELECT destination, paused_by, reason, paused_at FROM outbox_destination_pause ORDER BY destination";
/// `sql` for the names `tables` in `DB`'s dialect.
fn render<'a, DB: OutboxDatabase>(tables: &crate::Tables, sql: &'a str) -> std::borrow::Cow<'a, str> {
    tables.render(DB::DIALECT, sql)
}

/// Messages one transaction of a bulk action moves at most.
const BULK_PAGE: usize = 500;

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
    Option<String>: Type<DB> + for<'q> Encode<'q, DB>,
    i64: Type<DB> + for<'q> Encode<'q, DB> + for<'r> Decode<'r, DB>,
    i32: Type<DB> + for<'r> Decode<'r, DB>,
{
    /// The rows of a `GROUP BY [label,] status` count, as (label, status, count) sorted by label
    /// then status (the label empty without one).
    async fn counts(
        &self,
        conn: &mut DB::Connection,
        sql: &str,
        table: &'static str,
        label: Option<&'static str>,
    ) -> Result<Vec<(String, Status, u64)>> {
        let tables = self.0.tables();
        let rows = sqlx::query(&render::<DB>(tables, sql)).fetch_all(&mut *conn).await.map_err(db)?;
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

    /// The statements on one connection: a pool that keeps none (a store's on a crowded budget:
    /// see `Outbox::shed_connections`) opens one for them, not one per statement.
    pub(crate) async fn stats(&self) -> Result<Stats> {
        let mut conn = self.0.pool().acquire().await.map_err(db)?;
        self.stats_on(&mut conn).await
    }

    /// [`Self::stats`] and [`Self::relays`] on one connection (the daemon's backlog sampler,
    /// every store every `backlog_interval`: an idle store's pool that keeps no connection
    /// opens one for both). The relays' read may fail alone.
    pub(crate) async fn backlog(&self) -> Result<(Stats, Result<Vec<RelayPresence>>)> {
        let mut conn = self.0.pool().acquire().await.map_err(db)?;
        let stats = self.stats_on(&mut conn).await?;
        Ok((stats, self.relays_on(&mut conn).await))
    }

    async fn stats_on(&self, conn: &mut DB::Connection) -> Result<Stats> {
        let tables = self.0.tables();
        let by_status = self.counts(conn, BY_STATUS, "outbox_message", None).await?;
        let by_topic = self.counts(conn, BY_TOPIC, "outbox_message", Some("topic")).await?;
        let by_destination =
            self.counts(conn, BY_DESTINATION, "outbox_delivery", Some("destination")).await?;
        let oldest: Option<i64> = sqlx::query_scalar(&render::<DB>(tables, DB::OLDEST_PENDING_MS))
            .fetch_one(&mut *conn)
            .await
            .map_err(db)?;
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
        let tables = self.0.tables();
        filter.validate()?;
        let mut st = Statement::<DB>::new(format!(
            "SELECT {} FROM outbox_message WHERE {}",
            DB::MESSAGE_COLUMNS,
            DB::ALL
        ));
        st.filter(filter)?.push(" ORDER BY id LIMIT ").bind(filter.limit_i64())?;
        let (sql, args) = st.into_parts(tables);
        let rows = sqlx::query_with(&sql, args).fetch_all(self.0.pool()).await.map_err(db)?;
        rows.iter().map(DB::read_message).collect()
    }

    pub(crate) async fn show(&self, id: MessageId) -> Result<MessageDetail> {
        let tables = self.0.tables();
        let mut conn = self.0.pool().acquire().await.map_err(db)?;
        let message = DB::get(&mut conn, id).await?.ok_or(Error::NotFound { id })?;
        let deliveries = Self::deliveries(&mut conn, tables, id).await?;
        Ok(MessageDetail { message, deliveries })
    }

    /// The delivery rows of message `id`, by destination.
    async fn deliveries(
        conn: &mut DB::Connection,
        tables: &crate::Tables,
        id: MessageId,
    ) -> Result<Vec<DeliveryRecord>> {
        let rows = sqlx::query(&render::<DB>(tables, DB::DELIVERIES))
            .bind(id.0)
            .fetch_all(&mut *conn)
            .await
            .map_err(db)?;
        rows.iter().map(decode_delivery).collect()
    }

    /// Begins a transaction holding message `id` in a status `allowed` for `action`.
    async fn begin_checked(
        &self,
        id: MessageId,
        actor: &str,
        action: &'static str,
        allowed: fn(Status) -> bool,
    ) -> Result<Transaction<'static, DB>> {
        let tables = self.0.tables();
        check_actor(actor)?;
        let mut tx = DB::begin(self.0).await?;
        let row = sqlx::query(&render::<DB>(tables, DB::LOCK_STATUS))
            .bind(id.0)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db)?;
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
        let tables = self.0.tables();
        let mut tx = self.begin_checked(id, actor, "retry", Status::can_retry).await?;
        DB::redrive(&mut tx, tables, &[id.0], actor, Status::can_retry).await?;
        let message = Self::finish(tx, id).await?;
        self.0.signal().wake();
        Ok(message)
    }

    pub(crate) async fn retry_failed(
        &self,
        filter: &ListFilter,
        actor: &str,
        batch: usize,
        progress: Progress<'_>,
    ) -> Result<u64> {
        let statuses = bulk_statuses(BulkAction::Retry, filter)?;
        check_actor(actor)?;
        check_batch(batch)?;
        self.act_matching(BulkAction::Retry, filter, &statuses, actor, batch, progress).await
    }

    /// Cancels one message whose status was checked in this transaction (the dialects that
    /// re-check it in the statement may find it moved on: its deliveries are then left alone).
    /// Returns 1 when it was cancelled.
    async fn cancel_checked(
        conn: &mut DB::Connection,
        tables: &crate::Tables,
        id: i64,
        actor: &str,
    ) -> Result<u64> {
        let done = sqlx::query(&render::<DB>(tables, DB::CANCEL))
            .bind(actor.to_owned())
            .bind(id)
            .execute(&mut *conn)
            .await
            .map_err(db)?;
        if DB::affected(&done) != 1 {
            return Ok(0);
        }
        sqlx::query(&render::<DB>(tables, DB::CANCEL_DELIVERIES))
            .bind(id)
            .execute(&mut *conn)
            .await
            .map_err(db)?;
        Ok(1)
    }

    pub(crate) async fn cancel(&self, id: MessageId, actor: &str) -> Result<OutboxMessage> {
        let tables = self.0.tables();
        let mut tx = self.begin_checked(id, actor, "cancel", Status::can_cancel).await?;
        Self::cancel_checked(&mut tx, tables, id.0, actor).await?;
        Self::finish(tx, id).await
    }

    /// `SELECT <what> FROM outbox_message WHERE <every row>` and the `conditions`.
    fn select<'q>(what: &str, conditions: Conditions<'_, DB>) -> Result<Statement<'q, DB>> {
        let mut st = Statement::<DB>::new(format!("SELECT {what} FROM outbox_message WHERE {}", DB::ALL));
        conditions(&mut st)?;
        Ok(st)
    }

    /// Selects one page matching `conditions` in id order (locked where the dialect needs it)
    /// and applies `action` to it, in one transaction. Returns the ids selected and how many
    /// were moved.
    async fn act_page(
        &self,
        action: BulkAction,
        conditions: Conditions<'_, DB>,
        limit: usize,
        actor: &str,
    ) -> Result<(Vec<i64>, u64)> {
        let tables = self.0.tables();
        let mut st = Self::select("id", conditions)?;
        st.push(" ORDER BY id LIMIT ").bind(i64::try_from(limit).unwrap_or(i64::MAX))?.push(DB::LOCK_PAGE);
        let (sql, args) = st.into_parts(tables);
        let mut tx = DB::begin(self.0).await?;
        let ids: Vec<i64> = sqlx::query_scalar_with(&sql, args).fetch_all(&mut *tx).await.map_err(db)?;
        let done = match action {
            _ if ids.is_empty() => 0,
            BulkAction::Retry => DB::redrive(&mut tx, tables, &ids, actor, |s| s == BULK_RETRY_FROM).await?,
            BulkAction::Cancel => {
                let mut n = 0;
                for id in &ids {
                    n += Self::cancel_checked(&mut tx, tables, *id, actor).await?;
                }
                n
            }
        };
        tx.commit().await.map_err(db)?;
        Ok((ids, done))
    }

    /// Applies `action` to every message matching `filter` in one of `statuses`, page by page.
    async fn act_matching(
        &self,
        action: BulkAction,
        filter: &ListFilter,
        statuses: &[Status],
        actor: &str,
        batch: usize,
        mut progress: Progress<'_>,
    ) -> Result<u64> {
        let mut page = ListFilter { status: None, ..filter.clone() };
        let mut total = 0_u64;
        loop {
            let conditions = |st: &mut Statement<'_, DB>| matching(st, statuses, &page);
            let (ids, done) = self.act_page(action, &conditions, batch, actor).await?;
            total += done;
            report(&mut progress, total);
            match ids.last() {
                Some(&last) if ids.len() == batch => page.after_id = Some(MessageId(last)),
                _ => break,
            }
        }
        self.moved(action, total);
        Ok(total)
    }

    /// Applies `action` to those of `ids` in one of the statuses it moves from.
    async fn act_on_ids(
        &self,
        action: BulkAction,
        ids: &[i64],
        actor: &str,
        mut progress: Progress<'_>,
    ) -> Result<u64> {
        let mut total = 0_u64;
        for chunk in ids.chunks(BULK_PAGE) {
            let conditions = |st: &mut Statement<'_, DB>| among(st, action.moves_from(), chunk);
            total += self.act_page(action, &conditions, chunk.len(), actor).await?.1;
            report(&mut progress, total);
        }
        self.moved(action, total);
        Ok(total)
    }

    /// Wakes the relays when messages went back to `pending`.
    fn moved(&self, action: BulkAction, total: u64) {
        if action == BulkAction::Retry && total > 0 {
            self.0.signal().wake();
        }
    }

    /// How many messages meet `conditions`.
    async fn count(&self, conditions: Conditions<'_, DB>) -> Result<u64> {
        let tables = self.0.tables();
        let (sql, args) = Self::select("COUNT(*)", conditions)?.into_parts(tables);
        let n: i64 = sqlx::query_scalar_with(&sql, args).fetch_one(self.0.pool()).await.map_err(db)?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Reads the `scan` most recently failed messages, one at a time, into `each` (rows that
    /// cannot be read are counted, not fatal); returns (rows read, rows unreadable).
    async fn each_failed(&self, scan: usize, mut each: impl FnMut(Failed)) -> Result<(u64, u64)> {
        let tables = self.0.tables();
        let limit = check_scan(scan)?;
        let mut st = Statement::<DB>::new(FAILED.to_owned());
        st.bind(limit)?;
        let (sql, args) = st.into_parts(tables);
        let mut rows = sqlx::query_with(&sql, args).fetch(self.0.pool());
        let (mut read, mut unreadable) = (0_u64, 0_u64);
        while let Some(row) = rows.try_next().await.map_err(db)? {
            read += 1;
            match Failed::decode(&row) {
                Ok(f) => each(f),
                Err(e) => {
                    unreadable += 1;
                    tracing::warn!(error = %e, "A failed message cannot be read for grouping; skipped");
                }
            }
        }
        Ok((read, unreadable))
    }

    pub(crate) async fn failure_groups(&self, scan: usize) -> Result<FailureReport> {
        let mut groups = HashMap::new();
        let mut ungrouped = 0;
        let (scanned, unreadable) = self.each_failed(scan, |f| fold(&mut groups, &mut ungrouped, f)).await?;
        let failed = |st: &mut Statement<'_, DB>| matching(st, &[Status::Failed], &ListFilter::default());
        let truncated = scanned == scan as u64 && self.count(&failed).await? > scanned;
        let mut groups: Vec<FailureGroup> = groups.into_values().collect();
        groups.sort_by(|a, b| b.count.cmp(&a.count).then(b.last_failed_at.cmp(&a.last_failed_at)));
        Ok(FailureReport { groups, scanned, truncated, ungrouped, unreadable })
    }

    /// Runs `UPDATE outbox_message SET <set> WHERE id = <id>` with `value` bound in `set`.
    async fn set_on(
        conn: &mut DB::Connection,
        tables: &crate::Tables,
        set: &str,
        value: Option<String>,
        id: i64,
    ) -> Result<()> {
        let mut st = Statement::<DB>::new("UPDATE outbox_message SET ".into());
        st.push(set);
        if let Some(v) = value {
            st.bind(v)?;
        }
        st.push(" WHERE id = ").bind(id)?;
        let (sql, args) = st.into_parts(tables);
        sqlx::query_with(&sql, args).execute(&mut *conn).await.map_err(db)?;
        Ok(())
    }

    pub(crate) async fn resend(&self, id: MessageId, edit: &MessageEdit, actor: &str) -> Result<Resent> {
        let tables = self.0.tables();
        let mut tx = self.begin_checked(id, actor, "resend", |s| s == Status::Failed).await?;
        let original = DB::get(&mut tx, id).await?.ok_or(Error::NotFound { id })?;
        let deliveries = Self::deliveries(&mut tx, tables, id).await?;
        if deliveries.iter().any(|d| matches!(d.status, Status::Sent | Status::Acked)) {
            return Err(Error::InvalidTransition { id, from: original.status, action: "resend" });
        }
        let copy = edit.copy_of(&original, actor);
        copy.validate()?;
        // The business key moves to the copy (it is unique): freed first, in this transaction.
        Self::set_on(&mut tx, tables, "biz_type = NULL, biz_key = NULL", None, id.0).await?;
        let made = DB::enqueue(&mut tx, &copy).await?;
        let note = format!(
            "resent as message {} by {actor}; last error: {}",
            made.id.0,
            original.last_error.as_deref().unwrap_or("none")
        );
        Self::set_on(&mut tx, tables, "last_error = ", Some(outbox_core::text::bounded_error(&note)), id.0)
            .await?;
        Self::cancel_checked(&mut tx, tables, id.0, actor).await?;
        let original = DB::get(&mut tx, id).await?.ok_or(Error::NotFound { id })?;
        let copy = DB::get(&mut tx, made.id).await?.ok_or(Error::NotFound { id: made.id })?;
        tx.commit().await.map_err(db)?;
        self.0.signal().wake();
        Ok(Resent { original, copy })
    }

    pub(crate) async fn pauses(&self) -> Result<Vec<DestinationPause>> {
        let tables = self.0.tables();
        let rows = sqlx::query(&render::<DB>(tables, PAUSES)).fetch_all(self.0.pool()).await.map_err(db)?;
        rows.iter().map(decode_pause).collect()
    }

    pub(crate) async fn beat(&self, b: &RelayBeat) -> Result<()> {
        let tables = self.0.tables();
        let sql = render::<DB>(tables, DB::BEAT);
        beat_query::<DB>(&sql, b)?.execute(self.0.pool()).await.map_err(db)?;
        // Rows of relays that died without stopping, a day later (a table of a few rows).
        let mut st = Statement::<DB>::new("DELETE FROM outbox_relay WHERE seen_at < ".into());
        st.bind(DB::time(Utc::now() - chrono::Duration::days(1)))?;
        let (sql, args) = st.into_parts(tables);
        sqlx::query_with(&sql, args).execute(self.0.pool()).await.map_err(db)?;
        Ok(())
    }

    pub(crate) async fn overdue(&self) -> Result<Option<Duration>> {
        let tables = self.0.tables();
        let ms: Option<i64> = sqlx::query_scalar(&render::<DB>(tables, DB::OVERDUE_MS))
            .fetch_one(self.0.pool())
            .await
            .map_err(db)?;
        Ok(ms.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))))
    }

    pub(crate) async fn leave(&self, owner: &str) -> Result<()> {
        let tables = self.0.tables();
        let mut st = Statement::<DB>::new("DELETE FROM outbox_relay WHERE owner = ".into());
        st.bind(owner.to_owned())?;
        let (sql, args) = st.into_parts(tables);
        sqlx::query_with(&sql, args).execute(self.0.pool()).await.map_err(db)?;
        Ok(())
    }

    pub(crate) async fn relays(&self) -> Result<Vec<RelayPresence>> {
        let mut conn = self.0.pool().acquire().await.map_err(db)?;
        self.relays_on(&mut conn).await
    }

    async fn relays_on(&self, conn: &mut DB::Connection) -> Result<Vec<RelayPresence>> {
        let tables = self.0.tables();
        let rows = sqlx::query(&render::<DB>(tables, DB::RELAYS)).fetch_all(&mut *conn).await.map_err(db)?;
        let mut out = Vec::with_capacity(rows.len().min(MAX_RELAYS));
        for (i, r) in rows.iter().enumerate() {
            match decode_presence(r) {
                Ok(p) => out.push(p),
                Err(e) => tracing::warn!(row = i, error = %e, "Unreadable row in outbox_relay left out"),
            }
        }
        Ok(out)
    }

    pub(crate) async fn pause(&self, destination: &str, actor: &str, reason: Option<&str>) -> Result<bool> {
        let tables = self.0.tables();
        check_actor(actor)?;
        check_pause(destination, reason)?;
        let done = sqlx::query(&render::<DB>(tables, DB::PAUSE))
            .bind(destination.to_owned())
            .bind(actor.to_owned())
            .bind(reason.map(str::to_owned))
            .execute(self.0.pool())
            .await
            .map_err(db)?;
        Ok(DB::affected(&done) == 1)
    }

    pub(crate) async fn resume(&self, destination: &str, actor: &str) -> Result<bool> {
        let tables = self.0.tables();
        check_actor(actor)?;
        check_pause(destination, None)?;
        let mut st = Statement::<DB>::new("DELETE FROM outbox_destination_pause WHERE destination = ".into());
        st.bind(destination.to_owned())?;
        let (sql, args) = st.into_parts(tables);
        let done = sqlx::query_with(&sql, args).execute(self.0.pool()).await.map_err(db)?;
        let resumed = DB::affected(&done) == 1;
        if resumed {
            self.0.signal().wake();
        }
        Ok(resumed)
    }

    pub(crate) async fn bulk(
        &self,
        action: BulkAction,
        selection: &Selection,
        actor: &str,
        dry_run: bool,
        progress: Progress<'_>,
    ) -> Result<u64> {
        check_actor(actor)?;
        let ids: Vec<i64> = match selection {
            Selection::Filter(filter) => {
                let statuses = bulk_statuses(action, filter)?;
                if dry_run {
                    let page = ListFilter { status: None, ..filter.clone() };
                    return self.count(&|st: &mut Statement<'_, DB>| matching(st, &statuses, &page)).await;
                }
                return self.act_matching(action, filter, &statuses, actor, BULK_PAGE, progress).await;
            }
            Selection::Ids(ids) => {
                check_ids(ids)?;
                ids.iter().map(|id| id.0).collect()
            }
            Selection::Group { id, scan } => {
                let mut members = Vec::new();
                self.each_failed(*scan, |f| {
                    if f.group().0 == *id {
                        members.push(f.id);
                    }
                })
                .await?;
                members
            }
        };
        if !dry_run {
            return self.act_on_ids(action, &ids, actor, progress).await;
        }
        let mut total = 0;
        for chunk in ids.chunks(BULK_PAGE) {
            total += self.count(&|st: &mut Statement<'_, DB>| among(st, action.moves_from(), chunk)).await?;
        }
        Ok(total)
    }

    pub(crate) async fn purge(
        &self,
        older_than: Duration,
        batch: usize,
        mut progress: Progress<'_>,
    ) -> Result<u64> {
        let tables = self.0.tables();
        let age_us = check_age(older_than)?;
        let limit = check_batch(batch)?;
        let now: DB::Time =
            sqlx::query_scalar(&render::<DB>(tables, DB::NOW)).fetch_one(self.0.pool()).await.map_err(db)?;
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

/// The statement that writes `b` into `outbox_relay` (`sql` is the dialect's `BEAT`, rendered),
/// its texts bounded and printable; the owner is checked as every owner is.
pub(crate) fn beat_query<'q, DB>(
    sql: &'q str,
    b: &RelayBeat,
) -> Result<sqlx::query::Query<'q, DB, DB::Arguments<'q>>>
where
    DB: AdminSql,
    String: Type<DB> + for<'e> Encode<'e, DB>,
    i64: Type<DB> + for<'e> Encode<'e, DB>,
{
    outbox_core::text::check_name(&b.owner, outbox_core::limits::OWNER)
        .map_err(|reason| Error::InvalidArgument { name: "owner", reason })?;
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    Ok(sqlx::query(sql)
        .bind(b.owner.clone())
        .bind(printable(&b.host, MAX_PRESENCE_TEXT).into_owned())
        .bind(i64::from(b.pid))
        .bind(printable(&b.version, MAX_PRESENCE_TEXT).into_owned())
        .bind(b.state.as_str().to_owned())
        .bind(DB::time(b.started_at))
        .bind(DB::opt_time(b.last_claim_at))
        .bind(count(b.claimed))
        .bind(count(b.delivered))
        .bind(count(b.failed)))
}
