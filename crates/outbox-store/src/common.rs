//! Small helpers every dialect shares.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use outbox_core::{Error, NewMessage, Result, Status};
use sqlx::{Arguments, ColumnIndex, Decode, Encode, Row, Type};

use crate::error::db;
use crate::relay::AckOutcome;

/// `(biz_type, biz_key)` as optional string slices for binding.
pub(crate) fn biz_parts(msg: &NewMessage) -> (Option<&str>, Option<&str>) {
    match &msg.biz {
        Some((t, k)) => (Some(t.as_str()), Some(k.as_str())),
        None => (None, None),
    }
}

/// `max_attempts` as the `INTEGER` the tables store.
pub(crate) fn max_attempts(msg: &NewMessage) -> Result<Option<i32>> {
    msg.max_attempts
        .map(|n| {
            i32::try_from(n).map_err(|_| Error::InvalidMessage {
                field: "max_attempts",
                reason: format!("{n} is larger than {}", i32::MAX),
            })
        })
        .transpose()
}

/// A dialect's `ENQUEUE` arguments in the order of its parameters: biz type and key, topic, key,
/// tag, headers, payload, max attempts, `deliver_at` and `delay` (the dialect's own time values),
/// then created by, `by` times (a dialect whose `?` cannot repeat binds it again for updated by).
#[cfg_attr(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")), allow(dead_code))]
pub(crate) fn enqueue_args<'q, DB, T>(
    msg: &'q NewMessage,
    deliver_at: T,
    delay: Option<i64>,
    by: usize,
) -> Result<DB::Arguments<'q>>
where
    DB: sqlx::Database,
    Option<&'q str>: Encode<'q, DB> + Type<DB>,
    &'q str: Encode<'q, DB> + Type<DB>,
    String: Encode<'q, DB> + Type<DB>,
    Option<i32>: Encode<'q, DB> + Type<DB>,
    Option<i64>: Encode<'q, DB> + Type<DB>,
    T: Encode<'q, DB> + Type<DB> + 'q,
{
    let (biz_type, biz_key) = biz_parts(msg);
    let max_attempts = max_attempts(msg)?;
    let mut args = DB::Arguments::<'q>::default();
    let add = || -> std::result::Result<(), sqlx::error::BoxDynError> {
        args.add(biz_type)?;
        args.add(biz_key)?;
        args.add(msg.topic.as_str())?;
        args.add(msg.key.as_deref())?;
        args.add(msg.tag.as_deref())?;
        args.add(msg.headers_json())?;
        args.add(msg.payload.as_str())?;
        args.add(max_attempts)?;
        args.add(deliver_at)?;
        args.add(delay)?;
        for _ in 0..by {
            args.add(msg.created_by.as_deref())?;
        }
        Ok(())
    };
    add().map_err(|e| db(sqlx::Error::Encode(e)))?;
    Ok(args)
}

/// The message enqueued before with `msg`'s biz pair, for a dialect whose insert of a duplicate
/// returns no id: `existing` reads it, binding the biz type, then the biz key.
#[cfg_attr(not(any(feature = "mysql", feature = "sqlite")), allow(dead_code))]
pub(crate) async fn enqueued_before<DB>(
    conn: &mut DB::Connection,
    tables: &crate::Tables,
    existing: &str,
    msg: &NewMessage,
) -> Result<outbox_core::Enqueued>
where
    DB: crate::OutboxDatabase,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    (i64,): for<'r> sqlx::FromRow<'r, DB::Row>,
{
    let (biz_type, biz_key) = biz_parts(msg);
    let id: i64 = sqlx::query_scalar::<DB, i64>(&tables.render(DB::DIALECT, existing))
        .bind(biz_type)
        .bind(biz_key)
        .fetch_one(&mut *conn)
        .await
        .map_err(db)?;
    Ok(outbox_core::Enqueued { id: outbox_core::MessageId(id), created: false })
}

/// Parses a `status` column of `table` (row `id`), naming the row when a foreign writer put
/// an unknown value there.
pub(crate) fn parse_status(table: &'static str, id: String, value: &str) -> Result<Status> {
    value.parse().map_err(|e: outbox_core::UnknownStatus| Error::MalformedRow {
        table,
        id,
        reason: e.to_string(),
    })
}

/// The row a value is read from, named in the error when the value cannot be read. (Only
/// SQLite's decoder reads it yet: the other dialects build it for the shared admin code.)
#[derive(Debug, Clone, Copy)]
pub(crate) struct At {
    pub(crate) table: &'static str,
    pub(crate) id: i64,
}

impl At {
    /// The error for a value of this row that the library cannot use.
    pub(crate) fn malformed(self, reason: String) -> Error {
        Error::MalformedRow { table: self.table, id: self.id.to_string(), reason }
    }
}

/// The columns each dialect stores its own way (text on MySQL is bytes, times on SQLite are
/// INTEGER milliseconds); everything else is read with [`get`].
pub(crate) trait Cells {
    fn text(&self, col: &'static str, at: At) -> Result<String>;
    fn opt_text(&self, col: &'static str, at: At) -> Result<Option<String>>;
    fn time(&self, col: &'static str, at: At) -> Result<DateTime<Utc>>;
    fn opt_time(&self, col: &'static str, at: At) -> Result<Option<DateTime<Utc>>>;
}

/// Writes [`Cells`] methods that read their columns as sqlx decodes them (the columns a dialect
/// stores as they are), each `method: type`.
#[allow(unused_macros)]
macro_rules! decoded_cells {
    ($($method:ident: $ty:ty),* $(,)?) => {
        $(
            fn $method(&self, col: &'static str, _: $crate::common::At) -> ::outbox_core::Result<$ty> {
                $crate::common::get(self, col)
            }
        )*
    };
}
#[allow(unused_imports)]
pub(crate) use decoded_cells;

/// One row of the relay's delivery query (`message_id, destination, status, attempts,
/// last_error, wait_ms`), on any dialect.
pub(crate) fn delivery_state<R>(r: &R) -> Result<crate::relay::DeliveryState>
where
    R: Row + Cells,
    for<'s> &'s str: ColumnIndex<R>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i32: Decode<'r, R::Database> + Type<R::Database>,
{
    let message_id: i64 = get(r, "message_id")?;
    let at = At { table: "outbox_delivery", id: message_id };
    let wait_ms: i64 = get(r, "wait_ms")?;
    Ok(crate::relay::DeliveryState {
        message_id: outbox_core::MessageId(message_id),
        destination: r.text("destination", at)?,
        status: delivery_status(&r.text("status", at)?)?,
        attempts: get(r, "attempts")?,
        wait: std::time::Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0)),
        last_error: r.opt_text("last_error", at)?,
    })
}

/// Decodes a row selected with a dialect's `MESSAGE_COLUMNS`: numbers from `row`, text and
/// times through `cells`, the dialect's own way (usually the row itself). A value the library
/// cannot use fails the row, named.
pub(crate) fn decode_message_with<R, C>(row: &R, cells: &C) -> Result<outbox_core::OutboxMessage>
where
    R: Row,
    C: Cells,
    for<'s> &'s str: ColumnIndex<R>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i32: Decode<'r, R::Database> + Type<R::Database>,
{
    let id: i64 = get(row, "id")?;
    let at = At { table: "outbox_message", id };
    let headers = cells.text("headers", at)?;
    let status = cells.text("status", at)?;
    Ok(outbox_core::OutboxMessage {
        id: outbox_core::MessageId(id),
        biz_type: cells.opt_text("biz_type", at)?,
        biz_key: cells.opt_text("biz_key", at)?,
        topic: cells.text("topic", at)?,
        key: cells.opt_text("msg_key", at)?,
        tag: cells.opt_text("tag", at)?,
        headers: outbox_core::decode_headers(&headers).map_err(|reason| at.malformed(reason))?,
        payload: cells.text("payload", at)?,
        status: status.parse().map_err(|e: outbox_core::UnknownStatus| at.malformed(e.to_string()))?,
        attempts: get(row, "attempts")?,
        max_attempts: get(row, "max_attempts")?,
        next_attempt_at: cells.time("next_attempt_at", at)?,
        last_attempt_at: cells.opt_time("last_attempt_at", at)?,
        last_error: cells.opt_text("last_error", at)?,
        lease_owner: cells.opt_text("lease_owner", at)?,
        lease_until: cells.opt_time("lease_until", at)?,
        created_by: cells.opt_text("created_by", at)?,
        updated_by: cells.opt_text("updated_by", at)?,
        created_at: cells.time("created_at", at)?,
        updated_at: cells.time("updated_at", at)?,
    })
}

/// Enqueues `msgs` one statement each, all checked first, in the caller's transaction (the
/// dialects that cannot return the ids of a multi-row insert).
#[cfg_attr(not(any(feature = "mysql", feature = "sqlite")), allow(dead_code))]
pub(crate) async fn enqueue_each<DB: crate::OutboxDatabase>(
    conn: &mut DB::Connection,
    tables: &crate::Tables,
    msgs: &[NewMessage],
) -> Result<Vec<outbox_core::Enqueued>> {
    for m in msgs {
        m.validate()?;
    }
    let mut out = Vec::with_capacity(msgs.len());
    for m in msgs {
        out.push(DB::enqueue_in(&mut *conn, tables, m).await?);
    }
    Ok(out)
}

/// Reads a column sqlx decodes as it is.
pub(crate) fn get<'r, R, T>(row: &'r R, col: &'static str) -> Result<T>
where
    R: Row,
    for<'s> &'s str: ColumnIndex<R>,
    T: Decode<'r, R::Database> + Type<R::Database>,
{
    row.try_get(col).map_err(db)
}

/// What recording a consumer's ACK writes, decided from the message's status and its delivery
/// row's at this destination (both read, and locked where the database can, by the caller).
/// The rule is here once; each dialect runs only the SQL of the step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AckStep {
    /// The relay has published but not yet recorded this delivery (the message is still
    /// `sending`, no row): insert the row `acked`. The settlement keeps it.
    Insert,
    /// Mark the delivery row `acked`. With `complete`, the delivery was `sent` and awaiting
    /// this ACK: the message becomes `acked` too if no other destination is still open.
    /// Without, the ACK overtook the relay's bookkeeping (the message is still `sending`).
    Mark {
        /// Complete the message when this was its last open delivery.
        complete: bool,
    },
    /// Write nothing; answer this.
    Answer(AckOutcome),
}

/// The step for an ACK of a message in `message` status (`None`: no such message) whose
/// delivery row is in `delivery` status (`None`: no row).
pub(crate) fn ack_step(message: Option<&str>, delivery: Option<Status>) -> AckStep {
    let in_flight = message == Some("sending");
    match delivery {
        None if in_flight => AckStep::Insert,
        Some(Status::Pending | Status::Sending) if in_flight => AckStep::Mark { complete: false },
        None => AckStep::Answer(AckOutcome::Unknown),
        Some(Status::Acked) => AckStep::Answer(AckOutcome::AlreadyAcked),
        Some(Status::Sent) => AckStep::Mark { complete: true },
        Some(status) => AckStep::Answer(AckOutcome::NotAwaiting { status }),
    }
}

/// How a dialect counts the rows a statement changed (each driver's result has its own
/// `rows_affected`; sqlx has no trait for it).
pub(crate) trait Affected: crate::OutboxDatabase {
    fn rows_affected(done: &Self::QueryResult) -> u64;
}

/// The SQL of each [`AckStep`] in one dialect: a delivery row inserted `acked` and marked
/// `acked` (both bind the message id, then the destination), the message's deliveries still
/// open and the message completed (both bind the message id).
pub(crate) struct AckSql {
    pub(crate) insert: &'static str,
    pub(crate) mark: &'static str,
    pub(crate) open: &'static str,
    pub(crate) complete: &'static str,
}

/// Records an ACK of `message_id` at `destination` in `tx`, which read and locked the message's
/// status (`message`, `None`: no such message) and its delivery's there (`delivery`, `None`: no
/// row): the step [`ack_step`] decides, then commits. An ACK can overtake the relay's own
/// bookkeeping (the consumer got the message before the relay recorded the delivery, which is
/// still `sending`); the token proves the delivery was issued, so it is recorded now and the
/// settlement keeps it.
pub(crate) async fn finish_ack<DB>(
    mut tx: sqlx::Transaction<'_, DB>,
    sql: &AckSql,
    tables: &crate::Tables,
    message: Option<&str>,
    delivery: Option<&str>,
    message_id: i64,
    destination: &str,
) -> Result<AckOutcome>
where
    DB: Affected,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    i64: Type<DB> + for<'q> sqlx::Encode<'q, DB> + for<'r> Decode<'r, DB>,
    String: Type<DB> + for<'q> sqlx::Encode<'q, DB>,
    (i64,): for<'r> sqlx::FromRow<'r, DB::Row>,
{
    let outcome = 'write: {
        let (insert_or_mark, complete) = match ack_step(message, delivery.map(delivery_status).transpose()?) {
            AckStep::Answer(outcome) => break 'write outcome,
            AckStep::Insert => (sql.insert, false),
            AckStep::Mark { complete } => (sql.mark, complete),
        };
        sqlx::query::<DB>(&tables.render(DB::DIALECT, insert_or_mark))
            .bind(message_id)
            .bind(destination.to_owned())
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        if !complete {
            break 'write AckOutcome::Acked { message_done: false };
        }
        let (open,): (i64,) = sqlx::query_as::<DB, (i64,)>(&tables.render(DB::DIALECT, sql.open))
            .bind(message_id)
            .fetch_one(&mut *tx)
            .await
            .map_err(db)?;
        let message_done = open == 0 && {
            let done = sqlx::query::<DB>(&tables.render(DB::DIALECT, sql.complete))
                .bind(message_id)
                .execute(&mut *tx)
                .await
                .map_err(db)?;
            DB::rows_affected(&done) == 1
        };
        AckOutcome::Acked { message_done }
    };
    tx.commit().await.map_err(db)?;
    Ok(outcome)
}

/// ACK mode, the statements that send an overdue delivery back to `pending` one row at a time
/// (dialects without array parameters): `delivery` binds the message id, then the destination;
/// `message` binds the new attempts, the destination named in its error, then the message id.
#[cfg_attr(not(any(feature = "mysql", feature = "sqlite")), allow(dead_code))]
pub(crate) struct ExpireSql {
    pub(crate) delivery: &'static str,
    pub(crate) message: &'static str,
}

/// Sends the `due` deliveries (locked by the caller's transaction, with their messages) back to
/// `pending`, and each of their messages with the error of its delivery with the most
/// attempts; returns how many deliveries expired.
#[cfg_attr(not(any(feature = "mysql", feature = "sqlite")), allow(dead_code))]
pub(crate) async fn expire_each<DB>(
    conn: &mut DB::Connection,
    sql: &ExpireSql,
    tables: &crate::Tables,
    due: &[(i64, String, i32)],
) -> Result<u64>
where
    DB: Affected,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    i64: Type<DB> + for<'q> sqlx::Encode<'q, DB>,
    i32: Type<DB> + for<'q> sqlx::Encode<'q, DB>,
    String: Type<DB> + for<'q> sqlx::Encode<'q, DB>,
{
    let mut expired = 0;
    for (id, destination, _) in due {
        let done = sqlx::query::<DB>(&tables.render(DB::DIALECT, sql.delivery))
            .bind(*id)
            .bind(destination.clone())
            .execute(&mut *conn)
            .await
            .map_err(db)?;
        expired += DB::rows_affected(&done);
    }
    for (id, (destination, attempts)) in expired_per_message(due) {
        sqlx::query::<DB>(&tables.render(DB::DIALECT, sql.message))
            .bind(attempts)
            .bind(destination)
            .bind(id)
            .execute(&mut *conn)
            .await
            .map_err(db)?;
    }
    Ok(expired)
}

/// Returns every message `owner` leases to `pending`, due now, with the dialect's `statement`,
/// which binds the owner `binds` times (as updated by, then as the lease owner: once where a
/// parameter can repeat); returns how many it released.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")), allow(dead_code))]
pub(crate) async fn release_leases<DB>(
    outbox: &crate::Outbox<DB>,
    statement: &str,
    binds: usize,
    owner: &str,
) -> Result<u64>
where
    DB: Affected,
    for<'p> &'p sqlx::Pool<DB>: sqlx::Executor<'p, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
{
    let sql = outbox.tables().render(DB::DIALECT, statement);
    let mut query = sqlx::query::<DB>(&sql);
    for _ in 0..binds {
        query = query.bind(owner);
    }
    let done = query.execute(outbox.pool()).await.map_err(db)?;
    Ok(DB::rows_affected(&done))
}

/// A delivery's `status` column.
pub(crate) fn delivery_status(value: &str) -> Result<Status> {
    parse_status("outbox_delivery", String::new(), value)
}

/// Per message, the expired delivery with the most attempts: (destination, its new attempts).
pub(crate) fn expired_per_message(due: &[(i64, String, i32)]) -> BTreeMap<i64, (String, i32)> {
    let mut out: BTreeMap<i64, (String, i32)> = BTreeMap::new();
    for (id, dest, attempts) in due {
        let new = attempts.saturating_add(1);
        match out.get(id) {
            Some((_, a)) if *a >= new => {}
            _ => {
                out.insert(*id, (dest.clone(), new));
            }
        }
    }
    out
}

/// A claimed row the relay cannot read (a foreign writer put a value there that the decoder
/// refuses: invalid UTF-8, a zero date, a time out of range, ...). It fails by itself with
/// `reason`; every other row of the claim goes on.
#[derive(Debug, Clone)]
pub(crate) struct Poison {
    pub(crate) id: i64,
    pub(crate) reason: String,
}

/// Decodes each row alone: a row whose decoding fails, or panics inside a driver's decoder, is
/// returned as [`Poison`] with its id and reason instead of failing the whole claim.
pub(crate) fn decode_rows<R>(
    rows: &[R],
    id_of: impl Fn(&R) -> Option<i64>,
    decode: impl Fn(&R) -> Result<outbox_core::OutboxMessage>,
) -> (Vec<outbox_core::OutboxMessage>, Vec<Poison>) {
    let mut good = Vec::with_capacity(rows.len());
    let mut bad = Vec::new();
    for row in rows {
        let Some(id) = id_of(row) else { continue };
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decode(row))) {
            Ok(Ok(m)) => good.push(m),
            Ok(Err(e)) => bad.push(Poison { id, reason: poison_reason(&e.to_string()) }),
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "decoder panicked".to_owned());
                bad.push(Poison { id, reason: poison_reason(&what) });
            }
        }
    }
    (good, bad)
}

fn poison_reason(what: &str) -> String {
    outbox_core::text::bounded_error(&format!(
        "the relay cannot read this row ({what}); fix or delete it, then `outbox retry`"
    ))
}

/// A dialect's `FAIL_ONE`: marks one message the relay holds (`pending` under its lock, or
/// `sending` under its lease) `failed` with a reason, for a row it cannot read or whose outcome
/// could not be written. `statement` binds the reason, the message id, then the lease owner.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")), allow(dead_code))]
pub(crate) struct FailSql<DB> {
    statement: &'static str,
    db: std::marker::PhantomData<fn() -> DB>,
}

#[cfg_attr(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")), allow(dead_code))]
impl<DB> FailSql<DB> {
    /// The dialect's `statement`.
    pub(crate) const fn new(statement: &'static str) -> Self {
        FailSql { statement, db: std::marker::PhantomData }
    }
}

#[cfg_attr(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")), allow(dead_code))]
impl<DB> FailSql<DB>
where
    DB: Affected,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    i64: Type<DB> + for<'q> sqlx::Encode<'q, DB>,
    String: Type<DB> + for<'q> sqlx::Encode<'q, DB>,
{
    /// Marks message `id` `failed` with `reason`; returns the rows written (0 when the row is no
    /// longer held).
    pub(crate) async fn fail_one(
        &self,
        conn: &mut DB::Connection,
        tables: &crate::Tables,
        owner: &str,
        id: i64,
        reason: &str,
    ) -> Result<u64> {
        let done = sqlx::query::<DB>(&tables.render(DB::DIALECT, self.statement))
            .bind(reason.to_owned())
            .bind(id)
            .bind(owner.to_owned())
            .execute(&mut *conn)
            .await
            .map_err(db)?;
        Ok(DB::rows_affected(&done))
    }

    /// Logs and fails the claimed rows that could not be read, each alone (a row whose own
    /// write fails is left to its lease or lock, and logged).
    pub(crate) async fn fail_poison(
        &self,
        conn: &mut DB::Connection,
        tables: &crate::Tables,
        owner: &str,
        poison: &[Poison],
    ) {
        log_poison(poison);
        for p in poison {
            if let Err(e) = self.fail_one(conn, tables, owner, p.id, &p.reason).await {
                tracing::error!(message_id = p.id, error = %e, "Could not mark an unreadable row failed");
            }
        }
    }

    /// The messages of the rows a lease claimed for `owner`, in id order: each row decoded
    /// alone ([`decode_rows`]), the unreadable ones failed alone on a connection of `pool`.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub(crate) async fn leased(
        &self,
        pool: &sqlx::Pool<DB>,
        tables: &crate::Tables,
        owner: &str,
        rows: &[DB::Row],
        decode: fn(&DB::Row) -> Result<outbox_core::OutboxMessage>,
    ) -> Result<Vec<outbox_core::OutboxMessage>>
    where
        for<'s> &'s str: ColumnIndex<DB::Row>,
        for<'r> i64: Decode<'r, DB>,
    {
        let (mut out, poison) = decode_rows(rows, |r| r.try_get::<i64, _>("id").ok(), decode);
        if !poison.is_empty() {
            let mut conn = pool.acquire().await.map_err(db)?;
            self.fail_poison(&mut conn, tables, owner, &poison).await;
        }
        out.sort_by_key(|m| m.id);
        Ok(out)
    }
}

/// Logs the rows a claim failed because they could not be read.
fn log_poison(poison: &[Poison]) {
    for p in poison {
        tracing::error!(message_id = p.id, reason = %p.reason, "Message failed: its row cannot be read");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ack_is_recorded_once_and_only_for_a_delivery_awaiting_it() {
        let mark = |complete| AckStep::Mark { complete };
        // Awaiting its ACK: the delivery is acked and may complete the message.
        assert_eq!(ack_step(Some("sent"), Some(Status::Sent)), mark(true));
        // The ACK overtook the relay's bookkeeping: recorded now, the settlement keeps it.
        assert_eq!(ack_step(Some("sending"), None), AckStep::Insert);
        assert_eq!(ack_step(Some("sending"), Some(Status::Pending)), mark(false));
        assert_eq!(ack_step(Some("sending"), Some(Status::Sending)), mark(false));
        // Idempotent, and nothing for what does not await an ACK.
        assert_eq!(ack_step(Some("acked"), Some(Status::Acked)), AckStep::Answer(AckOutcome::AlreadyAcked));
        assert_eq!(ack_step(None, None), AckStep::Answer(AckOutcome::Unknown));
        assert_eq!(ack_step(Some("pending"), None), AckStep::Answer(AckOutcome::Unknown));
        for status in [Status::Pending, Status::Failed, Status::Cancelled] {
            assert_eq!(
                ack_step(Some("pending"), Some(status)),
                AckStep::Answer(AckOutcome::NotAwaiting { status })
            );
        }
    }
}
