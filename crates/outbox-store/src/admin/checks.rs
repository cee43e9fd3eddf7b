//! The checks every dialect's operations make on their arguments before any SQL, and the
//! errors they share.

use std::time::Duration;

use outbox_core::{Error, MessageId, Result, Status};

#[cfg(doc)]
use super::MessageAdmin;
use super::{BulkAction, ListFilter, Progress, MAX_BATCH, MAX_FAILURE_SCAN, MAX_PAUSE_REASON, MAX_PURGE_AGE};

/// Longest operator name stored in `updated_by`.
const MAX_ACTOR_LEN: usize = 128;

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
