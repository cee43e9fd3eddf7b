//! [`Budget`]: batches in flight across every relay of a process, so one process serving many
//! databases uses a bounded number of connections however many stores it has.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};
use tokio::time::Instant;

/// Batches in flight at once across the relays that share it (each relay still keeps its own
/// `max_in_flight_batches`). A relay takes a share before each claim and holds it until that
/// batch is settled; an empty claim gives it back at once (either may park it: below). A locked claim holds one connection
/// of its store from claim to settlement, so the relays sharing a budget of `n` use at most `n`
/// pooled connections for claiming and publishing together.
///
/// Fair by construction: shares are handed out first come, first served, and a relay queues
/// again for each batch while another waits, so a store with a large backlog takes its turn
/// behind the stores that have a message or two (none of them starves, however long the big
/// backlog).
///
/// **Parked shares.** When more relays share it than it has shares ([`Budget::crowded`]), a
/// store's pool keeps no connection between its turns, so each turn opens one (on PostgreSQL a
/// process forked for it, over TLS a handshake). A relay whose batch settles, or whose claim
/// found nothing, while no other relay waits for a share parks the share instead
/// ([`Budget::park`]): its connection stays
/// open in its pool, and its next claim takes the share back without a turn
/// ([`Budget::unpark`]) and on that connection. A parked share is still taken (the bound on
/// connections holds), and it is the waiters': a relay that finds no share free gives back the
/// oldest parked one (its owner's pool closes the connection) before it queues, and a relay
/// never reuses its parked share while another waits. Its owner gives it back after
/// [`Budget::PARK_FOR`] unused, and at its stop. So a few busy stores among many idle ones keep their
/// connections, and the idle ones still cost nothing.
#[derive(Debug, Clone)]
pub struct Budget {
    shares: Arc<Semaphore>,
    size: usize,
    /// Relays built with it.
    members: Arc<AtomicUsize>,
    /// Shares handed out so far.
    turns: Arc<AtomicU64>,
    /// Microseconds spent waiting for them, all turns together.
    waited_us: Arc<AtomicU64>,
    /// The relays waiting for a share, and the shares parked.
    queue: Arc<Mutex<Queue>>,
    /// Parked shares taken back by their relays (a turn, and a connection, saved each).
    reused: Arc<AtomicU64>,
    /// Parked shares given back for a relay that found none free.
    evicted: Arc<AtomicU64>,
}

/// A relay that parks shares of a [`Budget`]: how a share of its comes back to the budget
/// (its pool first closes the connection the share stood for).
pub(crate) trait Parker: Send + Sync {
    /// Gives `share` back (never parks it again).
    fn give_back_parked(&self, share: OwnedSemaphorePermit) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// A share parked by relay `member`.
struct Parked {
    member: usize,
    since: Instant,
    share: OwnedSemaphorePermit,
    owner: Weak<dyn Parker>,
}

impl Parked {
    /// Gives the share back through its owner (or straight to the budget if the owner is gone).
    async fn give_back(self) {
        match self.owner.upgrade() {
            Some(owner) => owner.give_back_parked(self.share).await,
            None => drop(self.share),
        }
    }
}

/// The relays waiting for a share, and the shares parked (oldest first).
#[derive(Default)]
struct Queue {
    waiting: usize,
    parked: VecDeque<Parked>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("waiting", &self.waiting).field("parked", &self.parked.len()).finish()
    }
}

/// A relay counted as waiting for a share until dropped.
struct Waiting<'a>(&'a Mutex<Queue>);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        lock(self.0).waiting -= 1;
    }
}

/// The queue's lock (a panic while it was held leaves counts that are still whole).
fn lock(queue: &Mutex<Queue>) -> std::sync::MutexGuard<'_, Queue> {
    queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Budget {
    /// The size `outbox relay` gives its budget unless told otherwise
    /// (`relay.total_in_flight_batches`).
    pub const DEFAULT_SIZE: usize = 16;

    /// How long a relay keeps a share parked unused before it gives it back (and its pool closes
    /// the connection): a store that claims again within this long keeps its connection; an
    /// idle one is back to its listening connection alone after it.
    pub const PARK_FOR: Duration = Duration::from_secs(2);

    /// A budget of `n` batches in flight (at least 1).
    pub fn new(n: usize) -> Budget {
        let size = n.clamp(1, Semaphore::MAX_PERMITS);
        Budget {
            shares: Arc::new(Semaphore::new(size)),
            size,
            members: Arc::default(),
            turns: Arc::default(),
            waited_us: Arc::default(),
            queue: Arc::default(),
            reused: Arc::default(),
            evicted: Arc::default(),
        }
    }

    /// Its size.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Shares taken now for claims and batches in flight (parked shares not counted).
    pub fn in_use(&self) -> usize {
        self.size.saturating_sub(self.shares.available_permits()).saturating_sub(self.parked())
    }

    /// Shares parked now (see [`Budget`]).
    pub fn parked(&self) -> usize {
        lock(&self.queue).parked.len()
    }

    /// Turns taken so far: shares handed out from the queue (a relay claiming again under a
    /// share it holds, or taking back one it parked, takes no new turn). Each turn of a crowded
    /// budget opens a connection.
    pub fn turns(&self) -> u64 {
        self.turns.load(Ordering::Relaxed)
    }

    /// Parked shares taken back by their relays so far (each a turn and a connection saved).
    pub fn reused(&self) -> u64 {
        self.reused.load(Ordering::Relaxed)
    }

    /// Parked shares given back so far for a relay that found no share free.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// Waits for a share (in arrival order). When none is free, the oldest parked share is
    /// given back first (its owner's pool closes its connection), then the relay queues. `None`
    /// only if the budget was closed, which nothing does.
    pub(crate) async fn take(&self) -> Option<OwnedSemaphorePermit> {
        let asked = std::time::Instant::now();
        let share = match self.shares.clone().try_acquire_owned() {
            Ok(s) => Some(s),
            Err(TryAcquireError::Closed) => None,
            Err(TryAcquireError::NoPermits) => {
                // Counted as waiting (no share is parked from now on) before the parked one is
                // looked for, under one lock: a share is either found here or never parked.
                let (waiting, evict) = {
                    let mut q = lock(&self.queue);
                    q.waiting += 1;
                    (Waiting(&self.queue), q.parked.pop_front())
                };
                if let Some(p) = evict {
                    self.evicted.fetch_add(1, Ordering::Relaxed);
                    p.give_back().await;
                }
                let share = self.shares.clone().acquire_owned().await.ok();
                drop(waiting);
                share
            }
        };
        self.turns.fetch_add(1, Ordering::Relaxed);
        let waited = u64::try_from(asked.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.waited_us.fetch_add(waited, Ordering::Relaxed);
        share
    }

    /// Gives back the oldest parked share, if any (its owner's pool closes its connection), for
    /// a relay's lane that takes a share without queueing ([`Budget::try_take`] after it);
    /// says whether there was one.
    pub(crate) async fn give_back_oldest_parked(&self) -> bool {
        let Some(p) = lock(&self.queue).parked.pop_front() else { return false };
        self.evicted.fetch_add(1, Ordering::Relaxed);
        p.give_back().await;
        true
    }

    /// A share if one is free now, without queueing (never ahead of a relay waiting in the
    /// queue: the semaphore hands freed shares to its waiters first).
    pub(crate) fn try_take(&self) -> Option<OwnedSemaphorePermit> {
        let share = self.shares.clone().try_acquire_owned().ok()?;
        self.turns.fetch_add(1, Ordering::Relaxed);
        Some(share)
    }

    /// Whether a share is free now.
    pub(crate) fn has_free(&self) -> bool {
        self.shares.available_permits() > 0
    }

    /// Parks `share` of relay `member` (see [`Budget`]), unless a relay waits for one: then it
    /// is handed back (`Err`), for the owner to give back as usual.
    pub(crate) fn park(
        &self,
        member: usize,
        share: OwnedSemaphorePermit,
        owner: Weak<dyn Parker>,
    ) -> Result<(), OwnedSemaphorePermit> {
        let mut q = lock(&self.queue);
        if q.waiting > 0 {
            return Err(share);
        }
        q.parked.push_back(Parked { member, since: Instant::now(), share, owner });
        Ok(())
    }

    /// A share relay `member` parked, taken back for its next claim; none while another relay
    /// waits for a share (that one's turn comes first).
    pub(crate) fn unpark(&self, member: usize) -> Option<OwnedSemaphorePermit> {
        let mut q = lock(&self.queue);
        if q.waiting > 0 {
            return None;
        }
        let at = q.parked.iter().rposition(|p| p.member == member)?;
        let parked = q.parked.remove(at)?;
        self.reused.fetch_add(1, Ordering::Relaxed);
        Some(parked.share)
    }

    /// Whether relay `member` has a share parked.
    #[cfg(test)]
    pub(crate) fn has_parked(&self, member: usize) -> bool {
        lock(&self.queue).parked.iter().any(|p| p.member == member)
    }

    /// Takes out the shares relay `member` parked at `older_than` or before (all of them with
    /// `None`), to be given back; says when the oldest one left was parked.
    pub(crate) fn unpark_older(
        &self,
        member: usize,
        older_than: Option<Instant>,
    ) -> (Vec<OwnedSemaphorePermit>, Option<Instant>) {
        let mut q = lock(&self.queue);
        let mut out = Vec::new();
        let mut kept = VecDeque::with_capacity(q.parked.len());
        for p in q.parked.drain(..) {
            if p.member == member && older_than.is_none_or(|t| p.since <= t) {
                out.push(p.share);
            } else {
                kept.push_back(p);
            }
        }
        q.parked = kept;
        let oldest = q.parked.iter().filter(|p| p.member == member).map(|p| p.since).min();
        (out, oldest)
    }

    /// Time spent in the queue so far, every turn together (divided by [`Self::turns`]: the
    /// mean wait for a turn).
    pub fn waited(&self) -> std::time::Duration {
        std::time::Duration::from_micros(self.waited_us.load(Ordering::Relaxed))
    }

    /// Counts a relay built with it; answers its number (for the shares it parks).
    pub(crate) fn join(&self) -> usize {
        self.members.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether more relays share it than it has shares: then a relay handing a share back
    /// closes the pooled connections its store holds unused, so the pooled connections of all
    /// of them together stay near the budget's size (each store's pool would otherwise keep its
    /// own open, one or more per store), unless it parks the share (see [`Budget`]). With fewer
    /// relays than shares, pools keep their connections as usual (no reconnect per burst of
    /// work).
    pub(crate) fn crowded(&self) -> bool {
        self.members.load(Ordering::Relaxed) > self.size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn shares_are_bounded_and_handed_out_in_arrival_order() {
        let budget = Budget::new(1);
        let first = budget.take().await.unwrap();
        assert_eq!(budget.in_use(), 1);
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for i in 0..3 {
            let (b, o) = (budget.clone(), order.clone());
            waiters.push(tokio::spawn(async move {
                let share = b.take().await.unwrap();
                o.lock().unwrap().push(i);
                drop(share);
            }));
            // On this single-threaded runtime the waiter runs (and queues) while this yields.
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
        }
        assert!(order.lock().unwrap().is_empty(), "nobody gets a share while the only one is taken");
        drop(first);
        for w in waiters {
            w.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
        assert_eq!(budget.in_use(), 0);
        assert_eq!(Budget::new(0).size(), 1);
    }

    #[tokio::test]
    async fn a_share_taken_without_queueing_only_when_one_is_free_and_nobody_waits() {
        let budget = Budget::new(2);
        let first = budget.try_take().expect("a share is free");
        assert!(budget.has_free());
        let second = budget.take().await.unwrap();
        assert!(!budget.has_free());
        assert!(budget.try_take().is_none(), "none is free");
        // A relay queues for a share; the one freed is its, not the next try's.
        let b = budget.clone();
        let waiter = tokio::spawn(async move { b.take().await.unwrap() });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        drop(first);
        assert!(budget.try_take().is_none(), "the waiter's share");
        let third = waiter.await.unwrap();
        assert_eq!((budget.in_use(), budget.turns()), (2, 3));
        drop((second, third));
        assert!(budget.try_take().is_some());
    }

    /// A relay parking shares in the tests below: counts the shares given back through it.
    #[derive(Default)]
    struct Owner {
        given: AtomicUsize,
    }

    impl Parker for Owner {
        fn give_back_parked(
            &self,
            share: OwnedSemaphorePermit,
        ) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
            self.given.fetch_add(1, Ordering::Relaxed);
            drop(share);
            Box::pin(async {})
        }
    }

    fn weak(owner: &Arc<Owner>) -> Weak<dyn Parker> {
        let owner: Arc<dyn Parker> = owner.clone();
        Arc::downgrade(&owner)
    }

    #[tokio::test]
    async fn a_parked_share_is_taken_back_by_its_relay_alone_without_a_turn() {
        let budget = Budget::new(1);
        let owner = Arc::new(Owner::default());
        let share = budget.take().await.unwrap();
        assert!(budget.park(0, share, weak(&owner)).is_ok(), "nobody waits: parked");
        assert_eq!((budget.in_use(), budget.parked(), budget.has_free()), (0, 1, false));
        assert!(budget.has_parked(0) && !budget.has_parked(1));
        assert!(budget.unpark(1).is_none(), "another relay's parked share is not its to reuse");
        let share = budget.unpark(0).expect("its own");
        assert_eq!((budget.turns(), budget.reused(), budget.parked(), budget.in_use()), (1, 1, 0, 1));
        drop(share);
        assert_eq!(owner.given.load(Ordering::Relaxed), 0, "a reused share is not given back");
    }

    #[tokio::test]
    async fn a_relay_finding_no_share_free_gives_back_the_oldest_parked_one_first() {
        let budget = Budget::new(2);
        let (a, b) = (Arc::new(Owner::default()), Arc::new(Owner::default()));
        let (sa, sb) = (budget.take().await.unwrap(), budget.take().await.unwrap());
        assert!(budget.park(0, sa, weak(&a)).is_ok());
        assert!(budget.park(1, sb, weak(&b)).is_ok());
        let third = budget.take().await.expect("the oldest parked share, given back");
        assert_eq!((a.given.load(Ordering::Relaxed), b.given.load(Ordering::Relaxed)), (1, 0));
        assert_eq!((budget.evicted(), budget.parked(), budget.in_use()), (1, 1, 1));
        assert!(budget.unpark(0).is_none(), "relay 0's share is gone");
        assert!(budget.unpark(1).is_some(), "relay 1's is still parked");
        drop(third);
        // A parked share whose relay is gone goes straight back to the budget.
        let gone = Arc::new(Owner::default());
        let s = budget.take().await.unwrap();
        assert!(budget.park(2, s, weak(&gone)).is_ok());
        drop(gone);
        let _s = budget.take().await.expect("free once the parked share of a relay gone is dropped");
    }

    #[tokio::test]
    async fn a_lane_takes_a_share_another_relay_parked_without_queueing() {
        let budget = Budget::new(1);
        let (a, b) = (Arc::new(Owner::default()), Arc::new(Owner::default()));
        assert!(!budget.give_back_oldest_parked().await, "nothing parked");
        assert!(budget.park(0, budget.take().await.unwrap(), weak(&a)).is_ok());
        assert!(budget.try_take().is_none(), "the only share is parked");
        assert!(budget.give_back_oldest_parked().await);
        assert_eq!((a.given.load(Ordering::Relaxed), budget.evicted(), budget.parked()), (1, 1, 0));
        let share = budget.try_take().expect("free once given back");
        assert!(budget.park(1, share, weak(&b)).is_ok());
        assert!(budget.unpark(0).is_none() && budget.unpark(1).is_some(), "relay 1's alone");
    }

    #[tokio::test]
    async fn no_share_is_parked_or_reused_while_a_relay_waits() {
        let budget = Budget::new(1);
        let owner = Arc::new(Owner::default());
        let first = budget.take().await.unwrap();
        let b = budget.clone();
        let waiter = tokio::spawn(async move { b.take().await.unwrap() });
        // On this single-threaded runtime the waiter runs (and queues) while this yields.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        let first = budget.park(0, first, weak(&owner)).expect_err("a relay waits: not parked");
        assert!(budget.unpark(0).is_none());
        drop(first);
        let share = waiter.await.unwrap();
        assert!(budget.park(0, share, weak(&owner)).is_ok(), "nobody waits any more");
        assert_eq!(owner.given.load(Ordering::Relaxed), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn shares_parked_long_enough_are_taken_out_for_their_relay() {
        let budget = Budget::new(3);
        let owner = Arc::new(Owner::default());
        let t0 = Instant::now();
        assert!(budget.park(0, budget.take().await.unwrap(), weak(&owner)).is_ok());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(budget.park(0, budget.take().await.unwrap(), weak(&owner)).is_ok());
        assert!(budget.park(1, budget.take().await.unwrap(), weak(&owner)).is_ok());
        let (out, oldest) = budget.unpark_older(0, Some(t0));
        assert_eq!(out.len(), 1, "only the one parked at t0");
        assert_eq!(oldest, Some(t0 + Duration::from_secs(1)), "the one left of relay 0");
        let (all, oldest) = budget.unpark_older(0, None);
        assert_eq!((all.len(), oldest, budget.parked()), (1, None, 1), "relay 1's stays");
    }
}
