//! Settling so that one message can never make the others be published again.

use std::future::Future;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use outbox_core::Result;

use super::{SettleReport, Settlement};

#[cfg_attr(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")), allow(dead_code))]
/// How one dialect writes a settlement, and marks one message `failed` with a reason, on a
/// connection inside an open transaction. [`settle_isolated`] wraps both in savepoints.
pub(crate) trait SettleWrites<DB: sqlx::Database> {
    /// Writes `s` (for the rows the caller holds).
    fn write(
        &self,
        conn: &mut DB::Connection,
        s: &Settlement,
    ) -> impl Future<Output = Result<SettleReport>> + Send;
    /// Marks message `id` `failed` with `reason` (a row this relay holds: `pending` under its
    /// lock, or `sending` under its lease), repairing what would stop the write. Returns the
    /// rows written.
    fn fail(
        &self,
        conn: &mut DB::Connection,
        id: i64,
        reason: &str,
    ) -> impl Future<Output = Result<u64>> + Send;
}

#[cfg_attr(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")), allow(dead_code))]
/// Writes a settlement inside the caller's open transaction so that one message can never
/// make the others be published again (SPEC guarantee 7): error texts are bounded first, and
/// the batch is written in a savepoint. If that write fails (a value the database refuses, a
/// constraint a foreign row breaks), each message is written in its own savepoint; a message
/// whose own write fails is marked `failed` with the reason ([`SettleReport::isolated`]), and
/// one of which not even that can be written is left as it was ([`SettleReport::unsettled`]).
/// An error is returned only when the connection itself fails (the caller's transaction is
/// then lost, and the batch with it).
pub(crate) async fn settle_isolated<DB, W>(
    conn: &mut DB::Connection,
    w: &W,
    s: &Settlement,
) -> Result<SettleReport>
where
    DB: sqlx::Database,
    W: SettleWrites<DB> + Sync,
{
    use outbox_core::text::bounded_error;
    use sqlx::Connection as _;
    let s = s.bounded();
    let batch_error = {
        let mut sp = conn.begin().await.map_err(crate::error::db)?;
        match w.write(&mut sp, &s).await {
            Ok(report) => {
                sp.commit().await.map_err(crate::error::db)?;
                return Ok(report);
            }
            Err(e) => {
                sp.rollback().await.map_err(crate::error::db)?;
                e
            }
        }
    };
    tracing::warn!(error = %bounded_error(&batch_error.to_string()), messages = s.ids().len(), "Writing a batch's outcomes failed; writing its messages one by one");
    let mut report = SettleReport::default();
    for id in s.ids() {
        let one = s.only(id);
        let own_error = {
            let mut sp = conn.begin().await.map_err(crate::error::db)?;
            match w.write(&mut sp, &one).await {
                Ok(r) => {
                    sp.commit().await.map_err(crate::error::db)?;
                    report.settled += r.settled;
                    report.lost_lease.extend(r.lost_lease);
                    continue;
                }
                Err(e) => {
                    sp.rollback().await.map_err(crate::error::db)?;
                    e
                }
            }
        };
        let reason = bounded_error(&format!(
            "the relay could not record this message's outcome ({own_error}); it may have been published: \
             check the consumer, then `outbox retry {id}` or `outbox cancel {id}`"
        ));
        let mut sp = conn.begin().await.map_err(crate::error::db)?;
        match w.fail(&mut sp, id.0, &reason).await {
            Ok(n) => {
                sp.commit().await.map_err(crate::error::db)?;
                if n > 0 {
                    tracing::error!(message_id = id.0, reason = %reason, "Message failed: its outcome could not be written");
                    report.isolated.push((id, reason));
                } else {
                    report.lost_lease.push(id);
                }
            }
            Err(e) => {
                sp.rollback().await.map_err(crate::error::db)?;
                let e = bounded_error(&e.to_string());
                tracing::error!(message_id = id.0, error = %e, "Nothing could be written for this message; it is held back");
                report.unsettled.push((id, e));
            }
        }
    }
    Ok(report)
}

/// Whether the message table is *plain*: nothing on it beyond what the migrations create (no
/// other trigger, rule, row security, constraint or unique index), so that a settlement's
/// update, which writes only values the relay chose into the columns it owns, cannot be refused
/// for one row. PostgreSQL then writes a batch without a savepoint (see `settle_locked` in
/// `postgres/relay.rs`). The answer is kept for [`PlainTable::FOR`] and forgotten when a batch
/// write fails anyway, so a trigger added later is seen within that time.
#[derive(Debug, Default)]
pub(crate) struct PlainTable(Mutex<Option<(Instant, bool)>>);

#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
impl PlainTable {
    /// How long an answer is kept.
    pub(crate) const FOR: Duration = Duration::from_secs(30);

    /// The answer, when one younger than [`PlainTable::FOR`] is kept.
    pub(crate) fn known(&self) -> Option<bool> {
        let kept = *self.0.lock().ok()?;
        kept.filter(|(at, _)| at.elapsed() < Self::FOR).map(|(_, plain)| plain)
    }

    /// Keeps an answer.
    pub(crate) fn set(&self, plain: bool) {
        if let Ok(mut kept) = self.0.lock() {
            *kept = Some((Instant::now(), plain));
        }
    }

    /// Forgets the answer: the next settlement checks again.
    pub(crate) fn forget(&self) {
        if let Ok(mut kept) = self.0.lock() {
            *kept = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_kept_until_forgotten() {
        let p = PlainTable::default();
        assert_eq!(p.known(), None);
        p.set(true);
        assert_eq!(p.known(), Some(true));
        p.set(false);
        assert_eq!(p.known(), Some(false));
        p.forget();
        assert_eq!(p.known(), None);
    }
}
