//! What the relay needs from a store: claim due messages under a lease, read per-destination
//! state, settle outcomes, release leases, and (PostgreSQL) push wake-ups.
//!
//! Every time is computed with the database clock (`now()`): the relay passes durations, never
//! instants, so relays on machines with skewed clocks still agree on leases and schedules.

use std::future::Future;
use std::time::Duration;

use outbox_core::{MessageId, OutboxMessage, Result, Status};

use crate::signal::CommitSignal;

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

/// What an ACK did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckOutcome {
    /// The delivery was awaiting its ACK and is now `acked`. `message_done` is true when this
    /// was the message's last open delivery, so the message itself became `acked`.
    Acked {
        /// The message became `acked` too.
        message_done: bool,
    },
    /// It was acked before: nothing changed (an ACK is idempotent).
    AlreadyAcked,
    /// The delivery exists but is not awaiting an ACK (still pending, failed, ...).
    NotAwaiting {
        /// Its current status.
        status: Status,
    },
    /// No such delivery.
    Unknown,
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

/// Row locks a [`RelayStore::claim_locked`] holds in an open database transaction until
/// [`RelayStore::settle_locked`] commits it. Dropping it rolls the transaction back: the messages
/// stay `pending`, due at once, untouched (nothing was written for them).
pub struct LockedClaim {
    pub(crate) tx: LockedTx,
    pub(crate) ids: Vec<MessageId>,
}

pub(crate) enum LockedTx {
    #[cfg(feature = "postgres")]
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
    #[cfg(feature = "mysql")]
    MySql(sqlx::Transaction<'static, sqlx::MySql>),
}

impl std::fmt::Debug for LockedClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockedClaim").field("messages", &self.ids.len()).finish()
    }
}

impl LockedClaim {
    /// The messages whose rows are locked.
    pub fn ids(&self) -> &[MessageId] {
        &self.ids
    }
}

impl SettleReport {
    /// The report of a settlement of `all` written only for the messages in `held` (the rows
    /// the settling relay still leased, or locked): the others are `lost_lease`.
    pub(crate) fn of(all: &[MessageId], held: &std::collections::HashSet<i64>) -> Self {
        let lost_lease: Vec<MessageId> = all.iter().copied().filter(|id| !held.contains(&id.0)).collect();
        SettleReport { settled: all.len() - lost_lease.len(), lost_lease, ..SettleReport::default() }
    }
}

/// Store operations the relay engine needs. Implemented by `Outbox<Postgres | MySql | Sqlite>`
/// and by `AnyOutbox`.
pub trait RelayStore: Clone + Send + Sync + 'static {
    /// Claims up to `limit` due messages for `owner` and leases them for `lease`: `pending`
    /// rows whose `next_attempt_at` has come, and `sending` rows whose lease expired. A message
    /// with a key is claimed only if every older open message with that key is claimed with it
    /// (per-key order). Returned in id order.
    fn claim(
        &self,
        owner: &str,
        limit: usize,
        lease: Duration,
    ) -> impl Future<Output = Result<Vec<OutboxMessage>>> + Send;

    /// True when this store implements [`RelayStore::claim_locked`] (PostgreSQL and
    /// MySQL/MariaDB; not SQLite, whose single writer lock would block every business
    /// transaction for the length of a publish).
    fn locks_claims(&self) -> bool {
        false
    }

    /// Like [`RelayStore::claim`], but instead of writing a lease it keeps the claimed rows
    /// locked (`FOR UPDATE SKIP LOCKED`) in an open transaction, returned with them, until
    /// [`RelayStore::settle_locked`] writes the outcomes and commits: one write per message
    /// instead of two. Other relays skip the locked rows, and their per-key check still sees
    /// them open (they stay `pending` until the commit), so per-key order holds as with leases.
    /// A relay that dies mid-publish loses its connection and the database rolls back at once;
    /// no lease has to expire. A relay that vanishes without closing its connection (host
    /// frozen, network partition) is cut off by the database after `lease` of idleness inside
    /// the transaction (PostgreSQL `idle_in_transaction_session_timeout`, MariaDB
    /// `idle_transaction_timeout`), so its rows are free again after `lease`, as with a lease.
    /// `None` when nothing was claimable (no transaction is kept).
    fn claim_locked(
        &self,
        owner: &str,
        limit: usize,
        lease: Duration,
    ) -> impl Future<Output = Result<Option<(Vec<OutboxMessage>, LockedClaim)>>> + Send {
        let _ = (owner, limit, lease);
        async { Err(outbox_core::Error::Config("locked claims are not supported by this store".into())) }
    }

    /// Applies a settlement to the messages of a locked claim and commits. Messages of the
    /// claim that the settlement does not mention stay `pending`, untouched.
    fn settle_locked(
        &self,
        claim: LockedClaim,
        owner: &str,
        settlement: &Settlement,
    ) -> impl Future<Output = Result<SettleReport>> + Send {
        let _ = (claim, owner, settlement);
        async { Err(outbox_core::Error::Config("locked claims are not supported by this store".into())) }
    }

    /// [`RelayStore::deliveries`] read through a locked claim's own transaction, so that a
    /// batch never waits for a second pooled connection while it holds one.
    fn deliveries_locked(
        &self,
        claim: &mut LockedClaim,
        ids: &[MessageId],
    ) -> impl Future<Output = Result<Vec<DeliveryState>>> + Send {
        let _ = claim;
        self.deliveries(ids)
    }

    /// The per-destination rows of these messages.
    fn deliveries(&self, ids: &[MessageId]) -> impl Future<Output = Result<Vec<DeliveryState>>> + Send;

    /// Applies a settlement atomically, for the messages `owner` still leases.
    fn settle(
        &self,
        owner: &str,
        settlement: &Settlement,
    ) -> impl Future<Output = Result<SettleReport>> + Send;

    /// Extends the lease of messages `owner` holds (long publishes).
    fn extend(
        &self,
        owner: &str,
        ids: &[MessageId],
        lease: Duration,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Returns every message `owner` leases to `pending`, due now (graceful shutdown).
    fn release(&self, owner: &str) -> impl Future<Output = Result<u64>> + Send;

    /// Tells writers whether `owner` is idle, so that they push a wake-up (PostgreSQL `NOTIFY`
    /// only while some relay is idle). A no-op where the store has no push channel.
    fn set_idle(&self, owner: &str, idle: bool, ttl: Duration) -> impl Future<Output = Result<()>> + Send;

    /// ACK mode: deliveries `sent` whose `ack_deadline` has passed go back to `pending`
    /// (attempts + 1, due now) and so do their messages (from `sent`), so the next claim
    /// publishes them again with the same id. At most `limit` deliveries per call. Returns how
    /// many expired.
    fn expire_acks(&self, limit: usize) -> impl Future<Output = Result<u64>> + Send {
        let _ = limit;
        async { Err(outbox_core::Error::Config("ACK mode is not supported by this store".into())) }
    }

    /// ACK mode: the consumer confirmed `message_id` at `destination` (the caller has verified
    /// the token). Idempotent.
    fn ack(
        &self,
        message_id: MessageId,
        destination: &str,
    ) -> impl Future<Output = Result<AckOutcome>> + Send {
        let _ = (message_id, destination);
        async { Err(outbox_core::Error::Config("ACK mode is not supported by this store".into())) }
    }

    /// Starts forwarding the store's push notifications (PostgreSQL `LISTEN`) to `signal`.
    /// Returns `None` where the store has no push channel (polling and the in-process signal
    /// remain).
    fn listen(
        &self,
        signal: CommitSignal,
    ) -> impl Future<Output = Result<Option<tokio::task::JoinHandle<()>>>> + Send;
}

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
    tracing::warn!(error = %batch_error, messages = s.ids().len(), "Writing a batch's outcomes failed; writing its messages one by one");
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
