//! The heads of the open keys that the last walk found, so that the next walk can start each
//! key's dive at its last known head instead of at the key's first index entry (MySQL/MariaDB's
//! claim, step 3: `crate::mysql::relay`).
//!
//! Why: a key's first entries in `(open_key, id)` are its sent messages' entries that purge has
//! not removed yet, and while another transaction is open (a locked claim holds one through its
//! publish) every entry the walk steps over costs a lookup of the clustered row to decide whether
//! it is visible. Draining 10^6 messages on 1,000 keys, one walk examined 538,415 entries on
//! average and took 280 ms; a walk that starts every key at its last known head reads one or two
//! entries a key (docs/benchmarks.md "The walk of every key's head, from where it was").
//!
//! The memo is only a hint: every head it proposes is locked and checked again by the claim
//! (still due, still open, nothing older of its key open), so a stale memo can cost a key some
//! delay, never its order. What it can miss, until the next full walk: a key that was not open at
//! the last full walk, and an open message older than its key's last known head (a transaction
//! that committed late, a re-driven message). So a full walk still runs at least every
//! [`FULL_EVERY`] and, when it is slow, no more than a tenth of the time; and the bounded walk
//! is used only where the full one is slow ([`SLOW`]) and costs more than it would ([`PER_KEY`]
//! a key, measured).

use std::time::{Duration, Instant};

use super::hint::Hint;

/// The full walk runs again at least this often, so that new keys and late commits are found.
pub(crate) const FULL_EVERY: Duration = Duration::from_secs(1);

/// Roughly what a bounded walk costs the database per key (a `UNION ALL` of one-row probes,
/// parsed and planned each time): 52-60 ms for 1,000 keys on MariaDB 10.11. A full walk
/// cheaper than this per key is kept.
pub(crate) const PER_KEY: Duration = Duration::from_micros(100);

/// A full walk faster than this is kept whatever the keys: with a few keys the walk from the memo
/// would save next to nothing, and it would find a key that opens during a backlog up to
/// [`FULL_EVERY`] later.
pub(crate) const SLOW: Duration = Duration::from_millis(5);

/// Beyond this many open keys the memo is not kept (the bounded walk's statement grows with the
/// keys), and every walk is a full one, as before.
pub(crate) const MAX_KEYS: usize = 2_000;

/// Which walk the next claim runs.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Walk {
    /// Every key from its first entry.
    Full,
    /// Each remembered key from its last known head: `(key, head id)`.
    From(Vec<(String, i64)>),
}

#[derive(Debug)]
pub(crate) struct Memo {
    heads: Vec<(String, i64)>,
    full_at: Instant,
    full_took: Duration,
}

/// See the module's documentation.
#[derive(Debug, Default)]
pub(crate) struct HeadMemo {
    /// Where the last walk of every key's head left off, and the tests' switch to walk from
    /// it whenever there is one, whatever the full walk cost and however long ago it ran
    /// ([`Hint::always`]).
    pub(crate) memo: Hint<Memo>,
}

impl HeadMemo {
    /// The walk to run at `now`.
    pub(crate) fn next(&self, now: Instant) -> Walk {
        let Some(memo) = self.memo.lock() else { return Walk::Full };
        let Some(m) = memo.as_ref() else { return Walk::Full };
        let due = FULL_EVERY.max(m.full_took.saturating_mul(10));
        let keys = u32::try_from(m.heads.len()).unwrap_or(u32::MAX);
        let always = self.memo.always();
        if m.heads.is_empty()
            || (!always
                && (now.saturating_duration_since(m.full_at) >= due
                    || m.full_took <= SLOW.max(PER_KEY * keys)))
        {
            return Walk::Full;
        }
        Walk::From(m.heads.clone())
    }

    /// A full walk that started at `started` found `heads` (every open key's oldest open id).
    pub(crate) fn walked_full(&self, heads: Vec<(String, i64)>, started: Instant, now: Instant) {
        if let Some(mut memo) = self.memo.lock() {
            *memo = (heads.len() <= MAX_KEYS).then(|| Memo {
                heads,
                full_at: now,
                full_took: now.saturating_duration_since(started),
            });
        }
    }

    /// A bounded walk found `heads`: the keys it found nothing for (no open message from their
    /// last known head on) are dropped until the next full walk.
    pub(crate) fn walked_from(&self, heads: Vec<(String, i64)>) {
        if let Some(mut memo) = self.memo.lock() {
            if let Some(m) = memo.as_mut() {
                m.heads = heads;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heads(n: usize) -> Vec<(String, i64)> {
        (0..n).map(|i| (format!("k{i}"), i64::try_from(i).unwrap_or(0) + 1)).collect()
    }

    #[test]
    fn a_cheap_full_walk_stays_full() {
        let memo = HeadMemo::default();
        let t0 = Instant::now();
        assert_eq!(memo.next(t0), Walk::Full, "nothing remembered yet");
        // 1,000 keys in 3 ms: cheaper than 1,000 bounded probes.
        memo.walked_full(heads(1_000), t0, t0 + Duration::from_millis(3));
        assert_eq!(memo.next(t0 + Duration::from_millis(10)), Walk::Full);
        // 5 keys in 2 ms: more than 100 us a key, but fast: stays full.
        memo.walked_full(heads(5), t0, t0 + Duration::from_millis(2));
        assert_eq!(memo.next(t0 + Duration::from_millis(10)), Walk::Full);
    }

    #[test]
    fn a_slow_full_walk_is_followed_by_bounded_ones_then_a_full_one_again() {
        let memo = HeadMemo::default();
        let t0 = Instant::now();
        // 1,000 keys in 280 ms (a drain at depth): bounded walks until 10 x 280 ms have passed.
        let done = t0 + Duration::from_millis(280);
        memo.walked_full(heads(1_000), t0, done);
        assert_eq!(memo.next(done + Duration::from_millis(5)), Walk::From(heads(1_000)));
        // A bounded walk that found nothing for some keys drops them.
        memo.walked_from(heads(400));
        assert_eq!(memo.next(done + Duration::from_millis(2_799)), Walk::From(heads(400)));
        assert_eq!(memo.next(done + Duration::from_millis(2_800)), Walk::Full);
        // No open key left: nothing to start from.
        memo.walked_from(Vec::new());
        assert_eq!(memo.next(done + Duration::from_millis(10)), Walk::Full);
    }

    #[test]
    fn a_full_walk_runs_at_least_every_second_and_too_many_keys_are_not_remembered() {
        let memo = HeadMemo::default();
        let t0 = Instant::now();
        let done = t0 + Duration::from_millis(60);
        memo.walked_full(heads(100), t0, done);
        assert!(matches!(memo.next(done + Duration::from_millis(999)), Walk::From(_)));
        assert_eq!(memo.next(done + FULL_EVERY), Walk::Full);
        memo.walked_full(heads(MAX_KEYS + 1), t0, t0 + Duration::from_secs(5));
        assert_eq!(memo.next(t0 + Duration::from_secs(5)), Walk::Full, "beyond MAX_KEYS");
        memo.walked_full(heads(100), t0, done);
        memo.memo.forget();
        assert_eq!(memo.next(done), Walk::Full);
    }
}
