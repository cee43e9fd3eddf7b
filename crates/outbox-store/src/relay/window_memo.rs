//! Where the last claim's window began, so that the next claim's window can start there instead
//! of at the first entry of the due index (PostgreSQL's locked claim: `crate::postgres::relay`).
//!
//! Why: a message sent leaves the due index `(next_attempt_at, id) WHERE status IN ('pending',
//! 'sending')` only when vacuum removes its entry, and a drain sends messages in due order, so
//! the index's first entries are those of the messages already sent. A window read from the
//! first entry steps over all of them on every claim: with 5·10^5 of 10^6 messages sent and
//! their entries already marked dead, 923 index pages and 9.9 ms for a window of 1,000, against
//! 47 pages and 0.7 ms from where the last window began (`EXPLAIN ANALYZE`, docs/benchmarks.md
//! "The window from where the last one began"). Autovacuum visits a database about once a
//! minute (`autovacuum_naptime`), so a drain of 10^6 runs most of its course with those entries.
//!
//! The memo is only a hint: it decides where the claim *looks*, never what it takes. Every row
//! the window proposes is locked and checked again (due, open, the oldest open message of its
//! key, by a probe of the open-key index that does not use the memo), so a stale memo can delay
//! a message, never reorder its key. What a window from the memo cannot see, until the next full
//! window: an open message due before the remembered start, which only a transaction that began
//! before the last full window and committed after it writes (its `now()` is its start), or a
//! writer that sets `next_attempt_at` in the past. Retries, releases and re-drives write `now()`
//! or later, past the start. So:
//! - a full window runs at least every [`FULL_EVERY`];
//! - the memo is kept only while the window is full of due rows (a backlog: when the window held
//!   every due row, there is nothing to skip, and the next window is a full one);
//! - anything unexpected (an error, a start the driver cannot represent) forgets it.

use std::time::Instant;

use chrono::{DateTime, Utc};

use super::head_memo::FULL_EVERY;
use super::hint::Hint;

/// Where a window begins: the first due row's `(next_attempt_at, id)`.
pub(crate) type Start = (DateTime<Utc>, i64);

#[derive(Debug)]
pub(crate) struct Memo {
    start: Start,
    full_at: Instant,
}

/// See the module's documentation.
#[derive(Debug, Default)]
pub(crate) struct WindowMemo {
    /// Where the last window in a backlog began, and the tests' switch to start from it
    /// whenever there is one, however long ago the last full window ran ([`Hint::always`]).
    pub(crate) memo: Hint<Memo>,
}

impl WindowMemo {
    /// Where the claim at `now` starts its window: `None` for the first entry (a full window).
    pub(crate) fn start(&self, now: Instant) -> Option<Start> {
        let memo = self.memo.lock()?;
        let m = memo.as_ref()?;
        (self.memo.always() || now.saturating_duration_since(m.full_at) < FULL_EVERY).then_some(m.start)
    }

    /// A window that started at `from` (`None`: a full one) found `first` as its first due row,
    /// and was full of due rows (`full`) or not. Kept only for a full window's backlog.
    pub(crate) fn found(&self, from: Option<Start>, first: Option<Start>, full: bool, now: Instant) {
        let Some(mut memo) = self.memo.lock() else { return };
        let Some(first) = first.filter(|_| full) else {
            *memo = None;
            return;
        };
        match (from, memo.as_mut()) {
            (None, _) => *memo = Some(Memo { start: first, full_at: now }),
            (Some(_), Some(m)) => m.start = first,
            // Forgotten meanwhile (another claim's error): the next window is a full one.
            (Some(_), None) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(id: i64) -> Start {
        (DateTime::from_timestamp(1_700_000_000 + id, 0).unwrap_or_default(), id)
    }

    #[test]
    fn a_backlog_window_is_remembered_until_the_next_full_one_is_due() {
        let memo = WindowMemo::default();
        let t0 = Instant::now();
        assert_eq!(memo.start(t0), None, "nothing remembered yet: a full window");
        memo.found(None, Some(at(10)), true, t0);
        assert_eq!(memo.start(t0 + Duration::from_millis(20)), Some(at(10)));
        // A window from the memo moves the start on, and keeps the time of the last full one.
        memo.found(Some(at(10)), Some(at(510)), true, t0 + Duration::from_millis(40));
        assert_eq!(memo.start(t0 + FULL_EVERY - Duration::from_millis(1)), Some(at(510)));
        assert_eq!(memo.start(t0 + FULL_EVERY), None, "a full window at least every FULL_EVERY");
        // That full window starts the count again.
        memo.found(None, Some(at(900)), true, t0 + FULL_EVERY);
        assert_eq!(memo.start(t0 + FULL_EVERY + Duration::from_millis(1)), Some(at(900)));
    }

    #[test]
    fn a_window_that_is_not_full_or_found_nothing_forgets_the_start() {
        let memo = WindowMemo::default();
        let t0 = Instant::now();
        memo.found(None, Some(at(10)), true, t0);
        memo.found(Some(at(10)), Some(at(20)), false, t0);
        assert_eq!(memo.start(t0), None, "the window held every due row: nothing to skip");
        memo.found(None, Some(at(10)), true, t0);
        memo.found(Some(at(10)), None, true, t0);
        assert_eq!(memo.start(t0), None, "no due row (or one the driver cannot represent)");
        // A window from a memo forgotten meanwhile does not bring it back.
        memo.found(Some(at(10)), Some(at(20)), true, t0);
        assert_eq!(memo.start(t0), None);
        memo.found(None, Some(at(10)), true, t0);
        memo.memo.forget();
        assert_eq!(memo.start(t0), None);
    }

    #[test]
    fn for_tests_the_memo_can_be_used_whatever_its_age() {
        let memo = WindowMemo::default();
        let t0 = Instant::now();
        memo.memo.always_from_memo(true);
        memo.found(None, Some(at(10)), true, t0);
        assert_eq!(memo.start(t0 + FULL_EVERY * 10), Some(at(10)));
        memo.memo.always_from_memo(false);
        assert_eq!(memo.start(t0), None, "back to the measured choice, nothing remembered");
    }
}
