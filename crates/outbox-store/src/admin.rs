//! Operations on the outbox table for people and tools: counts, search, one message with its
//! deliveries, re-drive, cancel and retention ([`MessageAdmin`]).
//!
//! Every call is parameterized SQL, every time is the database clock's, and the bulk calls
//! ([`MessageAdmin::retry_failed`], [`MessageAdmin::purge`]) work in batches, each its own short
//! transaction, so they never hold long locks against the relay or the application.

use std::future::Future;
use std::time::Duration;

use outbox_core::{MessageId, OutboxMessage, Result};

mod checks;
mod failures;
mod impl_admin;
mod rows;
mod shared;
mod sql;
mod statement;
#[cfg(test)]
mod tests;
mod types;

pub(crate) use checks::{
    bulk_statuses, check_actor, check_age, check_batch, check_ids, check_pause, check_scan, refused, report,
    BULK_RETRY_FROM,
};
pub(crate) use impl_admin::{impl_admin, to_admin};
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) use shared::beat_query;
pub(crate) use shared::Admin;
pub(crate) use sql::AdminSql;
pub use types::{
    BulkAction, DeliveryRecord, DestinationCount, DestinationPause, FailureGroup, FailureReport, ListFilter,
    MessageDetail, MessageEdit, RelayPresence, Resent, Selection, Stats, StatusCount, TopicCount,
    MAX_FAILURE_GROUPS, MAX_FAILURE_SCAN, MAX_PAUSE_REASON, MAX_RELAYS, RESENT_FROM,
};

/// Largest page [`MessageAdmin::list`] returns.
pub const MAX_LIST_LIMIT: usize = 1000;

/// Largest batch [`MessageAdmin::retry_failed`] and [`MessageAdmin::purge`] accept.
pub const MAX_BATCH: usize = 10_000;

/// Longest retention [`MessageAdmin::purge`] accepts (100 years).
pub const MAX_PURGE_AGE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A progress callback for the bulk calls: called after each batch with the total so far.
pub type Progress<'a> = Option<&'a mut (dyn FnMut(u64) + Send)>;

/// Operations on the outbox for people and tools (the `outbox` command's `status`, `list`,
/// `show`, `retry`, `cancel` and `purge`, and the admin API). Implemented by
/// `Outbox<Postgres | MySql | Sqlite>` and by `AnyOutbox`.
pub trait MessageAdmin: Send + Sync {
    /// Counts per status, per (topic, status) and per (destination, status), the age of the
    /// oldest unfinished message (database clock) and the number of failed messages.
    fn stats(&self) -> impl Future<Output = Result<Stats>> + Send;

    /// One page of messages matching `filter`, in id order. A `limit` outside
    /// 1..=[`MAX_LIST_LIMIT`] is an [`Error::InvalidArgument`].
    fn list(&self, filter: &ListFilter) -> impl Future<Output = Result<Vec<OutboxMessage>>> + Send;

    /// One message with its delivery rows; [`Error::NotFound`] for an unknown id.
    fn show(&self, id: MessageId) -> impl Future<Output = Result<MessageDetail>> + Send;

    /// Re-drives one `failed` or `cancelled` message: back to `pending`, attempts 0, due now,
    /// lease cleared, `updated_by = actor`; its failed or cancelled delivery rows go back to
    /// `pending` with attempts 0 (delivered destinations are not sent again). Returns the
    /// message as it is now. [`Error::InvalidTransition`] from any other status,
    /// [`Error::NotFound`] for an unknown id.
    fn retry(&self, id: MessageId, actor: &str) -> impl Future<Output = Result<OutboxMessage>> + Send;

    /// Re-drives every `failed` message matching `filter` (its `status` must be unset or
    /// `failed`; `after_id` is honoured, `limit` is not: everything matching is re-driven) in
    /// batches of `batch` messages in id order, each batch its own short transaction. Calls
    /// `progress` with the running total after each batch; returns the total.
    fn retry_failed(
        &self,
        filter: &ListFilter,
        actor: &str,
        batch: usize,
        progress: Progress<'_>,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Cancels a `pending` or `failed` message (it will never be published); its unfinished
    /// delivery rows are cancelled too. A `sending` message is being published by a relay and
    /// is refused, like every other status, with [`Error::InvalidTransition`].
    fn cancel(&self, id: MessageId, actor: &str) -> impl Future<Output = Result<OutboxMessage>> + Send;

    /// Failed messages grouped by cause, read from the `scan` most recently failed (1 to
    /// [`MAX_FAILURE_SCAN`]).
    fn failure_groups(&self, scan: usize) -> impl Future<Output = Result<FailureReport>> + Send;

    /// Applies `action` to the selected messages in batches of at most 500, each its own short
    /// transaction that re-checks each message's status; returns how many messages it moved.
    /// With `dry_run`, changes nothing and returns how many messages it would move now.
    /// Calls `progress` with the running total after each batch.
    fn bulk(
        &self,
        action: BulkAction,
        selection: &Selection,
        actor: &str,
        dry_run: bool,
        progress: Progress<'_>,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Edit-and-resend: writes a copy of a `failed` message with `edit`
    /// applied (a new id, due now, header [`RESENT_FROM`]) and cancels the original, pointing
    /// its `last_error` at the copy, in one transaction. The original's `(biz_type, biz_key)`
    /// moves to the copy, so a lookup by business key finds the live message.
    /// [`Error::InvalidTransition`] from any other status, and when a destination already
    /// received the original (fan-out): a copy would reach it twice under another id.
    fn resend(
        &self,
        id: MessageId,
        edit: &MessageEdit,
        actor: &str,
    ) -> impl Future<Output = Result<Resent>> + Send;

    /// The relays registered on this store (`outbox_relay`), by owner, at most [`MAX_RELAYS`]:
    /// those running and, until pruned, those that died without stopping (a large
    /// [`RelayPresence::silent_ms`]). A row that cannot be read is left out with a warning.
    fn relays(&self) -> impl Future<Output = Result<Vec<RelayPresence>>> + Send;

    /// [`MessageAdmin::stats`] and [`MessageAdmin::relays`] read on one connection (the second
    /// may fail alone): for a sampler that reads both from every store now and then, so that a
    /// store whose pool keeps no connection (one of many on `outbox relay`'s crowded budget)
    /// opens one per sample, not one per statement.
    fn backlog(&self) -> impl Future<Output = Result<(Stats, Result<Vec<RelayPresence>>)>> + Send;

    /// The destinations paused now, by name.
    fn pauses(&self) -> impl Future<Output = Result<Vec<DestinationPause>>> + Send;

    /// Pauses `destination` for every relay on this store: within about a second they hold its
    /// messages (due again a few seconds later, no attempt spent) until [`Self::resume`].
    /// Returns false when it was paused already (the first pause's record stays).
    fn pause(
        &self,
        destination: &str,
        actor: &str,
        reason: Option<&str>,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Resumes a paused destination; returns false when it was not paused.
    fn resume(&self, destination: &str, actor: &str) -> impl Future<Output = Result<bool>> + Send;

    /// Deletes finished messages (`sent`, `acked`, `cancelled`) whose last change is older than
    /// `older_than` (database clock, fixed when the call starts), `batch` rows per statement so
    /// no long lock builds up; their delivery rows go with them (`ON DELETE CASCADE`). Calls
    /// `progress` with the running total after each batch; returns the total.
    fn purge(
        &self,
        older_than: Duration,
        batch: usize,
        progress: Progress<'_>,
    ) -> impl Future<Output = Result<u64>> + Send;
}
