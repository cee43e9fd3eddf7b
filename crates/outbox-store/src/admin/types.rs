//! The data the operations take and return: counts ([`Stats`]), which messages a page or a
//! bulk action selects ([`ListFilter`], [`Selection`], [`BulkAction`]), and what they report
//! about messages, deliveries, failures, pauses and relays.

use std::time::Duration;

use chrono::{DateTime, Utc};
use outbox_core::{Error, Headers, MessageId, NewMessage, OutboxMessage, Result, Status};
use serde::{Deserialize, Serialize};

#[cfg(doc)]
use super::{MessageAdmin, MAX_BATCH};
use super::{BULK_RETRY_FROM, MAX_LIST_LIMIT};

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
    /// The messages of one failure group ([`FailureGroup::id`]) among
    /// the `scan` most recent failed messages (1 to [`MAX_FAILURE_SCAN`]).
    Group {
        /// The group.
        id: String,
        /// How many failed messages to read to find its members.
        scan: usize,
    },
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

impl MessageEdit {
    /// The copy an edit-and-resend of `original` by `actor` enqueues: this edit over the
    /// original's fields, its business key and attempt limit, and the header [`RESENT_FROM`]
    /// naming the original (not validated yet).
    pub(crate) fn copy_of(&self, original: &OutboxMessage, actor: &str) -> NewMessage {
        let mut copy = NewMessage::new(
            self.topic.clone().unwrap_or_else(|| original.topic.clone()),
            self.payload.clone().unwrap_or_else(|| original.payload.clone()),
        );
        copy.key = self.key.clone().or_else(|| original.key.clone());
        copy.tag = self.tag.clone().or_else(|| original.tag.clone());
        copy.headers = self.headers.clone().unwrap_or_else(|| original.headers.clone());
        copy.headers.insert(RESENT_FROM.to_owned(), original.id.0.to_string());
        copy.biz = original.biz_type.clone().zip(original.biz_key.clone());
        copy.max_attempts = original.max_attempts.and_then(|n| u32::try_from(n).ok());
        copy.created_by = Some(actor.to_owned());
        copy
    }
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
