//! Values for the unit tests of the pure steps.

use chrono::Utc;
use outbox_core::{Headers, MessageId, OutboxMessage, Status};

/// A claimed message (id 7, topic `t`, payload `p`) with `attempts` failed attempts and its
/// own `max_attempts`.
pub(crate) fn message(attempts: i32, max_attempts: Option<i32>) -> OutboxMessage {
    let now = Utc::now();
    OutboxMessage {
        id: MessageId(7),
        biz_type: None,
        biz_key: None,
        topic: "t".into(),
        key: None,
        tag: None,
        headers: Headers::new(),
        payload: "p".into(),
        status: Status::Sending,
        attempts,
        max_attempts,
        next_attempt_at: now,
        last_attempt_at: None,
        last_error: None,
        lease_owner: Some("r".into()),
        lease_until: Some(now),
        created_by: None,
        updated_by: None,
        created_at: now,
        updated_at: now,
    }
}
