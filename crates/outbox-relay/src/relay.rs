//! The [`Relay`] and the state its claim loop and batches share.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use outbox_core::{MessageId, OutboxMessage};
use outbox_store::{CommitSignal, RelayStore, Signalled};

use crate::alert::{AlertHook, LogAlert};
use crate::builder::RelayBuilder;
use crate::config::RelayConfig;
use crate::destination::DestRuntime;
use crate::router::Router;
use crate::stats::RelayStats;

/// How long a relay handing back its share of a crowded budget waits for its store's pooled
/// connections to close (a close takes well under a millisecond on a healthy server).
pub(crate) const SHARE_CLOSE_WAIT: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub(crate) struct Inner<S: RelayStore> {
    pub(crate) store: S,
    pub(crate) signal: CommitSignal,
    pub(crate) cfg: RelayConfig,
    pub(crate) dests: Vec<DestRuntime>,
    pub(crate) router: Router,
    pub(crate) alert: Arc<dyn AlertHook>,
    /// Batches in flight shared with other relays of the process, if any.
    pub(crate) budget: Option<crate::Budget>,
    /// Shares of the budget this relay holds now (claims under way, batches in flight, and
    /// shares parked: each stands for a connection its pool may hold).
    pub(crate) shares_held: std::sync::atomic::AtomicUsize,
    /// Its number among the budget's relays (for the shares it parks), if it has a budget.
    pub(crate) member: Option<usize>,
    /// Woken when this relay parks a share (its attendant then knows when to give it back).
    pub(crate) parked_changed: tokio::sync::Notify,
    pub(crate) stats: Arc<RelayStats>,
    pub(crate) health: Mutex<Health>,
    /// Batches in flight whose keys' runs go on across batches (cut at the run's length, or
    /// continuing a batch in front), and a wake-up each time one starts: while there are any,
    /// the lane claims this process's commits by id beside the claim loop (`poller::lane`).
    pub(crate) chains: Chains,
}

/// Batches in flight whose runs go on across batches, and a wake-up when one starts.
#[derive(Debug, Default)]
pub(crate) struct Chains {
    count: std::sync::atomic::AtomicUsize,
    started: tokio::sync::Notify,
}

impl Chains {
    /// Counts a batch until the guard is dropped.
    pub(crate) fn enter(&self) -> ChainGuard<'_> {
        self.count.fetch_add(1, Ordering::AcqRel);
        self.started.notify_waiters();
        ChainGuard(self)
    }

    /// Whether some such batch is in flight now.
    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    /// A wake-up when such a batch starts, from the moment this is called (enable it before
    /// looking at [`Chains::any`]).
    pub(crate) fn started(&self) -> tokio::sync::futures::Notified<'_> {
        self.started.notified()
    }
}

/// A batch counted by [`Chains::enter`].
pub(crate) struct ChainGuard<'a>(&'a Chains);

impl Drop for ChainGuard<'_> {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What the claim loop must respect after a batch's settlement failed.
#[derive(Debug, Default)]
pub(crate) struct Health {
    /// Settlements failed in a row (the store or its connection is failing).
    settle_failures: u32,
    /// No claim before this instant.
    pause_until: Option<Instant>,
    /// Messages of which nothing could be written (not even `failed`): not published again
    /// before the instant, so a row the database refuses to update cannot make the relay
    /// publish it in a loop.
    held_back: HashMap<MessageId, Instant>,
}

impl<S: RelayStore> Inner<S> {
    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// After a failed settlement: the batch's rows are due again (a locked claim rolled back)
    /// or will be after their lease. Claim nothing for a growing pause (100 ms doubling to
    /// 10 s), so a store that keeps refusing a settlement is not fed the same batch, and the
    /// broker the same messages, in a tight loop.
    pub(crate) fn settle_failed(&self) -> Duration {
        let mut h = self.health();
        h.settle_failures = h.settle_failures.saturating_add(1);
        let pause = Duration::from_millis(100)
            .saturating_mul(1 << h.settle_failures.min(7).saturating_sub(1))
            .min(Duration::from_secs(10));
        h.pause_until = Some(Instant::now() + pause);
        pause
    }

    pub(crate) fn settle_succeeded(&self) {
        let mut h = self.health();
        h.settle_failures = 0;
        h.pause_until = None;
    }

    /// Holds `ids` back for `lease` (the time their lease would keep them anyway).
    pub(crate) fn hold_back(&self, ids: impl IntoIterator<Item = MessageId>) {
        let until = Instant::now() + self.cfg.lease;
        let mut h = self.health();
        for id in ids {
            h.held_back.insert(id, until);
        }
    }

    /// Removes held-back messages from a claimed batch (they are left as they are).
    ///
    /// A message held back holds back the younger ones of its key in the batch too (a run
    /// claimed behind it), so that none overtakes it; their keys are returned, as keys whose
    /// run this batch does not deliver in full.
    pub(crate) fn without_held_back(
        &self,
        batch: Vec<OutboxMessage>,
    ) -> (Vec<OutboxMessage>, HashSet<String>) {
        let mut h = self.health();
        let mut blocked = HashSet::new();
        if h.held_back.is_empty() {
            return (batch, blocked);
        }
        let now = Instant::now();
        h.held_back.retain(|_, until| *until > now);
        // The oldest held-back id of each key.
        let mut first: HashMap<&str, i64> = HashMap::new();
        for m in batch.iter().filter(|m| h.held_back.contains_key(&m.id)) {
            if let Some(k) = m.key.as_deref() {
                let e = first.entry(k).or_insert(m.id.0);
                *e = (*e).min(m.id.0);
            }
        }
        let keep: Vec<bool> = batch
            .iter()
            .map(|m| {
                !h.held_back.contains_key(&m.id)
                    && m.key.as_deref().and_then(|k| first.get(k)).is_none_or(|&f| m.id.0 < f)
            })
            .collect();
        blocked.extend(first.keys().map(|k| (*k).to_owned()));
        let batch = batch.into_iter().zip(keep).filter(|(_, k)| *k).map(|(m, _)| m).collect();
        (batch, blocked)
    }

    /// Counts a share of the budget this relay took.
    pub(crate) fn took_share(&self) {
        self.shares_held.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// Before a claim under a share of a crowded budget: its pool may hold its listening
    /// connection and one per share this relay holds (this one's included), so the unused
    /// ones beyond that are closed, and the claim waits (at most [`SHARE_CLOSE_WAIT`]) until
    /// it can run on an unused connection or open one within that bound. A connection on its
    /// way back to the pool (sqlx pings it first, in a task of its own) or still closing counts
    /// against the pool but cannot be taken: a claim under a parked share taken back, or the
    /// claim once more after declaring idle, would otherwise open a connection beside the one
    /// its batch or claim before used, and the stores together would hold more than one each
    /// plus the budget's size.
    pub(crate) async fn ready_to_claim(&self) {
        if !self.budget.as_ref().is_some_and(crate::Budget::crowded) {
            return;
        }
        let held = self.shares_held.load(std::sync::atomic::Ordering::Acquire);
        let keep = u32::try_from(held.saturating_add(1)).unwrap_or(u32::MAX);
        self.store.close_down_to(keep, Duration::ZERO).await;
        if !self.store.room_to_claim(keep, SHARE_CLOSE_WAIT).await {
            tracing::debug!(
                wait = ?SHARE_CLOSE_WAIT,
                "The store's pool still held a connection per share, none of them unused; claiming anyway"
            );
        }
    }

    /// Hands a share of the budget back after its batch was settled or its claim found
    /// nothing, or parks it: when more relays share the budget than it has shares and none
    /// waits for one, the share is parked with the connection its pool holds (see
    /// [`crate::Budget`]: the next claim takes both back, a store with a stream of messages
    /// opens no connection per message; an idle one gives it back after
    /// [`crate::Budget::PARK_FOR`]). After a failed claim, or at the stop, [`Self::give_back`].
    pub(crate) async fn park_or_give_back(
        self: &Arc<Self>,
        share: Option<tokio::sync::OwnedSemaphorePermit>,
    ) {
        let (Some(s), Some(b)) = (share, &self.budget) else { return };
        let s = match self.member.filter(|_| b.crowded()) {
            Some(member) => {
                let me: Arc<dyn crate::budget::Parker> = self.clone();
                match b.park(member, s, Arc::downgrade(&me)) {
                    Ok(()) => {
                        self.parked_changed.notify_one();
                        return;
                    }
                    Err(s) => s,
                }
            }
            None => s,
        };
        self.give_back_now(s).await;
    }

    /// Hands a share of the budget back, if any (never parks it: see [`Self::give_back_now`]).
    pub(crate) async fn give_back(&self, share: Option<tokio::sync::OwnedSemaphorePermit>) {
        if let Some(s) = share {
            self.give_back_now(s).await;
        }
    }

    /// Hands a share of the budget back (never parks it). When more relays share the budget
    /// than it has shares, the store's pool closes the connections it holds unused beyond its
    /// listening connection and one per other share of this relay (and, once this relay holds
    /// none, stops keeping the ones handed back later), and the share goes on only once the
    /// pool is down to those
    /// (waiting at most [`SHARE_CLOSE_WAIT`]): a connection closing in the background still
    /// counts on the server, and the next store opens one as soon as it has the share. So
    /// the stores together hold at most one connection each plus the budget's size (see
    /// [`crate::Budget`]). Taking a share again ends the shedding.
    pub(crate) async fn give_back_now(&self, share: tokio::sync::OwnedSemaphorePermit) {
        let Some(b) = &self.budget else { return };
        let held = self.shares_held.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        if b.crowded() {
            // The pool sheds what comes back only once this relay holds no share: the
            // connections of its other shares (batches in flight, shares parked) stay open.
            if held <= 1 {
                self.store.shed_connections(true).await;
            }
            let deadline = Instant::now() + SHARE_CLOSE_WAIT;
            loop {
                // The listening connection and one per other share of this relay now (its claim
                // loop may take one meanwhile: its connection is not this share's).
                let held = self.shares_held.load(std::sync::atomic::Ordering::Acquire);
                let keep = u32::try_from(held.saturating_add(1)).unwrap_or(u32::MAX);
                if self.store.close_down_to(keep, Duration::ZERO).await {
                    break;
                }
                if Instant::now() >= deadline {
                    tracing::debug!(
                        wait = ?SHARE_CLOSE_WAIT,
                        "The store's pool still held more connections than its share; handing the share on"
                    );
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        drop(share);
    }

    /// A share of the budget for a claim of the lane, without queueing: one this relay parked,
    /// else one free now, else one another relay parked, given back first (its pool closes the
    /// connection, as for a relay that queues: parked shares are for whoever needs one; the
    /// lane would otherwise wait out [`crate::Budget::PARK_FOR`] behind a store that claims
    /// now and then, while its hot key's batches hold the others). `None` if none of these.
    pub(crate) async fn share_beside(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let b = self.budget.as_ref()?;
        if let Some(s) = self.member.and_then(|m| b.unpark(m)) {
            return Some(s);
        }
        if let Some(s) = b.try_take() {
            self.took_share();
            return Some(s);
        }
        if !b.give_back_oldest_parked().await {
            return None;
        }
        let s = b.try_take()?;
        self.took_share();
        Some(s)
    }

    /// Whether a share is to be had without queueing (see [`Self::share_beside`]).
    pub(crate) fn share_at_hand(&self) -> bool {
        self.budget.as_ref().is_some_and(|b| b.has_free() || b.parked() > 0)
    }

    /// A share of the budget for a claim: one this relay parked, if no other relay waits, else
    /// one from the queue (`None` only if the budget was closed).
    pub(crate) async fn take_share(&self, b: &crate::Budget) -> Option<tokio::sync::OwnedSemaphorePermit> {
        if let Some(s) = self.member.and_then(|m| b.unpark(m)) {
            return Some(s);
        }
        let s = b.take().await?;
        self.took_share();
        Some(s)
    }

    /// Gives back the shares this relay parked [`crate::Budget::PARK_FOR`] ago or more (every
    /// one with `all`); answers when the next one falls due.
    pub(crate) async fn unpark_expired(&self, all: bool) -> Option<Instant> {
        let (Some(b), Some(member)) = (&self.budget, self.member) else { return None };
        let older = if all {
            None
        } else {
            match Instant::now().checked_sub(crate::Budget::PARK_FOR) {
                Some(t) => Some(t),
                None => return Some(Instant::now() + crate::Budget::PARK_FOR),
            }
        };
        let (shares, oldest) = b.unpark_older(member, older);
        for s in shares {
            self.give_back_now(s).await;
        }
        oldest.map(|t| t + crate::Budget::PARK_FOR)
    }

    /// Declares this relay idle or busy for writers' wake-ups
    /// ([`Wakeups::set_idle`](outbox_store::Wakeups::set_idle)), through `keeper` when given
    /// (the listening connection: a relay between turns of a crowded budget opens no pooled
    /// connection for it, and one holding a claim's transaction needs no second one), else,
    /// or if that fails, through the pool.
    pub(crate) async fn set_idle(
        &self,
        keeper: Option<&outbox_store::Keeper>,
        idle: bool,
        ttl: Duration,
    ) -> outbox_store::Result<()> {
        let owner = &self.cfg.owner;
        match keeper {
            Some(k) => match k.set_idle(owner, idle, ttl).await {
                Err(_) => self.store.set_idle(owner, idle, ttl).await,
                ok => ok,
            },
            None => self.store.set_idle(owner, idle, ttl).await,
        }
    }

    /// Re-reads which destinations an operator paused (keeps the last known on an error).
    ///
    /// Read through `keeper` when given (the store's listening connection: nothing of the
    /// pool), else, or if that fails, through the pool.
    pub(crate) async fn refresh_pauses(&self, keeper: Option<&outbox_store::Keeper>) {
        let read = match keeper {
            Some(k) => match k.paused_destinations().await {
                Err(_) => self.store.paused_destinations().await,
                ok => ok,
            },
            None => self.store.paused_destinations().await,
        };
        let names = match read {
            Ok(names) => names,
            Err(e) => {
                tracing::warn!(error = %e, "Could not read the paused destinations; keeping the last known");
                return;
            }
        };
        for d in &self.dests {
            let paused = names.contains(&d.d.name);
            if d.flags.paused.swap(paused, Ordering::Relaxed) != paused {
                if paused {
                    tracing::warn!(destination = %d.d.name, "Destination paused by an operator; its messages wait");
                } else {
                    tracing::info!(destination = %d.d.name, "Destination resumed");
                }
            }
        }
    }

    pub(crate) fn pause_left(&self) -> Option<Duration> {
        let until = self.health().pause_until?;
        until.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())
    }
}

/// A relay: publishes the outbox of one store. Run it with [`Relay::run`]; any number of relays
/// (in one process or many) may run against the same database.
#[derive(Debug)]
pub struct Relay<S: RelayStore> {
    pub(crate) inner: Arc<Inner<S>>,
}

impl<S: RelayStore + Signalled> Relay<S> {
    /// Starts building a relay over `outbox` (an [`Outbox`](outbox_store::Outbox) or an
    /// [`AnyOutbox`](outbox_store::AnyOutbox)), woken at once by its commits in this process.
    pub fn builder(outbox: &S) -> RelayBuilder<S> {
        Self::builder_with(outbox.clone(), outbox.commit_signal().clone())
    }
}

impl<S: RelayStore> crate::budget::Parker for Inner<S> {
    fn give_back_parked(
        &self,
        share: tokio::sync::OwnedSemaphorePermit,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(self.give_back_now(share))
    }
}

/// Gives back the shares `inner` parks once unused for [`crate::Budget::PARK_FOR`], until
/// `stop`; then every one it still has parked.
pub(crate) async fn attend_parked<S: RelayStore>(
    inner: Arc<Inner<S>>,
    stop: tokio_util::sync::CancellationToken,
) {
    if inner.member.is_none() {
        return;
    }
    loop {
        let changed = inner.parked_changed.notified();
        let next = inner.unpark_expired(false).await;
        tokio::select! {
            () = stop.cancelled() => break,
            () = changed => {}
            () = async {
                match next {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            } => {}
        }
    }
    inner.unpark_expired(true).await;
}

impl<S: RelayStore> Relay<S> {
    /// Starts building a relay over `store`, woken by `signal`: for a store of your own. A
    /// store of this library is built with [`Relay::builder`].
    pub fn builder_with(store: S, signal: CommitSignal) -> RelayBuilder<S> {
        RelayBuilder {
            store,
            signal,
            config: RelayConfig::default(),
            destinations: Vec::new(),
            routes: Vec::new(),
            alert: Arc::new(LogAlert),
            budget: None,
        }
    }

    /// Live counters.
    pub fn stats(&self) -> Arc<RelayStats> {
        self.inner.stats.clone()
    }

    /// This relay's lease owner name.
    pub fn owner(&self) -> &str {
        &self.inner.cfg.owner
    }
}
