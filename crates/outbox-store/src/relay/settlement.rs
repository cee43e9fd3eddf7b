//! What a processed batch writes back ([`Settlement`]), what that did ([`SettleReport`]), and
//! the per-destination rows the relay reads and writes.

use std::time::Duration;

use outbox_core::{MessageId, Status};

/// The state of one destination's delivery of a message (a row of `outbox_delivery`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryState {
    /// Message.
    pub message_id: MessageId,
    /// Destination name (from the relay configuration).
    pub destination: String,
    /// Status of this delivery.
    pub status: Status,
    /// Failed attempts to this destination.
    pub attempts: i32,
    /// How long until this delivery is due (zero when due).
    pub wait: Duration,
    /// Last error for this destination.
    pub last_error: Option<String>,
}

/// A write of one destination's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryWrite {
    /// Message.
    pub message_id: MessageId,
    /// Destination name.
    pub destination: String,
    /// New status.
    pub status: Status,
    /// Failed attempts so far.
    pub attempts: i32,
    /// Due again after this long (for `pending`).
    pub retry_in: Duration,
    /// Error to record (None keeps the previous one).
    pub last_error: Option<String>,
    /// An attempt was made now (sets `last_attempt_at`).
    pub attempted: bool,
    /// For a `sent` delivery to a destination that requires the consumer's ACK: the ACK is due
    /// within this long (sets `ack_deadline = now() + ack_timeout`). `None` clears the deadline.
    pub ack_timeout: Option<Duration>,
}

/// A new state for a leased message (anything other than plain "sent").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageWrite {
    /// Message.
    pub id: MessageId,
    /// `pending` (retry later), `failed` or `sent`.
    pub status: Status,
    /// Failed attempts so far.
    pub attempts: i32,
    /// For `pending`: due again after this long.
    pub retry_in: Duration,
    /// Error to record (None keeps the previous one).
    pub last_error: Option<String>,
    /// An attempt was made now (sets `last_attempt_at`).
    pub attempted: bool,
}

/// Everything one processed batch writes back, applied atomically, and only to messages whose
/// lease the settling relay still holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settlement {
    /// Messages delivered to every destination: become `sent`.
    pub sent: Vec<MessageId>,
    /// Messages with another outcome.
    pub messages: Vec<MessageWrite>,
    /// Per-destination states to upsert (fan-out only).
    pub deliveries: Vec<DeliveryWrite>,
}

impl Settlement {
    /// True when there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.sent.is_empty() && self.messages.is_empty() && self.deliveries.is_empty()
    }

    /// The part of the settlement that concerns message `id` alone (settling row by row when
    /// a batch write failed).
    pub fn only(&self, id: MessageId) -> Settlement {
        Settlement {
            sent: self.sent.iter().copied().filter(|m| *m == id).collect(),
            messages: self.messages.iter().filter(|m| m.id == id).cloned().collect(),
            deliveries: self.deliveries.iter().filter(|d| d.message_id == id).cloned().collect(),
        }
    }

    /// The same settlement with every error text bounded and escaped
    /// ([`outbox_core::text::bounded_error`]), so that no text a broker or a row produced can
    /// make the write fail (too long for its column, a NUL PostgreSQL refuses).
    pub fn bounded(&self) -> Settlement {
        let b = |e: &Option<String>| e.as_deref().map(outbox_core::text::bounded_error);
        Settlement {
            sent: self.sent.clone(),
            messages: self
                .messages
                .iter()
                .map(|m| MessageWrite { last_error: b(&m.last_error), ..m.clone() })
                .collect(),
            deliveries: self
                .deliveries
                .iter()
                .map(|d| DeliveryWrite { last_error: b(&d.last_error), ..d.clone() })
                .collect(),
        }
    }

    /// Every message id the settlement touches.
    pub fn ids(&self) -> Vec<MessageId> {
        let mut ids: Vec<MessageId> = self.sent.clone();
        ids.extend(self.messages.iter().map(|m| m.id));
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

/// What a settlement did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SettleReport {
    /// Messages written.
    pub settled: usize,
    /// Messages skipped because the lease had passed to another relay (they will be published
    /// again by that relay: at-least-once).
    pub lost_lease: Vec<MessageId>,
    /// Messages whose outcome could not be written (the batch write failed, and so did this
    /// message's own write): marked `failed` instead, with the reason. Their lock or lease was
    /// held, so no other relay published them meanwhile.
    pub isolated: Vec<(MessageId, String)>,
    /// Messages of which nothing could be written, not even `failed`: left as they were (a
    /// locked claim's row stays `pending`, a leased one `sending` until its lease expires). The
    /// relay holds them back for a while rather than publishing them again at once.
    pub unsettled: Vec<(MessageId, String)>,
}

impl SettleReport {
    /// The report of a settlement of `all` written only for the messages in `held` (the rows
    /// the settling relay still leased, or locked): the others are `lost_lease`.
    #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
    pub(crate) fn of(all: &[MessageId], held: &std::collections::HashSet<i64>) -> Self {
        let lost_lease: Vec<MessageId> = all.iter().copied().filter(|id| !held.contains(&id.0)).collect();
        SettleReport { settled: all.len() - lost_lease.len(), lost_lease, ..SettleReport::default() }
    }
}
