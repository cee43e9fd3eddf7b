//! The messages this process holds locked in claims not yet settled (locked claims on
//! PostgreSQL and MySQL/MariaDB), so that the next claim leaves them out of its candidates
//! instead of trying to lock each one and being refused.
//!
//! With 1,000 keys and a batch of 500 in flight, half of a window's heads are the batch in
//! flight: each cost the claim a primary-key lookup and a refused lock (`SKIP LOCKED`) before
//! this. Leaving them out is only ever an optimisation: a row missing from the set (another
//! process's claim, or a claim that has just ended) is still skipped by its lock, and a row
//! still in the set for a moment after its claim ended is left for the next claim.

#![cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_core::MessageId;
use tokio::sync::watch;

/// The ids held by this process's unsettled locked claims over one outbox (shared by the
/// outbox's clones), each until its claim's lease has run out: a claim that outlives its lease
/// idle (a relay frozen mid-publish) is ended by the database, which frees its rows for anyone,
/// this process included, so they are no longer left out after that. Its size is bounded by
/// what the live claims hold: at most the batch size times the batches in flight of the relays
/// over the outbox.
#[derive(Debug, Default)]
pub(crate) struct InFlight(Mutex<Registry>);

#[derive(Debug, Default)]
struct Registry {
    /// Each id's claim (a number of this register's) and when its lease runs out.
    ids: HashMap<i64, (u64, Instant)>,
    claims: u64,
    /// Per live claim that holds keyed messages: the runs it holds, for a later claim to
    /// continue (see [`RunsHeld`]).
    runs: HashMap<u64, ClaimRuns>,
}

/// The keys one claim holds, each with its newest id there, and what its publication made of
/// them once the relay tells.
#[derive(Debug)]
struct ClaimRuns {
    owner: String,
    until: Instant,
    last: HashMap<String, i64>,
    told: watch::Receiver<Verdict>,
}

/// The keys whose every message in a claim was delivered to every destination, once the relay
/// has published the claim's batch (`None` before).
type Verdict = Option<Arc<HashSet<String>>>;

/// A key's run held by a claim of this process not settled yet, which a later claim may
/// continue: its newest id held, and how to learn whether that claim delivered all of it.
#[derive(Debug, Clone)]
pub(crate) struct RunHeld {
    pub(crate) key: String,
    pub(crate) last: i64,
    told: watch::Receiver<Verdict>,
}

impl RunHeld {
    /// What a claim that continues this run waits on before it publishes any of it.
    pub(crate) fn after(&self) -> super::RunAfter {
        super::RunAfter { key: self.key.clone(), told: self.told.clone() }
    }
}

impl InFlight {
    /// Registers `ids` as held for at most `lease`, and until the returned guard is dropped.
    #[cfg(test)]
    pub(crate) fn hold(self: &Arc<Self>, ids: &[MessageId], lease: Duration) -> Held {
        self.hold_runs(ids.iter().map(|m| (m.0, None)), "", lease).0
    }

    /// [`InFlight::hold`] of `(id, key)` per message, which also registers the claim's keys,
    /// each with its newest id, as runs a later claim of `owner` may continue
    /// ([`InFlight::runs_held`]) until the guard is dropped; the relay tells what became of
    /// them through the returned [`super::RunsTold`].
    pub(crate) fn hold_runs<'a>(
        self: &Arc<Self>,
        messages: impl IntoIterator<Item = (i64, Option<&'a str>)>,
        owner: &str,
        lease: Duration,
    ) -> (Held, super::RunsTold) {
        let mut ids = Vec::new();
        let mut last: HashMap<String, i64> = HashMap::new();
        for (id, key) in messages {
            ids.push(id);
            if let Some(k) = key {
                let newest = last.entry(k.to_owned()).or_insert(id);
                *newest = (*newest).max(id);
            }
        }
        let (tell, told) = watch::channel(None);
        let mut claim = 0;
        if let Ok(mut reg) = self.0.lock() {
            reg.claims += 1;
            claim = reg.claims;
            let until = Instant::now() + lease;
            reg.ids.extend(ids.iter().map(|id| (*id, (claim, until))));
            if !last.is_empty() {
                reg.runs.insert(claim, ClaimRuns { owner: owner.to_owned(), until, last, told });
            }
        }
        (Held { set: Arc::clone(self), claim, ids }, super::RunsTold { tell })
    }

    /// The runs `owner`'s claims hold now (their lease not run out), one per key: the newest
    /// id of the key held by any of them, with the claim that holds it, leaving out `except`.
    /// In id order of those newest ids. Only a relay's own: another relay, even in this
    /// process, takes nothing of a key while a claim holds its head, as across processes.
    pub(crate) fn runs_held(&self, owner: &str, except: &HashSet<&str>) -> Vec<RunHeld> {
        let now = Instant::now();
        let Ok(reg) = self.0.lock() else { return Vec::new() };
        let mut newest: HashMap<&str, (i64, &watch::Receiver<Verdict>)> = HashMap::new();
        for runs in reg.runs.values().filter(|r| r.until > now && r.owner == owner) {
            for (k, &id) in &runs.last {
                if except.contains(k.as_str()) {
                    continue;
                }
                let e = newest.entry(k.as_str()).or_insert((id, &runs.told));
                if id > e.0 {
                    *e = (id, &runs.told);
                }
            }
        }
        let mut out: Vec<RunHeld> = newest
            .into_iter()
            .map(|(k, (last, told))| RunHeld { key: k.to_owned(), last, told: told.clone() })
            .collect();
        out.sort_by_key(|r| r.last);
        out
    }

    /// The ids held now (their lease not run out), as a set.
    pub(crate) fn snapshot(&self) -> HashSet<i64> {
        let now = Instant::now();
        self.0
            .lock()
            .map(|reg| reg.ids.iter().filter(|(_, (_, until))| *until > now).map(|(id, _)| *id).collect())
            .unwrap_or_default()
    }

    /// For each of `ids`, whether it is held now (its lease not run out), read under the lock
    /// without copying the set: the relay asks on every wake-up.
    pub(crate) fn holds(&self, ids: &[MessageId]) -> Vec<bool> {
        let now = Instant::now();
        match self.0.lock() {
            Ok(reg) => {
                ids.iter().map(|id| reg.ids.get(&id.0).is_some_and(|(_, until)| *until > now)).collect()
            }
            Err(_) => vec![false; ids.len()],
        }
    }

    /// The ids held now, and `committed` without them: what a claim leaves out of its
    /// candidates, and the ids it may still claim by id.
    pub(crate) fn leave_out(&self, committed: &[MessageId]) -> (HashSet<i64>, Vec<MessageId>) {
        let held = self.snapshot();
        let free = committed.iter().copied().filter(|id| !held.contains(&id.0)).collect();
        (held, free)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.lock().map(|reg| reg.ids.len()).unwrap_or(0)
    }
}

/// The window of due rows a locked claim reads when it leaves `held` rows out: `window` (twice
/// the batch, which leaves a batch's worth of rows beside one batch in flight) plus the rows held
/// beyond one batch (`limit`), at most `MAX_WINDOW_GROWTH` times `window`.
///
/// The rows this process holds are still due `pending` rows, in the due index where the window
/// reads (their claims have written nothing), and they are the oldest: the window starts where
/// the last one began. With its size fixed, every batch in flight beyond the first took the place
/// of rows the claim could have taken; with 4 batches of 500 in flight a window of 1,000 rows held
/// nothing else, and the claim read further windows (`OFFSET`, reading the first ones again) or
/// walked every key's head; with more rows held than its passes read, it took nothing at all
/// while due rows waited behind them. Grown by what is held beyond one batch, the rows the claim
/// can take are as many as beside one batch in flight, for one read of an index entry and its row per row held (no
/// lock, no head probe: they are left out before either). `limit` is the claim's batch size.
pub(crate) fn held_window(limit: usize, window: usize, held: usize) -> usize {
    let window = window.max(limit);
    window.saturating_add(held.saturating_sub(limit)).min(window.saturating_mul(MAX_WINDOW_GROWTH))
}

/// See [`held_window`]: a bound on the rows one window reads, however many are held (a relay
/// configured with many batches in flight, or relays of one process sharing an outbox).
const MAX_WINDOW_GROWTH: usize = 8;

/// The ids one claim holds: taken out of the [`InFlight`] set when dropped, which a
/// [`super::RowLock`] does after its transaction has ended (committed by the settlement, or
/// dropped and so rolled back). An id registered again since by another claim (this one's
/// lease ran out, and the other locked the row) stays that claim's.
#[derive(Debug)]
pub(crate) struct Held {
    set: Arc<InFlight>,
    claim: u64,
    ids: Vec<i64>,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Ok(mut reg) = self.set.0.lock() {
            reg.runs.remove(&self.claim);
            for id in &self.ids {
                if reg.ids.get(id).is_some_and(|(claim, _)| *claim == self.claim) {
                    reg.ids.remove(id);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn the_window_grows_by_the_rows_held_within_a_bound() {
        assert_eq!(held_window(500, 1000, 0), 1000);
        assert_eq!(held_window(500, 1000, 500), 1000, "one batch in flight: as before");
        assert_eq!(held_window(500, 1000, 1500), 2000, "three batches of 500 in flight");
        assert_eq!(held_window(500, 1000, 100_000), 8000, "at most 8 windows");
        assert_eq!(held_window(10, 256, 1100), 1346);
        assert_eq!(held_window(10, 256, 10_000), 2048);
        assert_eq!(held_window(usize::MAX, usize::MAX, usize::MAX), usize::MAX);
    }

    #[test]
    fn runs_held_are_a_relays_own_newest_per_key_until_dropped_or_run_out() {
        let set = Arc::new(InFlight::default());
        let hour = Duration::from_secs(3600);
        let keys = |runs: Vec<RunHeld>| runs.into_iter().map(|r| (r.key, r.last)).collect::<Vec<_>>();
        let (first, _) =
            set.hold_runs([(1, Some("a")), (2, Some("a")), (3, Some("b")), (4, None)], "r", hour);
        let (second, _) = set.hold_runs([(7, Some("a")), (5, Some("c"))], "r", hour);
        let (_other, _) = set.hold_runs([(9, Some("a"))], "someone else", hour);
        assert_eq!(
            keys(set.runs_held("r", &HashSet::new())),
            [("b".to_owned(), 3), ("c".to_owned(), 5), ("a".to_owned(), 7)]
        );
        assert_eq!(keys(set.runs_held("r", &HashSet::from(["a", "c"]))), [("b".to_owned(), 3)]);
        drop(second);
        assert_eq!(keys(set.runs_held("r", &HashSet::new())), [("a".to_owned(), 2), ("b".to_owned(), 3)]);
        drop(first);
        assert!(set.runs_held("r", &HashSet::new()).is_empty());
        let (_frozen, _) = set.hold_runs([(11, Some("d"))], "r", Duration::ZERO);
        assert!(set.runs_held("r", &HashSet::new()).is_empty(), "a lease run out continues nothing");
    }

    #[tokio::test]
    async fn a_continued_run_learns_whether_its_claim_delivered_the_key() {
        let set = Arc::new(InFlight::default());
        let hour = Duration::from_secs(3600);
        let (_a, told) = set.hold_runs([(1, Some("a")), (2, Some("b"))], "r", hour);
        let held = set.runs_held("r", &HashSet::new());
        let (mut a, mut b) = (held[0].after(), held[1].after());
        told.tell(HashSet::from(["a".to_owned()]));
        assert!(a.delivered(hour).await);
        assert!(!b.delivered(hour).await, "b was not delivered in full");
        let (_c, untold) = set.hold_runs([(3, Some("c"))], "r", hour);
        let mut c = set.runs_held("r", &HashSet::from(["a", "b"]))[0].after();
        drop(untold);
        assert!(!c.delivered(hour).await, "a claim that ends untold delivered nothing");
        let (_d, _kept) = set.hold_runs([(4, Some("d"))], "r", hour);
        let mut d = set.runs_held("r", &HashSet::from(["a", "b", "c"]))[0].after();
        assert!(!d.delivered(Duration::from_millis(1)).await, "no word in time: not delivered");
    }

    #[test]
    fn ids_are_held_until_their_guard_is_dropped_or_their_lease_runs_out() {
        let set = Arc::new(InFlight::default());
        let hour = Duration::from_secs(3600);
        let a = set.hold(&[MessageId(1), MessageId(2)], hour);
        let b = set.hold(&[MessageId(3)], hour);
        assert_eq!(set.snapshot(), HashSet::from([1, 2, 3]));
        assert_eq!(set.holds(&[MessageId(3), MessageId(9), MessageId(1)]), [true, false, true]);
        drop(a);
        assert_eq!(set.snapshot(), HashSet::from([3]));
        drop(b);
        assert_eq!(set.len(), 0);
        // A lease run out: no longer held, though its claim lives on; the row claimed again
        // by another claim is that claim's, also once the first one is dropped.
        let frozen = set.hold(&[MessageId(4), MessageId(5)], Duration::ZERO);
        assert!(set.snapshot().is_empty());
        assert_eq!(set.holds(&[MessageId(4)]), [false], "a lease run out holds nothing");
        let heir = set.hold(&[MessageId(4)], hour);
        drop(frozen);
        assert_eq!(set.snapshot(), HashSet::from([4]));
        drop(heir);
        assert_eq!(set.len(), 0);
    }
}

/// Against the real servers: what a locked claim holds is registered until it is settled or
/// dropped, and a registered row is left out of every claim of the process, by id and by the
/// window, even where no lock would refuse it.
#[cfg(all(test, any(feature = "postgres", feature = "mysql")))]
mod claims {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use std::collections::HashSet;
    use std::time::{Duration, Instant};

    use outbox_core::{MessageId, NewMessage};

    use crate::relay::{ClaimMode, Claims, Hold, Settlement};
    use crate::{Outbox, OutboxDatabase};

    const LEASE: Duration = Duration::from_secs(30);

    fn ids(c: &crate::relay::Claimed<impl Sized>) -> HashSet<i64> {
        c.messages.iter().map(|m| m.id.0).collect()
    }

    async fn held_rows_are_left_out<DB: OutboxDatabase>(outbox: Outbox<DB>)
    where
        Outbox<DB>: Claims,
    {
        outbox.migrate().await.unwrap();
        let mut enqueue = Vec::new();
        for (key, n) in [("k0", 1), ("k1", 1), ("k2", 1), ("k3", 1), ("k4", 2)] {
            for _ in 0..n {
                enqueue.push(outbox.enqueue(&NewMessage::new("t", "{}").key(key)).await.unwrap().id.0);
            }
        }
        let [a, b, c, d, e, _f] = enqueue[..] else { panic!("six messages") };
        // `a` and the head of k4 (`e`) registered, not locked: nothing but the register keeps a
        // claim from them. The sixth, of k4, waits behind `e`.
        let fake = outbox.in_flight.hold(&[MessageId(a), MessageId(e)], LEASE);
        let first = outbox.claim_with(ClaimMode::Lock, "r", 10, LEASE).await.unwrap();
        assert_eq!(
            ids(&first),
            HashSet::from([b, c, d]),
            "the registered rows are left out, and k4's second waits behind e"
        );
        assert_eq!(outbox.in_flight.snapshot(), HashSet::from([a, b, c, d, e]));
        // By id: every id named is held, so the claim looks at the window, where everything due
        // is held too.
        let by_id = outbox
            .claim_committed(ClaimMode::Lock, "r", &[MessageId(a), MessageId(b)], 10, 1, LEASE)
            .await
            .unwrap();
        assert!(by_id.messages.is_empty(), "took {:?}", ids(&by_id));
        drop(fake);
        assert_eq!(outbox.in_flight.snapshot(), HashSet::from([b, c, d]));
        let second =
            outbox.claim_committed(ClaimMode::Lock, "r", &[MessageId(a)], 10, 1, LEASE).await.unwrap();
        assert_eq!(ids(&second), HashSet::from([a]), "the id, once no longer registered");
        // Settled: no longer registered.
        let sent = vec![MessageId(b), MessageId(c), MessageId(d)];
        let settlement = Settlement { sent, messages: Vec::new(), deliveries: Vec::new() };
        outbox.settle_held(first.hold, "r", &settlement).await.unwrap();
        assert_eq!(outbox.in_flight.snapshot(), HashSet::from([a]));
        // Dropped without a settlement (rolled back): no longer registered, and claimable again
        // once the database has the rollback.
        let Hold::Lock(lock) = second.hold else { panic!("a locked claim holds row locks") };
        drop(lock);
        assert!(outbox.in_flight.snapshot().is_empty());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let again = outbox.claim_with(ClaimMode::Lock, "r", 10, LEASE).await.unwrap();
            if ids(&again) == HashSet::from([a, e]) {
                break;
            }
            assert!(Instant::now() < deadline, "a and e were never claimable again: took {:?}", ids(&again));
            drop(again);
            tokio::task::yield_now().await;
        }
    }

    /// More rows held than a window of twice the batch, with its further passes, reads: the
    /// claim still takes the due rows behind them, in one window grown by the rows held.
    async fn rows_behind_many_held_are_claimed<DB: OutboxDatabase>(outbox: Outbox<DB>)
    where
        Outbox<DB>: Claims,
    {
        outbox.migrate().await.unwrap();
        // 1,100 rows held: a window of 256 rows (batch 10), with PostgreSQL's three further
        // passes 1,024 rows, holds only rows held, and the walk's keyless rows are the first 10,
        // held too.
        let msgs: Vec<NewMessage> =
            (0..1_105).map(|i| NewMessage::new("t", format!("{{\"n\":{i}}}"))).collect();
        let mut tx = outbox.begin().await.unwrap();
        let all: Vec<i64> = tx.enqueue_batch(&msgs).await.unwrap().iter().map(|e| e.id.0).collect();
        tx.commit().await.unwrap();
        let (held, free) = all.split_at(1_100);
        let held: Vec<MessageId> = held.iter().copied().map(MessageId).collect();
        let _fake = outbox.in_flight.hold(&held, LEASE);
        let claim = outbox.claim_with(ClaimMode::Lock, "r", 10, LEASE).await.unwrap();
        assert_eq!(
            ids(&claim),
            free.iter().copied().collect::<HashSet<_>>(),
            "the five rows behind those held"
        );
    }

    #[cfg(feature = "postgres")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_rows_behind_many_held_rows_are_claimed() {
        let db = outbox_testkit::fresh_pg().await;
        rows_behind_many_held_are_claimed(Outbox::new(db.pool.clone())).await;
        db.drop_db().await;
    }

    #[cfg(feature = "mysql")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mysql_rows_behind_many_held_rows_are_claimed() {
        let db = outbox_testkit::fresh_mysql().await;
        rows_behind_many_held_are_claimed(Outbox::new(db.pool.clone())).await;
        db.drop_db().await;
    }

    #[cfg(feature = "postgres")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_rows_this_process_holds_are_left_out_of_its_claims() {
        let db = outbox_testkit::fresh_pg().await;
        held_rows_are_left_out(Outbox::new(db.pool.clone())).await;
        db.drop_db().await;
    }

    #[cfg(feature = "mysql")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mysql_rows_this_process_holds_are_left_out_of_its_claims() {
        let db = outbox_testkit::fresh_mysql().await;
        held_rows_are_left_out(Outbox::new(db.pool.clone())).await;
        db.drop_db().await;
    }
}
