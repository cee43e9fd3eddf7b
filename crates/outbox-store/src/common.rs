//! Small helpers every dialect shares.

use std::collections::BTreeMap;

use outbox_core::{Error, NewMessage, Result, Status};

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

/// Parses a `status` column of `table` (row `id`), naming the row when a foreign writer put
/// an unknown value there.
pub(crate) fn parse_status(table: &'static str, id: String, value: &str) -> Result<Status> {
    value.parse().map_err(|e: outbox_core::UnknownStatus| Error::MalformedRow {
        table,
        id,
        reason: e.to_string(),
    })
}

/// A delivery's `status` column.
pub(crate) fn delivery_status(value: &str) -> Result<Status> {
    parse_status("outbox_delivery", String::new(), value)
}

/// Per message, the expired delivery with the most attempts: (destination, its new attempts).
pub(crate) fn expired_per_message(due: &[(i64, String, i32)]) -> BTreeMap<i64, (String, i32)> {
    let mut out: BTreeMap<i64, (String, i32)> = BTreeMap::new();
    for (id, dest, attempts) in due {
        let new = attempts.saturating_add(1);
        match out.get(id) {
            Some((_, a)) if *a >= new => {}
            _ => {
                out.insert(*id, (dest.clone(), new));
            }
        }
    }
    out
}
