//! Operations on the outbox table for people and tools: counts, search, one message with its
//! deliveries, re-drive, cancel and retention ([`MessageAdmin`]).
//!
//! Every call is parameterized SQL, every time is the database clock's, and the bulk calls
//! ([`MessageAdmin::retry_failed`], [`MessageAdmin::purge`]) work in batches, each its own short
//! transaction, so they never hold long locks against the relay or the application.

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use outbox_core::{Error, MessageId, OutboxMessage, Result, Status};
use serde::{Deserialize, Serialize};

mod shared;

pub(crate) use shared::{impl_admin, Admin, AdminSql};

/// Largest page [`MessageAdmin::list`] returns.
pub const MAX_LIST_LIMIT: usize = 1000;

/// Largest batch [`MessageAdmin::retry_failed`] and [`MessageAdmin::purge`] accept.
pub const MAX_BATCH: usize = 10_000;

/// Longest retention [`MessageAdmin::purge`] accepts (100 years).
pub const MAX_PURGE_AGE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Longest operator name stored in `updated_by`.
const MAX_ACTOR_LEN: usize = 128;

/// A progress callback for the bulk calls: called after each batch with the total so far.
pub type Progress<'a> = Option<&'a mut (dyn FnMut(u64) + Send)>;

/// How many messages are in one status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusCount {
    /// The status.
    pub status: Status,
    /// Messages in it.
    pub count: u64,
}

/// How many messages of one topic are in one status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicCount {
    /// The topic.
    pub topic: String,
    /// The status.
    pub status: Status,
    /// Messages of that topic in that status.
    pub count: u64,
}

/// How many deliveries to one destination are in one status (rows of `outbox_delivery`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestinationCount {
    /// The destination.
    pub destination: String,
    /// The status of those deliveries.
    pub status: Status,
    /// Deliveries to that destination in that status.
    pub count: u64,
}

/// What the outbox holds ([`MessageAdmin::stats`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Every message.
    pub total: u64,
    /// Messages per status, one entry for every status (zero included), in lifecycle order.
    pub by_status: Vec<StatusCount>,
    /// Messages per (topic, status), ordered by topic then status; only non-zero counts.
    pub by_topic: Vec<TopicCount>,
    /// Per-destination delivery rows per (destination, status), ordered by destination then
    /// status; only non-zero counts. Empty when no message has per-destination state.
    pub by_destination: Vec<DestinationCount>,
    /// Age of the oldest unfinished (`pending` or `sending`) message, by the database clock:
    /// how far the relay is behind. `None` when nothing is waiting.
    #[serde(rename = "oldest_pending_age_secs", with = "secs")]
    pub oldest_pending_age: Option<Duration>,
    /// Messages in `failed`: they need a person (re-drive or cancel).
    pub failed: u64,
}

impl Stats {
    /// Builds the totals from per-status counts (any status missing counts zero).
    pub(crate) fn from_counts(
        status_counts: Vec<(Status, u64)>,
        by_topic: Vec<TopicCount>,
        by_destination: Vec<DestinationCount>,
        oldest_pending_ms: Option<i64>,
    ) -> Stats {
        let count_of =
            |st: Status| status_counts.iter().filter(|(s, _)| *s == st).map(|(_, n)| *n).sum::<u64>();
        let by_status: Vec<StatusCount> =
            Status::ALL.into_iter().map(|status| StatusCount { status, count: count_of(status) }).collect();
        Stats {
            total: by_status.iter().map(|s| s.count).sum(),
            failed: count_of(Status::Failed),
            by_status,
            by_topic,
            by_destination,
            oldest_pending_age: oldest_pending_ms
                .map(|ms| Duration::from_millis(u64::try_from(ms.max(0)).unwrap_or(0))),
        }
    }

    /// The count of one status.
    pub fn count(&self, status: Status) -> u64 {
        self.by_status.iter().filter(|s| s.status == status).map(|s| s.count).sum()
    }
}

/// Serializes an optional duration as fractional seconds.
mod secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let secs: Option<f64> = Option::deserialize(d)?;
        Ok(secs.and_then(|s| Duration::try_from_secs_f64(s).ok()))
    }
}

/// Which messages [`MessageAdmin::list`] returns (every filter set must match), and the page.
///
/// Pages are keyset pages in id order: pass the last id of a page as `after_id` to get the
/// next one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListFilter {
    /// Only messages in this status.
    pub status: Option<Status>,
    /// Only messages of this topic (exact match).
    pub topic: Option<String>,
    /// Only messages with this `biz_type`.
    pub biz_type: Option<String>,
    /// Only messages with this `biz_key`.
    pub biz_key: Option<String>,
    /// Only messages with this ordering key (`msg_key`).
    pub key: Option<String>,
    /// Only messages created at or after this instant.
    pub created_after: Option<DateTime<Utc>>,
    /// Only messages created before this instant.
    pub created_before: Option<DateTime<Utc>>,
    /// Only messages with a larger id (the last id of the previous page).
    pub after_id: Option<MessageId>,
    /// Page size, 1 to [`MAX_LIST_LIMIT`].
    pub limit: usize,
}

impl Default for ListFilter {
    fn default() -> Self {
        ListFilter {
            status: None,
            topic: None,
            biz_type: None,
            biz_key: None,
            key: None,
            created_after: None,
            created_before: None,
            after_id: None,
            limit: 100,
        }
    }
}

impl ListFilter {
    /// Checks the page size.
    pub fn validate(&self) -> Result<()> {
        if self.limit == 0 || self.limit > MAX_LIST_LIMIT {
            return Err(Error::InvalidArgument {
                name: "limit",
                reason: format!(
                    "{} is out of range: a page holds 1 to {MAX_LIST_LIMIT} messages",
                    self.limit
                ),
            });
        }
        Ok(())
    }

    /// The page size as the `i64` the databases bind.
    pub(crate) fn limit_i64(&self) -> i64 {
        i64::try_from(self.limit).unwrap_or(i64::MAX)
    }
}

/// One row of `outbox_delivery`: a destination's state for a message, with its timestamps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryRecord {
    /// The message.
    pub message_id: MessageId,
    /// The destination (from the relay configuration).
    pub destination: String,
    /// Status of this delivery.
    pub status: Status,
    /// Failed attempts to this destination.
    pub attempts: i32,
    /// Not attempted again before this instant.
    pub next_attempt_at: DateTime<Utc>,
    /// The last attempt.
    pub last_attempt_at: Option<DateTime<Utc>>,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// ACK mode: the consumer must confirm before this instant.
    pub ack_deadline: Option<DateTime<Utc>>,
    /// ACK mode: when the consumer confirmed.
    pub acked_at: Option<DateTime<Utc>>,
    /// When the row was written first.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

/// One message and its per-destination deliveries ([`MessageAdmin::show`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageDetail {
    /// The message row.
    pub message: OutboxMessage,
    /// Its `outbox_delivery` rows, by destination (empty unless fan-out or ACK mode wrote some).
    pub deliveries: Vec<DeliveryRecord>,
}

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

/// Checks a bulk call's batch size.
pub(crate) fn check_batch(batch: usize) -> Result<i64> {
    if batch == 0 || batch > MAX_BATCH {
        return Err(Error::InvalidArgument {
            name: "batch",
            reason: format!("{batch} is out of range: a batch holds 1 to {MAX_BATCH} messages"),
        });
    }
    Ok(i64::try_from(batch).unwrap_or(i64::MAX))
}

/// Checks the operator name written to `updated_by`.
pub(crate) fn check_actor(actor: &str) -> Result<()> {
    if actor.trim().is_empty() || actor.len() > MAX_ACTOR_LEN {
        return Err(Error::InvalidArgument {
            name: "actor",
            reason: format!("must be 1 to {MAX_ACTOR_LEN} bytes, not blank"),
        });
    }
    Ok(())
}

/// Checks a purge's age and returns it in microseconds.
pub(crate) fn check_age(older_than: Duration) -> Result<i64> {
    if older_than > MAX_PURGE_AGE {
        return Err(Error::InvalidArgument {
            name: "older_than",
            reason: format!("{older_than:?} is longer than the 100 years a purge accepts"),
        });
    }
    Ok(i64::try_from(older_than.as_micros()).unwrap_or(i64::MAX))
}

/// The one status a bulk re-drive ([`MessageAdmin::retry_failed`]) moves messages from.
pub(crate) const BULK_RETRY_FROM: Status = Status::Failed;

/// Checks the filter of a bulk re-drive.
pub(crate) fn check_retry_filter(filter: &ListFilter) -> Result<()> {
    match filter.status {
        None => Ok(()),
        Some(s) if s == BULK_RETRY_FROM => Ok(()),
        Some(other) => Err(Error::InvalidArgument {
            name: "status",
            reason: format!("a bulk retry re-drives failed messages only, not {other}"),
        }),
    }
}

/// Reports progress if asked to.
pub(crate) fn report(progress: &mut Progress<'_>, done: u64) {
    if let Some(p) = progress.as_mut() {
        p(done);
    }
}

/// The error for an action refused from `from`, or for a missing message.
pub(crate) fn refused(id: MessageId, from: Option<Status>, action: &'static str) -> Error {
    match from {
        Some(from) => Error::InvalidTransition { id, from, action },
        None => Error::NotFound { id },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_checked() {
        assert!(ListFilter::default().validate().is_ok());
        for limit in [0, MAX_LIST_LIMIT + 1] {
            let err = ListFilter { limit, ..ListFilter::default() }.validate().unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { name: "limit", .. }), "{err}");
            assert!(err.to_string().contains("1 to 1000"), "{err}");
        }
        assert!(check_batch(0).is_err() && check_batch(MAX_BATCH + 1).is_err());
        assert_eq!(check_batch(500).unwrap(), 500);
        assert!(check_actor("").is_err() && check_actor(&"x".repeat(129)).is_err());
        assert!(check_age(MAX_PURGE_AGE + Duration::from_secs(1)).is_err());
        assert_eq!(check_age(Duration::from_millis(1500)).unwrap(), 1_500_000);
        let f = ListFilter { status: Some(Status::Sent), ..ListFilter::default() };
        assert!(check_retry_filter(&f).is_err());
    }

    #[test]
    fn stats_fill_every_status_and_serialize_the_age_in_seconds() {
        let s = Stats::from_counts(vec![(Status::Failed, 2), (Status::Sent, 5)], vec![], vec![], Some(1500));
        assert_eq!(s.by_status.len(), Status::ALL.len());
        assert_eq!((s.total, s.failed, s.count(Status::Pending)), (7, 2, 0));
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["oldest_pending_age_secs"], 1.5);
        let back: Stats = serde_json::from_value(json).unwrap();
        assert_eq!(back, s);
    }
}
