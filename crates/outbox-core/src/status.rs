//! Message and delivery statuses.

use std::fmt;
use std::str::FromStr;

/// Where a message (or one destination's delivery of it) stands.
///
/// Allowed transitions:
///
/// ```text
/// pending --claim--> sending --broker confirmed--> sent --consumer ACK (ACK mode)--> acked
///    ^                  |  \
///    |   failed attempt |   `--attempts exhausted / permanent error--> failed
///    `------------------'                                                |
///    ^                                                                   |
///    `------------------------------ re-drive (outbox retry) -----------'
/// pending / failed --by hand--> cancelled
/// sending with an expired lease is claimable again (the relay holding it died).
/// ```
///
/// A message with a `msg_key` in `pending`, `sending` or `failed` is *open*: it blocks younger
/// messages with the same key (per-key order, SPEC guarantee 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[non_exhaustive]
pub enum Status {
    /// Waiting to be published (possibly scheduled for later via `next_attempt_at`).
    Pending,
    /// Leased by one relay that is publishing it.
    Sending,
    /// Confirmed durable by the broker(s).
    Sent,
    /// Confirmed handled by the consumer (ACK mode).
    Acked,
    /// Gave up: attempts exhausted or a permanent error; needs a person.
    Failed,
    /// Cancelled by hand; never published.
    Cancelled,
}

impl Status {
    /// Every status, in lifecycle order.
    pub const ALL: [Status; 6] =
        [Status::Pending, Status::Sending, Status::Sent, Status::Acked, Status::Failed, Status::Cancelled];

    /// The value stored in the `status` column.
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Sending => "sending",
            Status::Sent => "sent",
            Status::Acked => "acked",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }

    /// True when the message still blocks younger messages with the same key.
    pub const fn is_open(self) -> bool {
        matches!(self, Status::Pending | Status::Sending | Status::Failed)
    }

    /// True when nothing more will happen to the message without a person.
    pub const fn is_terminal(self) -> bool {
        matches!(self, Status::Sent | Status::Acked | Status::Cancelled)
    }

    /// True when a person may re-drive a message in this status back to `pending`
    /// (`outbox retry`); a re-drive also resets its deliveries in these statuses.
    pub const fn can_retry(self) -> bool {
        matches!(self, Status::Failed | Status::Cancelled)
    }

    /// True when a person may cancel a message in this status (`outbox cancel`). A `sending`
    /// message is being published by a relay and cannot be.
    pub const fn can_cancel(self) -> bool {
        matches!(self, Status::Pending | Status::Failed)
    }

    /// Every status for which `rule` holds, as stored, in lifecycle order.
    pub fn names_where(rule: fn(Status) -> bool) -> Vec<&'static str> {
        Status::ALL.into_iter().filter(|s| rule(*s)).map(Status::as_str).collect()
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// Error returned when a string is not a known status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown status {0:?} (expected one of pending, sending, sent, acked, failed, cancelled)")]
pub struct UnknownStatus(pub String);

impl FromStr for Status {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Status::ALL.into_iter().find(|st| st.as_str() == s).ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_status() {
        for st in Status::ALL {
            assert_eq!(st.as_str().parse::<Status>(), Ok(st));
        }
        assert!("PENDING".parse::<Status>().is_err());
    }

    #[test]
    fn open_and_terminal_are_disjoint() {
        for st in Status::ALL {
            assert!(!(st.is_open() && st.is_terminal()), "{st}");
        }
        assert!(Status::Failed.is_open());
        assert!(!Status::Sent.is_open());
    }

    #[test]
    fn transitions_by_hand() {
        let retryable: Vec<Status> = Status::ALL.into_iter().filter(|s| s.can_retry()).collect();
        assert_eq!(retryable, [Status::Failed, Status::Cancelled]);
        let cancellable: Vec<Status> = Status::ALL.into_iter().filter(|s| s.can_cancel()).collect();
        assert_eq!(cancellable, [Status::Pending, Status::Failed]);
        // A message being published is never touched by hand.
        assert!(!Status::Sending.can_retry() && !Status::Sending.can_cancel());
        assert_eq!(Status::names_where(Status::can_retry), ["failed", "cancelled"]);
        assert_eq!(Status::names_where(Status::is_terminal), ["sent", "acked", "cancelled"]);
    }
}
