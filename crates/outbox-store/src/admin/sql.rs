//! [`AdminSql`]: what a dialect gives the shared operations (its SQL and the few steps its
//! database takes its own way).

use std::future::Future;

use chrono::{DateTime, Utc};
use outbox_core::{OutboxMessage, Result, Status};
use sqlx::{Decode, Encode, Transaction, Type};

use crate::common::Cells;
use crate::outbox::{Outbox, OutboxDatabase};

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
    /// [`decode_delivery`](super::rows::decode_delivery)); binds the message id.
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
    /// database clock), at most [`MAX_RELAYS`](super::MAX_RELAYS) of them.
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
