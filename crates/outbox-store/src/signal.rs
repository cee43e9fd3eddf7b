//! The after-commit signal: how a committing transaction wakes the in-process relay.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use outbox_core::MessageId;
use tokio::sync::Notify;

/// Most committed ids kept for the relay; beyond that the ids are dropped (the relay's scan
/// finds those messages anyway) so a stalled relay cannot make producers grow memory.
const MAX_PENDING_IDS: usize = 65_536;

/// How many of the ids this process is committing the signal remembers (see
/// [`CommitSignal::announcing`]). A push notification arrives within milliseconds of its
/// commit; 1,024 ids is seconds of a busy writer's commits. An id forgotten sooner only costs a
/// claim that finds nothing.
const ANNOUNCED_IDS: usize = 1_024;

/// Wakes the relay after a commit and tells it which messages were just committed, so it can
/// publish them without waiting for its next scan. Cheap to clone; all clones share state.
///
/// The signal is a hint, never the source of truth: a missed or dropped signal only delays a
/// message until the relay's next scan.
#[derive(Debug, Clone, Default)]
pub struct CommitSignal {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    notify: Notify,
    /// Woken at every commit for whoever waits beside the relay's loop (see
    /// [`CommitSignal::next_commit`]); stores no wake-up.
    observers: Notify,
    ids: Mutex<Vec<MessageId>>,
    announced: Mutex<Announced>,
    /// Wake-ups that named no ids, or not all of theirs (see [`CommitSignal::unnamed_wakes`]).
    unnamed: AtomicU64,
}

/// The last [`ANNOUNCED_IDS`] ids announced, in a ring.
#[derive(Debug, Default)]
struct Announced {
    ring: Vec<MessageId>,
    next: usize,
}

impl Announced {
    fn push(&mut self, id: MessageId) {
        if self.ring.len() < ANNOUNCED_IDS {
            self.ring.push(id);
        } else {
            self.ring[self.next] = id;
        }
        self.next = (self.next + 1) % ANNOUNCED_IDS;
    }
}

impl CommitSignal {
    /// A new, unconnected signal.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `ids` were committed and wakes the relay.
    pub fn committed(&self, ids: &[MessageId]) {
        let mut named = false;
        if !ids.is_empty() {
            if let Ok(mut pending) = self.inner.ids.lock() {
                let room = MAX_PENDING_IDS.saturating_sub(pending.len());
                pending.extend(ids.iter().take(room).copied());
                named = room >= ids.len();
            }
        }
        if !named {
            // Counted before the wake-up it stands for (see `unnamed_wakes`).
            self.inner.unnamed.fetch_add(1, Ordering::AcqRel);
        }
        self.inner.notify.notify_one();
        self.inner.observers.notify_waiters();
    }

    /// Wakes the relay without naming messages (rows were written some other way, a batch was
    /// settled, a commit's outcome is unknown).
    pub fn wake(&self) {
        self.inner.unnamed.fetch_add(1, Ordering::AcqRel);
        self.inner.notify.notify_one();
    }

    /// How many wake-ups so far did not name every message they stand for: [`wake`](Self::wake),
    /// and [`committed`](Self::committed) without ids or with ids beyond the bound. Each is
    /// counted before its wake-up is given, so a relay that reads this before a claim starts,
    /// and the same number after a later wake-up, knows that every wake-up since named its ids:
    /// if its claims hold all of those already, that wake-up needs no claim (see
    /// [`forget_held`](Self::forget_held)).
    pub fn unnamed_wakes(&self) -> u64 {
        self.inner.unnamed.load(Ordering::Acquire)
    }

    /// Drops the committed ids waiting for a claim that `held` says this process's claims hold
    /// already (a claim that looked for due messages took them after their commit), and says
    /// whether none are left. A claim by id of such ids would find them locked and look for due
    /// messages instead, for nothing.
    pub fn forget_held(&self, held: impl FnOnce(&[MessageId]) -> Vec<bool>) -> bool {
        let pending = match self.inner.ids.lock() {
            Ok(pending) => pending.clone(),
            Err(_) => return false,
        };
        if pending.is_empty() {
            return true;
        }
        let gone: std::collections::HashSet<MessageId> =
            pending.iter().zip(held(&pending)).filter(|(_, h)| *h).map(|(id, _)| *id).collect();
        match self.inner.ids.lock() {
            Ok(mut now) => {
                // Ids committed meanwhile are kept: `held` did not see them.
                now.retain(|id| !gone.contains(id));
                now.is_empty()
            }
            Err(_) => false,
        }
    }

    /// `ids` are about to be committed by this process, which will announce them with
    /// [`committed`](Self::committed) once the commit returns. Called before the commit, so
    /// that the database's push notification for the same rows, which may reach the relay's
    /// listener before the commit returns here, is known for a duplicate
    /// ([`announces`](Self::announces)) and wakes nothing. Without this, a commit of this
    /// process while its relay was idle could start a second claim: one that found nothing, or
    /// one that took the message first and left the claim by id with nothing (a third to a half
    /// of the messages of a trickle: docs/benchmarks.md, "The wake-up names its rows").
    ///
    /// Should the commit fail or its caller drop it, the committer wakes the relay instead
    /// (see `OutboxTransaction::commit`); a commit that succeeded without its caller learning
    /// it is found by the relay's next look.
    pub fn announcing(&self, ids: &[MessageId]) {
        if ids.is_empty() {
            return;
        }
        if let Ok(mut announced) = self.inner.announced.lock() {
            for &id in ids {
                announced.push(id);
            }
        }
    }

    /// Whether `id` is among the last ids this process announced (see
    /// [`announcing`](Self::announcing)).
    pub fn announces(&self, id: MessageId) -> bool {
        match self.inner.announced.lock() {
            Ok(announced) => announced.ring.contains(&id),
            Err(_) => false,
        }
    }

    /// A claim is about to start: it sees every commit announced so far, so the wake-up that
    /// may be waiting (one that came while nobody waited: a notification read while an idle
    /// look ran, a batch settled meanwhile) is spent. Without this, such
    /// a wake-up started a second claim right after this one, which found nothing. The ids are
    /// left to [`take_ids`](Self::take_ids).
    pub fn claiming(&self) {
        use futures::FutureExt as _;
        // Takes the stored wake-up if there is one; a `Notified` dropped after a wake-up
        // reached it passes that wake-up on (tokio), so none that comes meanwhile is lost.
        let _ = self.inner.notify.notified().now_or_never();
    }

    /// Waits until the next [`committed`](Self::committed) or [`wake`](Self::wake). A wake-up
    /// that happened while nobody waited is not lost: the next call returns at once.
    pub async fn notified(&self) {
        self.inner.notify.notified().await;
    }

    /// A wake-up at the next commit of this process, for a task beside the relay's claim loop:
    /// it takes nothing from the loop's wake-ups, and stores none (enable it before looking at
    /// [`CommitSignal::has_ids`]).
    pub fn next_commit(&self) -> tokio::sync::futures::Notified<'_> {
        self.inner.observers.notified()
    }

    /// Whether ids committed by this process wait for the relay ([`CommitSignal::take_ids`]).
    pub fn has_ids(&self) -> bool {
        self.inner.ids.lock().is_ok_and(|pending| !pending.is_empty())
    }

    /// Takes the ids committed since the last call.
    pub fn take_ids(&self) -> Vec<MessageId> {
        match self.inner.ids.lock() {
            Ok(mut pending) => std::mem::take(&mut *pending),
            Err(_) => Vec::new(),
        }
    }
}

/// A store whose writers in this process wake a relay after each commit: a relay built over
/// it with `Relay::builder(&store)` waits on its [`CommitSignal`].
pub trait Signalled {
    /// The signal its commits raise.
    fn commit_signal(&self) -> &CommitSignal;
}

impl<DB: crate::OutboxDatabase> Signalled for crate::Outbox<DB> {
    fn commit_signal(&self) -> &CommitSignal {
        self.signal()
    }
}

#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
impl Signalled for crate::AnyOutbox {
    fn commit_signal(&self) -> &CommitSignal {
        self.signal()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_commit_before_waiting_is_not_lost() {
        let s = CommitSignal::new();
        s.committed(&[MessageId(1), MessageId(2)]);
        tokio::time::timeout(Duration::from_secs(1), s.notified()).await.expect("permit was stored");
        assert_eq!(s.take_ids(), vec![MessageId(1), MessageId(2)]);
        assert!(s.take_ids().is_empty());
    }

    /// A claim starting spends the wake-up stored before it, keeps the
    /// ids for the claim, and a wake-up after it still wakes. The waits that must not end run
    /// on tokio's paused clock: the timeout fires at once when nothing else can run.
    #[tokio::test(start_paused = true)]
    async fn a_claim_spends_the_wake_ups_before_it_and_only_those() {
        let s = CommitSignal::new();
        s.committed(&[MessageId(7)]);
        s.claiming();
        let waited = tokio::time::timeout(Duration::from_secs(60), s.notified()).await;
        assert!(waited.is_err(), "the wake-up before the claim was spent");
        assert_eq!(s.take_ids(), vec![MessageId(7)], "the ids stay for the claim");
        s.claiming();
        s.wake();
        tokio::time::timeout(Duration::from_secs(60), s.notified())
            .await
            .expect("a wake-up after the claim wakes");
        // A relay waiting when the wake-up comes is woken, whatever claimed before.
        let waiter = tokio::spawn({
            let s = s.clone();
            async move { s.notified().await }
        });
        tokio::task::yield_now().await;
        s.claiming();
        s.wake();
        tokio::time::timeout(Duration::from_secs(60), waiter)
            .await
            .expect("the waiter woke")
            .expect("no panic");
    }

    #[test]
    fn the_announced_ids_are_the_last_ones_and_bounded() {
        let s = CommitSignal::new();
        assert!(!s.announces(MessageId(1)));
        s.announcing(&[MessageId(1), MessageId(2)]);
        assert!(s.announces(MessageId(1)) && s.announces(MessageId(2)));
        assert!(!s.announces(MessageId(3)));
        let many: Vec<_> = (10..10 + ANNOUNCED_IDS as i64).map(MessageId).collect();
        s.announcing(&many);
        assert!(!s.announces(MessageId(1)), "the oldest are forgotten");
        assert!(s.announces(MessageId(10)) && s.announces(MessageId(9 + ANNOUNCED_IDS as i64)));
        s.announcing(&[MessageId(-5)]);
        assert!(!s.announces(MessageId(10)) && s.announces(MessageId(-5)) && s.announces(MessageId(11)));
        assert!(s.take_ids().is_empty(), "announcing is not committing");
    }

    #[test]
    fn wake_ups_that_do_not_name_their_messages_are_counted() {
        let s = CommitSignal::new();
        s.committed(&[MessageId(1)]);
        assert_eq!(s.unnamed_wakes(), 0, "a commit names its ids");
        s.wake();
        s.committed(&[]);
        assert_eq!(s.unnamed_wakes(), 2, "a bare wake-up, a commit without ids");
        let ids: Vec<_> = (0..MAX_PENDING_IDS as i64).map(MessageId).collect();
        s.committed(&ids);
        assert_eq!(s.unnamed_wakes(), 3, "ids beyond the bound are not named");
    }

    #[test]
    fn the_ids_a_claim_holds_already_are_forgotten_and_only_those() {
        let s = CommitSignal::new();
        assert!(s.forget_held(|_| unreachable!("nothing to look up")), "no ids: none left");
        s.committed(&[MessageId(1), MessageId(2), MessageId(3)]);
        let left = s.forget_held(|ids| {
            assert_eq!(ids, [MessageId(1), MessageId(2), MessageId(3)]);
            // A commit landing while the claims are looked up is not touched.
            s.committed(&[MessageId(2), MessageId(4)]);
            vec![false, true, false]
        });
        assert!(!left);
        assert_eq!(s.take_ids(), vec![MessageId(1), MessageId(3), MessageId(4)]);
        s.committed(&[MessageId(5), MessageId(6)]);
        assert!(s.forget_held(|ids| vec![true; ids.len()]), "all held: none left");
        assert!(s.take_ids().is_empty());
    }

    #[tokio::test]
    async fn ids_are_bounded() {
        let s = CommitSignal::new();
        let ids: Vec<_> = (0..(MAX_PENDING_IDS as i64 + 10)).map(MessageId).collect();
        s.committed(&ids);
        s.committed(&[MessageId(-1)]);
        assert_eq!(s.take_ids().len(), MAX_PENDING_IDS);
    }
}
