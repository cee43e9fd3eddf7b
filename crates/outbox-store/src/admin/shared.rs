//! [`MessageAdmin`] once for every dialect: the logic (checks, status rules, batching, row
//! decoding) lives here; each dialect's `admin.rs` gives only its SQL and the few steps its
//! database does its own way ([`AdminSql`]).

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::TryStreamExt as _;
use outbox_core::failure::{cause_of, group_id};
use outbox_core::text::printable;
use outbox_core::{Error, MessageId, NewMessage, OutboxMessage, Result, Status};
use sqlx::{
    Arguments, ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Row, Transaction, Type,
};

use super::{
    bulk_statuses, check_actor, check_age, check_batch, check_ids, check_pause, check_scan, refused, report,
    BulkAction, DeliveryRecord, DestinationCount, DestinationPause, FailureGroup, FailureReport, ListFilter,
    MessageDetail, MessageEdit, Progress, Resent, Selection, Stats, TopicCount, BULK_RETRY_FROM,
    MAX_FAILURE_GROUPS, RESENT_FROM,
};
use crate::admin::{RelayPresence, MAX_RELAYS};
use crate::common::{get, parse_status, At, Cells};
use crate::error::db;
use crate::outbox::{Outbox, OutboxDatabase};
use crate::relay::{RelayBeat, RelayState, MAX_PRESENCE_TEXT};

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
    /// Pauses a destination unless it is paused (0 rows then); binds the destination, the
    /// actor and the reason.
    const PAUSE: &'static str;
    /// Inserts or refreshes a relay's row in `outbox_relay`, `seen_at` the database clock;
    /// binds owner, host, pid, version, state, started_at, last_claim_at, claimed, delivered,
    /// failed.
    const BEAT: &'static str;
    /// Milliseconds since the earliest due `pending` message became due (NULL when none is):
    /// `MIN(next_attempt_at)` over due pending rows, through the due index.
    const OVERDUE_MS: &'static str;
    /// The rows of `outbox_relay` by owner with `silent_ms` (milliseconds since `seen_at`,
    /// database clock), at most [`MAX_RELAYS`] of them.
    const RELAYS: &'static str;

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

    /// `t` as the tables store it, or NULL (`Option<Self::Time>`: sqlx implements `Encode` for
    /// an option per database, not generically).
    fn opt_time(t: Option<DateTime<Utc>>) -> impl for<'q> Encode<'q, Self> + Type<Self> + Send + 'static;

    /// Decodes a row of [`Self::MESSAGE_COLUMNS`] for people to read.
    fn read_message(row: &Self::Row) -> Result<OutboxMessage>;

    /// Begins a transaction for an action that checks a status and then writes.
    fn begin(outbox: &Outbox<Self>) -> impl Future<Output = Result<Transaction<'static, Self>>> + Send;

    /// Re-drives messages (locked, or re-checked here against `from`) with their failed or
    /// cancelled delivery rows; returns how many messages it re-drove.
    fn redrive(
        conn: &mut Self::Connection,
        tables: &crate::Tables,
        ids: &[i64],
        actor: &str,
        from: fn(Status) -> bool,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Rows a statement changed.
    fn affected(done: &Self::QueryResult) -> u64;

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

    /// The SQL for the names `tables` and the arguments.
    fn into_parts(self, tables: &crate::Tables) -> (String, DB::Arguments<'q>)
    where
        DB: OutboxDatabase,
    {
        let sql = match tables.render(DB::DIALECT, &self.sql) {
            std::borrow::Cow::Borrowed(_) => self.sql,
            std::borrow::Cow::Owned(rendered) => rendered,
        };
        (sql, self.args)
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
        if let Some(text) = &f.error {
            // `!` escapes the pattern's wildcards: portable (MySQL reads `\` in a literal).
            let mut pattern = String::with_capacity(text.len() + 8);
            pattern.push('%');
            for c in text.chars() {
                if matches!(c, '!' | '%' | '_') {
                    pattern.push('!');
                }
                pattern.push(c);
            }
            pattern.push('%');
            self.push(" AND last_error LIKE ").bind(pattern)?.push(" ESCAPE '!'");
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

    /// Appends ` AND <column> IN (...)` with every value bound; `values` must not be empty.
    fn any_of<T: 'q + Encode<'q, DB> + Type<DB>>(
        &mut self,
        column: &str,
        values: impl IntoIterator<Item = T>,
    ) -> Result<&mut Self> {
        self.push(" AND ").push(column).push(" IN (");
        for (i, v) in values.into_iter().enumerate() {
            if i > 0 {
                self.push(", ");
            }
            self.bind(v)?;
        }
        Ok(self.push(")"))
    }
}

/// What a statement on `outbox_message` appends after `WHERE <every row>`: built where the
/// statement runs, so its arguments live as long as the query needs.
type Conditions<'f, DB> = &'f (dyn for<'a> Fn(&mut Statement<'a, DB>) -> Result<()> + Sync);

/// ` AND status IN (<statuses>)` and the filter's conditions.
fn matching<'q, DB: AdminSql>(
    st: &mut Statement<'q, DB>,
    statuses: &[Status],
    filter: &ListFilter,
) -> Result<()>
where
    String: Type<DB> + Encode<'q, DB>,
    i64: Type<DB> + Encode<'q, DB>,
{
    st.any_of("status", statuses.iter().map(|s| s.as_str().to_owned()))?.filter(filter)?;
    Ok(())
}

/// ` AND status IN (<statuses>) AND id IN (<ids>)`.
fn among<'q, DB: AdminSql>(st: &mut Statement<'q, DB>, statuses: &[Status], ids: &[i64]) -> Result<()>
where
    String: Type<DB> + Encode<'q, DB>,
    i64: Type<DB> + Encode<'q, DB>,
{
    st.any_of("status", statuses.iter().map(|s| s.as_str().to_owned()))?.any_of("id", ids.iter().copied())?;
    Ok(())
}

/// One failed message as a grouping reads it.
struct Failed {
    id: i64,
    topic: String,
    last_error: Option<String>,
    at: DateTime<Utc>,
}

impl Failed {
    fn decode<R>(row: &R) -> Result<Failed>
    where
        R: Cells + Row,
        for<'s> &'s str: ColumnIndex<R>,
        i64: Type<R::Database> + for<'r> Decode<'r, R::Database>,
    {
        let id: i64 = get(row, "id")?;
        let at = At { table: "outbox_message", id };
        Ok(Failed {
            id,
            topic: row.text("topic", at)?,
            last_error: row.opt_text("last_error", at)?,
            at: row.time("updated_at", at)?,
        })
    }

    /// Its group's id, and the group's destination and cause.
    fn group(&self) -> (String, Option<String>, String) {
        let c = cause_of(self.last_error.as_deref());
        (group_id(&self.topic, c.destination.as_deref(), &c.cause), c.destination, c.cause)
    }
}

/// Adds one failed message to the groups (the rows come most recent first); counts it in
/// `ungrouped` when its group would be one too many.
fn fold(groups: &mut HashMap<String, FailureGroup>, ungrouped: &mut u64, f: Failed) {
    let (id, destination, cause) = f.group();
    if let Some(g) = groups.get_mut(&id) {
        g.count += 1;
        g.first_failed_at = g.first_failed_at.min(f.at);
        g.last_failed_at = g.last_failed_at.max(f.at);
        if g.example_ids.len() < 5 {
            g.example_ids.push(MessageId(f.id));
        }
        return;
    }
    if groups.len() >= MAX_FAILURE_GROUPS {
        *ungrouped += 1;
        return;
    }
    let example_error = f.last_error.as_deref().map(|e| printable(e, 1000).into_owned());
    groups.insert(
        id.clone(),
        FailureGroup {
            id,
            topic: f.topic,
            destination,
            cause,
            count: 1,
            first_failed_at: f.at,
            last_failed_at: f.at,
            example_ids: vec![MessageId(f.id)],
            example_error,
        },
    );
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
    Option<String>: Type<DB> + for<'q> Encode<'q, DB>,
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
        let tables = self.0.tables();
        let rows = sqlx::query(&render::<DB>(tables, sql)).fetch_all(self.0.pool()).await.map_err(db)?;
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
        let tables = self.0.tables();
        let by_status = self.counts(BY_STATUS, "outbox_message", None).await?;
        let by_topic = self.counts(BY_TOPIC, "outbox_message", Some("topic")).await?;
        let by_destination = self.counts(BY_DESTINATION, "outbox_delivery", Some("destination")).await?;
        let oldest: Option<i64> = sqlx::query_scalar(&render::<DB>(tables, DB::OLDEST_PENDING_MS))
            .fetch_one(self.0.pool())
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
        let rows = sqlx::query(&render::<DB>(tables, DB::DELIVERIES))
            .bind(id.0)
            .fetch_all(&mut *conn)
            .await
            .map_err(db)?;
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
        let rows = sqlx::query(&render::<DB>(tables, DB::DELIVERIES))
            .bind(id.0)
            .fetch_all(&mut *tx)
            .await
            .map_err(db)?;
        let deliveries = rows.iter().map(decode_delivery).collect::<Result<Vec<_>>>()?;
        if deliveries.iter().any(|d| matches!(d.status, Status::Sent | Status::Acked)) {
            return Err(Error::InvalidTransition { id, from: original.status, action: "resend" });
        }
        let mut copy = NewMessage::new(
            edit.topic.clone().unwrap_or_else(|| original.topic.clone()),
            edit.payload.clone().unwrap_or_else(|| original.payload.clone()),
        );
        copy.key = edit.key.clone().or_else(|| original.key.clone());
        copy.tag = edit.tag.clone().or_else(|| original.tag.clone());
        copy.headers = edit.headers.clone().unwrap_or_else(|| original.headers.clone());
        copy.headers.insert(RESENT_FROM.to_owned(), id.0.to_string());
        copy.biz = original.biz_type.clone().zip(original.biz_key.clone());
        copy.max_attempts = original.max_attempts.and_then(|n| u32::try_from(n).ok());
        copy.created_by = Some(actor.to_owned());
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
        let at = At { table: "outbox_destination_pause", id: 0 };
        rows.iter()
            .map(|r| {
                Ok(DestinationPause {
                    destination: r.text("destination", at)?,
                    paused_by: r.text("paused_by", at)?,
                    reason: r.opt_text("reason", at)?,
                    paused_at: r.time("paused_at", at)?,
                })
            })
            .collect()
    }

    pub(crate) async fn beat(&self, b: &RelayBeat) -> Result<()> {
        let tables = self.0.tables();
        outbox_core::text::check_name(&b.owner, outbox_core::limits::OWNER)
            .map_err(|reason| Error::InvalidArgument { name: "owner", reason })?;
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        sqlx::query(&render::<DB>(tables, DB::BEAT))
            .bind(b.owner.clone())
            .bind(printable(&b.host, MAX_PRESENCE_TEXT).into_owned())
            .bind(i64::from(b.pid))
            .bind(printable(&b.version, MAX_PRESENCE_TEXT).into_owned())
            .bind(b.state.as_str().to_owned())
            .bind(DB::time(b.started_at))
            .bind(DB::opt_time(b.last_claim_at))
            .bind(count(b.claimed))
            .bind(count(b.delivered))
            .bind(count(b.failed))
            .execute(self.0.pool())
            .await
            .map_err(db)?;
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
        let tables = self.0.tables();
        let rows =
            sqlx::query(&render::<DB>(tables, DB::RELAYS)).fetch_all(self.0.pool()).await.map_err(db)?;
        let at = At { table: "outbox_relay", id: 0 };
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        let mut out = Vec::with_capacity(rows.len().min(MAX_RELAYS));
        for (i, r) in rows.iter().enumerate() {
            let read = || -> Result<RelayPresence> {
                let text = |col| -> Result<String> {
                    Ok(printable(&r.text(col, at)?, MAX_PRESENCE_TEXT).into_owned())
                };
                Ok(RelayPresence {
                    beat: RelayBeat {
                        owner: printable(&r.text("owner", at)?, outbox_core::limits::OWNER).into_owned(),
                        host: text("host")?,
                        pid: u32::try_from(get::<_, i64>(r, "pid")?).unwrap_or(0),
                        version: text("version")?,
                        state: RelayState::parse(&r.text("state", at)?),
                        started_at: r.time("started_at", at)?,
                        last_claim_at: r.opt_time("last_claim_at", at)?,
                        claimed: count(get(r, "claimed")?),
                        delivered: count(get(r, "delivered")?),
                        failed: count(get(r, "failed")?),
                    },
                    seen_at: r.time("seen_at", at)?,
                    silent_ms: get(r, "silent_ms")?,
                })
            };
            match read() {
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

            async fn failure_groups(
                &self,
                scan: usize,
            ) -> ::outbox_core::Result<$crate::admin::FailureReport> {
                $crate::admin::Admin(self).failure_groups(scan).await
            }

            async fn bulk(
                &self,
                action: $crate::admin::BulkAction,
                selection: &$crate::admin::Selection,
                actor: &str,
                dry_run: bool,
                progress: $crate::admin::Progress<'_>,
            ) -> ::outbox_core::Result<u64> {
                $crate::admin::Admin(self).bulk(action, selection, actor, dry_run, progress).await
            }

            async fn resend(
                &self,
                id: ::outbox_core::MessageId,
                edit: &$crate::admin::MessageEdit,
                actor: &str,
            ) -> ::outbox_core::Result<$crate::admin::Resent> {
                $crate::admin::Admin(self).resend(id, edit, actor).await
            }

            async fn relays(&self) -> ::outbox_core::Result<Vec<$crate::admin::RelayPresence>> {
                $crate::admin::Admin(self).relays().await
            }

            async fn pauses(&self) -> ::outbox_core::Result<Vec<$crate::admin::DestinationPause>> {
                $crate::admin::Admin(self).pauses().await
            }

            async fn pause(
                &self,
                destination: &str,
                actor: &str,
                reason: Option<&str>,
            ) -> ::outbox_core::Result<bool> {
                $crate::admin::Admin(self).pause(destination, actor, reason).await
            }

            async fn resume(&self, destination: &str, actor: &str) -> ::outbox_core::Result<bool> {
                $crate::admin::Admin(self).resume(destination, actor).await
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

        impl $crate::relay::Backlog for $crate::outbox::Outbox<$db> {
            async fn overdue(&self) -> ::outbox_core::Result<Option<::std::time::Duration>> {
                $crate::admin::Admin(self).overdue().await
            }
        }

        impl $crate::relay::Presence for $crate::outbox::Outbox<$db> {
            async fn beat(&self, beat: &$crate::relay::RelayBeat) -> ::outbox_core::Result<()> {
                $crate::admin::Admin(self).beat(beat).await
            }

            async fn leave(&self, owner: &str) -> ::outbox_core::Result<()> {
                $crate::admin::Admin(self).leave(owner).await
            }
        }

        impl $crate::relay::Pauses for $crate::outbox::Outbox<$db> {
            async fn paused_destinations(&self) -> ::outbox_core::Result<Vec<String>> {
                let pauses = $crate::admin::Admin(self).pauses().await?;
                Ok(pauses.into_iter().map(|p| p.destination).collect())
            }
        }
    };
}
pub(crate) use impl_admin;
