//! Operations on the outbox table for people and tools: counts, search, one message with its
//! deliveries, re-drive, cancel and retention ([`MessageAdmin`]).
//!
//! Every call is parameterized SQL, every time is the database clock's, and the bulk calls
//! ([`MessageAdmin::retry_failed`], [`MessageAdmin::purge`]) work in batches, each its own short
//! transaction, so they never hold long locks against the relay or the application.

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use outbox_core::{Error, Headers, MessageId, OutboxMessage, Result, Status};
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
    /// Only messages whose `last_error` contains this text (`%` and `_` match themselves).
    pub error: Option<String>,
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
            error: None,
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

/// Most failed messages one [`MessageAdmin::failure_groups`] call reads (most recent first).
pub const MAX_FAILURE_SCAN: usize = 100_000;

/// Most groups one [`FailureReport`] holds; failures of further causes are counted in
/// [`FailureReport::ungrouped`].
pub const MAX_FAILURE_GROUPS: usize = 1_000;

/// Failed messages of one cause: the same topic, destination and error once ids and numbers
/// are normalised away ([`outbox_core::failure`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureGroup {
    /// Stable name of the group (16 hexadecimal characters), for acting on it.
    pub id: String,
    /// The messages' topic.
    pub topic: String,
    /// The destination that failed, from the error's `[destination]` prefix.
    pub destination: Option<String>,
    /// The normalised error.
    pub cause: String,
    /// Failed messages in the group (among those read).
    pub count: u64,
    /// The earliest time one of them was marked failed.
    pub first_failed_at: DateTime<Utc>,
    /// The latest time one of them was marked failed.
    pub last_failed_at: DateTime<Utc>,
    /// Up to five of its messages, the most recent first.
    pub example_ids: Vec<MessageId>,
    /// The most recent error of the group as stored.
    pub example_error: Option<String>,
}

/// Failed messages grouped by cause ([`MessageAdmin::failure_groups`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureReport {
    /// The groups, the largest first (ties: the most recent failure first).
    pub groups: Vec<FailureGroup>,
    /// Failed messages read.
    pub scanned: u64,
    /// True when more failed messages exist than were read (the oldest were left out).
    pub truncated: bool,
    /// Failed messages read whose cause would have made a group beyond
    /// [`MAX_FAILURE_GROUPS`].
    pub ungrouped: u64,
    /// Failed rows that could not be read (a row another program wrote badly); they are left
    /// out of the groups and can be found with a search.
    pub unreadable: u64,
}

/// What a bulk action ([`MessageAdmin::bulk`]) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BulkAction {
    /// Re-drive `failed` messages (as [`MessageAdmin::retry`] does one).
    Retry,
    /// Cancel `pending` and `failed` messages (as [`MessageAdmin::cancel`] does one).
    Cancel,
}

impl BulkAction {
    /// The statuses the action moves messages from.
    pub const fn moves_from(self) -> &'static [Status] {
        match self {
            BulkAction::Retry => &[BULK_RETRY_FROM],
            BulkAction::Cancel => &[Status::Pending, Status::Failed],
        }
    }

    /// The action's name in errors.
    pub const fn name(self) -> &'static str {
        match self {
            BulkAction::Retry => "retry",
            BulkAction::Cancel => "cancel",
        }
    }
}

/// Which messages a bulk action applies to. Only those in a status the action moves from
/// ([`BulkAction::moves_from`]) are touched; the others are skipped, not refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Every message matching the filter (its `after_id` is honoured, its `limit` is not). A
    /// `status` in the filter must be one the action moves from.
    Filter(ListFilter),
    /// These messages: 1 to [`MAX_BATCH`] ids.
    Ids(Vec<MessageId>),
    /// The messages of one failure group ([`FailureGroup::id`]) among the `scan` most recent
    /// failed messages (1 to [`MAX_FAILURE_SCAN`]).
    Group {
        /// The group.
        id: String,
        /// How many failed messages to read to find its members.
        scan: usize,
    },
}

/// A destination an operator paused for every relay on the store ([`MessageAdmin::pause`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestinationPause {
    /// The destination (its name in the relay configuration).
    pub destination: String,
    /// Who paused it.
    pub paused_by: String,
    /// Why, as given.
    pub reason: Option<String>,
    /// When (database clock).
    pub paused_at: DateTime<Utc>,
}

/// A relay's row in `outbox_relay` as the admin API shows it ([`MessageAdmin::relays`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayPresence {
    /// What the relay last wrote.
    #[serde(flatten)]
    pub beat: crate::relay::RelayBeat,
    /// When it last wrote it (database clock).
    pub seen_at: DateTime<Utc>,
    /// Milliseconds since then (database clock): a running relay refreshes its row about every
    /// 5 seconds, so a large value is a relay that died without stopping.
    pub silent_ms: i64,
}

/// Most relays [`MessageAdmin::relays`] returns.
pub const MAX_RELAYS: usize = 1000;

/// What an edit-and-resend changes in the copy ([`MessageAdmin::resend`]); what is not set is
/// copied from the original.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageEdit {
    /// A new topic.
    pub topic: Option<String>,
    /// A new payload.
    pub payload: Option<String>,
    /// A new ordering key.
    pub key: Option<String>,
    /// A new tag.
    pub tag: Option<String>,
    /// New headers (replacing the original's).
    pub headers: Option<Headers>,
}

/// The result of an edit-and-resend: the original, now `cancelled`, and its copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resent {
    /// The original as it is now: `cancelled`, its `last_error` naming the copy, its
    /// `(biz_type, biz_key)` moved to the copy.
    pub original: OutboxMessage,
    /// The copy: a new message (new id, `pending`, due now) with header `outbox-resent-from`.
    pub copy: OutboxMessage,
}

/// The header a resent copy carries: the id of the message it replaces.
pub const RESENT_FROM: &str = "outbox-resent-from";

/// Longest reason a pause records, in characters.
pub const MAX_PAUSE_REASON: usize = 512;

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

/// The statuses a bulk action by `filter` moves messages from: the filter's own status, which
/// must be one the action moves from, or all of those.
pub(crate) fn bulk_statuses(action: BulkAction, filter: &ListFilter) -> Result<Vec<Status>> {
    match filter.status {
        None => Ok(action.moves_from().to_vec()),
        Some(s) if action.moves_from().contains(&s) => Ok(vec![s]),
        Some(other) => Err(Error::InvalidArgument {
            name: "status",
            reason: format!(
                "a bulk {} moves {} messages only, not {other}",
                action.name(),
                action.moves_from().iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" or ")
            ),
        }),
    }
}

/// Checks the ids of a bulk action.
pub(crate) fn check_ids(ids: &[MessageId]) -> Result<()> {
    if ids.is_empty() || ids.len() > MAX_BATCH {
        return Err(Error::InvalidArgument {
            name: "ids",
            reason: format!("{} ids: a bulk action by id takes 1 to {MAX_BATCH}", ids.len()),
        });
    }
    if let Some(bad) = ids.iter().find(|id| id.0 <= 0) {
        return Err(Error::InvalidArgument { name: "ids", reason: format!("{} is not a message id", bad.0) });
    }
    Ok(())
}

/// Checks a destination name and a pause's reason.
pub(crate) fn check_pause(destination: &str, reason: Option<&str>) -> Result<()> {
    outbox_core::text::check_name(destination, 128)
        .map_err(|reason| Error::InvalidArgument { name: "destination", reason })?;
    match reason {
        Some(r) if r.chars().count() > MAX_PAUSE_REASON || r.chars().any(char::is_control) => {
            Err(Error::InvalidArgument {
                name: "reason",
                reason: format!("must be at most {MAX_PAUSE_REASON} characters without control characters"),
            })
        }
        _ => Ok(()),
    }
}

/// Checks how many failed messages a grouping reads.
pub(crate) fn check_scan(scan: usize) -> Result<i64> {
    if scan == 0 || scan > MAX_FAILURE_SCAN {
        return Err(Error::InvalidArgument {
            name: "scan",
            reason: format!(
                "{scan} is out of range: a grouping reads 1 to {MAX_FAILURE_SCAN} failed messages"
            ),
        });
    }
    Ok(i64::try_from(scan).unwrap_or(i64::MAX))
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
        assert!(bulk_statuses(BulkAction::Retry, &f).is_err());
        let e = bulk_statuses(BulkAction::Cancel, &f).unwrap_err().to_string();
        assert!(e.contains("pending or failed messages only, not sent"), "{e}");
        let f = ListFilter { status: Some(Status::Pending), ..ListFilter::default() };
        assert_eq!(bulk_statuses(BulkAction::Cancel, &f).unwrap(), vec![Status::Pending]);
        assert_eq!(bulk_statuses(BulkAction::Retry, &ListFilter::default()).unwrap(), vec![Status::Failed]);
        assert!(check_ids(&[]).is_err() && check_ids(&[MessageId(0)]).is_err());
        assert!(check_ids(&vec![MessageId(1); MAX_BATCH + 1]).is_err());
        assert!(check_scan(0).is_err() && check_scan(MAX_FAILURE_SCAN + 1).is_err());
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
