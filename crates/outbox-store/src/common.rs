//! Small helpers every dialect shares.

use outbox_core::{Error, NewMessage, Result};

/// `(biz_type, biz_key)` as optional string slices for binding.
pub(crate) fn biz_parts(msg: &NewMessage) -> (Option<&str>, Option<&str>) {
    match &msg.biz {
        Some((t, k)) => (Some(t.as_str()), Some(k.as_str())),
        None => (None, None),
    }
}

/// `max_attempts` as the `INTEGER` the tables store.
pub(crate) fn max_attempts(msg: &NewMessage) -> Result<Option<i32>> {
    msg.max_attempts
        .map(|n| {
            i32::try_from(n).map_err(|_| Error::InvalidMessage {
                field: "max_attempts",
                reason: format!("{n} is larger than {}", i32::MAX),
            })
        })
        .transpose()
}
