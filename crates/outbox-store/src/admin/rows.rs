//! Decoding the rows the operations read: deliveries, counts, pauses and relays.

use outbox_core::text::printable;
use outbox_core::{MessageId, Result, Status};
use sqlx::{ColumnIndex, Decode, Row, Type};

use super::{DeliveryRecord, DestinationPause, RelayPresence};
use crate::common::{get, parse_status, At, Cells};
use crate::relay::{RelayBeat, RelayState, MAX_PRESENCE_TEXT};

/// Decodes a row of `outbox_delivery` ([`AdminSql::DELIVERIES`](super::AdminSql::DELIVERIES)).
pub(super) fn decode_delivery<R>(row: &R) -> Result<DeliveryRecord>
where
    R: Cells + Row,
    for<'s> &'s str: ColumnIndex<R>,
    i64: Type<R::Database> + for<'r> Decode<'r, R::Database>,
    i32: Type<R::Database> + for<'r> Decode<'r, R::Database>,
{
    let message_id: i64 = get(row, "message_id")?;
    let at = At { table: "outbox_delivery", id: message_id };
    Ok(DeliveryRecord {
        message_id: MessageId(message_id),
        destination: row.text("destination", at)?,
        status: parse_status("outbox_delivery", message_id.to_string(), &row.text("status", at)?)?,
        attempts: get(row, "attempts")?,
        next_attempt_at: row.time("next_attempt_at", at)?,
        last_attempt_at: row.opt_time("last_attempt_at", at)?,
        last_error: row.opt_text("last_error", at)?,
        ack_deadline: row.opt_time("ack_deadline", at)?,
        acked_at: row.opt_time("acked_at", at)?,
        created_at: row.time("created_at", at)?,
        updated_at: row.time("updated_at", at)?,
    })
}

/// The status and count of a `GROUP BY ..., status` row.
pub(super) fn counted<R>(row: &R, table: &'static str) -> Result<(Status, u64)>
where
    R: Cells + Row,
    for<'s> &'s str: ColumnIndex<R>,
    i64: Type<R::Database> + for<'r> Decode<'r, R::Database>,
{
    let status = parse_status(table, String::new(), &row.text("status", At { table, id: 0 })?)?;
    let n: i64 = get(row, "n")?;
    Ok((status, u64::try_from(n).unwrap_or(0)))
}

/// Decodes a row of `outbox_destination_pause`.
pub(super) fn decode_pause<R: Cells>(r: &R) -> Result<DestinationPause> {
    let at = At { table: "outbox_destination_pause", id: 0 };
    Ok(DestinationPause {
        destination: r.text("destination", at)?,
        paused_by: r.text("paused_by", at)?,
        reason: r.opt_text("reason", at)?,
        paused_at: r.time("paused_at", at)?,
    })
}

/// Decodes a row of `outbox_relay` ([`AdminSql::RELAYS`](super::AdminSql::RELAYS)), its texts
/// made printable.
pub(super) fn decode_presence<R>(r: &R) -> Result<RelayPresence>
where
    R: Cells + Row,
    for<'s> &'s str: ColumnIndex<R>,
    i64: Type<R::Database> + for<'d> Decode<'d, R::Database>,
{
    let at = At { table: "outbox_relay", id: 0 };
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    let text = |col| -> Result<String> { Ok(printable(&r.text(col, at)?, MAX_PRESENCE_TEXT).into_owned()) };
    Ok(RelayPresence {
        beat: RelayBeat {
            owner: printable(&r.text("owner", at)?, outbox_core::limits::OWNER).into_owned(),
            host: text("host")?,
            pid: u32::try_from(get::<_, i64>(r, "pid")?).unwrap_or(0),
            version: text("version")?,
            state: RelayState::parse(&r.text("state", at)?),
            started_at: r.time("started_at", at)?,
            last_claim_at: r.opt_time("last_claim_at", at)?,
            claimed: count(get(r, "claimed")?),
            delivered: count(get(r, "delivered")?),
            failed: count(get(r, "failed")?),
        },
        seen_at: r.time("seen_at", at)?,
        silent_ms: get(r, "silent_ms")?,
    })
}
