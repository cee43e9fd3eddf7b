//! [`Budget`]: batches in flight across every relay of a process, so one process serving many
//! databases uses a bounded number of connections however many stores it has.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Batches in flight at once across the relays that share it (each relay still keeps its own
/// `max_in_flight_batches`). A relay takes a share before each claim and holds it until that
/// batch is settled; an empty claim gives it back at once. A locked claim holds one connection
/// of its store from claim to settlement, so the relays sharing a budget of `n` use at most `n`
/// pooled connections for claiming and publishing together.
///
/// Fair by construction: shares are handed out first come, first served, and a relay queues
/// again for each batch, so a store with a large backlog takes its turn behind the stores that
/// have a message or two (none of them starves, however long the big backlog).
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
}

impl Budget {
    /// The size `outbox relay` gives its budget unless told otherwise
    /// (`relay.total_in_flight_batches`).
    pub const DEFAULT_SIZE: usize = 16;

    /// A budget of `n` batches in flight (at least 1).
    pub fn new(n: usize) -> Budget {
        let size = n.clamp(1, Semaphore::MAX_PERMITS);
        Budget {
            shares: Arc::new(Semaphore::new(size)),
            size,
            members: Arc::default(),
            turns: Arc::default(),
            waited_us: Arc::default(),
        }
    }

    /// Its size.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Shares taken now.
    pub fn in_use(&self) -> usize {
        self.size.saturating_sub(self.shares.available_permits())
    }

    /// Turns taken so far: shares handed out from the queue (a relay claiming again under a
    /// share it holds takes no new turn). Each turn of a crowded budget opens a connection.
    pub fn turns(&self) -> u64 {
        self.turns.load(Ordering::Relaxed)
    }

    /// Waits for a share (in arrival order). `None` only if the budget was closed, which
    /// nothing does.
    pub(crate) async fn take(&self) -> Option<OwnedSemaphorePermit> {
        let asked = std::time::Instant::now();
        let share = self.shares.clone().acquire_owned().await.ok();
        self.turns.fetch_add(1, Ordering::Relaxed);
        let waited = u64::try_from(asked.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.waited_us.fetch_add(waited, Ordering::Relaxed);
        share
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

    /// Time spent in the queue so far, every turn together (divided by [`Self::turns`]: the
    /// mean wait for a turn).
    pub fn waited(&self) -> std::time::Duration {
        std::time::Duration::from_micros(self.waited_us.load(Ordering::Relaxed))
    }

    /// Counts a relay built with it.
    pub(crate) fn join(&self) {
        self.members.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether more relays share it than it has shares: then a relay handing a share back
    /// closes the pooled connections its store holds unused, so the pooled connections of all
    /// of them together stay near the budget's size (each store's pool would otherwise keep its
    /// own open, one or more per store). With fewer relays than shares, pools keep their
    /// connections as usual (no reconnect per burst of work).
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
}
