//! The after-commit signal: how a committing transaction wakes the in-process relay.

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
    ids: Mutex<Vec<MessageId>>,
    announced: Mutex<Announced>,
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
        if !ids.is_empty() {
            if let Ok(mut pending) = self.inner.ids.lock() {
                let room = MAX_PENDING_IDS.saturating_sub(pending.len());
                pending.extend(ids.iter().take(room).copied());
            }
        }
        self.inner.notify.notify_one();
    }

    /// Wakes the relay without naming messages (rows were written some other way).
    pub fn wake(&self) {
        self.inner.notify.notify_one();
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

    #[tokio::test]
    async fn ids_are_bounded() {
        let s = CommitSignal::new();
        let ids: Vec<_> = (0..(MAX_PENDING_IDS as i64 + 10)).map(MessageId).collect();
        s.committed(&ids);
        s.committed(&[MessageId(-1)]);
        assert_eq!(s.take_ids().len(), MAX_PENDING_IDS);
    }
}
