//! What the relay needs from a store, as capabilities a store implements:
//!
//! - [`Claims`]: claim due messages, read their per-destination state, settle outcomes, extend
//!   and release leases. Every store. A claim holds its messages either by a lease written in
//!   the rows or, where the database can, by row locks in an open transaction: the store's own
//!   [`Claims::Lock`] type, so a claim can only ever be settled by the kind of store that made
//!   it, and a store that cannot lock has no lock value at all ([`NoLocks`]).
//! - [`Acks`]: ACK mode (a consumer's confirmation, overdue ACKs published again).
//! - [`Wakeups`]: push wake-ups between relays and writers (PostgreSQL `LISTEN`/`NOTIFY`).
//! - [`Pauses`]: destinations an operator paused for every relay on the store.
//! - [`Presence`]: each relay's row in `outbox_relay` (host, process, state, last claim), so
//!   one admin listener lists every relay process on the store.
//! - [`Backlog`]: how late the most overdue message is (the backlog alert).
//! - [`RelayStore`]: all of them, which is what the relay engine runs on.
//!
//! Admin queries are the separate [`MessageAdmin`](crate::MessageAdmin).
//!
//! Every time is computed with the database clock (`now()`): the relay passes durations, never
//! instants, so relays on machines with skewed clocks still agree on leases and schedules.

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use outbox_core::{MessageId, OutboxMessage, Result, Status};
use serde::{Deserialize, Serialize};

use crate::signal::CommitSignal;

#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
mod head_memo;
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
mod hint;
mod in_flight;
mod isolate;
mod listening;
#[cfg_attr(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")), allow(dead_code))]
pub(crate) mod runs;
mod settlement;
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
mod window_memo;

pub(crate) use head_memo::HeadMemo;
#[cfg(feature = "mysql")]
pub(crate) use head_memo::Walk;
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(unused_imports))]
pub(crate) use in_flight::{held_window, Held, InFlight, RunHeld};
pub(crate) use isolate::PlainTable;
#[cfg_attr(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")), allow(unused_imports))]
pub(crate) use isolate::{settle_isolated, SettleWrites};
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) use listening::{serve, Job, KeeperSql, PAUSED};
pub use listening::{Keeper, Listening};
pub use settlement::{DeliveryState, DeliveryWrite, MessageWrite, SettleReport, Settlement};
pub(crate) use window_memo::WindowMemo;

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

/// How a relay asks to hold what it claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimMode {
    /// A lease written in the rows (`sending`, `lease_owner`, `lease_until`): two writes per
    /// message, works everywhere.
    Lease,
    /// Row locks (`FOR UPDATE SKIP LOCKED`) kept in an open transaction until the settlement
    /// commits: one write per message. A store that cannot lock claims (its [`Claims::Lock`]
    /// is [`NoLocks`]: SQLite, whose single writer lock would block every business
    /// transaction for the length of a publish) leases instead.
    Lock,
}

/// How a claim holds its messages until it is settled.
#[derive(Debug)]
pub enum Hold<L> {
    /// By a lease in the rows (or nothing was claimed).
    Lease,
    /// By row locks in the store's open transaction. Dropping it rolls the transaction back:
    /// the messages stay `pending`, due at once, untouched (nothing was written for them).
    Lock(L),
}

/// What a claim returns: the messages, in id order, and how they are held.
#[derive(Debug)]
pub struct Claimed<L> {
    /// The claimed messages, in id order.
    pub messages: Vec<OutboxMessage>,
    /// The lease or the row locks that hold them until [`Claims::settle_held`].
    pub hold: Hold<L>,
    /// Whether due messages may remain that this claim did not take: its batch was full, or
    /// due messages were held back behind an open message of their key (once these settle,
    /// they may head it). False only when the store saw every due message and none was held
    /// back: then nothing becomes claimable when this batch settles that was not committed
    /// after the claim. True when the store cannot tell.
    pub left_behind: bool,
    /// Runs this claim continues: keys whose older messages another claim of this process
    /// holds, unsettled. None of a key's messages here may be published before
    /// [`RunAfter::delivered`] says that claim delivered all of the key's (see
    /// [`Claims::claim_runs`]). Empty where the store does not continue runs.
    pub after: Vec<RunAfter>,
    /// Where the relay tells which keys of this claim it delivered in full, for the claims
    /// that continue them. `None` where nothing can continue this claim's runs.
    pub told: Option<RunsTold>,
    /// Some key's run in this claim stopped at the run's length, not at the end of its due
    /// messages: a claim made now, while this one is in flight, may continue it.
    pub runs_cut: bool,
}

/// What [`Claims::newer_than`] saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Newer {
    /// The due `pending` messages among those seen, in id order.
    pub due: Vec<MessageId>,
    /// The `pending` messages among those seen that were not due by the look's clock, in id
    /// order: scheduled later (a delay, a retry's backoff), or committed while the look began
    /// (the clock a statement reads is taken before its snapshot, so a row can be there with a
    /// time past it). A look reads them again a while later.
    pub later: Vec<MessageId>,
    /// Every message seen, due or not, in id order (a look's ids absent from it, between its
    /// start and `newest`, may be transactions not committed yet).
    pub seen: Vec<MessageId>,
    /// Where the next look starts: the newest id seen after the look's start, or that start
    /// when it saw nothing there (`None` on an empty table).
    pub newest: Option<MessageId>,
}

/// A look's row state: `pending` and due by the look's clock ([`Newer::due`]).
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) const LOOKED_DUE: i16 = 2;
/// A look's row state: `pending`, not due by the look's clock ([`Newer::later`]).
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) const LOOKED_LATER: i16 = 1;

/// How far back a look without a start ([`Claims::newer_than`] with `after` of `None`, the
/// lane's first look as it opens) names the `pending` messages among the newest: those created
/// in the last two seconds by the database's clock. They were committed just before the look,
/// and a relay whose claim loop is busy with a backlog may otherwise reach them only a second
/// or more later; older ones are the claim loop's. Two seconds cover a business transaction's
/// time between its `INSERT` (the creation time, PostgreSQL's `now()` being its transaction's
/// start) and its commit, and a look taken a moment after a relay's start.
pub const LOOK_BACK: Duration = Duration::from_secs(2);

/// [`Newer`] from a look without a start: the newest rows, `(id, state)` as for [`newer_of`]
/// (the state of a row created before [`LOOK_BACK`] being neither [`LOOKED_DUE`] nor
/// [`LOOKED_LATER`]); where the next look starts is the newest of them (`None` on an empty
/// table).
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) fn newest_of(rows: &[(i64, i16)]) -> Newer {
    if rows.is_empty() {
        return Newer::default();
    }
    newer_of(MessageId(i64::MIN), rows)
}

/// [`Newer`] from a look's rows after `after` (and of the ids looked at again): `(id, state)`,
/// the state [`LOOKED_DUE`], [`LOOKED_LATER`] or anything else (not `pending`).
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) fn newer_of(after: MessageId, rows: &[(i64, i16)]) -> Newer {
    let mut rows = rows.to_vec();
    rows.sort_unstable();
    rows.dedup_by_key(|(id, _)| *id);
    let with = |state: i16| rows.iter().filter(|(_, s)| *s == state).map(|(id, _)| MessageId(*id)).collect();
    Newer {
        due: with(LOOKED_DUE),
        later: with(LOOKED_LATER),
        seen: rows.iter().map(|(id, _)| MessageId(*id)).collect(),
        newest: Some(rows.iter().map(|(id, _)| MessageId(*id)).max().unwrap_or(after).max(after)),
    }
}

impl<L> Claimed<L> {
    /// Messages held by a lease.
    pub fn leased(messages: Vec<OutboxMessage>) -> Self {
        Claimed {
            messages,
            hold: Hold::Lease,
            left_behind: true,
            after: Vec::new(),
            told: None,
            runs_cut: false,
        }
    }

    /// Messages held by `lock`; see [`Claimed::left_behind`].
    pub fn locked(messages: Vec<OutboxMessage>, lock: L, left_behind: bool) -> Self {
        Claimed {
            messages,
            hold: Hold::Lock(lock),
            left_behind,
            after: Vec::new(),
            told: None,
            runs_cut: false,
        }
    }

    /// A claim that took nothing; see [`Claimed::left_behind`]. An empty claim that says
    /// nothing was left behind saw every due message, each heading its key and held by a
    /// batch in flight (or not claimable): the batches' settlements make nothing claimable
    /// that was not committed after it.
    pub fn nothing(left_behind: bool) -> Self {
        Claimed {
            messages: Vec::new(),
            hold: Hold::Lease,
            left_behind,
            after: Vec::new(),
            told: None,
            runs_cut: false,
        }
    }
}

/// A key's run that a claim continues: the older messages of the key are held by another claim
/// of this process, which must deliver all of them before any of this claim's is published.
#[derive(Debug)]
pub struct RunAfter {
    key: String,
    told: tokio::sync::watch::Receiver<Option<std::sync::Arc<std::collections::HashSet<String>>>>,
}

impl RunAfter {
    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Waits until the claim that holds the key's older messages has published them, at most
    /// `within`: true only if it delivered every one of them to every destination. False when
    /// it did not, when it ended without telling (given up, rolled back), or when `within`
    /// passed first: the continuing claim then holds the key's messages back.
    pub async fn delivered(&mut self, within: Duration) -> bool {
        let key = self.key.as_str();
        match tokio::time::timeout(within, self.told.wait_for(Option::is_some)).await {
            Ok(Ok(v)) => v.as_ref().is_some_and(|keys| keys.contains(key)),
            _ => false,
        }
    }
}

/// Where the relay tells which keys of a claim it delivered in full (every message of the key
/// in the claim, to every destination): the claims that continue those keys' runs wait for it.
/// Dropped untold, it tells those claims that nothing was delivered.
#[derive(Debug)]
pub struct RunsTold {
    tell: tokio::sync::watch::Sender<Option<std::sync::Arc<std::collections::HashSet<String>>>>,
}

impl RunsTold {
    /// Tells the keys delivered in full.
    pub fn tell(self, delivered: std::collections::HashSet<String>) {
        let _ = self.tell.send(Some(std::sync::Arc::new(delivered)));
    }
}

/// The [`Claims::Lock`] of a store that cannot lock claims: a type with no values, so no
/// locked claim of such a store can exist, and the compiler knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoLocks {}

/// The row locks of a locked claim on a database that can lock rows (PostgreSQL,
/// MySQL/MariaDB): the claim's open transaction and the messages it holds. Dropping it rolls
/// the transaction back, which frees the rows at once. `T` is the transaction: sqlx's own, or
/// on PostgreSQL [`crate::postgres::ClaimTx`], begun by hand so that `BEGIN` and a claim by id
/// travel in one round trip.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub struct RowLock<T> {
    pub(crate) tx: T,
    pub(crate) ids: Vec<MessageId>,
    /// The names of the claiming outbox's tables.
    pub(crate) tables: crate::Tables,
    /// The messages registered as this process's, for its next claims to leave out; taken out
    /// of the register when this is dropped, after `tx` (fields drop in order, and a
    /// settlement ends `tx` first). Kept only to be dropped.
    #[allow(dead_code)]
    pub(crate) held: Held,
}

#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
impl<T> RowLock<T> {
    /// The locks `tx` holds on `messages`, registered in `in_flight` (the claiming outbox's) for
    /// at most `lease`, until this is dropped; the runs of `messages` whose key is in `cut`
    /// (they stopped at the run's length) registered as runs a later claim of `owner` may
    /// continue, with where the relay tells what became of them.
    pub(crate) fn with_runs(
        tx: T,
        messages: &[OutboxMessage],
        cut: &std::collections::HashSet<String>,
        tables: &crate::Tables,
        in_flight: &std::sync::Arc<InFlight>,
        owner: &str,
        lease: Duration,
    ) -> (Self, RunsTold) {
        let ids: Vec<MessageId> = messages.iter().map(|m| m.id).collect();
        let keyed = messages.iter().map(|m| (m.id.0, m.key.as_deref().filter(|k| cut.contains(*k))));
        let (held, told) = in_flight.hold_runs(keyed, owner, lease);
        (RowLock { held, tx, ids, tables: tables.clone() }, told)
    }
}

impl<T> std::fmt::Debug for RowLock<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowLock").field("messages", &self.ids.len()).finish()
    }
}

/// Implements [`Claims`] for `Outbox<$db>` on a database that locks rows (`$lock`, a [`RowLock`]), by
/// dispatching on the claim mode to the dialect module's own steps: the inherent
/// `claim_leased`, `claim_locked`, `settle_leased`, `settle_locked`, `extend_leases` and
/// `release_leases`, and the module's `read_deliveries`.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(unused_macros))]
macro_rules! row_lock_claims {
    ($db:ty, $lock:ty) => {
        /// The per-destination rows of these messages, read through the claim's own transaction.
        pub(crate) async fn deliveries_locked(
            lock: &mut $lock,
            ids: &[MessageId],
        ) -> Result<Vec<DeliveryState>> {
            read_deliveries(&mut *lock.tx, &lock.tables, ids).await
        }

        impl $crate::relay::Claims for Outbox<$db> {
            type Lock = $lock;

            async fn claim_committed(
                &self,
                mode: ClaimMode,
                owner: &str,
                committed: &[MessageId],
                limit: usize,
                run: usize,
                lease: Duration,
            ) -> Result<Claimed<Self::Lock>> {
                Ok(match mode {
                    ClaimMode::Lease => Claimed::leased(self.claim_leased(owner, limit, run, lease).await?),
                    ClaimMode::Lock => self.claim_locked(owner, committed, limit, run, lease, false).await?,
                })
            }

            async fn claim_ids(
                &self,
                mode: ClaimMode,
                owner: &str,
                ids: &[MessageId],
                limit: usize,
                lease: Duration,
            ) -> Result<Claimed<Self::Lock>> {
                match mode {
                    ClaimMode::Lease => Ok(Claimed::nothing(true)),
                    ClaimMode::Lock => self.claim_locked(owner, ids, limit, 1, lease, true).await,
                }
            }

            async fn newer_than(
                &self,
                after: Option<MessageId>,
                again: &[MessageId],
                limit: usize,
            ) -> Result<$crate::relay::Newer> {
                self.look_newer(after, again, limit).await
            }

            async fn deliveries_held(
                &self,
                hold: &mut Hold<Self::Lock>,
                ids: &[MessageId],
            ) -> Result<Vec<DeliveryState>> {
                match hold {
                    Hold::Lease => read_deliveries(self.pool(), self.tables(), ids).await,
                    Hold::Lock(lock) => deliveries_locked(lock, ids).await,
                }
            }

            async fn settle_held(
                &self,
                hold: Hold<Self::Lock>,
                owner: &str,
                s: &Settlement,
            ) -> Result<SettleReport> {
                match hold {
                    Hold::Lease => self.settle_leased(owner, s).await,
                    Hold::Lock(lock) => self.settle_locked(lock, owner, s).await,
                }
            }

            async fn extend(&self, owner: &str, ids: &[MessageId], lease: Duration) -> Result<u64> {
                self.extend_leases(owner, ids, lease).await
            }

            async fn release(&self, owner: &str) -> Result<u64> {
                self.release_leases(owner).await
            }

            fn held_in_flight(&self, ids: &[MessageId]) -> Vec<bool> {
                self.in_flight.holds(ids)
            }
        }
    };
}
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(unused_imports))]
pub(crate) use row_lock_claims;

/// Claiming and settling: what every store does for the relay.
pub trait Claims: Clone + Send + Sync + 'static {
    /// Row locks a locked claim holds in an open transaction until it is settled: the store's
    /// own transaction type, or [`NoLocks`] where the store cannot lock claims.
    type Lock: Send + 'static;

    /// Claims up to `limit` due messages for `owner`: `pending` rows whose `next_attempt_at`
    /// has come, and `sending` rows whose lease expired. A message with a key is claimed only
    /// if every older open message with that key is claimed with it (per-key order). Returned
    /// in id order.
    ///
    /// With [`ClaimMode::Lease`] the messages are leased for `lease` (`sending`). With
    /// [`ClaimMode::Lock`], where the store can, they stay `pending` but locked in an open
    /// transaction returned in [`Claimed::hold`], until [`Claims::settle_held`] writes the
    /// outcomes and commits: other relays skip the locked rows, and their per-key check still
    /// sees them open, so per-key order holds as with leases. A relay that dies mid-publish
    /// loses its connection and the database rolls back at once. One that vanishes without
    /// closing its connection (host frozen, network partition) is cut off by the database
    /// after `lease` of idleness inside the transaction (PostgreSQL
    /// `idle_in_transaction_session_timeout`, MariaDB `idle_transaction_timeout`), so its rows
    /// are free again after `lease`, as with a lease. No transaction is kept when nothing was
    /// claimed.
    fn claim_with(
        &self,
        mode: ClaimMode,
        owner: &str,
        limit: usize,
        lease: Duration,
    ) -> impl Future<Output = Result<Claimed<Self::Lock>>> + Send {
        self.claim_runs(mode, owner, limit, 1, lease)
    }

    /// [`Claims::claim_with`], where a key's head may bring the messages that follow it in its
    /// key in the same claim, up to `run` messages per key in all (`run` = 1: heads only): each
    /// behind an unbroken line of due messages of its key, all in this claim (see
    /// `relay::runs`). The relay then publishes a key's run in id order, each message only
    /// once the one before it is delivered. A store that does not build runs claims heads only.
    ///
    /// A locked claim may also continue a run that one of `owner`'s claims still in flight
    /// holds and that stopped at the run's length ([`Claimed::runs_cut`]): the key's next due
    /// messages after the newest one held, named in [`Claimed::after`], which the relay must
    /// not publish before that claim's relay tells, through its [`Claimed::told`], that it
    /// delivered every one of the key's.
    fn claim_runs(
        &self,
        mode: ClaimMode,
        owner: &str,
        limit: usize,
        run: usize,
        lease: Duration,
    ) -> impl Future<Output = Result<Claimed<Self::Lock>>> + Send {
        self.claim_committed(mode, owner, &[], limit, run, lease)
    }

    /// [`Claims::claim_runs`], told which messages this process has just committed
    /// (`committed`, from its [`CommitSignal`](crate::CommitSignal)): a store may claim those by
    /// id, without looking for due messages, when they are claimable (due, each the head of its
    /// key); it then reports [`Claimed::left_behind`]. The ids are a hint: any of them may have
    /// been claimed meanwhile, belong to no message, or wait behind their key. When none of them
    /// can be taken, when they outnumber `limit`, or when the store does not claim by id, the
    /// claim is [`Claims::claim_runs`]'s. The one claim a store implements.
    fn claim_committed(
        &self,
        mode: ClaimMode,
        owner: &str,
        committed: &[MessageId],
        limit: usize,
        run: usize,
        lease: Duration,
    ) -> impl Future<Output = Result<Claimed<Self::Lock>>> + Send;

    /// [`Claims::claim_committed`] by id alone, for a claim beside the claim loop: of `ids`
    /// (at most `limit` of them), those claimable now (due, each the head of its key) are
    /// locked and returned, and nothing else: no window is read when none is, and no run is
    /// brought or continued, so the batch publishes at once, whatever the batches in flight
    /// hold. Takes nothing ([`Claimed::nothing`], no transaction kept) with a lease, and where
    /// the store does not lock claims (the default).
    fn claim_ids(
        &self,
        mode: ClaimMode,
        owner: &str,
        ids: &[MessageId],
        limit: usize,
        lease: Duration,
    ) -> impl Future<Output = Result<Claimed<Self::Lock>>> + Send {
        let _ = (mode, owner, ids, limit, lease);
        async { Ok(Claimed::nothing(true)) }
    }

    /// A look at what was committed since the last one, by any process: the messages with an
    /// id above `after`, at most `limit` of them in id order, and those of `again` (ids below
    /// `after` an earlier look did not see: ids are taken at insert and committed in any order,
    /// so they may be transactions still open then), the due `pending` ones named (a hint for
    /// [`Claims::claim_ids`]). Without `after`: where the next look starts (the newest id now),
    /// and among the newest `limit` messages the `pending` ones created in the last
    /// [`LOOK_BACK`] (committed just before this first look, which a busy claim loop may be
    /// slow to reach). One read of the primary key's index from `after` (backwards from its
    /// end without it), and one probe per id of `again`, whatever the backlog behind them. Sees nothing (the default) where the store does not
    /// claim by id.
    fn newer_than(
        &self,
        after: Option<MessageId>,
        again: &[MessageId],
        limit: usize,
    ) -> impl Future<Output = Result<Newer>> + Send {
        let _ = (after, again, limit);
        async { Ok(Newer::default()) }
    }

    /// The per-destination rows of these messages, read through the claim's own transaction
    /// when it holds one (a batch never waits for a second pooled connection while it holds
    /// one).
    fn deliveries_held(
        &self,
        hold: &mut Hold<Self::Lock>,
        ids: &[MessageId],
    ) -> impl Future<Output = Result<Vec<DeliveryState>>> + Send;

    /// Applies a settlement atomically to the messages `owner` still holds (its lease, or the
    /// claim's locks, then committed). Messages of a locked claim that the settlement does not
    /// mention stay `pending`, untouched.
    fn settle_held(
        &self,
        hold: Hold<Self::Lock>,
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

    /// For each of `ids`, whether a locked claim of this process over this outbox holds it
    /// now, unsettled (its lease not run out): a claim would leave it out of its candidates.
    /// No round trip. `false` for every id by default, and where the store does not lock
    /// claims.
    fn held_in_flight(&self, ids: &[MessageId]) -> Vec<bool> {
        vec![false; ids.len()]
    }

    /// [`Claims::claim_with`] a lease: the claimed messages.
    fn claim(
        &self,
        owner: &str,
        limit: usize,
        lease: Duration,
    ) -> impl Future<Output = Result<Vec<OutboxMessage>>> + Send {
        async move { Ok(self.claim_with(ClaimMode::Lease, owner, limit, lease).await?.messages) }
    }

    /// The per-destination rows of these messages.
    fn deliveries(&self, ids: &[MessageId]) -> impl Future<Output = Result<Vec<DeliveryState>>> + Send {
        async move { self.deliveries_held(&mut Hold::Lease, ids).await }
    }

    /// Applies a settlement atomically, for the messages `owner` still leases.
    fn settle(
        &self,
        owner: &str,
        settlement: &Settlement,
    ) -> impl Future<Output = Result<SettleReport>> + Send {
        self.settle_held(Hold::Lease, owner, settlement)
    }
}

/// ACK mode: the consumer confirms a delivery, and one not confirmed in time is published
/// again with the same id.
pub trait Acks: Clone + Send + Sync + 'static {
    /// Deliveries `sent` whose `ack_deadline` has passed go back to `pending` (attempts + 1,
    /// due now) and so do their messages (from `sent`), so the next claim publishes them
    /// again with the same id. At most `limit` deliveries per call. Returns how many expired.
    fn expire_acks(&self, limit: usize) -> impl Future<Output = Result<u64>> + Send;

    /// The consumer confirmed `message_id` at `destination` (the caller has verified the
    /// token). Idempotent.
    fn ack(
        &self,
        message_id: MessageId,
        destination: &str,
    ) -> impl Future<Output = Result<AckOutcome>> + Send;
}

/// Push wake-ups: writers wake idle relays at once instead of at the next scan.
pub trait Wakeups: Clone + Send + Sync + 'static {
    /// Tells writers whether `owner` is idle, so that they push a wake-up (PostgreSQL `NOTIFY`
    /// only while some relay is idle).
    fn set_idle(&self, owner: &str, idle: bool, ttl: Duration) -> impl Future<Output = Result<()>> + Send;

    /// Starts forwarding the store's push notifications (PostgreSQL `LISTEN`) to `signal`.
    /// Returns `None` where the store has no push channel (polling and the in-process signal
    /// remain). Where the listening connection can also run an idle relay's statements, the
    /// returned [`Listening`] has a [`Keeper`].
    fn listen(&self, signal: CommitSignal) -> impl Future<Output = Result<Option<Listening>>> + Send;

    /// Whether a claim now would get a pooled connection without waiting for one to be handed
    /// back (true by default). The relay asks before a claim beside batches that all hold
    /// theirs.
    fn spare_connection(&self) -> bool {
        true
    }

    /// Whether opening a connection costs the server little next to a claim (false by
    /// default). MySQL/MariaDB: a thread, often from its thread cache; PostgreSQL forks a
    /// backend process for each. A relay sharing a crowded [budget] opens a connection for each
    /// of its lane's claims (its pool keeps none between turns), so it runs the lane there only
    /// where this holds: measured on MariaDB beside a hot backlog, the lane took another
    /// process's messages from 20-439 ms (mean) to 11-14 ms at the cost of a connection per
    /// claim; on PostgreSQL the forks made the same load slower (docs/benchmarks.md, "The lane
    /// under a crowded budget").
    ///
    /// [budget]: https://docs.rs/outbox-relay/latest/outbox_relay/struct.Budget.html
    fn cheap_connections(&self) -> bool {
        false
    }

    /// While `on`, the store's pool closes the connections it is handed back, and closes those
    /// it holds unused now: a relay sharing a crowded [budget] with many stores keeps none
    /// between its turns (its [`Keeper`] needs none). Does nothing by default.
    ///
    /// [budget]: https://docs.rs/outbox-relay/latest/outbox_relay/struct.Budget.html
    fn shed_connections(&self, on: bool) -> impl Future<Output = ()> + Send {
        let _ = on;
        async {}
    }

    /// Closes the pool's unused connections and waits (at most `within`) until it holds at
    /// most `keep` connections, counting those still closing: see
    /// [`Outbox::close_down_to`](crate::Outbox::close_down_to). Returns whether it got there
    /// (at once by default).
    fn close_down_to(&self, keep: u32, within: Duration) -> impl Future<Output = bool> + Send {
        let _ = (keep, within);
        async { true }
    }

    /// Waits (at most `within`) until a claim can run without the pool holding more than
    /// `keep` connections: one is unused, or it holds fewer than `keep` (those on their way
    /// back to it or closing counted): see [`Outbox::room_to_claim`](crate::Outbox::room_to_claim).
    /// Returns whether it got there (at once by default).
    fn room_to_claim(&self, keep: u32, within: Duration) -> impl Future<Output = bool> + Send {
        let _ = (keep, within);
        async { true }
    }
}

/// Destinations an operator paused for every relay on the store (`outbox_destination_pause`).
pub trait Pauses: Clone + Send + Sync + 'static {
    /// The destinations paused now, by name.
    fn paused_destinations(&self) -> impl Future<Output = Result<Vec<String>>> + Send;
}

/// What a relay is doing, as it reports it in `outbox_relay`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RelayState {
    /// Its last claim found nothing due: it waits for a wake-up or the scan.
    Idle,
    /// It is claiming and publishing.
    Busy,
    /// A value this build does not know (a newer relay, or a row written by hand).
    Unknown,
}

impl RelayState {
    /// The stored value.
    pub fn as_str(self) -> &'static str {
        match self {
            RelayState::Idle => "idle",
            RelayState::Busy => "busy",
            RelayState::Unknown => "unknown",
        }
    }

    /// Reads a stored value; anything unknown is [`RelayState::Unknown`].
    pub fn parse(value: &str) -> Self {
        match value {
            "idle" => RelayState::Idle,
            "busy" => RelayState::Busy,
            _ => RelayState::Unknown,
        }
    }
}

/// Longest host name and version a relay records (longer ones are cut).
pub const MAX_PRESENCE_TEXT: usize = 64;

/// What a relay writes about itself ([`Presence::beat`]). The counters are its own since it
/// started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayBeat {
    /// Its lease owner name (unique among the relays of a store).
    pub owner: String,
    /// The machine (or pod) it runs on.
    pub host: String,
    /// Its process id there.
    pub pid: u32,
    /// The `outbox` version it runs.
    pub version: String,
    /// Idle or busy.
    pub state: RelayState,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// When it last claimed a non-empty batch.
    pub last_claim_at: Option<DateTime<Utc>>,
    /// Messages it claimed.
    pub claimed: u64,
    /// Deliveries it settled as delivered.
    pub delivered: u64,
    /// Messages it marked failed for good.
    pub failed: u64,
}

/// Each relay's row in `outbox_relay`, refreshed while it runs and removed when it stops, so
/// the admin API lists every relay process on the store
/// ([`MessageAdmin::relays`](crate::MessageAdmin::relays)).
pub trait Presence: Clone + Send + Sync + 'static {
    /// Writes (inserts or refreshes) the relay's row, stamped with the database clock, and
    /// prunes rows not refreshed for a day (relays that died without stopping).
    fn beat(&self, beat: &RelayBeat) -> impl Future<Output = Result<()>> + Send;

    /// Removes the relay's row (it stops).
    fn leave(&self, owner: &str) -> impl Future<Output = Result<()>> + Send;
}

/// How late the store's most overdue message is, for the relay's backlog alert.
pub trait Backlog: Clone + Send + Sync + 'static {
    /// How long ago the earliest due `pending` message became due (its `next_attempt_at`,
    /// database clock), or `None` when no message is due. A message scheduled for later, one
    /// waiting for its retry, or one held by a paused or unreachable destination (deferred)
    /// is not overdue. One read of the due index.
    fn overdue(&self) -> impl Future<Output = Result<Option<Duration>>> + Send;
}

/// Everything the relay engine runs on: [`Claims`], [`Acks`], [`Wakeups`], [`Pauses`],
/// [`Presence`] and [`Backlog`]. Implemented for every store that has them all
/// (`Outbox<Postgres | MySql | Sqlite>`, `AnyOutbox`).
pub trait RelayStore: Claims + Acks + Wakeups + Pauses + Presence + Backlog {}

impl<S: Claims + Acks + Wakeups + Pauses + Presence + Backlog> RelayStore for S {}
