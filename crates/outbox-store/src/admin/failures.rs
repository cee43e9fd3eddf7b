//! Grouping failed messages by cause ([`MessageAdmin::failure_groups`]).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use outbox_core::failure::{cause_of, group_id};
use outbox_core::text::printable;
use outbox_core::{MessageId, Result};
use sqlx::{ColumnIndex, Decode, Row, Type};

#[cfg(doc)]
use super::MessageAdmin;
use super::{FailureGroup, MAX_FAILURE_GROUPS};
use crate::common::{get, At, Cells};

/// One failed message as a grouping reads it.
pub(super) struct Failed {
    pub(super) id: i64,
    topic: String,
    last_error: Option<String>,
    at: DateTime<Utc>,
}

impl Failed {
    pub(super) fn decode<R>(row: &R) -> Result<Failed>
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
    pub(super) fn group(&self) -> (String, Option<String>, String) {
        let c = cause_of(self.last_error.as_deref());
        (group_id(&self.topic, c.destination.as_deref(), &c.cause), c.destination, c.cause)
    }
}

/// Adds one failed message to the groups (the rows come most recent first); counts it in
/// `ungrouped` when its group would be one too many.
pub(super) fn fold(groups: &mut HashMap<String, FailureGroup>, ungrouped: &mut u64, f: Failed) {
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
